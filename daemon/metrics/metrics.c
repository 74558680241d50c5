/*
 * Metrics storage and the Prometheus text exposition (format 0.0.4).
 *
 * Writers only ever do relaxed atomic adds, or relaxed loads and stores on their own shard; the
 * renderer only ever does relaxed loads, summing the shared instance and every shard. A scrape
 * therefore sees each number exactly, but not all numbers at one instant: that is the price of
 * never taking a lock on the hot path, and Prometheus is built to tolerate it.
 */
#include <ctype.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "dispatch/exec.h"
#include "grpc/status.h"
#include "metrics/metrics.h"
#include "util/cgroup.h"
#include "util/err.h"

echod_metrics_t echod_metrics;
_Thread_local echod_metrics_t *echod_metrics_shard;
static _Thread_local int shard_tried; /* the thread asked for one: without a shard, it stays shared */

/* Shards are never freed: a thread that exits leaves its counts behind for the next one. */
static pthread_once_t shards_once = PTHREAD_ONCE_INIT;
static pthread_key_t shards_key; /* its destructor gives a thread's shard back */
static pthread_mutex_t shards_mutex = PTHREAD_MUTEX_INITIALIZER;
static echod_metrics_t *_Atomic shards[ECHOD_METRICS_MAX_SHARDS];
static _Atomic size_t nshards;
static unsigned char shard_taken[ECHOD_METRICS_MAX_SHARDS]; /* under shards_mutex */

/* Flush sizes: one frame up to a batch that would fill a 256-frame writev. */
static const double flush_frames_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
/* Flush bytes: a lone PING ack (tens of bytes) up to 1 MiB, in powers of 4. */
static const double flush_bytes_bounds[] = {64, 256, 1024, 4096, 16384, 65536, 262144, 1048576};
/* Microsecond-scale latencies: a hand-off costs a few us, a stalled pool up to seconds. */
static const double latency_bounds_us[] = {1,    2,    5,    10,    20,    50,     100,    200, 500,
                                           1000, 2000, 5000, 10000, 50000, 100000, 500000, 1e6};

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

_Static_assert(NELEMS(latency_bounds_us) <= ECHOD_HISTOGRAM_MAX_BOUNDS, "latency buckets fit a histogram");
_Static_assert(NELEMS(flush_frames_bounds) <= ECHOD_HISTOGRAM_MAX_BOUNDS, "frame buckets fit a histogram");
_Static_assert(NELEMS(flush_bytes_bounds) <= ECHOD_HISTOGRAM_MAX_BOUNDS, "byte buckets fit a histogram");

/* Set once at start-up, before the admin thread (the only reader) exists. */
static const echod_config_t *metrics_cfg;
static const char *metrics_version = "unknown";
static double process_start_time;

static const char *const grpc_type_names[] = {"unary", "client_stream", "server_stream", "bidi_stream"};
static const char *const loop_task_names[ECHOD_LOOP_TASK__COUNT] = {"request", "write", "close"};
static const char *const charge_names[ECHOD_CHARGE__COUNT] = {"call", "step", "handoff", "message"};
static const char *const charge_thread_names[ECHOD_CHARGE_THREAD__COUNT] = {"loop", "worker"};
static const char *const drawn_names[ECHOD_DRAWN__COUNT] = {"cpu", "sleep"};
static const char *const flush_trigger_names[ECHOD_FLUSH_TRIGGER__COUNT] = {"loop_tail", "read_complete", "immediate",
                                                                            "loop_task"};

/* Start-up (registration happens before the threads that observe): the counts are zero already. */
static void histogram_setup(echod_histogram_t *h, const double *bounds, size_t nbounds, double scale)
{
    h->bounds = bounds;
    h->nbounds = nbounds;
    h->scale = scale;
}

