/* Context-switch microbenchmark (lmbench lat_ctx; Li, Ding & Shen 2007).
 *
 *   ctxsw --mode overhead|pingpong|migrate|migrate_ref --ws BYTES
 *         --cpu-a N [--cpu-b N] --target-ns NS --samples S [--max-seconds S]
 *
 * Prints "K <pid_a> <pid_b>" (pid_b = 0 in overhead mode) once both
 * processes exist and waits for "G" on stdin, so the driver can move A and B
 * into their cgroups first; only then are they pinned (a v1 cpuset attach
 * resets the affinity).  Then one line per sample:
 *   "S <rounds> <elapsed_ns> <vcsw> <ivcsw>"
 * with the context switches of A and B together.  Warm-up and the batch
 * size search are not reported.
 *
 * Round trip: A walks its working set and writes the token to B; B wakes,
 * walks its own working set, writes the token back and blocks.  In
 * overhead mode one process does both hops through its own pipe.  A walk
 * touches one byte per 64-byte line, read-modify-write, sequentially.
 *
 * B records its getrusage when it receives a token marked 'b' (the first
 * of every batch) into a shared page, so B's counts cover the same rounds
 * as A's without any traffic inside a batch.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
#define MAX_BATCHES 4096

enum mode { OVERHEAD, PINGPONG, MIGRATE, MIGRATE_REF };

struct counts { long vcsw, ivcsw; };

static void die(const char *what) {
    fprintf(stderr, "ctxsw: %s: %s\n", what, strerror(errno));
    exit(2);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct counts rusage_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (struct counts){ru.ru_nvcsw, ru.ru_nivcsw};
}

static volatile unsigned char *alloc_ws(size_t ws) {
    if (ws == 0)
        return NULL;
    unsigned char *p = mmap(NULL, ws, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap working set");
    memset(p, 1, ws);   /* fault every page in before timing */
    return p;
}

static inline void walk(volatile unsigned char *ws, size_t n) {
    for (size_t i = 0; i < n; i += LINE)
        ws[i]++;
}

static void pin(pid_t pid, int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(pid, sizeof set, &set) != 0)
        die("sched_setaffinity");
}

static void put(int fd, char c) {
    if (write(fd, &c, 1) != 1)
        die("write token");
}

static char get(int fd) {
    char c;
    ssize_t r;
    do r = read(fd, &c, 1); while (r < 0 && errno == EINTR);
    if (r != 1) {
        if (r == 0)
            exit(0);    /* partner gone */
        die("read token");
    }
    return c;
}

