/* Wake-up latency of a periodic sleeper (cyclictest style).
 *
 *   wakeup --cpu N --period-ns P --count C [--skip W] [--duration-ns D]
 *          [--slack-ns S] [--fifo PRIO] [--work-loops L] [--waker-cpu M]
 *          [--max-seconds S]
 *
 * Prints "K <pid>" and waits for "G" on stdin (the driver moves it into its
 * cgroup first), pins itself, sets its timer slack to S ns (PR_SET_TIMERSLACK;
 * default 1 ns, so the kernel's default 50 us is not in the numbers; give
 * 50000 to measure it), with --fifo switches to SCHED_FIFO at PRIO, then
 * sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) to deadlines P
 * apart.  Lateness = CLOCK_MONOTONIC right after the wake-up minus the
 * deadline.  A wake-up later than the next deadline skips the deadlines
 * already past (as cyclictest does), so every row is one wake-up.  The first
 * W wake-ups are not reported; it stops after C more or D ns of them,
 * whichever comes first (late wake-ups skip periods, so C can take much
 * longer than C * P), then prints one line "L <lateness_ns>" per wake-up.
 *
 * --work-loops L: after each wake-up it runs L iterations of a fixed chain
 * of dependent multiply-adds (no memory traffic) and the line is "L
 * <lateness_ns> <wall_ns> <cpu_ns>" (CLOCK_MONOTONIC and
 * CLOCK_THREAD_CPUTIME_ID around the work); then it runs the same work C
 * times back to back, without sleeping, one line "H <wall_ns> <cpu_ns>"
 * each: the same work hot, the reference for the work after a sleep.
 *
 * --waker-cpu M: the sleeper is woken by another thread instead of its own
 * timer, as a worker is by a load generator's write: a second thread of the
 * process, pinned to CPU M (same policy and slack), sleeps to the deadlines
 * and writes CLOCK_MONOTONIC into a pipe the sleeper blocks on; lateness =
 * the sleeper's CLOCK_MONOTONIC after its read minus the time written (the
 * wake-up's cross-CPU path: the write, the reschedule IPI, the sleeper's
 * CPU's exit from idle, the switch).  Without --work-loops only.
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
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "handshake.h"

static int64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static volatile uint64_t sink;

/* `loops` links of a dependent multiply-add chain (hog.c's iteration
 * without its working set): the same instructions every time. */
