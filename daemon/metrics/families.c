/*
 * What /metrics shows, as tables (metrics_internal.h): every family's name, type, help, labels
 * and where its values live, in the order a scrape shows them; the histograms' buckets and the
 * start-up registration of the methods, executors and loops the tables have series for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/admin.h"
#include "metrics/exposition.h"
#include "metrics/metrics_internal.h"
#include "metrics/table.h"

/* Flush sizes: one frame up to a batch that would fill a 256-frame writev. */
static const double flush_frames_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
/* Flush bytes: a lone PING ack (tens of bytes) up to 1 MiB, in powers of 4. */
static const double flush_bytes_bounds[] = {64, 256, 1024, 4096, 16384, 65536, 262144, 1048576};
/* Read batches: one connection up to Netty's first epoll array (4,096 events). */
static const double read_batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
/*
 * Microsecond-scale latencies: a hand-off costs a few us, a stalled pool seconds. A saturated arm's
 * p99 runs 2-40 s and histogram_quantile answers the last finite bound for anything past it, so
 * the bounds go on to a minute, coarsely: each bound is one more series per histogram per scrape.
 */
static const double latency_bounds_us[] = {1,    2,     5,     10,     20,     50,  100,   200, 500,  1000, 2000,
                                           5000, 10000, 50000, 100000, 500000, 1e6, 2.5e6, 5e6, 10e6, 30e6, 60e6};

_Static_assert(NELEMS(latency_bounds_us) <= ECHOD_HISTOGRAM_MAX_BOUNDS, "latency buckets fit a histogram");
_Static_assert(NELEMS(flush_frames_bounds) <= ECHOD_HISTOGRAM_MAX_BOUNDS, "frame buckets fit a histogram");
_Static_assert(NELEMS(flush_bytes_bounds) <= ECHOD_HISTOGRAM_MAX_BOUNDS, "byte buckets fit a histogram");
_Static_assert(NELEMS(read_batch_bounds) <= ECHOD_HISTOGRAM_MAX_BOUNDS, "batch buckets fit a histogram");

/* Set once at start-up, before the admin thread (the only reader) exists. */
static const char *metrics_version = "unknown";

/* -------------------------------------------------------------------------------------------- */
/* start-up */

/* Start-up (registration happens before the threads that observe): the counts are zero already. */
static void histogram_setup(echod_histogram_t *h, const double *bounds, size_t nbounds, double scale)
{
    h->bounds = bounds;
    h->nbounds = nbounds;
    h->scale = scale;
}

static void latency_setup(echod_histogram_t *h)
{
    histogram_setup(h, latency_bounds_us, NELEMS(latency_bounds_us), 1e-6);
}

void echod_metrics_init(const echod_config_t *cfg)
{
    echod_metrics__reset(cfg);
    histogram_setup(&echod_metrics.flush_frames, flush_frames_bounds, NELEMS(flush_frames_bounds), 1);
    histogram_setup(&echod_metrics.flush_bytes, flush_bytes_bounds, NELEMS(flush_bytes_bounds), 1);
    histogram_setup(&echod_metrics.read_batch, read_batch_bounds, NELEMS(read_batch_bounds), 1);
    for (size_t k = 0; k < ECHOD_DRAWN__COUNT; k++)
        latency_setup(&echod_metrics.work_drawn[k]);
    echod_metrics__process_init();
}

void echod_metrics_set_version(const char *version)
{
    metrics_version = version != NULL ? version : "unknown";
}

/* The next of `max` slots counted by *n, or abort: a programming error. */
static size_t next_slot(_Atomic size_t *n, size_t max, const char *what)
{
    size_t idx = atomic_load_explicit(n, memory_order_relaxed);
    if (idx >= max) {
        fprintf(stderr, "echod: more than %zu %s registered for metrics\n", max, what);
        abort();
    }
    return idx;
}

