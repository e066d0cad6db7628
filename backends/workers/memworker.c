/* memworker: colosim's native memory worker (backends/workers/).
 *
 * The real-host counterpart of the simulator's memory model (docs/memory.md,
 * sim/workloads/memlookup.py): threads accessing one buffer with a given
 * access pattern and page size, reporting the time per access.  It is also
 * how the real backend runs a noisy_jobs job (backends/real/jobs.py): a job
 * is one memworker with the job's threads and its MemoryProfile's shape.
 *
 *   memworker --bytes N[k|m|g] [--pattern random|stride|sequential]
 *             [--stride BYTES] [--pages 4k|thp|2m|1g] [--duration S]
 *             [--accesses N] [--seed N] [--max-seconds S] [--threads K]
 *             [--gap-ops G] [--mlp M] [--write-fraction F] [--report-every N]
 *             [--start-at-stdin yes]
 *
 * Pages: 4k = plain anonymous mmap with MADV_NOHUGEPAGE; thp = a mapping
 * aligned to 2 MiB with MADV_HUGEPAGE (how much became huge is read back
 * from /proc/self/smaps); 2m / 1g = MAP_HUGETLB with MAP_HUGE_2MB /
 * MAP_HUGE_1GB.  A page size the host cannot provide is refused before any
 * work, with exit code 3 and a message saying what to change.
 *
 * Patterns (as sim/memory/pages.py's Buffer): random = uniform cache-line
 * references from a seeded splitmix64; sequential = a cyclic sweep over
 * every line; stride = a cyclic sweep over every STRIDE-th byte.  Each
 * access is one 8-byte load whose address depends on the previous load's
 * value (always 0, which the CPU cannot know), so loads never overlap and
 * ns_per_access is a latency; for sequential and stride the prefetcher can
 * still run ahead, which is the difference this worker exists to measure.
 *
 * The job shape (defaults: the plain latency probe above):
 * - --threads K: K threads on the one buffer, thread j with its own random
 *   stream (seed + j) or sweep start (j/K of the buffer); --accesses is per
 *   thread.
 * - --mlp M: M independent dependency chains per thread, so M loads can be
 *   in flight at once (the profile's memory-level parallelism, rounded).
 * - --gap-ops G: after each load, G iterations of a dependent integer
 *   recurrence fed by the loaded value, and the next address depends on its
 *   result: core work that neither overlaps the miss nor is optimised away
 *   (the model's cycles = core cycles + stall cycles, additive).
 * - --write-fraction F: that share of accesses also store to the line (a
 *   dirty line the LLC writes back when it evicts it).
 * - --report-every N: each thread prints "B <thread> <release_ns> <start_ns>
 *   <end_ns> <cpu_ns>" after every N of its accesses (rounded up to whole
 *   rounds of the chains): a burst of work done back to back, as the
 *   function worker's periodic bursts (workload=memlookup on the real host).
 * - --start-at-stdin yes: after the fault-in, read a CLOCK_MONOTONIC time in
 *   ns from stdin and start the threads then (every container together).
 *
 * The buffer is written once per 4 KiB before the clock starts, so page
 * faults are not measured.  The run stops after --accesses N or --duration S
 * (default 1 s), whichever comes first; --max-seconds (default duration +
 * 30 s) kills the process with SIGALRM whatever happens, fault-in included.
 * The result is one JSON line on stdout; errors go to stderr (exit 2: bad
 * arguments, 3: page size unavailable, 4: other failures).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif
#ifndef MAP_HUGE_1GB
#define MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#endif
#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

#define KIB 1024ULL
#define MIB (1024 * KIB)
#define GIB (1024 * MIB)
#define LINE 64
#define CHUNK 4096   /* accesses between clock reads */