static void work(long loops) {
    uint64_t x = (uintptr_t)&x;
    for (long i = 0; i < loops; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink = x;
}

struct waker {
    int cpu, fd;
    int64_t period;
};

/* The waker thread: to the deadlines `period` apart from its start, writes
 * the time of each wake-up into the pipe; ends with the process. */
static void *waker_main(void *arg) {
    const struct waker *w = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(w->cpu, &set);
    int e = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (e) {
        fprintf(stderr, "wakeup: waker affinity to CPU %d: %s\n", w->cpu, strerror(e));
        exit(2);
    }
    int64_t next = now_ns() + w->period;
    for (;;) {
        struct timespec ts = {next / 1000000000ll, next % 1000000000ll};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        int64_t t = now_ns();
        if (write(w->fd, &t, sizeof t) != (ssize_t)sizeof t) {
            fprintf(stderr, "wakeup: waker write: %s\n", strerror(errno));
            exit(2);
        }
        next += w->period;
        while (next <= t)
            next += w->period;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int cpu = -1, max_seconds = 600;
    long count = 1000, skip = 20, work_loops = 0, slack = 1;
    int fifo = 0, waker_cpu = -1;
    int64_t period = 1000000, duration = INT64_MAX;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--cpu")) cpu = atoi(v);
        else if (!strcmp(k, "--period-ns")) period = atoll(v);
        else if (!strcmp(k, "--count")) count = atol(v);
        else if (!strcmp(k, "--skip")) skip = atol(v);
        else if (!strcmp(k, "--duration-ns")) duration = atoll(v);
        else if (!strcmp(k, "--max-seconds")) max_seconds = atoi(v);
        else if (!strcmp(k, "--slack-ns")) slack = atol(v);
        else if (!strcmp(k, "--fifo")) fifo = atoi(v);
        else if (!strcmp(k, "--work-loops")) work_loops = atol(v);
        else if (!strcmp(k, "--waker-cpu")) waker_cpu = atoi(v);
        else { fprintf(stderr, "wakeup: unknown option %s\n", k); return 2; }
    }
    if (period < 1000 || count < 1 || skip < 0 || slack < 1 || fifo < 0 || fifo > 99 ||
        work_loops < 0 || waker_cpu < -1 || (waker_cpu >= 0 && work_loops)) {
        fprintf(stderr, "wakeup: need --period-ns >= 1000, --count >= 1, --skip >= 0, "
                        "--slack-ns >= 1, --fifo 1..99, --work-loops >= 0, --waker-cpu >= 0 "
                        "and not with --work-loops\n");
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(max_seconds);
    int64_t *late = calloc(count, sizeof *late);
    int64_t *wall = calloc(count, sizeof *wall), *cpu_ns = calloc(count, sizeof *cpu_ns);
    if (!late || !wall || !cpu_ns) {
        fprintf(stderr, "wakeup: out of memory\n");
        return 2;
    }
    int rc = handshake_and_pin("wakeup", cpu);
    if (rc)
        return rc;
    if (prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0) != 0) {
        fprintf(stderr, "wakeup: PR_SET_TIMERSLACK: %s\n", strerror(errno));
        return 2;
    }
    if (fifo) {
        struct sched_param sp = {.sched_priority = fifo};
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
            fprintf(stderr, "wakeup: sched_setscheduler(SCHED_FIFO, %d): %s\n", fifo,
                    strerror(errno));
            return 2;
        }
    }
    /* the waker is created after the policy and slack are set: it has them */
    int pipefd[2] = {-1, -1};
    static struct waker w;
    if (waker_cpu >= 0) {
        pthread_t th;
        if (pipe(pipefd) != 0) {
            fprintf(stderr, "wakeup: pipe: %s\n", strerror(errno));
            return 2;
        }
        w = (struct waker){waker_cpu, pipefd[1], period};
        int e = pthread_create(&th, NULL, waker_main, &w);
        if (e) {
            fprintf(stderr, "wakeup: pthread_create: %s\n", strerror(e));
            return 2;
        }
    }
    int64_t next = now_ns() + period, stop = INT64_MAX;
    long done = 0;
    for (long i = -skip; i < count; i++) {
        int64_t t;
        if (waker_cpu >= 0) {
            /* the deadline is the time the waker wrote */
            ssize_t n;
            while ((n = read(pipefd[0], &next, sizeof next)) < 0 && errno == EINTR)
                ;
            t = now_ns();
            if (n != (ssize_t)sizeof next) {
                fprintf(stderr, "wakeup: read: %s\n", n < 0 ? strerror(errno) : "short");
                return 2;
            }
        } else {
            struct timespec ts = {next / 1000000000ll, next % 1000000000ll};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
            t = now_ns();
        }
        if (i == 0)
            stop = t > INT64_MAX - duration ? INT64_MAX : t + duration;
        if (work_loops) {
            int64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            work(work_loops);
            int64_t t1 = now_ns();
            if (i >= 0) {
                wall[done] = t1 - t;
                cpu_ns[done] = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
            }
        }
        if (i >= 0)
            late[done++] = t - next;
        if (t >= stop)
            break;
        next += period;
        while (next <= t)
            next += period;
    }
    for (long i = 0; i < done; i++) {
        if (work_loops)
            printf("L %lld %lld %lld\n", (long long)late[i], (long long)wall[i],
                   (long long)cpu_ns[i]);
        else
            printf("L %lld\n", (long long)late[i]);
    }
    for (long i = 0; work_loops && i < done; i++) {
        int64_t t0 = now_ns(), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        work(work_loops);
        printf("H %lld %lld\n", (long long)(now_ns() - t0),
               (long long)(clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0));
    }
    return 0;
}
