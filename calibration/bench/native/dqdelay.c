/* Where a task that went to sleep while not eligible is woken
 * (calibration/bench/delay_dequeue.py).
 *
 *   dqdelay --cpu X --other Y --cycles N --runs NS[,NS...] --hog-nice NICE
 *           --sleeps NS[,NS...] [--max-seconds S]
 *
 * A hog thread pinned to X at nice NICE (heavier than S) spins without
 * system calls.  The main thread S, pinned to X, spins until it sees a gap
 * in its clock (it was preempted and has just been picked again), runs R ns
 * more without a gap, so that it has had more than its share since its pick
 * (negative lag), widens its affinity to X and Y, and sleeps; R goes round
 * the --runs list and the sleep lengths round the --sleeps list.  After
 * each sleep it prints "W <cycle> <sleep ns> <R> <cpu it woke on> <ns from
 * the sleep's end to running>" and pins itself to X again.
 *
 * Y is idle throughout: a task dequeued at its sleep is woken there
 * (select_task_rq_fair() finds the idle CPU); one EEVDF left queued
 * (DELAY_DEQUEUE) is woken where it is, on X, and waits there until it is
 * eligible or an idle balance of Y takes it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "handshake.h"

/* a jump of the clock this long between two reads: S was off the CPU */
#define GAP_NS 30000
#define MAX_LIST 16

static int X = -1, Y = -1, hog_nice = -10;
static _Atomic int stop = 0, ready = 0;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void pin(int a, int b) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(a, &s);
    if (b >= 0)
        CPU_SET(b, &s);
    if (sched_setaffinity(0, sizeof s, &s) != 0) {
        fprintf(stderr, "dqdelay: sched_setaffinity: %s\n", strerror(errno));
        exit(2);
    }
}

static void nap(int64_t ns) {
    struct timespec t = {ns / 1000000000, ns % 1000000000};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

/* "NS[,NS...]" into out (at most MAX_LIST); the count, 0 if any is not > 0 */
static int parse_list(const char *v, int64_t *out) {
    int n = 0;
    for (char *s = (char *)v; *s && n < MAX_LIST; s++) {
        out[n] = strtoll(s, &s, 10);
        if (out[n++] <= 0)
            return 0;
        if (*s != ',')
            break;
    }
    return n;
}

static void *hog(void *arg) {
    (void)arg;
    pin(X, -1);
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), hog_nice) != 0) {
        fprintf(stderr, "dqdelay: setpriority: %s\n", strerror(errno));
        exit(2);
    }
    atomic_fetch_add(&ready, 1);
    uint64_t x = (uintptr_t)&x;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        for (int k = 0; k < 64; k++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
    return (void *)(uintptr_t)x;
}

int main(int argc, char **argv) {
    long cycles = 0, max_seconds = 600;
    int64_t runs[MAX_LIST], sleeps[MAX_LIST];
    int nruns = 0, nsleeps = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--cpu")) X = atoi(v);
        else if (!strcmp(k, "--other")) Y = atoi(v);
        else if (!strcmp(k, "--cycles")) cycles = atol(v);
        else if (!strcmp(k, "--runs")) nruns = parse_list(v, runs);
        else if (!strcmp(k, "--hog-nice")) hog_nice = atoi(v);
        else if (!strcmp(k, "--max-seconds")) max_seconds = atol(v);
        else if (!strcmp(k, "--sleeps")) nsleeps = parse_list(v, sleeps);
        else {
            fprintf(stderr, "dqdelay: unknown option %s\n", k);
            return 2;
        }
    }
    if (X < 0 || Y < 0 || X == Y || cycles <= 0 || nsleeps == 0 || nruns == 0) {
        fprintf(stderr, "dqdelay: --cpu and --other (two CPUs), --cycles > 0, --runs and "
                        "--sleeps (times > 0) are required\n");
        return 2;
    }
    alarm((unsigned)max_seconds);
    int rc = handshake_and_pin("dqdelay", X);
    if (rc)
        return rc;
    pthread_t h;
    pthread_create(&h, NULL, hog, NULL);
    while (atomic_load(&ready) < 1)
        sched_yield();
    nap(20000000);
    for (long c = 0; c < cycles; c++) {
        int64_t sleep_ns = sleeps[c % nsleeps], run_ns = runs[c % nruns];
        pin(X, -1);
        int64_t prev = now_ns(), start = -1;
        for (;;) {
            int64_t t = now_ns();
            if (t - prev > GAP_NS)
                start = t;
            prev = t;
            if (start >= 0 && t - start >= run_ns)
                break;
        }
        pin(X, Y);
        int64_t t0 = now_ns();
        nap(sleep_ns);
        int64_t t1 = now_ns();
        printf("W %ld %lld %lld %d %lld\n", c, (long long)sleep_ns, (long long)run_ns,
               sched_getcpu(), (long long)(t1 - t0 - sleep_ns));
    }
    atomic_store(&stop, 1);
    pthread_join(h, NULL);
    return 0;
}
