/* funcworker: colosim's native function worker (backends/workers/).
 *
 * One process per function cgroup.  The load generator (backends/real/
 * loadgen.py) starts it, attaches it to the function's cgroup, then drives
 * it over stdin/stdout with one-line text commands (all times are
 * CLOCK_MONOTONIC nanoseconds, the clock of Python's time.monotonic_ns):
 *
 *   P                          ping        -> "K <pid>"
 *   R <id> <demand_ns> <k>     request     -> later "D <id> <start_ns> <end_ns> <cpu_ns> <start_cpu_ns>"
 *   Q                          quit now (requests in flight are abandoned)
 *   G <t0_ns>                  periodic mode: start the threads at t0
 *
 * A request forks k threads (fork-join); the demand is split evenly as the
 * simulator does (divmod: the first thread takes the remainder).  Each
 * thread spins until ITS OWN CPU time (CLOCK_THREAD_CPUTIME_ID) has grown by
 * its share, so preemption, throttling and waiting do not count as work.
 * start_ns is when the first of the request's threads began running, end_ns
 * when the last finished, cpu_ns the CPU time its threads measured,
 * start_cpu_ns the CPU time its threads had used before their shares began
 * (thread start-up: the thread's clock counts from its creation).  Pool
 * and accept mode's "D" lines omit start_cpu_ns (their threads are reused).
 * Malformed commands are answered with "E <message>".  EOF on stdin exits.
 *
 * Periodic mode (--periodic THREADS RUN_US SLEEP_US [--nices N0,N1,...]):
 * THREADS threads wait for "G <t0_ns>", then from t0 each spins RUN_US of
 * its own CPU time, sleeps SLEEP_US (0: a CPU hog), and so on, until Q, EOF
 * or the time bound.  Each burst is reported as
 *   "B <thread> <release_ns> <start_ns> <end_ns> <cpu_ns>"
 * (release: when it became due, t0 or the previous end + SLEEP_US; start:
 * when the thread ran after it; as the simulator's periodic requests).
 * --nices gives thread j nice Nj (setpriority on its tid).
 *
 * Pool mode (--pool WORKERS CAPACITY): the server of workload=worker_pool
 * (sim/workloads/worker_pool.py).  WORKERS threads serve a FIFO queue of at
 * most CAPACITY waiting requests; "R <id> <demand_ns> 1" is admitted while
 * fewer than WORKERS + CAPACITY requests are queued or in service (M/G/c/K),
 * else answered at once with "X <id> <now_ns>" (dropped).  A request runs on
 * the worker that takes it (start_ns: when it took it) and is reported with
 * "D" as above.  The threads exist from the start, blocked on the queue:
 * the simulator spawns them on first demand, which costs no CPU either way.
 * Pool thread j is named "worker-j", as the simulator names its tasks.
 *
 * Accept mode (--pool WORKERS CAPACITY --accept BACKLOG BATCH WINDOW_NS
 * ACCEPT_NS POLL_NS): the server of workload=webserver (sim/workloads/webserver.py)
 * in front of the pool.  A request line is a connection that completed its
 * handshake: the main thread puts it in the listen backlog (at most BACKLOG
 * waiting, else "X <id> <now_ns>" at once: refused).  One thread named
 * "accept" takes connections out of the backlog as the simulator's accept
 * thread does: each pass spins ACCEPT_NS of its CPU time (accept + enqueue),
 * then takes one waiting connection into the batch; the batch goes to the
 * pool (as a pool-mode request, dropped with "X" where the queue is full)
 * when it holds BATCH connections or WINDOW_NS after its first was taken.
 * With nothing to accept and no batch due it blocks (on a condition
 * variable, as a blocking accept or epoll would), woken by a connection or
 * by the window's end; with POLL_NS > 0 it never blocks: a pass that finds
 * the backlog empty spins POLL_NS (a non-blocking accept's loop).  The main
 * thread stands for the kernel's TCP stack (the handshake that queues the
 * connection and wakes the accepter).
 *
 * --max-seconds S: the process is killed by SIGALRM after S seconds of wall
 * time whatever happens (the backend's time bound on every worker).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Burn `ns` of this thread's CPU time. */
