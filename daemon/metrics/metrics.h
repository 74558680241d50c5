/*
 * Process-wide counters, gauges and histograms, rendered as Prometheus text 0.0.4.
 *
 * This is (with main.c) the only global mutable state in echod. Every update is a relaxed
 * atomic, safe from any thread; rendering reads them without stopping anyone, so a scrape is
 * a consistent-enough snapshot, never a lock on the hot path.
 */
#ifndef ECHOD_METRICS_H
#define ECHOD_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "config/config.h"
#include "dispatch/step.h"

typedef enum {
    ECHOD_LOOP_TASK_REQUEST = 0,
    ECHOD_LOOP_TASK_WRITE,
    ECHOD_LOOP_TASK_CLOSE,
    ECHOD_LOOP_TASK__COUNT
} echod_loop_task_kind_t;
typedef enum {
    ECHOD_FLUSH_TRIGGER_LOOP_TAIL = 0,
    ECHOD_FLUSH_TRIGGER_READ_COMPLETE,
    ECHOD_FLUSH_TRIGGER_IMMEDIATE,
    ECHOD_FLUSH_TRIGGER_LOOP_TASK,
    ECHOD_FLUSH_TRIGGER__COUNT
} echod_flush_trigger_t;
typedef enum {
    ECHOD_CLOSE_HANDSHAKE_TIMEOUT = 0,
    ECHOD_CLOSE_IDLE,
    ECHOD_CLOSE_MAX_AGE,
    ECHOD_CLOSE_LIMIT,
    ECHOD_CLOSE_RESET_FLOOD,    /* RST_STREAM over transport.max_resets_per_second (CVE-2023-44487) */
    ECHOD_CLOSE_FLOOD,          /* SETTINGS/PING acks piling up, too many CONTINUATION frames */
    ECHOD_CLOSE_PROTOCOL_ERROR, /* bad preface, malformed frames, any other HTTP/2 connection error */
    ECHOD_CLOSE__COUNT
} echod_close_reason_t;
typedef enum {
    ECHOD_GRPC_UNARY = 0,
    ECHOD_GRPC_CLIENT_STREAM,
    ECHOD_GRPC_SERVER_STREAM,
    ECHOD_GRPC_BIDI_STREAM
} echod_grpc_type_t;

#define ECHOD_METRICS_MAX_METHODS   16
#define ECHOD_METRICS_MAX_EXECUTORS 16
#define ECHOD_GRPC_CODES            17

/* A cumulative histogram with fixed upper bounds (the +Inf bucket is implicit). */
typedef struct {
    const double *bounds; /* ascending, in the unit the value is observed in */
    size_t nbounds;
    double scale;              /* multiply observed values by this when rendering (e.g. 1e-6 for us -> s) */
    _Atomic uint64_t *buckets; /* nbounds + 1 entries, non-cumulative; rendered cumulative */
    _Atomic uint64_t count;
    _Atomic uint64_t sum; /* in observed units */
} echod_histogram_t;

typedef struct {
    const char *service; /* "grpc.examples.echo.Echo" */
    const char *method;  /* "UnaryEcho" */
    echod_grpc_type_t type;
    _Atomic uint64_t started;
    _Atomic uint64_t handled[ECHOD_GRPC_CODES];
    _Atomic uint64_t msg_received;
    _Atomic uint64_t msg_sent;
    echod_histogram_t handling;     /* microseconds from start_call to closed (grpc_server_handling_seconds) */
    echod_histogram_t msg_handling; /* microseconds in the handler per delivered message (streams) */
} echod_method_metrics_t;

struct echod_exec;

#define ECHOD_METRICS_MAX_LOOPS 64

/* One I/O loop's saturation, sampled by the loop itself every 100 ms. */
typedef struct {
    _Atomic uint64_t busy_ppm; /* loop thread CPU / wall time over the last sample, in millionths */
    _Atomic uint64_t lag_us;   /* how late the last sample's timer fired */
    _Atomic uint64_t cpu_ns;   /* loop thread CPU time, total */
} echod_loop_metrics_t;

typedef struct {
    const char *name;              /* executor label: "default" or the per-method executor's name */
    const struct echod_exec *exec; /* for gauges; read through echod_exec_* getters */
    _Atomic uint64_t dispatches;
    echod_histogram_t queue_wait; /* microseconds */
} echod_exec_metrics_t;

/* The REST control arm (listen.rest), indexed like echod_rest_status_t: 200 400 404 405 413. */
typedef struct {
    _Atomic uint64_t responses[5];
    _Atomic uint64_t connections_accepted;
    _Atomic uint64_t connections_open; /* a gauge kept as accepted - closed (wraps like the instance's) */
    _Atomic uint64_t body_bytes_in;
    _Atomic uint64_t body_bytes_out;
} echod_rest_metrics_t;