int main(int argc, char **argv) {
    enum mode mode = PINGPONG;
    size_t ws = 0;
    int cpu_a = 0, cpu_b = -1, samples = 30, max_seconds = 600;
    uint64_t target_ns = 20000000;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--mode")) {
            mode = !strcmp(v, "overhead") ? OVERHEAD : !strcmp(v, "pingpong") ? PINGPONG
                 : !strcmp(v, "migrate") ? MIGRATE : !strcmp(v, "migrate_ref") ? MIGRATE_REF : -1;
            if ((int)mode < 0) { fprintf(stderr, "ctxsw: unknown mode %s\n", v); return 2; }
        } else if (!strcmp(k, "--ws")) ws = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--cpu-a")) cpu_a = atoi(v);
        else if (!strcmp(k, "--cpu-b")) cpu_b = atoi(v);
        else if (!strcmp(k, "--target-ns")) target_ns = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--samples")) samples = atoi(v);
        else if (!strcmp(k, "--max-seconds")) max_seconds = atoi(v);
        else { fprintf(stderr, "ctxsw: unknown option %s\n", k); return 2; }
    }
    if ((mode == MIGRATE || mode == MIGRATE_REF) && cpu_b < 0) {
        fprintf(stderr, "ctxsw: migrate modes need --cpu-b\n");
        return 2;
    }
    if (samples < 1 || samples > MAX_BATCHES - 64) {
        fprintf(stderr, "ctxsw: --samples must be 1..%d\n", MAX_BATCHES - 64);
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(max_seconds);

    /* B's rusage at the start of each batch, written by B, read by A */
    struct counts *b_marks = mmap(NULL, MAX_BATCHES * sizeof *b_marks, PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b_marks == MAP_FAILED)
        die("mmap shared marks");
    int ab[2], ba[2];
    if (pipe(ab) || pipe(ba))
        die("pipe");
    pid_t b = 0;
    if (mode != OVERHEAD) {
        b = fork();
        if (b < 0)
            die("fork");
        if (b == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            volatile unsigned char *wsb = alloc_ws(ws);
            int marks = 0;
            for (;;) {
                char c = get(ab[0]);
                if (c == 'q')
                    _exit(0);
                if (c == 'b' && marks < MAX_BATCHES)
                    b_marks[marks++] = rusage_now();
                walk(wsb, ws);
                put(ba[1], 't');
            }
        }
    }
    volatile unsigned char *wsa = alloc_ws(ws);
    printf("K %d %d\n", (int)getpid(), (int)b);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin) || line[0] != 'G') {
        if (b) kill(b, SIGKILL);
        return 1;
    }
    pin(0, cpu_a);
    if (b)
        pin(b, cpu_a);
    /* overhead: A writes to itself through one pipe */
    int to = ab[1], from = mode == OVERHEAD ? ab[0] : ba[0];

    int where = 0;   /* migrate: 0 = cpu_a, 1 = cpu_b */
    int batch = 0;   /* tokens marked 'b' sent so far = B's mark index */
    struct counts a_start, a_end;
    uint64_t t0, t1;
    /* one batch of `rounds` round trips, timed into t0..t1 */
#define RUN_BATCH(rounds) do { \
        a_start = rusage_now(); \
        t0 = now_ns(); \
        for (long r_ = 0; r_ < (rounds); r_++) { \
            if (mode == MIGRATE || mode == MIGRATE_REF) { \
                int dst = mode == MIGRATE ? (where ^= 1) : where; \
                int cpu = dst ? cpu_b : cpu_a; \
                pin(b, cpu); \
                pin(0, cpu); \
            } \
            walk(wsa, ws); \
            put(to, r_ == 0 ? 'b' : 't'); \
            get(from); \
            if (mode == OVERHEAD) { \
                walk(wsa, ws); \
                put(to, 't'); \
                get(from); \
            } \
        } \
        t1 = now_ns(); \
        a_end = rusage_now(); \
        batch++; \
    } while (0)

    /* batch size: double until a batch takes at least half the target */
    long rounds = 1;
    for (;;) {
        RUN_BATCH(rounds);
        if (t1 - t0 >= target_ns / 2 || rounds >= (1L << 24) || batch >= 48)
            break;
        rounds *= 2;
    }
    for (int w = 0; w < 2; w++)
        RUN_BATCH(rounds);
    int first = batch;   /* B's mark of the first measured batch */
    uint64_t *elapsed = calloc(samples, sizeof *elapsed);
    struct counts *a_delta = calloc(samples, sizeof *a_delta);
    for (int s = 0; s < samples; s++) {
        RUN_BATCH(rounds);
        elapsed[s] = t1 - t0;
        a_delta[s] = (struct counts){a_end.vcsw - a_start.vcsw, a_end.ivcsw - a_start.ivcsw};
    }
    if (b) {
        /* one more marked token closes B's last batch */
        put(to, 'b');
        get(from);
        put(to, 'q');
        waitpid(b, NULL, 0);
    }
    for (int s = 0; s < samples; s++) {
        long v = a_delta[s].vcsw, iv = a_delta[s].ivcsw;
        if (b) {
            v += b_marks[first + s + 1].vcsw - b_marks[first + s].vcsw;
            iv += b_marks[first + s + 1].ivcsw - b_marks[first + s].ivcsw;
        }
        printf("S %ld %llu %ld %ld\n", rounds, (unsigned long long)elapsed[s], v, iv);
    }
    return 0;
}