static void spin_cpu(int64_t ns) {
    int64_t end = now_ns(CLOCK_THREAD_CPUTIME_ID) + ns;
    while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end) {
        for (volatile int i = 0; i < 64; i++) {
        }
    }
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n >= (int)sizeof buf) n = sizeof buf - 1;
    pthread_mutex_lock(&out_lock);
    const char *p = buf;
    while (n > 0) {   /* one write per line: < PIPE_BUF, so lines never interleave */
        ssize_t w = write(1, p, (size_t)n);
        if (w < 0) {
            if (errno == EINTR) continue;
            _exit(3);   /* the load generator is gone */
        }
        p += w;
        n -= (int)w;
    }
    pthread_mutex_unlock(&out_lock);
}

struct request {
    uint64_t id;
    pthread_mutex_t lock;
    int pending;
    int64_t start_ns;   /* first thread's start, CLOCK_MONOTONIC */
    int64_t cpu_ns;
    int64_t start_cpu_ns;   /* the threads' CPU before their shares began */
};

struct share {
    struct request *req;
    int64_t ns;
};

static void *run_share(void *arg) {
    struct share *s = arg;
    struct request *r = s->req;
    int64_t t0 = now_ns(CLOCK_MONOTONIC);
    int64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    pthread_mutex_lock(&r->lock);
    if (r->start_ns == 0 || t0 < r->start_ns) r->start_ns = t0;
    pthread_mutex_unlock(&r->lock);
    spin_cpu(s->ns);
    int64_t cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
    free(s);
    pthread_mutex_lock(&r->lock);
    r->cpu_ns += cpu;
    r->start_cpu_ns += c0;
    int last = --r->pending == 0;
    pthread_mutex_unlock(&r->lock);
    if (last) {
        int64_t end = now_ns(CLOCK_MONOTONIC);
        say("D %" PRIu64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n", r->id,
            r->start_ns, end, r->cpu_ns, r->start_cpu_ns);
        pthread_mutex_destroy(&r->lock);
        free(r);
    }
    return NULL;
}

static pthread_attr_t attr;

static int start_request(uint64_t id, int64_t demand, int k) {
    struct request *r = calloc(1, sizeof *r);
    if (!r) return -1;
    r->id = id;
    r->pending = k;
    pthread_mutex_init(&r->lock, NULL);
    int64_t share = demand / k, extra = demand % k;
    for (int j = 0; j < k; j++) {
        struct share *s = malloc(sizeof *s);
        if (!s) return -1;
        s->req = r;
        s->ns = share + (j == 0 ? extra : 0);
        if (s->ns < 1) s->ns = 1;
        pthread_t t;
        int e = pthread_create(&t, &attr, run_share, s);
        if (e) {
            /* threads already started still hold r; report and give up */
            say("E pthread_create: %s\n", strerror(e));
            exit(4);
        }
    }
    return 0;
}

struct periodic {
    int64_t run_ns, sleep_ns;
};

static pthread_mutex_t go_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go_cond = PTHREAD_COND_INITIALIZER;
static int64_t go_at = 0;   /* t0 of periodic threads, CLOCK_MONOTONIC ns */
static struct periodic per = {0, 0};
static int nices[1024];
static int have_nices = 0;

static void sleep_until(int64_t t) {
    struct timespec ts = {t / 1000000000LL, t % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static void *periodic_thread(void *arg) {
    long j = (long)arg;
    if (have_nices && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nices[j]) != 0)
        say("E setpriority(%d) for thread %ld: %s\n", nices[j], j, strerror(errno));
    pthread_mutex_lock(&go_lock);
    while (go_at == 0) pthread_cond_wait(&go_cond, &go_lock);
    int64_t release = go_at;
    pthread_mutex_unlock(&go_lock);
    sleep_until(release);
    for (;;) {
        int64_t start = now_ns(CLOCK_MONOTONIC);
        int64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        spin_cpu(per.run_ns > 0 ? per.run_ns : 1000000);
        int64_t end = now_ns(CLOCK_MONOTONIC);
        say("B %ld %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n", j, release, start, end,
            now_ns(CLOCK_THREAD_CPUTIME_ID) - c0);
        release = end + per.sleep_ns;
        if (per.sleep_ns > 0) sleep_until(release);
    }
    return NULL;
}

/* Pool mode: a ring of WORKERS + CAPACITY slots holds the queued requests;
 * `admitted` counts those queued or in service. */
struct pool_item {
    uint64_t id;
    int64_t demand;
};
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cond = PTHREAD_COND_INITIALIZER;
static struct pool_item *ring;
static long ring_size, ring_head, ring_len, admitted, pool_limit;

static void *pool_thread(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&pool_lock);
        while (ring_len == 0) pthread_cond_wait(&pool_cond, &pool_lock);
        struct pool_item it = ring[ring_head];
        ring_head = (ring_head + 1) % ring_size;
        ring_len--;
        pthread_mutex_unlock(&pool_lock);
        int64_t start = now_ns(CLOCK_MONOTONIC);
        int64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        spin_cpu(it.demand);
        int64_t end = now_ns(CLOCK_MONOTONIC);
        int64_t cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        pthread_mutex_lock(&pool_lock);
        admitted--;
        pthread_mutex_unlock(&pool_lock);
        say("D %" PRIu64 " %" PRId64 " %" PRId64 " %" PRId64 "\n", it.id, start, end, cpu);
    }
    return NULL;
}