size_t echod_metrics_add_method(const char *service, const char *method, echod_grpc_type_t type)
{
    size_t idx = next_slot(&echod_metrics.nmethods, ECHOD_METRICS_MAX_METHODS, "methods");
    echod_method_metrics_t *m = &echod_metrics.methods[idx];
    m->service = service;
    m->method = method;
    m->grpc_type = echod_grpc_type_names[type];
    latency_setup(&m->handling);
    latency_setup(&m->msg_handling);
    /* Release: a renderer that sees the new count also sees the slot filled in. */
    atomic_store_explicit(&echod_metrics.nmethods, idx + 1, memory_order_release);
    return idx;
}

echod_exec_metrics_t *echod_metrics_add_exec(const char *name, const struct echod_exec *exec)
{
    size_t idx = next_slot(&echod_metrics.nexecs, ECHOD_METRICS_MAX_EXECUTORS, "executors");
    echod_exec_metrics_t *e = &echod_metrics.execs[idx];
    e->name = name;
    e->exec = exec;
    latency_setup(&e->queue_wait);
    atomic_store_explicit(&echod_metrics.nexecs, idx + 1, memory_order_release);
    return e;
}

echod_loop_metrics_t *echod_metrics_add_loop(unsigned index)
{
    if (index >= ECHOD_METRICS_MAX_LOOPS) {
        fprintf(stderr, "echod: more than %d loops registered for metrics\n", ECHOD_METRICS_MAX_LOOPS);
        abort();
    }
    if (echod_metrics.loop_lag.bounds == NULL)
        latency_setup(&echod_metrics.loop_lag);
    if (index + 1 > atomic_load(&echod_metrics.nloops))
        atomic_store(&echod_metrics.nloops, index + 1);
    return &echod_metrics.loops[index];
}

/* -------------------------------------------------------------------------------------------- */
/* a scrape's sample */

static void read_exec(echod_metrics__exec_sample_t *s, const struct echod_exec *exec)
{
    echod_exec_vthreads_t vt;
    if ((s->has_exec = exec != NULL) == 0)
        return;
    s->queue_depth = echod_exec_queue_depth(exec);
    s->threads = echod_exec_threads(exec);
    s->busy_threads = echod_exec_busy_threads(exec);
    if ((s->is_virtual = echod_exec_vthreads(exec, &vt)) == 0)
        return;
    s->vt_started = vt.started;
    s->vt_parks = vt.parks;
    s->vt_unparks = vt.unparks;
    s->vt_live = vt.live;
    s->vt_stack_bytes = vt.stack_bytes;
    s->vt_stack_peak_bytes = vt.stack_peak_bytes;
}

void echod_metrics__read_sample(echod_metrics__render_t *r)
{
    echod_metrics__sample_t *s = &r->sample;
    r->count[ECHOD_METRICS__PROCESS] = 1;
    r->count[ECHOD_METRICS__EACH_EXEC] = atomic_load_explicit(&echod_metrics.nexecs, memory_order_acquire);
    r->count[ECHOD_METRICS__EACH_METHOD] = atomic_load_explicit(&echod_metrics.nmethods, memory_order_acquire);
    r->count[ECHOD_METRICS__EACH_LOOP] = atomic_load(&echod_metrics.nloops);
    for (size_t i = 0; i < r->count[ECHOD_METRICS__EACH_EXEC]; i++) {
        read_exec(&s->execs[i], echod_metrics.execs[i].exec);
        s->any_virtual |= s->execs[i].is_virtual;
    }
    s->any_loop = r->count[ECHOD_METRICS__EACH_LOOP] != 0;
    const echod_config_t *cfg = echod_metrics__config();
    s->rest_on = cfg != NULL && cfg->listen.rest != NULL && cfg->listen.rest[0] != '\0';
    int ready, draining;
    echod_admin_readiness(&ready, &draining);
    s->ready = ready;
    s->draining = draining;
    echod_stage_read(&s->stage);
    echod_metrics__read_process(s);
}

/* -------------------------------------------------------------------------------------------- */
/* families no table entry can say */

static const char *yes_no(bool b)
{
    return b ? "true" : "false";
}

