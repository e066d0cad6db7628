/* The start-up handshake of the benchmark programs (calibration/bench/
 * common.NativeProc): announce the pid, wait for the driver's "G" (it has
 * attached us to our cgroups by then), then pin to `cpu` (-1: stay).
 * Pinning after the attach because since Linux 6.2 a v1 cpuset attach keeps
 * the affinity the process already has.  Returns 0, or the exit status to
 * leave with after saying why on stderr. */
#ifndef COLOSIM_HANDSHAKE_H
#define COLOSIM_HANDSHAKE_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int handshake_and_pin(const char *prog, int cpu) {
    printf("K %d\n", (int)getpid());
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin) || line[0] != 'G')
        return 1;
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) {
            fprintf(stderr, "%s: sched_setaffinity: %s\n", prog, strerror(errno));
            return 2;
        }
    }
    return 0;
}
#endif