static void pool_submit(uint64_t id, int64_t demand) {
    pthread_mutex_lock(&pool_lock);
    int ok = admitted < pool_limit;
    if (ok) {
        ring[(ring_head + ring_len) % ring_size] = (struct pool_item){id, demand};
        ring_len++;
        admitted++;
        pthread_cond_signal(&pool_cond);
    }
    pthread_mutex_unlock(&pool_lock);
    if (!ok) say("X %" PRIu64 " %" PRId64 "\n", id, now_ns(CLOCK_MONOTONIC));
}

/* Accept mode: the listen backlog (a ring of BACKLOG connections) and the
 * accept thread's batch. */
static pthread_mutex_t acc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t acc_cond;   /* on CLOCK_MONOTONIC: the batch window's end */
static struct pool_item *backlog, *batch;
static long backlog_size, backlog_head, backlog_len, batch_size, batch_len;
static int64_t window_ns, accept_ns, poll_ns;

static void listen_submit(uint64_t id, int64_t demand) {
    pthread_mutex_lock(&acc_lock);
    int ok = backlog_len < backlog_size;
    if (ok) {
        backlog[(backlog_head + backlog_len) % backlog_size] = (struct pool_item){id, demand};
        backlog_len++;
        pthread_cond_signal(&acc_cond);
    }
    pthread_mutex_unlock(&acc_lock);
    if (!ok) say("X %" PRIu64 " %" PRId64 "\n", id, now_ns(CLOCK_MONOTONIC));
}

static void *accept_thread(void *arg) {
    (void)arg;
    int64_t window_end = 0;
    for (;;) {
        pthread_mutex_lock(&acc_lock);
        /* a pass runs for a connection, or to hand over a batch whose window
         * ended; a polling loop runs passes whatever there is */
        while (!poll_ns && backlog_len == 0 &&
               !(batch_len > 0 && now_ns(CLOCK_MONOTONIC) >= window_end)) {
            if (batch_len > 0) {
                struct timespec ts = {window_end / 1000000000LL, window_end % 1000000000LL};
                pthread_cond_timedwait(&acc_cond, &acc_lock, &ts);
            } else {
                pthread_cond_wait(&acc_cond, &acc_lock);
            }
        }
        int empty = backlog_len == 0;
        pthread_mutex_unlock(&acc_lock);
        spin_cpu(empty && poll_ns ? poll_ns : accept_ns);
        pthread_mutex_lock(&acc_lock);
        if (backlog_len > 0) {
            batch[batch_len++] = backlog[backlog_head];
            backlog_head = (backlog_head + 1) % backlog_size;
            backlog_len--;
            if (batch_len == 1) window_end = now_ns(CLOCK_MONOTONIC) + window_ns;
        }
        pthread_mutex_unlock(&acc_lock);
        if (batch_len > 0 && (batch_len >= batch_size || now_ns(CLOCK_MONOTONIC) >= window_end)) {
            for (long j = 0; j < batch_len; j++) pool_submit(batch[j].id, batch[j].demand);
            batch_len = 0;
        }
    }
    return NULL;
}

static void usage(void) {
    fprintf(stderr, "usage: funcworker [--max-seconds S] [--periodic THREADS RUN_US SLEEP_US "
                    "[--nices N0,N1,...] | --pool WORKERS CAPACITY "
                    "[--accept BACKLOG BATCH WINDOW_NS ACCEPT_NS POLL_NS]]\n");
    exit(2);
}

