/* How soon an idle CPU takes a task waiting on the other CPU
 * (calibration/bench/newidle.py).
 *
 *   newidle --cpu X --other Y --cycles N [--fails F --fail-ns NS]
 *           [--gap-ns NS] [--trial-ns NS] [--max-seconds S]
 *
 * Two spinning threads (hogs) and the main thread S, pinned to X.  Every
 * cycle: S pins both hogs to Y (the one S found on X moves there at once),
 * lets them run on X and Y again, spins --gap-ns on X with both hogs queued
 * on Y, then sleeps --trial-ns: X goes idle with a task waiting on Y.  A
 * hog that finds itself on X (sched_getcpu()) during the sleep records the
 * time; S prints "P <cycle> <ns from its sleep to the hog on X, or -1>".
 * Before the first cycle, --fails sleeps of --fail-ns each with the hogs
 * pinned to Y: X goes idle F times with nothing it may pull, each a failed
 * newidle balance.
 *
 * The hogs burn CPU without system calls, so their slices end at ticks.
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
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "handshake.h"

static int X = -1, Y = -1;
static _Atomic int in_trial = 0;
static _Atomic int64_t pulled_at = 0;
static _Atomic int stop = 0;
static _Atomic int ready = 0;
static pid_t hog_tid[2];

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void pin(pid_t tid, int a, int b) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(a, &s);
    if (b >= 0)
        CPU_SET(b, &s);
    if (sched_setaffinity(tid, sizeof s, &s) != 0) {
        fprintf(stderr, "newidle: sched_setaffinity: %s\n", strerror(errno));
        exit(2);
    }
}

static void nap(int64_t ns) {
    struct timespec t = {ns / 1000000000, ns % 1000000000};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

static void *hog(void *arg) {
    int i = (int)(intptr_t)arg;
    hog_tid[i] = (pid_t)syscall(SYS_gettid);
    pin(0, Y, -1);
    atomic_fetch_add(&ready, 1);
    uint64_t x = (uintptr_t)&x;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int k = 0; k < 64; k++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
        if (atomic_load_explicit(&in_trial, memory_order_relaxed) && sched_getcpu() == X) {
            int64_t zero = 0;
            atomic_compare_exchange_strong(&pulled_at, &zero, now_ns());
        }
    }
    return (void *)(uintptr_t)x;
}

int main(int argc, char **argv) {
    long cycles = 0, fails = 0, max_seconds = 600;
    int64_t fail_ns = 200000, gap_ns = 2000000, trial_ns = 30000000;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--cpu")) X = atoi(v);
        else if (!strcmp(k, "--other")) Y = atoi(v);
        else if (!strcmp(k, "--cycles")) cycles = atol(v);
        else if (!strcmp(k, "--fails")) fails = atol(v);
        else if (!strcmp(k, "--fail-ns")) fail_ns = atoll(v);
        else if (!strcmp(k, "--gap-ns")) gap_ns = atoll(v);
        else if (!strcmp(k, "--trial-ns")) trial_ns = atoll(v);
        else if (!strcmp(k, "--max-seconds")) max_seconds = atol(v);
        else {
            fprintf(stderr, "newidle: unknown option %s\n", k);
            return 2;
        }
    }
    if (X < 0 || Y < 0 || X == Y || cycles <= 0) {
        fprintf(stderr, "newidle: --cpu and --other (two CPUs) and --cycles > 0 are required\n");
        return 2;
    }
    alarm((unsigned)max_seconds);
    int rc = handshake_and_pin("newidle", X);
    if (rc)
        return rc;
    pthread_t h[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&h[i], NULL, hog, (void *)(intptr_t)i);
    while (atomic_load(&ready) < 2)
        sched_yield();
    nap(20000000);
    for (long f = 0; f < fails; f++)
        nap(fail_ns);
    for (long c = 0; c < cycles; c++) {
        for (int i = 0; i < 2; i++)
            pin(hog_tid[i], Y, -1);
        for (int i = 0; i < 2; i++)
            pin(hog_tid[i], X, Y);
        for (int64_t end = now_ns() + gap_ns; now_ns() < end;)
            ;
        atomic_store(&pulled_at, 0);
        int64_t t0 = now_ns();
        atomic_store(&in_trial, 1);
        nap(trial_ns);
        atomic_store(&in_trial, 0);
        int64_t p = atomic_load(&pulled_at);
        printf("P %ld %lld\n", c, p ? (long long)(p - t0) : -1LL);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(h[i], NULL);
    return 0;
}
