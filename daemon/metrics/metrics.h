/*
 * The counters, gauges and histograms every layer updates: the one instance echod_metrics, its
 * per-thread shards and the update API. What a scrape shows of them, and the start-up
 * registration of methods, executors and loops, is metrics/exposition.h's.
 *
 * Process-wide by design (docs/threads.md lists the rest). Updates (ECHOD_COUNT, ECHOD_ADD,
 * echod_histogram_observe) are safe from any thread and never take a lock; rendering reads
 * without stopping anyone, so a scrape is a consistent-enough snapshot.
 *
 * Shards: a relaxed atomic add is still a lock-prefixed instruction, and a direct unary call made
 * about forty of them (5.6% of its CPU, measured). A thread's first update takes it a shard, a
 * private echod_metrics_t that only it writes, with a plain load and store; the renderer adds
 * every shard to the shared instance. The shard goes back for reuse when the thread exits (a
 * pthread key destructor), its counts kept. Past ECHOD_METRICS_MAX_SHARDS threads, a thread
 * updates the shared instance `echod_metrics` with atomic adds, as do the gauges under a limit
 * (echod_metrics.connections and calls_admitted, util/limit.h) and their peaks.
 *
 * Includes only the enums that size the counters (leaf headers, each with its label values).
 */
#ifndef ECHOD_METRICS_H
#define ECHOD_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "dispatch/step.h"
#include "grpc/encoding.h"
#include "grpc/status.h"
#include "transport/events.h"
#include "work/charges.h"

#define ECHOD_METRICS_MAX_METHODS   16
#define ECHOD_METRICS_MAX_EXECUTORS 16
#define ECHOD_GRPC_CODES            ECHOD_STATUS__COUNT

#define ECHOD_HISTOGRAM_MAX_BOUNDS 22

/* A cumulative histogram with fixed upper bounds (the +Inf bucket is implicit). The buckets are
 * inline so that a shard, a copy of the whole echod_metrics_t, has its own; bounds and scale are
 * set in the shared instance only. */
typedef struct {
    const double *bounds; /* ascending, in the unit the value is observed in; NULL until set up */
    size_t nbounds;
    double scale; /* multiply observed values by this when rendering (e.g. 1e-6 for us -> s) */
    _Atomic uint64_t buckets[ECHOD_HISTOGRAM_MAX_BOUNDS + 1]; /* non-cumulative; rendered cumulative */
    _Atomic uint64_t sum;                                     /* in observed units */
} echod_histogram_t;