enum { EXIT_USAGE = 2, EXIT_UNAVAILABLE = 3, EXIT_FAILED = 4 };

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("memworker: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* "512m" -> bytes; junk, zero or overflow -> 0 */
static uint64_t parse_size(const char *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-') return 0;
    uint64_t mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = KIB; end++; break;
    case 'm': case 'M': mult = MIB; end++; break;
    case 'g': case 'G': mult = GIB; end++; break;
    }
    if (*end || v > UINT64_MAX / mult) return 0;
    return v * mult;
}

static double parse_seconds(const char *s) {
    char *end;
    double v = strtod(s, &end);
    return (end == s || *end || !(v > 0) || v > 1e9) ? -1 : v;
}

static int read_long(const char *path, long *out) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fscanf(f, "%ld", out) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

static const char *page_label(uint64_t bytes) {
    return bytes >= GIB ? "1 GiB" : "2 MiB";
}

/* Refuse a hugetlb page size the host has too few free pages of, naming the
 * sysfs knob that would provide them. */
static void check_hugetlb(uint64_t page, uint64_t mapped) {
    char dir[128], path[192];
    snprintf(dir, sizeof dir, "/sys/kernel/mm/hugepages/hugepages-%" PRIu64 "kB",
             (uint64_t)(page / KIB));
    long nr = 0, free_ = 0, resv = 0;
    snprintf(path, sizeof path, "%s/nr_hugepages", dir);
    if (read_long(path, &nr))
        die(EXIT_UNAVAILABLE, "this host offers no %s hugepages (no %s: %s)", page_label(page),
            dir, page >= GIB ? "the CPU needs pdpe1gb and the kernel hugetlbfs"
                             : "the kernel needs CONFIG_HUGETLBFS");
    snprintf(path, sizeof path, "%s/free_hugepages", dir);
    read_long(path, &free_);
    snprintf(path, sizeof path, "%s/resv_hugepages", dir);
    read_long(path, &resv);
    long avail = free_ - resv, need = (long)(mapped / page);
    if (avail < need)
        die(EXIT_UNAVAILABLE,
            "no free %s hugepages: the buffer needs %ld, %ld are free (nr_hugepages %ld); as "
            "root: echo %ld > %s/nr_hugepages%s", page_label(page), need, avail < 0 ? 0 : avail,
            nr, nr + need - (avail < 0 ? 0 : avail), dir,
            page >= GIB ? " (if memory is too fragmented for that, boot with "
                          "hugepagesz=1G hugepages=N)" : "");
}

static void check_thp(void) {
    const char *path = "/sys/kernel/mm/transparent_hugepage/enabled";
    char mode[128] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        die(EXIT_UNAVAILABLE, "transparent hugepages are not available: no %s "
            "(the kernel needs CONFIG_TRANSPARENT_HUGEPAGE)", path);
    if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
    fclose(f);
    if (strstr(mode, "[never]"))
        die(EXIT_UNAVAILABLE, "transparent hugepages are disabled ([never] in %s); as root: "
            "echo madvise > %s", path, path);
}