static void build_info_series(echod_metrics__render_t *r, const echod_metrics__family_t *f)
{
    const echod_config_t *cfg = echod_metrics__config();
    echod_metrics__label(r, "version", metrics_version);
    echod_metrics__label(r, "fiber_switch", echod_exec_fiber_switch());
    if (cfg != NULL) {
        echod_metrics__label(r, "arm", cfg->arm);
        echod_metrics__label(r, "executor", echod_exec_mode_name(cfg->executor.mode));
        echod_metrics__label(r, "serialize", echod_serialize_name(cfg->dispatch.serialize));
        echod_metrics__label(r, "unwrap_sequential", yes_no(cfg->dispatch.unwrap_sequential));
        echod_metrics__label(r, "merge_lookup_and_start", yes_no(cfg->dispatch.merge_lookup_and_start));
        echod_metrics__label(r, "coalesce_end_stream", yes_no(cfg->dispatch.coalesce_end_stream));
        echod_metrics__label(r, "flush", echod_flush_name(cfg->transport.flush));
        echod_metrics__label(r, "read_batch", echod_read_batch_name(cfg->io.read_batch));
        echod_metrics__label(r, "sched_policy", echod_sched_policy_name(cfg->dispatch.sched_policy));
        /* flat cost or cost model: the unit costs a scrape was priced with (per call they may differ) */
        const echod_work_model_t *m = &cfg->work.model;
        char model[384] = "off"; /* every unit at its widest fits */
        if (m->enabled)
            snprintf(
                model, sizeof(model),
                "call=%u,step=%u,handoff=%u,message=%u,handoff_wake=%u,handoff_wake_loop=%u,wakeup=%u,wakeup_short=%u,"
                "wakeup_full_sleep_us=%u,wakeup_sleep_exponent=%g,background_millicores=%u",
                m->call_cpu_us, m->step_cpu_us, m->handoff_cpu_us, m->message_cpu_us, m->handoff_wake_cpu_us,
                m->handoff_wake_loop_cpu_us, m->wakeup_cpu_us, m->wakeup_short_cpu_us, m->wakeup_full_sleep_us,
                m->wakeup_sleep_exponent, m->background_millicores);
        echod_metrics__label(r, "work_model", model);
        echod_metrics__label(r, "config_sha256", cfg->sha256);
    }
    echod_metrics__write_u64(r, f, 1);
}

/* Identity's decompressed bytes are its wire bytes, not counted twice (echod_encoding_metrics_t). */
static void encoding_bytes_series(echod_metrics__render_t *r, const echod_metrics__family_t *f)
{
    static const char *const forms[] = {"wire", "decompressed"};
    for (int d = 0; d < ECHOD_DIRECTION__COUNT; d++) {
        for (int e = 0; e < ECHOD_ENCODING__COUNT; e++) {
            const echod_encoding_metrics_t *m = &echod_metrics.encodings[d][e];
            uint64_t wire = echod_metrics_value(&m->wire_bytes);
            for (int form = 0; form < 2; form++) {
                echod_metrics__label(r, "direction", echod_direction_names[d]);
                echod_metrics__label(r, "encoding", echod_encoding_names[e]);
                echod_metrics__label(r, "form", forms[form]);
                int own = form == 1 && e != ECHOD_ENCODING_IDENTITY;
                echod_metrics__write_u64(r, f, own ? echod_metrics_value(&m->payload_bytes) : wire);
            }
        }
    }
}

static void stage_info_series(echod_metrics__render_t *r, const echod_metrics__family_t *f)
{
    echod_metrics__label(r, "stage", r->sample.stage.name);
    echod_metrics__write_u64(r, f, 1);
}

/* -------------------------------------------------------------------------------------------- */
/* the tables */

static const char *const in_out[] = {"in", "out"};
static const char *const drain_states[] = {"open", "finished", "cut"};

