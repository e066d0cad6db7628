/* Wake-up latency of a periodic sleeper (cyclictest style).
 *
 *   wakeup --cpu N --period-ns P --count C [--skip W] [--duration-ns D]
 *          [--max-seconds S]
 *
 * Prints "K <pid>" and waits for "G" on stdin (the driver moves it into its
 * cgroup first), pins itself, sets its timer slack to 1 ns (PR_SET_TIMERSLACK;
 * the default 50 us would be added to every wake-up), then sleeps with
 * clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) to deadlines P apart.
 * Lateness = CLOCK_MONOTONIC right after the wake-up minus the deadline.  A
 * wake-up later than the next deadline skips the deadlines already past
 * (as cyclictest does), so every row is one wake-up.  The first W wake-ups
 * are not reported; it stops after C more or D ns of them, whichever comes
 * first (late wake-ups skip periods, so C can take much longer than C * P),
 * then prints one line "L <lateness_ns>" per wake-up.
 */
#define _GNU_SOURCE
#include <errno.h>
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

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int main(int argc, char **argv) {
    int cpu = -1, max_seconds = 600;
    long count = 1000, skip = 20;
    int64_t period = 1000000, duration = INT64_MAX;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--cpu")) cpu = atoi(v);
        else if (!strcmp(k, "--period-ns")) period = atoll(v);
        else if (!strcmp(k, "--count")) count = atol(v);
        else if (!strcmp(k, "--skip")) skip = atol(v);
        else if (!strcmp(k, "--duration-ns")) duration = atoll(v);
        else if (!strcmp(k, "--max-seconds")) max_seconds = atoi(v);
        else { fprintf(stderr, "wakeup: unknown option %s\n", k); return 2; }
    }
    if (period < 1000 || count < 1 || skip < 0) {
        fprintf(stderr, "wakeup: need --period-ns >= 1000, --count >= 1, --skip >= 0\n");
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(max_seconds);
    int64_t *late = calloc(count, sizeof *late);
    if (!late) {
        fprintf(stderr, "wakeup: out of memory\n");
        return 2;
    }
    int rc = handshake_and_pin("wakeup", cpu);
    if (rc)
        return rc;
    if (prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0) != 0) {
        fprintf(stderr, "wakeup: PR_SET_TIMERSLACK: %s\n", strerror(errno));
        return 2;
    }
    int64_t next = now_ns() + period, stop = INT64_MAX;
    long done = 0;
    for (long i = -skip; i < count; i++) {
        struct timespec ts = {next / 1000000000ll, next % 1000000000ll};
        int r;
        while ((r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)) == EINTR)
            ;
        int64_t t = now_ns();
        if (i == 0)
            stop = t > INT64_MAX - duration ? INT64_MAX : t + duration;
        if (i >= 0)
            late[done++] = t - next;
        if (t >= stop)
            break;
        next += period;
        while (next <= t)
            next += period;
    }
    for (long i = 0; i < done; i++)
        printf("L %lld\n", (long long)late[i]);
    return 0;
}