static void *map_buffer(const char *pages, uint64_t mapped) {
    int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
    if (!strcmp(pages, "2m") || !strcmp(pages, "1g")) {
        int size_flag = !strcmp(pages, "2m") ? MAP_HUGE_2MB : MAP_HUGE_1GB;
        void *p = mmap(NULL, mapped, prot, flags | MAP_HUGETLB | size_flag, -1, 0);
        if (p == MAP_FAILED)
            die(EXIT_UNAVAILABLE, "mmap of %" PRIu64 " bytes of %s hugepages failed: %s "
                "(another process took the free pages, or a hugetlb cgroup limit)", mapped,
                page_label(!strcmp(pages, "2m") ? 2 * MIB : GIB), strerror(errno));
        return p;
    }
    if (!strcmp(pages, "thp")) {
        /* a huge page can only back a 2 MiB-aligned range: over-map, trim */
        uint8_t *raw = mmap(NULL, mapped + 2 * MIB, prot, flags, -1, 0);
        if (raw == MAP_FAILED) die(EXIT_FAILED, "mmap: %s", strerror(errno));
        uint8_t *p = (uint8_t *)(((uintptr_t)raw + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
        if (p > raw) munmap(raw, (size_t)(p - raw));
        munmap(p + mapped, (size_t)(raw + mapped + 2 * MIB - (p + mapped)));
        if (madvise(p, mapped, MADV_HUGEPAGE))
            die(EXIT_UNAVAILABLE, "madvise(MADV_HUGEPAGE): %s", strerror(errno));
        return p;
    }
    void *p = mmap(NULL, mapped, prot, flags, -1, 0);
    if (p == MAP_FAILED) die(EXIT_FAILED, "mmap: %s", strerror(errno));
    madvise(p, mapped, MADV_NOHUGEPAGE);   /* EINVAL without THP: 4k anyway */
    return p;
}

/* What backs [buf, buf+len) according to /proc/self/smaps: the largest
 * KernelPageSize and the bytes in huge pages (THP or hugetlb). */
static void smaps_pages(const void *buf, uint64_t len, uint64_t *page, uint64_t *huge) {
    uintptr_t lo = (uintptr_t)buf, hi = lo + len;
    FILE *f = fopen("/proc/self/smaps", "r");
    *page = 0;
    *huge = 0;
    if (!f) return;
    char line[512];
    int inside = 0;
    while (fgets(line, sizeof line, f)) {
        uintptr_t a, b;
        unsigned long kb;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &a, &b) == 2) {   /* a VMA's header */
            inside = a < hi && b > lo;
        } else if (inside && sscanf(line, "KernelPageSize: %lu kB", &kb) == 1) {
            if (kb * KIB > *page) *page = kb * KIB;
        } else if (inside && (sscanf(line, "AnonHugePages: %lu kB", &kb) == 1 ||
                              sscanf(line, "Private_Hugetlb: %lu kB", &kb) == 1 ||
                              sscanf(line, "Shared_Hugetlb: %lu kB", &kb) == 1)) {
            *huge += kb * KIB;
        }
    }
    fclose(f);
}

static inline uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* What one thread does: the buffer, the pattern and the job shape. */
struct job {
    uint8_t *buf;
    uint64_t bytes, lines, step, limit, accesses, gap, mlp, seed;
    uint64_t write_per_2_32;   /* store on accesses whose 32-bit draw is below it */
    uint64_t zero;             /* 0, read at run time so the compiler cannot fold it */
    uint64_t report_every;     /* a thread's accesses per "B" line; 0: no lines */
    int random, threads;
    int64_t start, deadline;
};

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

struct thread_state {
    const struct job *job;
    int index;
    uint64_t done;
    int stopped_by_accesses;
    pthread_t tid;
};

#define MAX_MLP 16

/* Core work between loads: a dependent recurrence the compiler cannot fold. */
static inline uint64_t gap_work(uint64_t x, uint64_t g) {
    for (uint64_t i = 0; i < g; i++) x = (x ^ (x >> 7)) + i;
    return x;
}

/* n rounds of one access on each of the m chains.  For random the line
 * comes from the thread's stream; for sweeps chain c sweeps from its own
 * offset.  The next address of a chain adds the loaded value (0) and the gap
 * work masked with zero (0): the CPU cannot know either before it has them,
 * so a chain's accesses are serialised, and the chains overlap. */
static void run_rounds(const struct job *j, uint64_t n, uint64_t *rng, uint64_t *off,
                       uint64_t *dep, uint64_t *wdraw, uint64_t zero) {
    uint64_t m = j->mlp;
    for (uint64_t k = 0; k < n; k++) {
        for (uint64_t c = 0; c < m; c++) {
            uint64_t o;
            if (j->random) {
                uint64_t r = splitmix64(rng);
                o = (uint64_t)(((unsigned __int128)r * j->lines) >> 64) * LINE;
            } else {
                o = off[c];
                off[c] += j->step;
                if (off[c] >= j->limit) off[c] = 0;
            }
            volatile uint64_t *p = (volatile uint64_t *)(j->buf + o + dep[c]);
            uint64_t v = *p;
            if (j->write_per_2_32 && (uint32_t)splitmix64(wdraw) < j->write_per_2_32) *p = v;
            dep[c] = j->gap ? (gap_work(v, j->gap) & zero) + v : v;
        }
    }
}