/* From echod_build_info to the loops' saturation. */
static const echod_metrics__family_t serving[] = {
    {"echod_build_info", GAUGE, "Always 1; the labels name the build and the arm being measured.",
     .series = build_info_series},

    /* dispatch */
    {"echod_call_steps_total", COUNTER, "Submissions to the per-call serializer, by step.", FIELD(steps),
     .label = {LABEL("step", echod_step_names, ECHOD_STEP__COUNT, U64)}},
    {"echod_inline_runs_total", COUNTER, "Steps run at once by the inline runner (no dispatch).", FIELD(inline_runs)},
    {"echod_step_runs_total", COUNTER, "Steps run, by the kind of thread that ran them (loop or worker).",
     .label = {LABEL_FIELDS("thread", echod_charge_thread_names, M(step_runs_loop), M(step_runs_worker))}},
    {"echod_loop_tasks_total", COUNTER, "Work posted back to an I/O loop from another thread, by kind.",
     FIELD(loop_tasks), .label = {LABEL("kind", echod_loop_task_names, ECHOD_LOOP_TASK__COUNT, U64)}},
    {"echod_handoffs_total", COUNTER,
     "Hand-offs of calls across threads (dispatches to workers, loop tasks to loops), by receiver and what they "
     "found: the receiver parked (asleep: it woke it) or running.",
     FIELD(handoffs),
     .label = {LABEL("receiver", echod_handoff_receiver_names, ECHOD_HANDOFF_RECEIVER__COUNT, ROW(handoffs)),
               LABEL("found", echod_handoff_found_names, ECHOD_HANDOFF_FOUND__COUNT, U64)}},
    {"echod_loop_wakeups_total", COUNTER,
     "I/O loop iterations that slept in the poll and woke to work, by cause: a read or accept (io), or a batch of "
     "loop tasks (task).",
     FIELD(loop_wakeups), .label = {LABEL("cause", echod_loop_wake_names, ECHOD_LOOP_WAKE__COUNT, U64)}},
    {"echod_loop_wakeup_sleep_seconds_total", COUNTER,
     "Seconds I/O loops slept in the polls that ended in a wake-up, by cause: over echod_loop_wakeups_total, the "
     "mean sleep a wake-up ends.",
     FIELD(loop_wakeup_sleep_ns), SCALED(1e9),
     .label = {LABEL("cause", echod_loop_wake_names, ECHOD_LOOP_WAKE__COUNT, U64)}},
    {"echod_flushes_total", COUNTER, "Write-queue flushes (one writev each), by trigger.", FIELD(flushes),
     .label = {LABEL("trigger", echod_flush_trigger_names, ECHOD_FLUSH_TRIGGER__COUNT, U64)}},
    {"echod_flush_frames", HISTOGRAM, "HTTP/2 frames written per flush.", FIELD(flush_frames)},
    {"echod_flush_bytes", HISTOGRAM, "Bytes written per flush.", FIELD(flush_bytes)},

    /* executors */
    {"echod_executor_dispatches_total", COUNTER,
     "Serializer drains handed to an underlying executor (cross-thread hand-offs).", EXEC_FIELD(dispatches)},
    {"echod_executor_queue_depth", GAUGE, "Tasks queued but not yet started.", EXEC_SAMPLE(queue_depth),
     SERIES_IF(has_exec)},
    {"echod_executor_threads", GAUGE, "Executor threads alive.", EXEC_SAMPLE(threads), SERIES_IF(has_exec)},
    {"echod_executor_busy_threads", GAUGE, "Executor threads running a task.", EXEC_SAMPLE(busy_threads),
     SERIES_IF(has_exec)},
    {"echod_executor_queue_wait_seconds", HISTOGRAM, "Time a task waited between submit and run.",
     EXEC_FIELD(queue_wait)},
    /* executor.mode virtual: its virtual threads (one per dispatch), parks and stacks */
    {"echod_executor_virtual_threads_started_total", COUNTER,
     "Virtual threads started: one per task (serializer drain) submitted.", EXEC_SAMPLE(vt_started),
     SHOWN_IF(any_virtual), SERIES_IF(is_virtual)},
    {"echod_executor_virtual_thread_parks_total", COUNTER,
     "Sleeps (echod-sleep-us) that unmounted a virtual thread and freed its carrier.", EXEC_SAMPLE(vt_parks),
     SHOWN_IF(any_virtual), SERIES_IF(is_virtual)},
    {"echod_executor_virtual_thread_unparks_total", COUNTER,
     "Parked virtual threads resubmitted to a carrier: by the unparker at their time, or early on cancel.",
     EXEC_SAMPLE(vt_unparks), SHOWN_IF(any_virtual), SERIES_IF(is_virtual)},
    {"echod_executor_virtual_threads", GAUGE, "Virtual threads alive (running, queued or parked).",
     EXEC_SAMPLE(vt_live), SHOWN_IF(any_virtual), SERIES_IF(is_virtual)},
    {"echod_executor_virtual_stack_bytes", GAUGE, "Stack size of each virtual thread (executor.stack_bytes).",
     EXEC_SAMPLE(vt_stack_bytes), SHOWN_IF(any_virtual), SERIES_IF(is_virtual)},
    {"echod_executor_virtual_stack_peak_bytes", GAUGE,
     "Deepest stack use seen on a virtual thread that has ended (for sizing executor.stack_bytes).",
     EXEC_SAMPLE(vt_stack_peak_bytes), SHOWN_IF(any_virtual), SERIES_IF(is_virtual)},

    /* calls and connections */
    {"echod_calls_in_flight", GAUGE, "Calls started and not yet closed.", FIELD(calls_in_flight), SIGNED},
    {"echod_calls_admitted", GAUGE, "Calls counted against limits.max_calls_in_flight (health calls are not).",
     FIELD(calls_admitted), SIGNED},
    {"echod_calls_admitted_peak", GAUGE,
     "The highest echod_calls_admitted under limits.max_calls_in_flight (never above it; 0 without a limit).",
     FIELD(calls_admitted_peak), SIGNED},
    {"echod_calls_shed_total", COUNTER, "Calls refused with RESOURCE_EXHAUSTED by limits.max_calls_in_flight.",
     FIELD(calls_shed)},
    {"echod_deadline_expired_queued_total", COUNTER,
     "Calls whose grpc-timeout expired before their handler started (queued behind the executor).",
     FIELD(deadline_expired_queued)},
    {"echod_connections", GAUGE, "Open gRPC connections.", FIELD(connections), SIGNED},
    {"echod_connections_peak", GAUGE, "The most gRPC connections open at once (never above limits.max_connections).",
     FIELD(connections_peak), SIGNED},
    {"echod_connections_total", COUNTER, "gRPC connections accepted.", FIELD(connections_total)},
    {"echod_goaways_sent_total", COUNTER, "GOAWAY frames sent.", FIELD(goaways_sent)},
    {"echod_flow_control_pings_total", COUNTER,
     "PINGs sent as grpc-java's automatic flow control sends them (transport.flow_control_pings): one on the first "
     "DATA frame after the last one was acked, written at the end of the connection's read.",
     FIELD(flow_control_pings)},
    {"echod_ping_acks_at_read_total", COUNTER,
     "The client's PINGs acked at the end of the connection's read, ahead of the responses the flush policy holds, "
     "as Netty flushes at channelReadComplete (transport.flow_control_pings; else nghttp2 acks with the next flush).",
     FIELD(pings_acked_at_read)},
    {"echod_connections_closed_total", COUNTER,
     "Connections the server ended itself, by reason (max_age and idle close gracefully).", FIELD(connections_closed),
     .label = {LABEL("reason", echod_close_reason_names, ECHOD_CLOSE__COUNT, U64)}},
    {"echod_header_lists_too_large_total", COUNTER,
     "Request header blocks over transport.max_header_list_bytes (the stream is reset).",
     FIELD(header_lists_too_large)},
    {"echod_grpc_encoding_messages_total", COUNTER,
     "gRPC messages by direction and grpc-encoding on the wire (an uncompressed message is identity).",
     FIELD(encodings[0][0].messages),
     .label = {LABEL("direction", echod_direction_names, ECHOD_DIRECTION__COUNT, ROW(encodings)),
               LABEL("encoding", echod_encoding_names, ECHOD_ENCODING__COUNT, sizeof(echod_encoding_metrics_t))}},
    {"echod_grpc_encoding_bytes_total", COUNTER,
     "gRPC message payload bytes by direction and encoding, on the wire (compressed) and decompressed.",
     .series = encoding_bytes_series},
    {"echod_grpc_inflate_failures_total", COUNTER,
     "Compressed request messages that failed to inflate, by reason (too_large: over max_receive_message_bytes).",
     FIELD(inflate_failures),
     .label = {{.name = "reason",
                .values = echod_inflate_status_names,
                .first = ECHOD_INFLATE_TOO_LARGE,
                .count = ECHOD_INFLATE__COUNT,
                .stride = U64}}},
    {"echod_streams_refused_total", COUNTER,
     "Streams refused with RST_STREAM(REFUSED_STREAM): above transport.max_concurrent_streams.",
     FIELD(streams_refused)},
    {"echod_closed_stream_frames_total", COUNTER,
     "DATA and HEADERS frames on closed client streams, by the answer (docs/http2-conformance.md): "
     "discarded (the server had reset the stream), or the connection error sent.",
     FIELD(closed_stream_frames), .label = {LABEL("answer", echod_closed_frame_names, ECHOD_CLOSED_FRAME__COUNT, U64)}},
    {"echod_drain_streams_total", COUNTER,
     "Streams open when shutdown began, and how they ended (finished on their own, or cut at drain_timeout).",
     .label = {LABEL_FIELDS("state", drain_states, M(drain_streams_open), M(drain_streams_finished),
                            M(drain_streams_cut))}},

    /* methods */
    {"grpc_server_started_total", COUNTER, "RPCs started, by method.", METHOD_FIELD(started)},
    {"grpc_server_handled_total", COUNTER,
     "RPCs finished, by method and status code (OK always; other codes once seen).", METHOD_FIELD(handled),
     .label = {LABEL("grpc_code", echod_status_names, ECHOD_GRPC_CODES, U64)}, .sparse = 1},
    {"grpc_server_msg_received_total", COUNTER, "Request messages delivered to handlers, by method.",
     METHOD_FIELD(msg_received)},
    {"grpc_server_msg_sent_total", COUNTER, "Response messages sent, by method.", METHOD_FIELD(msg_sent)},
    {"grpc_server_handling_seconds", HISTOGRAM, "Seconds from the start of a call to its completion, by method.",
     METHOD_FIELD(handling)},
    /* per-RPC time says nothing for a stream that lives 25 minutes: this is per message */
    {"echod_message_handling_seconds", HISTOGRAM,
     "Seconds a handler spent on one delivered request message, by method.", METHOD_FIELD(msg_handling)},

    /* synthetic work: the cost model's charges (work/model.h) and the draws (work/draw.h) */
    {"echod_work_model_cpu_seconds_total", COUNTER,
     "CPU the cost model charged (work.model), by kind of charge and kind of thread that burnt it.",
     FIELD(work_model_cpu_ns), SCALED(1e9),
     .label = {LABEL("kind", echod_charge_names, ECHOD_CHARGE__COUNT, ROW(work_model_cpu_ns)),
               LABEL("thread", echod_charge_thread_names, ECHOD_CHARGE_THREAD__COUNT, U64)}},
    {"echod_work_model_charges_total", COUNTER,
     "Charges of the cost model: calls, steps run, hand-offs received (and wakes), messages, wake-ups, slices.",
     FIELD(work_model_charges),
     .label = {LABEL("kind", echod_charge_names, ECHOD_CHARGE__COUNT, ROW(work_model_charges)),
               LABEL("thread", echod_charge_thread_names, ECHOD_CHARGE_THREAD__COUNT, U64)}},
    {"echod_work_drawn_seconds", HISTOGRAM,
     "Synthetic CPU and sleep as drawn per handler run (a call, or a bidi message), by kind.", FIELD(work_drawn),
     .label = {LABEL("kind", echod_drawn_names, ECHOD_DRAWN__COUNT, sizeof(echod_histogram_t))}},

    /* saturation: readiness (admin/admin.h) and the loops */
    {"echod_ready", GAUGE, "1 while /readyz answers 200: every thread runs, no SIGTERM yet.", SAMPLE(ready), SIGNED},
    {"echod_draining", GAUGE, "1 from SIGTERM on: /readyz 503, health NOT_SERVING, then GOAWAY and the drain.",
     SAMPLE(draining), SIGNED},
    {"echod_loop_busy_ratio", GAUGE, "I/O loop thread CPU time over wall time, last 100 ms sample.",
     LOOP_FIELD(busy_ppm), SCALED(1e6)},
    {"echod_loop_cpu_seconds_total", COUNTER, "CPU time of each I/O loop thread.", LOOP_FIELD(cpu_ns), SCALED(1e9)},
    {"echod_loop_lag_seconds", GAUGE, "How late the last 100 ms loop timer fired.", LOOP_FIELD(lag_us), SCALED(1e6)},
    {"echod_loop_lag_distribution_seconds", HISTOGRAM, "How late 100 ms loop timers fired, all loops.", FIELD(loop_lag),
     SHOWN_IF(any_loop)},
    {"echod_loop_read_batch_connections", HISTOGRAM,
     "Connections an I/O loop served in one read batch, all loops (io.read_batch: netty, every one ready at a wait; "
     "h2o, one wait's, at most 256 events).",
     FIELD(read_batch), SHOWN_IF(any_loop)},
    {"echod_loop_turn_read_bytes_total", COUNTER,
     "Bytes read from a connection at its turn in a read batch, after the wait that found it ready: what its "
     "client sent while the batch ran the connections before it (io.read_batch netty, plaintext).",
     FIELD(turn_read_bytes), SHOWN_IF(any_loop)},
};