int main(int argc, char **argv) {
    unsigned max_s = 0;
    int periodic = 0;
    long threads = 0, pool_workers = 0, pool_capacity = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-seconds") && i + 1 < argc) {
            max_s = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--periodic") && i + 3 < argc) {
            periodic = 1;
            threads = strtol(argv[++i], NULL, 10);
            per.run_ns = strtoll(argv[++i], NULL, 10) * 1000;
            per.sleep_ns = strtoll(argv[++i], NULL, 10) * 1000;
            if (threads < 1 || threads > 1024 || per.run_ns < 0 || per.sleep_ns < 0) usage();
        } else if (!strcmp(argv[i], "--pool") && i + 2 < argc) {
            pool_workers = strtol(argv[++i], NULL, 10);
            pool_capacity = strtol(argv[++i], NULL, 10);
            if (pool_workers < 1 || pool_workers > 4096 || pool_capacity < 0 ||
                pool_capacity > 10000000)
                usage();
        } else if (!strcmp(argv[i], "--accept") && i + 5 < argc) {
            backlog_size = strtol(argv[++i], NULL, 10);
            batch_size = strtol(argv[++i], NULL, 10);
            window_ns = strtoll(argv[++i], NULL, 10);
            accept_ns = strtoll(argv[++i], NULL, 10);
            poll_ns = strtoll(argv[++i], NULL, 10);
            if (backlog_size < 1 || backlog_size > 10000000 || batch_size < 1 ||
                batch_size > 10000000 || window_ns < 0 || accept_ns < 1 || poll_ns < 0)
                usage();
        } else if (!strcmp(argv[i], "--nices") && i + 1 < argc) {
            char *q = argv[++i];
            for (have_nices = 0; *q && have_nices < 1024; have_nices++) {
                nices[have_nices] = (int)strtol(q, &q, 10);
                if (*q == ',') q++;
            }
        } else {
            usage();
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (max_s) {
        signal(SIGALRM, SIG_DFL);   /* default action: terminate */
        alarm(max_s);
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    if (periodic) {
        if (have_nices && have_nices != threads) usage();
        for (long j = 0; j < threads; j++) {
            pthread_t t;
            if (pthread_create(&t, &attr, periodic_thread, (void *)j)) {
                perror("pthread_create");
                return 4;
            }
        }
    }
    if ((periodic && pool_workers) || (backlog_size && !pool_workers)) usage();
    if (pool_workers) {
        pool_limit = ring_size = pool_workers + pool_capacity;
        ring = calloc((size_t)ring_size, sizeof *ring);
        if (!ring) return 4;
        for (long j = 0; j < pool_workers; j++) {
            pthread_t t;
            if (pthread_create(&t, &attr, pool_thread, NULL)) {
                perror("pthread_create");
                return 4;
            }
            /* named before the handshake, so the name is there when the run starts */
            char name[16];
            snprintf(name, sizeof name, "worker-%ld", j);
            pthread_setname_np(t, name);
        }
    }
    if (backlog_size) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&acc_cond, &ca);
        backlog = calloc((size_t)backlog_size, sizeof *backlog);
        batch = calloc((size_t)batch_size, sizeof *batch);
        pthread_t t;
        if (!backlog || !batch) return 4;
        if (pthread_create(&t, &attr, accept_thread, NULL)) {
            perror("pthread_create");
            return 4;
        }
        pthread_setname_np(t, "accept");
    }
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        uint64_t id;
        int64_t demand;
        int k;
        switch (line[0]) {
        case 'P':
            say("K %d\n", (int)getpid());
            break;
        case 'Q':
            _exit(0);
        case 'G':
            if (!periodic || sscanf(line + 1, "%" SCNd64, &demand) != 1 || demand <= 0) {
                say("E bad start: %.*s\n", (int)strcspn(line, "\n"), line);
            } else {
                pthread_mutex_lock(&go_lock);
                go_at = demand;
                pthread_cond_broadcast(&go_cond);
                pthread_mutex_unlock(&go_lock);
            }
            break;
        case 'R':
            if (periodic) {
                say("E requests are not accepted in periodic mode\n");
            } else if (sscanf(line + 1, "%" SCNu64 " %" SCNd64 " %d", &id, &demand, &k) != 3 ||
                       demand < 1 || k < 1 || k > 4096) {
                say("E bad request: %.*s\n", (int)strcspn(line, "\n"), line);
            } else if (pool_workers) {
                if (k != 1)
                    say("E pool requests run on one worker thread: %.*s\n",
                        (int)strcspn(line, "\n"), line);
                else if (backlog_size)
                    listen_submit(id, demand);
                else
                    pool_submit(id, demand);
            } else if (start_request(id, demand, k)) {
                say("E out of memory\n");
                exit(4);
            }
            break;
        case '\n':
            break;
        default:
            say("E unknown command: %.*s\n", (int)strcspn(line, "\n"), line);
        }
    }
    _exit(0);
}