typedef struct {
    _Atomic uint64_t steps[ECHOD_STEP__COUNT];
    _Atomic uint64_t inline_runs;
    _Atomic uint64_t step_runs_loop;   /* steps that ran on an I/O loop thread */
    _Atomic uint64_t step_runs_worker; /* steps that ran on an executor worker */
    _Atomic uint64_t loop_tasks[ECHOD_LOOP_TASK__COUNT];
    _Atomic uint64_t flushes[ECHOD_FLUSH_TRIGGER__COUNT];
    echod_histogram_t flush_frames;
    echod_histogram_t flush_bytes;
    _Atomic int64_t calls_in_flight;
    _Atomic int64_t calls_admitted;           /* gauge: calls counted against limits.max_calls_in_flight */
    _Atomic uint64_t calls_shed;              /* refused by limits.max_calls_in_flight */
    _Atomic uint64_t deadline_expired_queued; /* deadline passed before the handler started */
    _Atomic int64_t connections;
    _Atomic uint64_t connections_total;
    _Atomic uint64_t goaways_sent;
    _Atomic uint64_t connections_closed[ECHOD_CLOSE__COUNT]; /* by the server's own guards */
    _Atomic uint64_t header_lists_too_large;
    _Atomic uint64_t drain_streams_open;     /* open when shutdown began */
    _Atomic uint64_t drain_streams_finished; /* of those, ended on their own */
    _Atomic uint64_t drain_streams_cut;      /* of those, ended with UNAVAILABLE at drain_timeout */
    echod_method_metrics_t methods[ECHOD_METRICS_MAX_METHODS];
    _Atomic size_t nmethods;
    echod_exec_metrics_t execs[ECHOD_METRICS_MAX_EXECUTORS];
    _Atomic size_t nexecs;
    echod_loop_metrics_t loops[ECHOD_METRICS_MAX_LOOPS];
    _Atomic size_t nloops;
    echod_histogram_t loop_lag; /* microseconds a 100 ms loop timer fired late, all loops */
    echod_rest_metrics_t rest;
} echod_metrics_t;

/* The one instance. */
extern echod_metrics_t echod_metrics;

/*
 * Main thread, before any other thread starts: zeroes every metric, sets up the histograms and
 * remembers cfg (not copied; it must outlive every render) for echod_build_info.
 */
void echod_metrics_init(const echod_config_t *cfg);

/* Main thread, at start-up: the version label of echod_build_info (not copied; "unknown" until set). */
void echod_metrics_set_version(const char *version);

/*
 * Main thread, at start-up: registers a method; returns its index for echod_metrics.methods.
 * The strings are not copied. More than ECHOD_METRICS_MAX_METHODS is a programming error (aborts).
 */
size_t echod_metrics_add_method(const char *service, const char *method, echod_grpc_type_t type);

/*
 * Main thread, at start-up: registers an executor; returns its echod_exec_metrics_t. The name is
 * not copied; exec may be NULL (no gauges). More than ECHOD_METRICS_MAX_EXECUTORS aborts.
 */
echod_exec_metrics_t *echod_metrics_add_exec(const char *name, const struct echod_exec *exec);

/* Any thread; relaxed atomics. A histogram whose init has not run (no buckets) ignores values. */
void echod_histogram_observe(echod_histogram_t *h, uint64_t value);

/* Main thread, at start-up: a slot for loop `index`. */
echod_loop_metrics_t *echod_metrics_add_loop(unsigned index);

/* A stage name is 1-100 characters of [A-Za-z0-9._:-]: it goes into a Prometheus label as it is. */
#define ECHOD_STAGE_NAME_MAX 100
int echod_metrics_stage_name_ok(const char *name, size_t len);

/* Names the current ramp stage (POST /admin/mark?stage=NAME, a valid name): echod_stage_info and
 * its start time; a mark even when the name is unchanged. Any thread. */
void echod_metrics_mark_stage(const char *name);

/* An echod-stage request header: the stage becomes `name` if that is a valid name and not the
 * current one (every call carries it; only a change is a mark). Any thread. */
void echod_metrics_enter_stage(const char *name, size_t len);

/*
 * Fits echod_exec_set_observer's on_start: ctx is the executor's echod_exec_metrics_t; the wait
 * arrives in nanoseconds and is observed into queue_wait in microseconds. Any thread.
 */
void echod_metrics_observe_queue_wait(void *ctx, uint64_t wait_ns);

/* Renders the whole exposition into a malloc'd buffer; *len gets its length. Any thread. */
char *echod_metrics_render(size_t *len);

#define ECHOD_COUNT(field)  atomic_fetch_add_explicit(&(field), 1, memory_order_relaxed)
#define ECHOD_ADD(field, n) atomic_fetch_add_explicit(&(field), (n), memory_order_relaxed)

#endif