/* The REST control arm (listen.rest) and the ramp stage (admin/stage.h). */
static const echod_metrics__family_t control[] = {
    {"echod_rest_requests_total", COUNTER, "REST control arm responses, by HTTP status.", FIELD(rest.responses),
     .label = {LABEL("code", echod_rest_status_names, ECHOD_REST_STATUS_MAX, U64)}, SHOWN_IF(rest_on)},
    {"echod_rest_connections_accepted_total", COUNTER, "REST control arm connections accepted.",
     FIELD(rest.connections_accepted), SHOWN_IF(rest_on)},
    {"echod_rest_connections_open", GAUGE, "REST control arm connections open.", FIELD(rest.connections_open), SIGNED,
     SHOWN_IF(rest_on)},
    {"echod_rest_body_bytes_total", COUNTER, "REST control arm body bytes, by direction.",
     .label = {LABEL_FIELDS("direction", in_out, M(rest.body_bytes_in), M(rest.body_bytes_out))}, SHOWN_IF(rest_on)},
    {"echod_stage_info", GAUGE, "Always 1; names the stage set by POST /admin/mark?stage=NAME.",
     .series = stage_info_series},
    {"echod_stage_started_timestamp_seconds", GAUGE, "When the current stage was marked (Unix time).",
     SAMPLE(stage.started), DOUBLE},
    {"echod_stage_marks_total", COUNTER, "Stage marks: POST /admin/mark calls and echod-stage header changes.",
     SAMPLE(stage.marks)},
};

static const echod_metrics__table_t serving_table = {serving, NELEMS(serving)};
static const echod_metrics__table_t control_table = {control, NELEMS(control)};

const echod_metrics__table_t *const echod_metrics__tables[] = {
    &serving_table,
    &echod_metrics__cgroup_table,
    &control_table,
    &echod_metrics__process_table,
};
const size_t echod_metrics__ntables = NELEMS(echod_metrics__tables);