static void *thread_main(void *arg) {
    struct thread_state *t = arg;
    const struct job *j = t->job;
    uint64_t rng = j->seed + (uint64_t)t->index * 0x9E3779B97F4A7C15ULL;
    uint64_t wdraw = ~rng, off[MAX_MLP], dep[MAX_MLP];
    for (uint64_t c = 0; c < j->mlp; c++) {
        /* chains and threads start evenly spread over the sweep */
        uint64_t slot = (uint64_t)t->index * j->mlp + c, slots = (uint64_t)j->threads * j->mlp;
        uint64_t start = (uint64_t)(((unsigned __int128)j->limit * slot) / slots);
        off[c] = j->random ? 0 : start / j->step * j->step;
        dep[c] = 0;
    }
    uint64_t zero = *(const volatile uint64_t *)&j->zero;
    uint64_t done = 0, per_round = j->mlp;
    /* reports fall on whole rounds: every report_every rounded up to chains */
    uint64_t every = (j->report_every + per_round - 1) / per_round * per_round;
    uint64_t next_report = every;
    int64_t last_end = j->start, last_cpu = thread_cpu_ns();
    for (;;) {
        uint64_t n = CHUNK / per_round ? CHUNK / per_round : 1;
        if (j->accesses && (j->accesses - done) / per_round < n)
            n = (j->accesses - done + per_round - 1) / per_round;
        if (every && (next_report - done) / per_round < n) n = (next_report - done) / per_round;
        run_rounds(j, n, &rng, off, dep, &wdraw, zero);
        done += n * per_round;
        if (every && done >= next_report) {
            /* one burst of work done: "B <thread> <release> <start> <end> <cpu>",
             * back to back, so released and started when the previous ended */
            int64_t end = now_ns(), cpu = thread_cpu_ns();
            pthread_mutex_lock(&out_lock);
            printf("B %d %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n", t->index, last_end,
                   last_end, end, cpu - last_cpu);
            fflush(stdout);
            pthread_mutex_unlock(&out_lock);
            last_end = end;
            last_cpu = cpu;
            next_report += every;
        }
        if (j->accesses && done >= j->accesses) {
            t->stopped_by_accesses = 1;
            break;
        }
        if (now_ns() >= j->deadline) break;
    }
    t->done = done;
    return NULL;
}

static void usage(const char *why) {
    die(EXIT_USAGE, "%s\nusage: memworker --bytes N[k|m|g] [--pattern random|stride|sequential] "
        "[--stride BYTES] [--pages 4k|thp|2m|1g] [--duration S] [--accesses N] [--seed N] "
        "[--max-seconds S] [--threads K] [--gap-ops G] [--mlp M] [--write-fraction F] "
        "[--report-every N] [--start-at-stdin yes]", why);
}