/* Reads a small /proc file whole; returns its length or -1. */
static ssize_t read_proc(const char *path, char *buf, size_t cap)
{
    FILE *fp = fopen(path, "re");
    if (fp == NULL)
        return -1;
    size_t n = fread(buf, 1, cap - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return (ssize_t)n;
}

/*
 * Process start in seconds since the epoch: boot time plus the start tick from /proc/self/stat.
 * The wall clock at init would be off by however long the config load took; this is what
 * client_golang's process collector reports too, so dashboards agree.
 */
static double compute_start_time(void)
{
    char buf[1024];
    struct timeval now;
    gettimeofday(&now, NULL);
    double fallback = (double)now.tv_sec + now.tv_usec / 1e6;

    if (read_proc("/proc/self/stat", buf, sizeof(buf)) <= 0)
        return fallback;
    /* comm (field 2) may hold spaces and parentheses: fields are counted from the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return fallback;
    unsigned long long start_ticks = 0;
    int field = 2;
    char *save = NULL;
    for (char *tok = strtok_r(p + 1, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        if (++field == 22) {
            start_ticks = strtoull(tok, NULL, 10);
            break;
        }
    }
    if (field != 22)
        return fallback;

    FILE *fp = fopen("/proc/stat", "re");
    if (fp == NULL)
        return fallback;
    /* The intr line can be many kilobytes long, hence getline rather than a fixed buffer. */
    char *line = NULL;
    size_t linecap = 0;
    unsigned long long btime = 0;
    while (getline(&line, &linecap, fp) != -1) {
        if (strncmp(line, "btime ", 6) == 0) {
            btime = strtoull(line + 6, NULL, 10);
            break;
        }
    }
    free(line);
    fclose(fp);
    long hz = sysconf(_SC_CLK_TCK);
    if (btime == 0 || hz <= 0)
        return fallback;
    return (double)btime + (double)start_ticks / (double)hz;
}

void echod_metrics_init(const echod_config_t *cfg)
{
    /* No other thread exists yet, so plain stores into the atomics are race-free. */
    memset(&echod_metrics, 0, sizeof(echod_metrics));
    for (size_t i = 0; i < atomic_load(&nshards); i++)
        memset(atomic_load(&shards[i]), 0, sizeof(echod_metrics));
    metrics_cfg = cfg;
    histogram_setup(&echod_metrics.flush_frames, flush_frames_bounds, NELEMS(flush_frames_bounds), 1);
    histogram_setup(&echod_metrics.flush_bytes, flush_bytes_bounds, NELEMS(flush_bytes_bounds), 1);
    for (size_t k = 0; k < ECHOD_DRAWN__COUNT; k++)
        histogram_setup(&echod_metrics.work_drawn[k], latency_bounds_us, NELEMS(latency_bounds_us), 1e-6);
    process_start_time = compute_start_time();
}

void echod_metrics_set_version(const char *version)
{
    metrics_version = version != NULL ? version : "unknown";
}

size_t echod_metrics_add_method(const char *service, const char *method, echod_grpc_type_t type)
{
    size_t idx = atomic_load_explicit(&echod_metrics.nmethods, memory_order_relaxed);
    if (idx >= ECHOD_METRICS_MAX_METHODS) {
        fprintf(stderr, "echod: more than %d methods registered for metrics\n", ECHOD_METRICS_MAX_METHODS);
        abort();
    }
    echod_method_metrics_t *m = &echod_metrics.methods[idx];
    m->service = service;
    m->method = method;
    m->type = type;
    histogram_setup(&m->handling, latency_bounds_us, NELEMS(latency_bounds_us), 1e-6);
    histogram_setup(&m->msg_handling, latency_bounds_us, NELEMS(latency_bounds_us), 1e-6);
    /* Release: a renderer that sees the new count also sees the slot filled in. */
    atomic_store_explicit(&echod_metrics.nmethods, idx + 1, memory_order_release);
    return idx;
}

echod_exec_metrics_t *echod_metrics_add_exec(const char *name, const struct echod_exec *exec)
{
    size_t idx = atomic_load_explicit(&echod_metrics.nexecs, memory_order_relaxed);
    if (idx >= ECHOD_METRICS_MAX_EXECUTORS) {
        fprintf(stderr, "echod: more than %d executors registered for metrics\n", ECHOD_METRICS_MAX_EXECUTORS);
        abort();
    }
    echod_exec_metrics_t *e = &echod_metrics.execs[idx];
    e->name = name;
    e->exec = exec;
    histogram_setup(&e->queue_wait, latency_bounds_us, NELEMS(latency_bounds_us), 1e-6);
    atomic_store_explicit(&echod_metrics.nexecs, idx + 1, memory_order_release);
    return e;
}

static void shard_release(void *value)
{
    echod_metrics_t *shard = value;
    echod_metrics_shard = NULL; /* a later key destructor's update goes to the shared instance */
    pthread_mutex_lock(&shards_mutex);
    size_t n = atomic_load_explicit(&nshards, memory_order_relaxed);
    for (size_t i = 0; i < n; i++)
        if (atomic_load_explicit(&shards[i], memory_order_relaxed) == shard)
            shard_taken[i] = 0; /* the mutex orders this thread's last counts before the next owner's */
    pthread_mutex_unlock(&shards_mutex);
}

static void shards_key_create(void)
{
    if (pthread_key_create(&shards_key, shard_release) != 0) {
        fprintf(stderr, "echod: cannot create the metrics shard key\n");
        abort();
    }
}

/* A free shard (one a thread that exited left, counts kept), else a new one, else none. */
static echod_metrics_t *shard_take(void)
{
    echod_metrics_t *shard = NULL;
    pthread_mutex_lock(&shards_mutex);
    size_t n = atomic_load_explicit(&nshards, memory_order_relaxed);
    for (size_t i = 0; i < n && shard == NULL; i++) {
        if (!shard_taken[i]) {
            shard_taken[i] = 1;
            shard = atomic_load_explicit(&shards[i], memory_order_relaxed);
        }
    }
    if (shard == NULL && n < ECHOD_METRICS_MAX_SHARDS) {
        shard = echod_must(calloc(1, sizeof(*shard)), "metrics shard");
        shard_taken[n] = 1;
        /* release: a renderer that sees the count sees the (zeroed) shard behind it */
        atomic_store_explicit(&shards[n], shard, memory_order_release);
        atomic_store_explicit(&nshards, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&shards_mutex);
    return shard;
}

size_t echod_metrics_shard_count(void)
{
    return atomic_load_explicit(&nshards, memory_order_acquire);
}

void echod_metrics_add_slow(_Atomic uint64_t *field, uint64_t n)
{
    if (!shard_tried) {
        /* this thread's first update: from now on it has a shard, or never will */
        shard_tried = 1;
        pthread_once(&shards_once, shards_key_create);
        echod_metrics_t *shard = shard_take();
        if (shard != NULL && pthread_setspecific(shards_key, shard) != 0) {
            shard_release(shard);
            shard = NULL;
        }
        if ((echod_metrics_shard = shard) != NULL) {
            echod_metrics_add_u64(field, n);
            return;
        }
    }
    atomic_fetch_add_explicit(field, n, memory_order_relaxed);
}

void echod_histogram_observe(echod_histogram_t *h, uint64_t value)
{
    if (h->bounds == NULL)
        return;
    /* Binary search for the first bound >= value; nbounds is the +Inf bucket. */
    size_t lo = 0, hi = h->nbounds;
    double v = (double)value;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v <= h->bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    echod_metrics_add_u64(&h->buckets[lo], 1);
    echod_metrics_add_u64(&h->sum, value);
}

void echod_metrics_observe_queue_wait(void *ctx, uint64_t wait_ns)
{
    echod_exec_metrics_t *e = ctx;
    echod_histogram_observe(&e->queue_wait, wait_ns / 1000);
}

/* -------------------------------------------------------------------------------------------- */
/* rendering */

typedef struct {
    char *base;
    size_t len;
    size_t cap;
    int failed; /* a format failed (vsnprintf): the result is discarded */
} mbuf_t;

static int mbuf_reserve(mbuf_t *b, size_t extra)
{
    if (b->failed)
        return -1;
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap != 0 ? b->cap : 16384;
    while (cap < b->len + extra + 1)
        cap *= 2;
    b->base = echod_must(realloc(b->base, cap), "metrics text");
    b->cap = cap;
    return 0;
}

static void mbuf_append(mbuf_t *b, const char *s, size_t n)
{
    if (mbuf_reserve(b, n) != 0)
        return;
    memcpy(b->base + b->len, s, n);
    b->len += n;
    b->base[b->len] = '\0';
}

static void mbuf_puts(mbuf_t *b, const char *s)
{
    mbuf_append(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void mbuf_printf(mbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    if (mbuf_reserve(b, 128) != 0)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(b->base + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n >= b->cap - b->len) {
        if (mbuf_reserve(b, (size_t)n) != 0)
            return;
        va_start(ap, fmt);
        vsnprintf(b->base + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

/* Label values may come from configuration (executor names, the arm): escape per the format. */
static void mbuf_label_value(mbuf_t *b, const char *s)
{
    if (s == NULL)
        s = "";
    for (; *s != '\0'; ++s) {
        switch (*s) {
        case '\\':
            mbuf_append(b, "\\\\", 2);
            break;
        case '"':
            mbuf_append(b, "\\\"", 2);
            break;
        case '\n':
            mbuf_append(b, "\\n", 2);
            break;
        default:
            mbuf_append(b, s, 1);
            break;
        }
    }
}

static void mbuf_label(mbuf_t *b, int first, const char *name, const char *value)
{
    if (!first)
        mbuf_append(b, ",", 1);
    mbuf_puts(b, name);
    mbuf_append(b, "=\"", 2);
    mbuf_label_value(b, value);
    mbuf_append(b, "\"", 1);
}

static void family(mbuf_t *b, const char *name, const char *type, const char *help)
{
    mbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Shortest text that reads back as the same double, so bucket bounds look like "5e-06", not noise. */
static void format_double(char *dst, size_t cap, double v)
{
    for (int prec = 1; prec <= 17; ++prec) {
        snprintf(dst, cap, "%.*g", prec, v);
        if (strtod(dst, NULL) == v)
            return;
    }
}

/*
 * Applies a histogram's scale. A scale like 1e-6 is not exact in binary, so multiplying by it
 * turns 5 into 4.9999999999999996e-06; dividing by the exact integer 1e6 gives the intended value.
 */
static double scaled(double v, double scale)
{
    if (scale == 1)
        return v;
    if (scale < 1) {
        double inv = (double)(uint64_t)(1 / scale + 0.5);
        if (inv * scale > 0.999999999 && inv * scale < 1.000000001)
            return v / inv;
    }
    return v * scale;
}

/* The shared value plus its twin in every shard. */
uint64_t echod_metrics_value(const _Atomic uint64_t *p)
{
    uint64_t v = atomic_load_explicit(p, memory_order_relaxed);
    uintptr_t off = (uintptr_t)p - (uintptr_t)&echod_metrics;
    size_t n = atomic_load_explicit(&nshards, memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
        echod_metrics_t *shard = atomic_load_explicit(&shards[i], memory_order_acquire);
        v += atomic_load_explicit((const _Atomic uint64_t *)((uintptr_t)shard + off), memory_order_relaxed);
    }
    return v;
}

static uint64_t load(const _Atomic uint64_t *p)
{
    return echod_metrics_value(p);
}

/* Gauges are summed as unsigned (the shards' deltas wrap) and read back as two's complement. */
static int64_t load_signed(const _Atomic int64_t *p)
{
    return (int64_t)echod_metrics_value((const _Atomic uint64_t *)(const void *)p);
}

/* One histogram series; labels is a preformatted, already escaped "a=\"x\"" list or "". */
static void histogram_series(mbuf_t *b, const char *name, const char *labels, const echod_histogram_t *h)
{
    const char *lbrace = labels[0] != '\0' ? "{" : "", *rbrace = labels[0] != '\0' ? "}" : "";
    const char *sep = labels[0] != '\0' ? "," : "";
    char num[64];
    uint64_t cum = 0;
    size_t nbounds = h->bounds != NULL ? h->nbounds : 0;

    for (size_t i = 0; i < nbounds; ++i) {
        cum += load(&h->buckets[i]);
        format_double(num, sizeof(num), scaled(h->bounds[i], h->scale));
        mbuf_printf(b, "%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", name, labels, sep, num, cum);
    }
    cum += load(&h->buckets[nbounds]);
    mbuf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, cum);

    uint64_t sum = load(&h->sum);
    if (h->scale == 1) {
        snprintf(num, sizeof(num), "%" PRIu64, sum);
    } else {
        format_double(num, sizeof(num), scaled((double)sum, h->scale));
    }
    mbuf_printf(b, "%s_sum%s%s%s %s\n", name, lbrace, labels, rbrace, num);
    /* _count is the bucket total: the +Inf bucket and _count must never disagree. */
    mbuf_printf(b, "%s_count%s%s%s %" PRIu64 "\n", name, lbrace, labels, rbrace, cum);
}

static void render_dispatch(mbuf_t *b)
{
    family(b, "echod_call_steps_total", "counter", "Submissions to the per-call serializer, by step.");
    for (size_t i = 0; i < ECHOD_STEP__COUNT; ++i)
        mbuf_printf(b, "echod_call_steps_total{step=\"%s\"} %" PRIu64 "\n", echod_step_names[i],
                    load(&echod_metrics.steps[i]));

    family(b, "echod_inline_runs_total", "counter", "Steps run at once by the inline runner (no dispatch).");
    mbuf_printf(b, "echod_inline_runs_total %" PRIu64 "\n", load(&echod_metrics.inline_runs));
    family(b, "echod_step_runs_total", "counter", "Steps run, by the kind of thread that ran them (loop or worker).");
    mbuf_printf(b, "echod_step_runs_total{thread=\"loop\"} %" PRIu64 "\n", load(&echod_metrics.step_runs_loop));
    mbuf_printf(b, "echod_step_runs_total{thread=\"worker\"} %" PRIu64 "\n", load(&echod_metrics.step_runs_worker));

    family(b, "echod_loop_tasks_total", "counter", "Work posted back to an I/O loop from another thread, by kind.");
    for (size_t i = 0; i < ECHOD_LOOP_TASK__COUNT; ++i)
        mbuf_printf(b, "echod_loop_tasks_total{kind=\"%s\"} %" PRIu64 "\n", loop_task_names[i],
                    load(&echod_metrics.loop_tasks[i]));

    family(b, "echod_flushes_total", "counter", "Write-queue flushes (one writev each), by trigger.");
    for (size_t i = 0; i < ECHOD_FLUSH_TRIGGER__COUNT; ++i)
        mbuf_printf(b, "echod_flushes_total{trigger=\"%s\"} %" PRIu64 "\n", flush_trigger_names[i],
                    load(&echod_metrics.flushes[i]));

    family(b, "echod_flush_frames", "histogram", "HTTP/2 frames written per flush.");
    histogram_series(b, "echod_flush_frames", "", &echod_metrics.flush_frames);
    family(b, "echod_flush_bytes", "histogram", "Bytes written per flush.");
    histogram_series(b, "echod_flush_bytes", "", &echod_metrics.flush_bytes);
}

/* executor.mode virtual: its virtual threads (one per dispatch), parks and stacks. */
static void render_virtual_threads(mbuf_t *b, size_t n, const mbuf_t *labels)
{
    echod_exec_vthreads_t vt[ECHOD_METRICS_MAX_EXECUTORS];
    int is_virtual[ECHOD_METRICS_MAX_EXECUTORS], any = 0;
    for (size_t i = 0; i < n; ++i)
        any |= is_virtual[i] =
            echod_metrics.execs[i].exec != NULL && echod_exec_vthreads(echod_metrics.execs[i].exec, &vt[i]);
    if (!any)
        return;
    family(b, "echod_executor_virtual_threads_started_total", "counter",
           "Virtual threads started: one per task (serializer drain) submitted.");
    for (size_t i = 0; i < n; ++i)
        if (is_virtual[i])
            mbuf_printf(b, "echod_executor_virtual_threads_started_total{%s} %" PRIu64 "\n", labels[i].base,
                        vt[i].started);
    family(b, "echod_executor_virtual_thread_parks_total", "counter",
           "Sleeps (echod-sleep-us) that unmounted a virtual thread and freed its carrier.");
    for (size_t i = 0; i < n; ++i)
        if (is_virtual[i])
            mbuf_printf(b, "echod_executor_virtual_thread_parks_total{%s} %" PRIu64 "\n", labels[i].base, vt[i].parks);
    family(b, "echod_executor_virtual_thread_unparks_total", "counter",
           "Parked virtual threads resubmitted to a carrier: by the unparker at their time, or early on cancel.");
    for (size_t i = 0; i < n; ++i)
        if (is_virtual[i])
            mbuf_printf(b, "echod_executor_virtual_thread_unparks_total{%s} %" PRIu64 "\n", labels[i].base,
                        vt[i].unparks);
    family(b, "echod_executor_virtual_threads", "gauge", "Virtual threads alive (running, queued or parked).");
    for (size_t i = 0; i < n; ++i)
        if (is_virtual[i])
            mbuf_printf(b, "echod_executor_virtual_threads{%s} %u\n", labels[i].base, vt[i].live);
    family(b, "echod_executor_virtual_stack_bytes", "gauge",
           "Stack size of each virtual thread (executor.stack_bytes).");
    for (size_t i = 0; i < n; ++i)
        if (is_virtual[i])
            mbuf_printf(b, "echod_executor_virtual_stack_bytes{%s} %zu\n", labels[i].base, vt[i].stack_bytes);
    family(b, "echod_executor_virtual_stack_peak_bytes", "gauge",
           "Deepest stack use seen on a virtual thread that has ended (for sizing executor.stack_bytes).");
    for (size_t i = 0; i < n; ++i)
        if (is_virtual[i])
            mbuf_printf(b, "echod_executor_virtual_stack_peak_bytes{%s} %zu\n", labels[i].base, vt[i].stack_peak_bytes);
}

static void render_executors(mbuf_t *b)
{
    size_t n = atomic_load_explicit(&echod_metrics.nexecs, memory_order_acquire);
    mbuf_t labels[ECHOD_METRICS_MAX_EXECUTORS];
    memset(labels, 0, sizeof(labels));
    for (size_t i = 0; i < n; ++i) {
        mbuf_label(&labels[i], 1, "executor", echod_metrics.execs[i].name);
        if (labels[i].failed)
            b->failed = 1;
    }
    if (b->failed)
        goto Exit;

    family(b, "echod_executor_dispatches_total", "counter",
           "Serializer drains handed to an underlying executor (cross-thread hand-offs).");
    for (size_t i = 0; i < n; ++i)
        mbuf_printf(b, "echod_executor_dispatches_total{%s} %" PRIu64 "\n", labels[i].base,
                    load(&echod_metrics.execs[i].dispatches));

    family(b, "echod_executor_queue_depth", "gauge", "Tasks queued but not yet started.");
    for (size_t i = 0; i < n; ++i)
        if (echod_metrics.execs[i].exec != NULL)
            mbuf_printf(b, "echod_executor_queue_depth{%s} %u\n", labels[i].base,
                        echod_exec_queue_depth(echod_metrics.execs[i].exec));

    family(b, "echod_executor_threads", "gauge", "Executor threads alive.");
    for (size_t i = 0; i < n; ++i)
        if (echod_metrics.execs[i].exec != NULL)
            mbuf_printf(b, "echod_executor_threads{%s} %u\n", labels[i].base,
                        echod_exec_threads(echod_metrics.execs[i].exec));

    family(b, "echod_executor_busy_threads", "gauge", "Executor threads running a task.");
    for (size_t i = 0; i < n; ++i)
        if (echod_metrics.execs[i].exec != NULL)
            mbuf_printf(b, "echod_executor_busy_threads{%s} %u\n", labels[i].base,
                        echod_exec_busy_threads(echod_metrics.execs[i].exec));

    family(b, "echod_executor_queue_wait_seconds", "histogram", "Time a task waited between submit and run.");
    for (size_t i = 0; i < n; ++i)
        histogram_series(b, "echod_executor_queue_wait_seconds", labels[i].base, &echod_metrics.execs[i].queue_wait);

    render_virtual_threads(b, n, labels);

Exit:
    for (size_t i = 0; i < n; ++i)
        free(labels[i].base);
}

static void render_encodings(mbuf_t *b)
{
    static const char *const dirs[ECHOD_DIRECTION__COUNT] = {"received", "sent"};
    static const char *const failures[] = {"ok", "too_large", "corrupt", "truncated"};
    _Static_assert(sizeof(failures) / sizeof(failures[0]) == ECHOD_INFLATE_TRUNCATED + 1, "one name per status");
    family(b, "echod_grpc_encoding_messages_total", "counter",
           "gRPC messages by direction and grpc-encoding on the wire (an uncompressed message is identity).");
    for (int d = 0; d < ECHOD_DIRECTION__COUNT; d++)
        for (int e = 0; e < ECHOD_ENCODING__COUNT; e++)
            mbuf_printf(b, "echod_grpc_encoding_messages_total{direction=\"%s\",encoding=\"%s\"} %" PRIu64 "\n",
                        dirs[d], echod_encoding_name((echod_encoding_t)e),
                        load(&echod_metrics.encodings[d][e].messages));
    family(b, "echod_grpc_encoding_bytes_total", "counter",
           "gRPC message payload bytes by direction and encoding, on the wire (compressed) and decompressed.");
    for (int d = 0; d < ECHOD_DIRECTION__COUNT; d++) {
        for (int e = 0; e < ECHOD_ENCODING__COUNT; e++) {
            const echod_encoding_metrics_t *m = &echod_metrics.encodings[d][e];
            uint64_t wire = load(&m->wire_bytes);
            mbuf_printf(b,
                        "echod_grpc_encoding_bytes_total{direction=\"%s\",encoding=\"%s\",form=\"wire\"} %" PRIu64 "\n",
                        dirs[d], echod_encoding_name((echod_encoding_t)e), wire);
            mbuf_printf(
                b,
                "echod_grpc_encoding_bytes_total{direction=\"%s\",encoding=\"%s\",form=\"decompressed\"} %" PRIu64 "\n",
                dirs[d], echod_encoding_name((echod_encoding_t)e),
                e == ECHOD_ENCODING_IDENTITY ? wire : load(&m->payload_bytes));
        }
    }
    family(
        b, "echod_grpc_inflate_failures_total", "counter",
        "Compressed request messages that failed to inflate, by reason (too_large: over max_receive_message_bytes).");
    for (int i = ECHOD_INFLATE_TOO_LARGE; i <= ECHOD_INFLATE_TRUNCATED; i++)
        mbuf_printf(b, "echod_grpc_inflate_failures_total{reason=\"%s\"} %" PRIu64 "\n", failures[i],
                    load(&echod_metrics.inflate_failures[i]));
}

static void render_calls(mbuf_t *b)
{
    family(b, "echod_calls_in_flight", "gauge", "Calls started and not yet closed.");
    mbuf_printf(b, "echod_calls_in_flight %" PRId64 "\n", load_signed(&echod_metrics.calls_in_flight));
    family(b, "echod_calls_admitted", "gauge",
           "Calls counted against limits.max_calls_in_flight (health calls are not).");
    mbuf_printf(b, "echod_calls_admitted %" PRId64 "\n", load_signed(&echod_metrics.calls_admitted));
    family(b, "echod_calls_admitted_peak", "gauge",
           "The highest echod_calls_admitted under limits.max_calls_in_flight (never above it; 0 without a limit).");
    mbuf_printf(b, "echod_calls_admitted_peak %" PRId64 "\n", load_signed(&echod_metrics.calls_admitted_peak));
    family(b, "echod_calls_shed_total", "counter",
           "Calls refused with RESOURCE_EXHAUSTED by limits.max_calls_in_flight.");
    mbuf_printf(b, "echod_calls_shed_total %" PRIu64 "\n", load(&echod_metrics.calls_shed));
    family(b, "echod_deadline_expired_queued_total", "counter",
           "Calls whose grpc-timeout expired before their handler started (queued behind the executor).");
    mbuf_printf(b, "echod_deadline_expired_queued_total %" PRIu64 "\n", load(&echod_metrics.deadline_expired_queued));
    family(b, "echod_connections", "gauge", "Open gRPC connections.");
    mbuf_printf(b, "echod_connections %" PRId64 "\n", load_signed(&echod_metrics.connections));
    family(b, "echod_connections_peak", "gauge",
           "The most gRPC connections open at once (never above limits.max_connections).");
    mbuf_printf(b, "echod_connections_peak %" PRId64 "\n", load_signed(&echod_metrics.connections_peak));
    family(b, "echod_connections_total", "counter", "gRPC connections accepted.");
    mbuf_printf(b, "echod_connections_total %" PRIu64 "\n", load(&echod_metrics.connections_total));
    family(b, "echod_goaways_sent_total", "counter", "GOAWAY frames sent.");
    mbuf_printf(b, "echod_goaways_sent_total %" PRIu64 "\n", load(&echod_metrics.goaways_sent));
    static const char *const close_reasons[ECHOD_CLOSE__COUNT] = {
        "handshake_timeout", "idle", "max_age", "limit", "reset_flood", "flood", "protocol_error"};
    family(b, "echod_connections_closed_total", "counter",
           "Connections the server ended itself, by reason (max_age and idle close gracefully).");
    for (int i = 0; i < ECHOD_CLOSE__COUNT; i++)
        mbuf_printf(b, "echod_connections_closed_total{reason=\"%s\"} %" PRIu64 "\n", close_reasons[i],
                    load(&echod_metrics.connections_closed[i]));
    family(b, "echod_header_lists_too_large_total", "counter",
           "Request header blocks over transport.max_header_list_bytes (the stream is reset).");
    mbuf_printf(b, "echod_header_lists_too_large_total %" PRIu64 "\n", load(&echod_metrics.header_lists_too_large));
    render_encodings(b);
    family(b, "echod_streams_refused_total", "counter",
           "Streams refused with RST_STREAM(REFUSED_STREAM): above transport.max_concurrent_streams.");
    mbuf_printf(b, "echod_streams_refused_total %" PRIu64 "\n", load(&echod_metrics.streams_refused));
    static const char *const closed_answers[ECHOD_CLOSED_FRAME__COUNT] = {"discarded", "stream_closed",
                                                                          "protocol_error"};
    family(b, "echod_closed_stream_frames_total", "counter",
           "DATA and HEADERS frames on closed client streams, by the answer (docs/http2-conformance.md): "
           "discarded (the server had reset the stream), or the connection error sent.");
    for (int i = 0; i < ECHOD_CLOSED_FRAME__COUNT; i++)
        mbuf_printf(b, "echod_closed_stream_frames_total{answer=\"%s\"} %" PRIu64 "\n", closed_answers[i],
                    load(&echod_metrics.closed_stream_frames[i]));
    family(b, "echod_drain_streams_total", "counter",
           "Streams open when shutdown began, and how they ended (finished on their own, or cut at drain_timeout).");
    mbuf_printf(b, "echod_drain_streams_total{state=\"open\"} %" PRIu64 "\n", load(&echod_metrics.drain_streams_open));
    mbuf_printf(b, "echod_drain_streams_total{state=\"finished\"} %" PRIu64 "\n",
                load(&echod_metrics.drain_streams_finished));
    mbuf_printf(b, "echod_drain_streams_total{state=\"cut\"} %" PRIu64 "\n", load(&echod_metrics.drain_streams_cut));
}

static void render_grpc(mbuf_t *b)
{
    size_t n = atomic_load_explicit(&echod_metrics.nmethods, memory_order_acquire);
    mbuf_t labels[ECHOD_METRICS_MAX_METHODS];
    memset(labels, 0, sizeof(labels));
    for (size_t i = 0; i < n; ++i) {
        const echod_method_metrics_t *m = &echod_metrics.methods[i];
        mbuf_label(&labels[i], 1, "grpc_type", grpc_type_names[m->type]);
        mbuf_label(&labels[i], 0, "grpc_service", m->service);
        mbuf_label(&labels[i], 0, "grpc_method", m->method);
        if (labels[i].failed)
            b->failed = 1;
    }
    if (b->failed)
        goto Exit;

    family(b, "grpc_server_started_total", "counter", "RPCs started, by method.");
    for (size_t i = 0; i < n; ++i)
        mbuf_printf(b, "grpc_server_started_total{%s} %" PRIu64 "\n", labels[i].base,
                    load(&echod_metrics.methods[i].started));

    family(b, "grpc_server_handled_total", "counter",
           "RPCs finished, by method and status code (OK always; other codes once seen).");
    for (size_t i = 0; i < n; ++i) {
        for (int code = 0; code < ECHOD_GRPC_CODES; ++code) {
            uint64_t v = load(&echod_metrics.methods[i].handled[code]);
            /* OK always, so rate() has a series to start from; other codes once they occur. */
            if (v == 0 && code != ECHOD_OK)
                continue;
            mbuf_printf(b, "grpc_server_handled_total{%s,grpc_code=\"%s\"} %" PRIu64 "\n", labels[i].base,
                        echod_status_name(code), v);
        }
    }

    family(b, "grpc_server_msg_received_total", "counter", "Request messages delivered to handlers, by method.");
    for (size_t i = 0; i < n; ++i)
        mbuf_printf(b, "grpc_server_msg_received_total{%s} %" PRIu64 "\n", labels[i].base,
                    load(&echod_metrics.methods[i].msg_received));

    family(b, "grpc_server_msg_sent_total", "counter", "Response messages sent, by method.");
    for (size_t i = 0; i < n; ++i)
        mbuf_printf(b, "grpc_server_msg_sent_total{%s} %" PRIu64 "\n", labels[i].base,
                    load(&echod_metrics.methods[i].msg_sent));

    family(b, "grpc_server_handling_seconds", "histogram",
           "Seconds from the start of a call to its completion, by method.");
    for (size_t i = 0; i < n; ++i)
        histogram_series(b, "grpc_server_handling_seconds", labels[i].base, &echod_metrics.methods[i].handling);

    /* per-RPC time says nothing for a stream that lives 25 minutes: this is per message */
    family(b, "echod_message_handling_seconds", "histogram",
           "Seconds a handler spent on one delivered request message, by method.");
    for (size_t i = 0; i < n; ++i)
        histogram_series(b, "echod_message_handling_seconds", labels[i].base, &echod_metrics.methods[i].msg_handling);

Exit:
    for (size_t i = 0; i < n; ++i)
        free(labels[i].base);
}

/* Synthetic work: the cost model's charges (work/model.h) and the draws (work/draw.h). */
static void render_work(mbuf_t *b)
{
    char num[64];
    family(b, "echod_work_model_cpu_seconds_total", "counter",
           "CPU the cost model charged (work.model), by kind of charge and kind of thread that burnt it.");
    for (size_t k = 0; k < ECHOD_CHARGE__COUNT; k++) {
        for (size_t t = 0; t < ECHOD_CHARGE_THREAD__COUNT; t++) {
            format_double(num, sizeof(num), (double)load(&echod_metrics.work_model_cpu_ns[k][t]) / 1e9);
            mbuf_printf(b, "echod_work_model_cpu_seconds_total{kind=\"%s\",thread=\"%s\"} %s\n", charge_names[k],
                        charge_thread_names[t], num);
        }
    }
    family(b, "echod_work_model_charges_total", "counter",
           "Charges of the cost model: calls, steps run, hand-offs received, messages in and out.");
    for (size_t k = 0; k < ECHOD_CHARGE__COUNT; k++)
        for (size_t t = 0; t < ECHOD_CHARGE_THREAD__COUNT; t++)
            mbuf_printf(b, "echod_work_model_charges_total{kind=\"%s\",thread=\"%s\"} %" PRIu64 "\n", charge_names[k],
                        charge_thread_names[t], load(&echod_metrics.work_model_charges[k][t]));
    family(b, "echod_work_drawn_seconds", "histogram",
           "Synthetic CPU and sleep as drawn per handler run (a call, or a bidi message), by kind.");
    for (size_t k = 0; k < ECHOD_DRAWN__COUNT; k++) {
        char labels[32];
        snprintf(labels, sizeof(labels), "kind=\"%s\"", drawn_names[k]);
        histogram_series(b, "echod_work_drawn_seconds", labels, &echod_metrics.work_drawn[k]);
    }
}

static void render_process(mbuf_t *b)
{
    char num[64], buf[4096];

    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                     ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
        format_double(num, sizeof(num), cpu);
        family(b, "process_cpu_seconds_total", "counter", "CPU time used by the process (user + system), in seconds.");
        mbuf_printf(b, "process_cpu_seconds_total %s\n", num);
        /* RUSAGE_SELF sums every thread, those that have exited included (the kernel folds a
         * thread's counts into the process when it exits), so a cached pool's aged-out
         * workers still count: the figure bench/compare divides by calls. */
        family(b, "echod_context_switches_total", "counter",
               "Context switches of all threads of the process, exited ones included (getrusage): voluntary = "
               "the thread blocked (a hand-off, a park), involuntary = it was preempted.");
        mbuf_printf(b, "echod_context_switches_total{kind=\"voluntary\"} %ld\n", ru.ru_nvcsw);
        mbuf_printf(b, "echod_context_switches_total{kind=\"involuntary\"} %ld\n", ru.ru_nivcsw);
    }

    unsigned long long vsz_pages, rss_pages;
    if (read_proc("/proc/self/statm", buf, sizeof(buf)) > 0 && sscanf(buf, "%llu %llu", &vsz_pages, &rss_pages) == 2) {
        unsigned long long page = (unsigned long long)sysconf(_SC_PAGESIZE);
        family(b, "process_virtual_memory_bytes", "gauge", "Size of the address space, in bytes.");
        mbuf_printf(b, "process_virtual_memory_bytes %llu\n", vsz_pages * page);
        family(b, "process_resident_memory_bytes", "gauge", "Memory resident in RAM, in bytes.");
        mbuf_printf(b, "process_resident_memory_bytes %llu\n", rss_pages * page);
    }

    DIR *dir = opendir("/proc/self/fd");
    if (dir != NULL) {
        unsigned long nfds = 0;
        struct dirent *de;
        /* readdir_r is deprecated; readdir on a DIR this thread alone owns is thread-safe in glibc. */
        while ((de = readdir(dir)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            /* The descriptor opendir itself holds is not one of the process's. */
            if (atoi(de->d_name) == dirfd(dir))
                continue;
            ++nfds;
        }
        closedir(dir);
        family(b, "process_open_fds", "gauge", "File descriptors the process has open.");
        mbuf_printf(b, "process_open_fds %lu\n", nfds);
    }

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        family(b, "process_max_fds", "gauge", "Soft limit on open file descriptors.");
        if (rl.rlim_cur == RLIM_INFINITY)
            mbuf_puts(b, "process_max_fds +Inf\n");
        else
            mbuf_printf(b, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    }

    if (process_start_time != 0) {
        format_double(num, sizeof(num), process_start_time);
        family(b, "process_start_time_seconds", "gauge", "When the process started, in seconds since the Unix epoch.");
        mbuf_printf(b, "process_start_time_seconds %s\n", num);
    }

    if (read_proc("/proc/self/status", buf, sizeof(buf)) > 0) {
        const char *t = strstr(buf, "\nThreads:");
        if (t != NULL) {
            family(b, "echod_threads", "gauge", "Threads in the process.");
            mbuf_printf(b, "echod_threads %lu\n", strtoul(t + 9, NULL, 10));
        }
    }
}

/* -------------------------------------------------------------------------------------------- */
/* saturation: loops, cgroup, stage */

/* The current stage label: written rarely (a mark per ramp stage), read by scrapes. */
static pthread_mutex_t stage_mutex = PTHREAD_MUTEX_INITIALIZER;
static char stage_name[ECHOD_STAGE_NAME_MAX + 1] = "";
static double stage_started;
static uint64_t stage_marks;

/* Set by the admin module as /readyz changes (rarely), read by scrapes. */
static _Atomic int readiness_ready;
static _Atomic int readiness_draining;

void echod_metrics_set_readiness(int ready, int draining)
{
    atomic_store_explicit(&readiness_ready, ready, memory_order_relaxed);
    atomic_store_explicit(&readiness_draining, draining, memory_order_relaxed);
}

echod_loop_metrics_t *echod_metrics_add_loop(unsigned index)
{
    if (index >= ECHOD_METRICS_MAX_LOOPS) {
        fprintf(stderr, "echod: more than %d loops registered for metrics\n", ECHOD_METRICS_MAX_LOOPS);
        abort();
    }
    if (echod_metrics.loop_lag.bounds == NULL)
        histogram_setup(&echod_metrics.loop_lag, latency_bounds_us, NELEMS(latency_bounds_us), 1e-6);
    if (index + 1 > atomic_load(&echod_metrics.nloops))
        atomic_store(&echod_metrics.nloops, index + 1);
    return &echod_metrics.loops[index];
}

int echod_metrics_stage_name_ok(const char *name, size_t len)
{
    if (len == 0 || len > ECHOD_STAGE_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)name[i]) && strchr("._:-", name[i]) == NULL)
            return 0;
    return 1;
}

/* `always`: a mark even when the name is the current one (POST /admin/mark restarts a stage). */
static void set_stage(const char *name, size_t len, int always)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pthread_mutex_lock(&stage_mutex);
    if (always || strlen(stage_name) != len || memcmp(stage_name, name, len) != 0) {
        memcpy(stage_name, name, len);
        stage_name[len] = '\0';
        stage_started = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
        stage_marks++;
    }
    pthread_mutex_unlock(&stage_mutex);
}

void echod_metrics_mark_stage(const char *name)
{
    set_stage(name, strlen(name), 1);
}

void echod_metrics_stage_header(char *seen, size_t cap, const char *name, size_t len)
{
    if (len == 0 || len >= cap || (len == strlen(seen) && memcmp(seen, name, len) == 0))
        return;
    memcpy(seen, name, len);
    seen[len] = '\0';
    if (echod_metrics_stage_name_ok(seen, len))
        set_stage(seen, len, 0);
}

/*
 * The CPU limits and throttling of this process's cgroups, v1 or v2 (util/cgroup.h): throttling
 * is what a 1-CPU limit does to a ramp.
 */
static void render_cgroup(mbuf_t *b)
{
    static const char *const versions[] = {
        [ECHOD_CGROUP_NONE] = "none",
        [ECHOD_CGROUP_V1] = "v1",
        [ECHOD_CGROUP_V2] = "v2",
    };
    echod_cgroup_cpu_t cg;
    char num[64];
    echod_cgroup_read_cpu("", &cg);
    family(b, "echod_cgroup_info", "gauge", "The cgroup version the cpu controller was read from (v1, v2, none).");
    mbuf_printf(b, "echod_cgroup_info{cpu=\"%s\"} 1\n", versions[cg.version]);
    if (cg.quota_cpus > 0) {
        format_double(num, sizeof(num), cg.quota_cpus);
        family(b, "echod_cgroup_cpu_quota_cpus", "gauge",
               "The tightest CPU quota on this process's cgroup path, quota / period (v2 cpu.max, "
               "v1 cpu.cfs_quota_us / cpu.cfs_period_us).");
        mbuf_printf(b, "echod_cgroup_cpu_quota_cpus %s\n", num);
    }
    if (cg.cpuset_cpus != 0) {
        family(b, "echod_cgroup_cpuset_cpus", "gauge", "CPUs in the smallest cpuset on this process's cgroup path.");
        mbuf_printf(b, "echod_cgroup_cpuset_cpus %u\n", cg.cpuset_cpus);
    }
    if (cg.has_stat) {
        family(b, "echod_cgroup_cpu_throttled_periods_total", "counter",
               "cgroup cpu.stat nr_throttled: CFS periods in which the cgroup was throttled.");
        mbuf_printf(b, "echod_cgroup_cpu_throttled_periods_total %" PRIu64 "\n", cg.nr_throttled);
        family(b, "echod_cgroup_cpu_periods_total", "counter", "cgroup cpu.stat nr_periods.");
        mbuf_printf(b, "echod_cgroup_cpu_periods_total %" PRIu64 "\n", cg.nr_periods);
        format_double(num, sizeof(num), (double)cg.throttled_usec / 1e6);
        family(b, "echod_cgroup_cpu_throttled_seconds_total", "counter",
               "cgroup cpu.stat throttled time (v2 throttled_usec, v1 throttled_time), in seconds.");
        mbuf_printf(b, "echod_cgroup_cpu_throttled_seconds_total %s\n", num);
    }
    family(b, "echod_effective_cpus", "gauge",
           "CPUs this process may use: the tightest cgroup CPU quota rounded up or cpuset, capped by the "
           "affinity mask.");
    mbuf_printf(b, "echod_effective_cpus %u\n", echod_exec_available_cpus());
}

static void render_saturation(mbuf_t *b)
{
    family(b, "echod_ready", "gauge", "1 while /readyz answers 200: every thread runs, no SIGTERM yet.");
    mbuf_printf(b, "echod_ready %d\n", atomic_load_explicit(&readiness_ready, memory_order_relaxed));
    family(b, "echod_draining", "gauge",
           "1 from SIGTERM on: /readyz 503, health NOT_SERVING, then GOAWAY and the drain.");
    mbuf_printf(b, "echod_draining %d\n", atomic_load_explicit(&readiness_draining, memory_order_relaxed));
    size_t n = atomic_load(&echod_metrics.nloops);
    char num[64];
    family(b, "echod_loop_busy_ratio", "gauge", "I/O loop thread CPU time over wall time, last 100 ms sample.");
    for (size_t i = 0; i < n; i++) {
        format_double(num, sizeof(num), (double)load(&echod_metrics.loops[i].busy_ppm) / 1e6);
        mbuf_printf(b, "echod_loop_busy_ratio{loop=\"%zu\"} %s\n", i, num);
    }
    family(b, "echod_loop_cpu_seconds_total", "counter", "CPU time of each I/O loop thread.");
    for (size_t i = 0; i < n; i++) {
        format_double(num, sizeof(num), (double)load(&echod_metrics.loops[i].cpu_ns) / 1e9);
        mbuf_printf(b, "echod_loop_cpu_seconds_total{loop=\"%zu\"} %s\n", i, num);
    }
    family(b, "echod_loop_lag_seconds", "gauge", "How late the last 100 ms loop timer fired.");
    for (size_t i = 0; i < n; i++) {
        format_double(num, sizeof(num), (double)load(&echod_metrics.loops[i].lag_us) / 1e6);
        mbuf_printf(b, "echod_loop_lag_seconds{loop=\"%zu\"} %s\n", i, num);
    }
    if (n != 0) {
        family(b, "echod_loop_lag_distribution_seconds", "histogram", "How late 100 ms loop timers fired, all loops.");
        histogram_series(b, "echod_loop_lag_distribution_seconds", "", &echod_metrics.loop_lag);
    }
    render_cgroup(b);

    pthread_mutex_lock(&stage_mutex);
    char name[128];
    snprintf(name, sizeof(name), "%s", stage_name);
    double started = stage_started;
    uint64_t marks = stage_marks;
    pthread_mutex_unlock(&stage_mutex);
    if (metrics_cfg != NULL && metrics_cfg->listen.rest != NULL && metrics_cfg->listen.rest[0] != '\0') {
        static const char *const codes[5] = {"200", "400", "404", "405", "413"};
        family(b, "echod_rest_requests_total", "counter", "REST control arm responses, by HTTP status.");
        for (int i = 0; i < 5; i++)
            mbuf_printf(b, "echod_rest_requests_total{code=\"%s\"} %" PRIu64 "\n", codes[i],
                        load(&echod_metrics.rest.responses[i]));
        family(b, "echod_rest_connections_accepted_total", "counter", "REST control arm connections accepted.");
        mbuf_printf(b, "echod_rest_connections_accepted_total %" PRIu64 "\n",
                    load(&echod_metrics.rest.connections_accepted));
        family(b, "echod_rest_connections_open", "gauge", "REST control arm connections open.");
        mbuf_printf(b, "echod_rest_connections_open %" PRId64 "\n",
                    (int64_t)load(&echod_metrics.rest.connections_open));
        family(b, "echod_rest_body_bytes_total", "counter", "REST control arm body bytes, by direction.");
        mbuf_printf(b, "echod_rest_body_bytes_total{direction=\"in\"} %" PRIu64 "\n",
                    load(&echod_metrics.rest.body_bytes_in));
        mbuf_printf(b, "echod_rest_body_bytes_total{direction=\"out\"} %" PRIu64 "\n",
                    load(&echod_metrics.rest.body_bytes_out));
    }
    family(b, "echod_stage_info", "gauge", "Always 1; names the stage set by POST /admin/mark?stage=NAME.");
    mbuf_puts(b, "echod_stage_info{");
    mbuf_label(b, 1, "stage", name);
    mbuf_puts(b, "} 1\n");
    format_double(num, sizeof(num), started);
    family(b, "echod_stage_started_timestamp_seconds", "gauge", "When the current stage was marked (Unix time).");
    mbuf_printf(b, "echod_stage_started_timestamp_seconds %s\n", num);
    family(b, "echod_stage_marks_total", "counter",
           "Stage marks: POST /admin/mark calls and echod-stage header changes.");
    mbuf_printf(b, "echod_stage_marks_total %" PRIu64 "\n", marks);
}

static void render_build_info(mbuf_t *b)
{
    const echod_config_t *cfg = metrics_cfg;
    family(b, "echod_build_info", "gauge", "Always 1; the labels name the build and the arm being measured.");
    mbuf_puts(b, "echod_build_info{");
    mbuf_label(b, 1, "version", metrics_version);
    mbuf_label(b, 0, "fiber_switch", echod_exec_fiber_switch());
    if (cfg != NULL) {
        mbuf_label(b, 0, "arm", cfg->arm);
        mbuf_label(b, 0, "executor", echod_exec_mode_name(cfg->executor.mode));
        mbuf_label(b, 0, "serialize", echod_serialize_name(cfg->dispatch.serialize));
        mbuf_label(b, 0, "unwrap_sequential", cfg->dispatch.unwrap_sequential ? "true" : "false");
        mbuf_label(b, 0, "merge_lookup_and_start", cfg->dispatch.merge_lookup_and_start ? "true" : "false");
        mbuf_label(b, 0, "coalesce_end_stream", cfg->dispatch.coalesce_end_stream ? "true" : "false");
        mbuf_label(b, 0, "flush", echod_flush_name(cfg->transport.flush));
        mbuf_label(b, 0, "sched_policy", echod_sched_policy_name(cfg->dispatch.sched_policy));
        /* flat cost or cost model: the unit costs a scrape was priced with (per call they may differ) */
        const echod_work_model_t *m = &cfg->work.model;
        char model[96] = "off";
        if (m->enabled)
            snprintf(model, sizeof(model), "call=%u,step=%u,handoff=%u,message=%u", m->call_cpu_us, m->step_cpu_us,
                     m->handoff_cpu_us, m->message_cpu_us);
        mbuf_label(b, 0, "work_model", model);
        mbuf_label(b, 0, "config_sha256", cfg->sha256);
    }
    mbuf_puts(b, "} 1\n");
}

char *echod_metrics_render(size_t *len)
{
    mbuf_t b = {NULL, 0, 0, 0};

    render_build_info(&b);
    render_dispatch(&b);
    render_executors(&b);
    render_calls(&b);
    render_grpc(&b);
    render_work(&b);
    render_saturation(&b);
    render_process(&b);

    if (b.failed) {
        free(b.base);
        *len = 0;
        return NULL;
    }
    *len = b.len;
    return b.base;
}