typedef struct echod_method_metrics {
    const char *service;   /* "grpc.examples.echo.Echo" */
    const char *method;    /* "UnaryEcho" */
    const char *grpc_type; /* "unary": echod_grpc_type_names (dispatch/method.h) */
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
typedef struct echod_loop_metrics {
    _Atomic uint64_t busy_ppm; /* loop thread CPU / wall time over the last sample, in millionths */
    _Atomic uint64_t lag_us;   /* how late the last sample's timer fired */
    _Atomic uint64_t cpu_ns;   /* loop thread CPU time, total */
} echod_loop_metrics_t;

typedef struct echod_exec_metrics {
    const char *name;              /* executor label: "default" or the per-method executor's name */
    const struct echod_exec *exec; /* for gauges; read through echod_exec_* getters */
    _Atomic uint64_t dispatches;
    echod_histogram_t queue_wait; /* microseconds */
} echod_exec_metrics_t;

/* The REST control arm (listen.rest). */
typedef struct {
    _Atomic uint64_t responses[ECHOD_REST_STATUS_MAX]; /* by echod_rest_status_t */
    _Atomic uint64_t connections_accepted;
    _Atomic uint64_t connections_open; /* a gauge kept as accepted - closed (wraps like the instance's) */
    _Atomic uint64_t body_bytes_in;
    _Atomic uint64_t body_bytes_out;
} echod_rest_metrics_t;

typedef enum { ECHOD_DIRECTION_RECEIVED = 0, ECHOD_DIRECTION_SENT, ECHOD_DIRECTION__COUNT } echod_direction_t;
extern const char *const echod_direction_names[]; /* "received", "sent" (metrics.c asserts one per value) */

/* gRPC messages by direction and by their encoding on the wire (flag 0 counts as identity, even
 * on a call with a grpc-encoding: min_bytes sends small ones uncompressed). */
typedef struct {
    _Atomic uint64_t messages;
    _Atomic uint64_t wire_bytes;    /* payload bytes as framed: compressed for gzip and deflate */
    _Atomic uint64_t payload_bytes; /* decompressed; identity's is its wire_bytes (not counted twice) */
} echod_encoding_metrics_t;

typedef struct {
    _Atomic uint64_t steps[ECHOD_STEP__COUNT];
    _Atomic uint64_t inline_runs;
    _Atomic uint64_t step_runs_loop;   /* steps that ran on an I/O loop thread */
    _Atomic uint64_t step_runs_worker; /* steps that ran on an executor worker */
    _Atomic uint64_t loop_tasks[ECHOD_LOOP_TASK__COUNT];
    /* hand-offs of calls, by receiver and what they found (dispatch/step.h) */
    _Atomic uint64_t handoffs[ECHOD_HANDOFF_RECEIVER__COUNT][ECHOD_HANDOFF_FOUND__COUNT];
    _Atomic uint64_t loop_wakeups[ECHOD_LOOP_WAKE__COUNT];         /* loop iterations that slept, by what woke them */
    _Atomic uint64_t loop_wakeup_sleep_ns[ECHOD_LOOP_WAKE__COUNT]; /* how long those slept in all */
    _Atomic uint64_t flushes[ECHOD_FLUSH_TRIGGER__COUNT];
    echod_histogram_t flush_frames;
    echod_histogram_t flush_bytes;
    _Atomic int64_t calls_in_flight;
    _Atomic int64_t calls_admitted;           /* gauge: calls counted against limits.max_calls_in_flight; with a limit
                                                 set, a shared atomic (util/limit.h), else ECHOD_ADD */
    _Atomic int64_t calls_admitted_peak;      /* shared: its highest value under a limit (util/limit.h) */
    _Atomic uint64_t calls_shed;              /* refused by limits.max_calls_in_flight */
    _Atomic uint64_t deadline_expired_queued; /* deadline passed before the handler started */
    _Atomic int64_t connections;              /* shared: limits.max_connections reserves it (util/limit.h) */
    _Atomic int64_t connections_peak;         /* shared: the most connections open at once */
    _Atomic uint64_t connections_total;
    _Atomic uint64_t goaways_sent;
    _Atomic uint64_t flow_control_pings;  /* transport.flow_control_pings: PINGs sent on a DATA frame */
    _Atomic uint64_t pings_acked_at_read; /* transport.flow_control_pings: the client's PINGs acked by echod itself */
    _Atomic uint64_t connections_closed[ECHOD_CLOSE__COUNT]; /* by the server's own guards */
    _Atomic uint64_t header_lists_too_large;
    echod_encoding_metrics_t encodings[ECHOD_DIRECTION__COUNT][ECHOD_ENCODING__COUNT];
    _Atomic uint64_t inflate_failures[ECHOD_INFLATE__COUNT]; /* by echod_inflate_status_t (OK unused) */
    _Atomic uint64_t streams_refused;        /* RST_STREAM(REFUSED_STREAM) sent: above max_concurrent_streams */
    _Atomic uint64_t drain_streams_open;     /* open when shutdown began */
    _Atomic uint64_t drain_streams_finished; /* of those, ended on their own */
    _Atomic uint64_t drain_streams_cut;      /* of those, ended with UNAVAILABLE at drain_timeout */
    /* DATA and HEADERS frames on closed client streams, by the server's answer */
    _Atomic uint64_t closed_stream_frames[ECHOD_CLOSED_FRAME__COUNT];
    echod_method_metrics_t methods[ECHOD_METRICS_MAX_METHODS];
    _Atomic size_t nmethods;
    echod_exec_metrics_t execs[ECHOD_METRICS_MAX_EXECUTORS];
    _Atomic size_t nexecs;
    echod_loop_metrics_t loops[ECHOD_METRICS_MAX_LOOPS];
    _Atomic size_t nloops;
    echod_histogram_t loop_lag;       /* microseconds a 100 ms loop timer fired late, all loops */
    echod_histogram_t read_batch;     /* connections a loop served in one read batch (io.read_batch), all loops */
    _Atomic uint64_t turn_read_bytes; /* io.read_batch netty: bytes a connection's turn read after the wait */
    /* the cost model (work/model.h): nanoseconds charged and charges, by kind and thread */
    _Atomic uint64_t work_model_cpu_ns[ECHOD_CHARGE__COUNT][ECHOD_CHARGE_THREAD__COUNT];
    _Atomic uint64_t work_model_charges[ECHOD_CHARGE__COUNT][ECHOD_CHARGE_THREAD__COUNT];
    echod_histogram_t work_drawn[ECHOD_DRAWN__COUNT]; /* microseconds of synthetic cpu, sleep per draw */
    echod_rest_metrics_t rest;
} echod_metrics_t;

/* The one instance, shared by every thread: updates through it are atomic adds. */
extern echod_metrics_t echod_metrics;

#define ECHOD_METRICS_MAX_SHARDS 64

/* The calling thread's shard, or NULL (before its first update, or none to have). */
extern _Thread_local echod_metrics_t *echod_metrics_shard;

/* Any thread: a counter or gauge of echod_metrics as a scrape shows it (every shard added in). */
uint64_t echod_metrics_value(const _Atomic uint64_t *field);

/* Shards handed out so far (for tests): the most threads that updated metrics at once, capped. */
size_t echod_metrics_shard_count(void);

/* Any thread: the slow path of an update: the thread's first takes it a shard; without one, an
 * atomic add on the shared instance. */
void echod_metrics_add_slow(_Atomic uint64_t *field, uint64_t n);

/* Any thread; h is a histogram of echod_metrics. One that was not set up (no bounds) ignores values. */
void echod_histogram_observe(echod_histogram_t *h, uint64_t value);

/*
 * Fits echod_exec_set_observer's on_start: ctx is the executor's echod_exec_metrics_t; the wait
 * arrives in nanoseconds and is observed into queue_wait in microseconds. Any thread.
 */
void echod_metrics_observe_queue_wait(void *ctx, uint64_t wait_ns);

/* `field` is a member of echod_metrics; its twin in the thread's shard is at the same offset. */
static inline void *echod_metrics_twin(const void *field)
{
    return (void *)((uintptr_t)echod_metrics_shard + ((uintptr_t)field - (uintptr_t)&echod_metrics));
}

static inline void echod_metrics_add_u64(_Atomic uint64_t *field, uint64_t n)
{
    if (echod_metrics_shard == NULL) {
        echod_metrics_add_slow(field, n);
        return;
    }
    _Atomic uint64_t *own = echod_metrics_twin(field); /* one writer: no lock prefix needed */
    atomic_store_explicit(own, atomic_load_explicit(own, memory_order_relaxed) + n, memory_order_relaxed);
}

/* Gauges go up and down: two's complement makes the signed sum the unsigned one. */
static inline void echod_metrics_add_i64(_Atomic int64_t *field, int64_t n)
{
    _Static_assert(sizeof(_Atomic int64_t) == sizeof(_Atomic uint64_t), "same width");
    echod_metrics_add_u64((_Atomic uint64_t *)(void *)field, (uint64_t)n);
}

/* Any thread. `field` names a counter or gauge of echod_metrics (not one read on the hot path). */
#define ECHOD_ADD(field, n)                                                                                            \
    _Generic(&(field), _Atomic int64_t * : echod_metrics_add_i64, default : echod_metrics_add_u64)(&(field), (n))
#define ECHOD_COUNT(field) ECHOD_ADD(field, 1)

#endif