int main(int argc, char **argv) {
    uint64_t bytes = 0, stride = 4096, accesses = 0, seed = 0, threads = 1, gap = 0, mlp = 1;
    const char *pattern = "random", *pages = "4k";
    double duration = 1.0, max_s = 0, write_fraction = 0;
    int stride_given = 0, start_at_stdin = 0;
    uint64_t report_every = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage("every option takes a value");
        i++;
        if (!strcmp(a, "--bytes")) {
            if (!(bytes = parse_size(v))) usage("--bytes must be a positive size, e.g. 512m");
        } else if (!strcmp(a, "--pattern")) {
            if (strcmp(v, "random") && strcmp(v, "stride") && strcmp(v, "sequential"))
                usage("--pattern must be random, stride or sequential");
            pattern = v;
        } else if (!strcmp(a, "--stride")) {
            if (!(stride = parse_size(v))) usage("--stride must be a positive number of bytes");
            stride_given = 1;
        } else if (!strcmp(a, "--pages")) {
            if (strcmp(v, "4k") && strcmp(v, "thp") && strcmp(v, "2m") && strcmp(v, "1g"))
                usage("--pages must be 4k, thp, 2m or 1g");
            pages = v;
        } else if (!strcmp(a, "--duration")) {
            if ((duration = parse_seconds(v)) < 0) usage("--duration must be > 0 seconds");
        } else if (!strcmp(a, "--accesses")) {
            if (!(accesses = parse_size(v))) usage("--accesses must be a positive integer");
        } else if (!strcmp(a, "--seed")) {
            char *end;
            seed = strtoull(v, &end, 10);
            if (end == v || *end || *v == '-') usage("--seed must be an unsigned integer");
        } else if (!strcmp(a, "--threads")) {
            if (!(threads = parse_size(v)) || threads > 1024)
                usage("--threads must be an integer in 1..1024");
        } else if (!strcmp(a, "--gap-ops")) {
            char *end;
            gap = strtoull(v, &end, 10);
            if (end == v || *end || *v == '-') usage("--gap-ops must be an unsigned integer");
        } else if (!strcmp(a, "--mlp")) {
            if (!(mlp = parse_size(v)) || mlp > MAX_MLP) usage("--mlp must be an integer in 1..16");
        } else if (!strcmp(a, "--write-fraction")) {
            char *end;
            write_fraction = strtod(v, &end);
            if (end == v || *end || !(write_fraction >= 0 && write_fraction <= 1))
                usage("--write-fraction must be in [0, 1]");
        } else if (!strcmp(a, "--report-every")) {
            if (!(report_every = parse_size(v))) usage("--report-every must be a positive integer");
        } else if (!strcmp(a, "--start-at-stdin")) {
            if (strcmp(v, "yes")) usage("--start-at-stdin takes yes");
            start_at_stdin = 1;
        } else if (!strcmp(a, "--max-seconds")) {
            if ((max_s = parse_seconds(v)) < 0) usage("--max-seconds must be > 0");
        } else {
            usage("unknown option");
        }
    }
    if (!bytes) usage("--bytes is required");
    if (bytes < LINE) usage("--bytes must be at least one cache line (64)");
    if (stride_given && strcmp(pattern, "stride"))
        usage("--stride only applies to --pattern stride");
    if (!strcmp(pattern, "stride") && stride > bytes - 8)
        usage("--stride must leave room for two accesses in --bytes");
    if (max_s == 0) max_s = duration + 30;
    if (max_s < duration) usage("--max-seconds must be at least --duration");
    signal(SIGALRM, SIG_DFL);   /* default action: terminate */
    alarm((unsigned)max_s + ((double)(unsigned)max_s < max_s));   /* rounded up */

    uint64_t page = !strcmp(pages, "1g") ? GIB : !strcmp(pages, "2m") ? 2 * MIB : 4 * KIB;
    uint64_t mapped = (bytes + page - 1) / page * page;
    if (!strcmp(pages, "2m") || !strcmp(pages, "1g")) check_hugetlb(page, mapped);
    if (!strcmp(pages, "thp")) check_thp();
    uint8_t *buf = map_buffer(pages, mapped);
    /* best effort (CONFIG_ANON_VMA_NAME): find it in smaps, keep it unmerged */
    prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)buf, mapped,
          (unsigned long)"colosim-memworker");

    int64_t t_touch = now_ns();
    for (uint64_t o = 0; o < mapped; o += 4 * KIB) ((volatile uint8_t *)buf)[o] = 0;
    double touch_s = (now_ns() - t_touch) / 1e9;
    uint64_t kernel_page_bytes, huge_bytes;
    /* read before the clock starts; khugepaged may collapse more later */
    smaps_pages(buf, mapped, &kernel_page_bytes, &huge_bytes);
    if (huge_bytes > mapped) huge_bytes = mapped;   /* a merged neighbour's */
    const char *got = kernel_page_bytes >= GIB ? "1g" : kernel_page_bytes >= 2 * MIB ? "2m"
                      : huge_bytes == 0 ? "4k" : huge_bytes >= mapped ? "2m" : "mixed";

    struct job job = {
        .buf = buf, .bytes = bytes, .lines = bytes / LINE, .accesses = accesses, .gap = gap,
        .mlp = mlp, .seed = seed, .random = !strcmp(pattern, "random"),
        .threads = (int)threads,
        .step = !strcmp(pattern, "stride") ? stride : LINE,
        .limit = bytes - 7,   /* the last 8-byte load must fit */
        /* 2^32 * F, so F = 1 stores on every access */
        .write_per_2_32 = write_fraction >= 1 ? UINT32_MAX
                          : (uint64_t)(write_fraction * 4294967296.0),
    };
    job.report_every = report_every;
    struct thread_state *ts = calloc(threads, sizeof *ts);
    if (!ts) die(EXIT_FAILED, "out of memory");
    int64_t t0 = now_ns();
    if (start_at_stdin) {
        /* ready (buffer faulted in): wait for the CLOCK_MONOTONIC start */
        long long at;
        if (scanf("%lld", &at) != 1) die(EXIT_USAGE, "--start-at-stdin: expected a start time in ns");
        struct timespec ts_at = {.tv_sec = at / 1000000000LL, .tv_nsec = at % 1000000000LL};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts_at, NULL) == EINTR) {
        }
        t0 = now_ns();
        if (t0 < at) t0 = at;
    }
    job.start = t0;
    job.deadline = t0 + (int64_t)(duration * 1e9);
    for (uint64_t i = 0; i < threads; i++) {
        ts[i] = (struct thread_state){.job = &job, .index = (int)i};
        int e = pthread_create(&ts[i].tid, NULL, thread_main, &ts[i]);
        if (e) die(EXIT_FAILED, "pthread_create: %s", strerror(e));
    }
    uint64_t done = 0;
    int all_by_accesses = 1;
    for (uint64_t i = 0; i < threads; i++) {
        pthread_join(ts[i].tid, NULL);
        done += ts[i].done;
        all_by_accesses &= ts[i].stopped_by_accesses;
    }
    int64_t t = now_ns();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu_s = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
                   (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    double elapsed = (t - t0) / 1e9;
    char step_json[24] = "null";   /* random has no step */
    if (!job.random) snprintf(step_json, sizeof step_json, "%" PRIu64, job.step);
    printf("{\"pattern\": \"%s\", \"pages\": \"%s\", \"page_size\": \"%s\", "
           "\"kernel_page_bytes\": %" PRIu64 ", \"huge_bytes\": %" PRIu64 ", "
           "\"bytes\": %" PRIu64 ", \"mapped_bytes\": %" PRIu64 ", \"step_bytes\": %s, "
           "\"seed\": %" PRIu64 ", \"threads\": %" PRIu64 ", \"mlp\": %" PRIu64 ", "
           "\"gap_ops\": %" PRIu64 ", \"write_fraction\": %.6f, "
           "\"accesses\": %" PRIu64 ", \"elapsed_s\": %.9f, \"ns_per_access\": %.6f, "
           "\"touch_s\": %.6f, \"cpu_s\": %.6f, \"start_ns\": %" PRId64 ", "
           "\"end_ns\": %" PRId64 ", \"stopped\": \"%s\"}\n",
           pattern, pages, got, kernel_page_bytes, huge_bytes, bytes, mapped, step_json, seed,
           threads, mlp, gap, write_fraction, done, elapsed,
           /* one thread's wall time per access of its own */
           elapsed * 1e9 * (double)threads / (double)done, touch_s, cpu_s, t0, t,
           accesses && all_by_accesses ? "accesses" : "duration");
    return 0;
}
