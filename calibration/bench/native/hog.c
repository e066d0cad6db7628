/* CPU hog for the density, throttle and ctx_switch/wakeup background load.
 *
 *   hog [--cpu N] [--threads T] [--ws BYTES] [--counter-fd FD --slot I]
 *       [--max-seconds S]
 *
 * Prints "K <pid>" and waits for "G" on stdin, so the driver can move it
 * into its cgroup before it burns any CPU; then pins itself (if --cpu; a v1
 * cpuset attach resets the affinity) and spins in T threads until killed.
 *
 * Iteration: a fixed chain of 256 dependent multiply-adds, then 16
 * read-modify-writes one per 64-byte line, continuing cyclically through the
 * working set (so --ws 1M is walked every 1024 iterations).  Thread 0
 * stores its iteration count in 64-bit slot I (one 64-byte line per slot) of
 * the shared memory file FD, which the driver reads without disturbing it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "handshake.h"

#define LINE 64
#define CHAIN 256
#define TOUCH 16

static size_t ws;
static volatile unsigned char *buf;
static volatile uint64_t *counter;

static void die(const char *what) {
    fprintf(stderr, "hog: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void *spin(void *arg) {
    int counted = arg != NULL;
    uint64_t x = (uintptr_t)&x, n = 0;
    size_t pos = 0;
    for (;;) {
        for (int i = 0; i < CHAIN; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
        if (ws) {
            for (int i = 0; i < TOUCH; i++) {
                buf[pos] += (unsigned char)x;
                pos += LINE;
                if (pos >= ws)
                    pos = 0;
            }
        }
        n++;
        if (counted)
            *counter = n;
        __asm__ volatile("" : : "r"(x));
    }
    return NULL;
}

int main(int argc, char **argv) {
    int cpu = -1, threads = 1, fd = -1, slot = 0, max_seconds = 600;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--cpu")) cpu = atoi(v);
        else if (!strcmp(k, "--threads")) threads = atoi(v);
        else if (!strcmp(k, "--ws")) ws = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--counter-fd")) fd = atoi(v);
        else if (!strcmp(k, "--slot")) slot = atoi(v);
        else if (!strcmp(k, "--max-seconds")) max_seconds = atoi(v);
        else { fprintf(stderr, "hog: unknown option %s\n", k); return 2; }
    }
    if (threads < 1 || (ws && ws < LINE)) {
        fprintf(stderr, "hog: need --threads >= 1 and --ws 0 or >= %d\n", LINE);
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(max_seconds);
    static uint64_t local;
    counter = &local;
    if (fd >= 0) {
        size_t len = (size_t)(slot + 1) * LINE;
        unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            die("mmap counter file");
        counter = (volatile uint64_t *)(m + (size_t)slot * LINE);
    }
    if (ws) {
        unsigned char *p = mmap(NULL, ws, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            die("mmap working set");
        memset(p, 1, ws);
        buf = p;
    }
    int rc = handshake_and_pin("hog", cpu);
    if (rc)
        return rc;
    for (int t = 1; t < threads; t++) {
        pthread_t th;
        if (pthread_create(&th, NULL, spin, NULL) != 0)
            die("pthread_create");
    }
    spin((void *)1);
    return 0;
}
