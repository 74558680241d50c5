/*
 * The effective configuration of one echod process: defaults, then the YAML file, then
 * every --set override, then cross-field validation. Built once on the main thread before
 * any other thread starts, read-only afterwards (threads may read it without locking).
 */
#ifndef ECHOD_CONFIG_H
#define ECHOD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "util/log.h"

typedef enum {
    ECHOD_EXEC_DIRECT = 0,   /* run steps on the calling (loop) thread */
    ECHOD_EXEC_FIXED,        /* n threads, one shared FIFO under one lock */
    ECHOD_EXEC_CACHED,       /* hand-off to an idle thread or start one; idle threads expire */
    ECHOD_EXEC_WORKSTEALING, /* n carriers with their own deques; idle carriers steal */
    ECHOD_EXEC_VIRTUAL       /* a virtual thread (fiber) per task on workstealing carriers; sleeps park */
} echod_exec_mode_t;

/* executor.stack_bytes when not set (0 in an echod_exec_config_t means this too). */
#define ECHOD_EXEC_STACK_BYTES_DEFAULT (64 * 1024)

typedef struct {
    echod_exec_mode_t mode;
    unsigned threads;       /* fixed, workstealing, virtual: 0 = CPUs the process may use */
    unsigned max_threads;   /* cached: 0 = no cap */
    uint64_t keep_alive_ms; /* cached: idle threads exit after this */
    size_t stack_bytes;     /* virtual: each virtual thread's stack (a guard page comes on top) */
} echod_exec_config_t;

typedef struct {
    char *method; /* full gRPC path, "/grpc.examples.echo.Echo/BidirectionalStreamingEcho" */
    echod_exec_config_t exec;
} echod_per_method_t;

/* How a synthetic CPU or sleep time is drawn around its `_us` value (work/draw.h). */
typedef enum {
    ECHOD_DIST_CONSTANT = 0, /* always the value */
    ECHOD_DIST_EXPONENTIAL,  /* exponential with the value as its mean */
    ECHOD_DIST_STALL,        /* the value, plus stall_us for a fraction stall_fraction of the draws */
} echod_dist_kind_t;

typedef struct {
    echod_dist_kind_t kind;
    double stall_fraction; /* ECHOD_DIST_STALL: the share of draws that stall, 0.0..1.0 */
    uint32_t stall_us;     /* ECHOD_DIST_STALL: what a stall adds */
} echod_dist_t;

/*
 * Synthetic work a handler does (README, Synthetic work): server-wide defaults and per-method values in config,
 * overridable per call by request metadata (echod-response-bytes, echod-cpu-us, ...).
 */
typedef struct {
    int64_t response_bytes; /* -1 = echo the request as it is; else pad/truncate the message to N bytes */
    uint32_t cpu_us;        /* calibrated busy loop on the handler thread (the mean or base of cpu_dist) */
    uint32_t sleep_us;      /* blocking sleep on the handler thread (the mean or base of sleep_dist) */
    echod_dist_t cpu_dist, sleep_dist;
    /*
     * Failing on purpose: with status != 0 and error_rate 0, every call fails with status; with
     * error_rate in (0, 1], that fraction of calls fails with status (INTERNAL when status is 0).
     */
    uint32_t status;
    double error_rate;
    bool echo_metadata; /* echo request metadata back as response headers */
} echod_work_t;

typedef struct {
    char *method; /* full gRPC path */
    echod_work_t work;
} echod_method_work_t;

/*
 * The cost model (docs/work-model.md): synthetic CPU charged on the dispatch structure itself,
 * where grpc-java's JVM spends it, instead of once per call. Server-wide, overridable per call.
 */
typedef struct {
    bool enabled;
    uint32_t call_cpu_us;    /* per call, on the loop: half with the request headers, half with the trailers */
    uint32_t step_cpu_us;    /* per step that runs, on the thread that runs it */
    uint32_t handoff_cpu_us; /* per cross-thread hand-off (dispatch, loop task), on the receiving thread */
    uint32_t message_cpu_us; /* per message in and per message out, where it is decoded or encoded */
    /* in addition to handoff_cpu_us, per hand-off that found its receiver parked (and so woke it) */
    uint32_t handoff_wake_cpu_us;
    /* server-wide only (no call's): in addition to handoff_wake_cpu_us, per hand-off that woke a
     * parked loop (a JVM's selector convoy when the waker shares the loop's CPU: docs/work-model.md) */
    uint32_t handoff_wake_loop_cpu_us;
    /* server-wide only (no call's): per I/O wake-up of a loop, on the loop, after a sleep in its
     * poll of wakeup_full_sleep_us or more (0: whatever the sleep); a shorter sleep s costs
     * short + (wakeup_cpu_us - short) x (s / full)^wakeup_sleep_exponent; and a steady background
     * rate in thousandths of a CPU, on a thread of its own (work/background.h) */
    uint32_t wakeup_cpu_us;
    uint32_t wakeup_short_cpu_us;
    uint32_t wakeup_full_sleep_us;
    double wakeup_sleep_exponent;
    uint32_t background_millicores;
} echod_work_model_t;

typedef enum { ECHOD_SERIALIZE_AUTO = 0, ECHOD_SERIALIZE_ALWAYS } echod_serialize_t;
/* The Linux scheduling policy of every echod thread: SCHED_OTHER, or SCHED_BATCH, under which a
 * woken thread does not preempt the running one (a hand-off waits for the waker to block). */
typedef enum { ECHOD_SCHED_OTHER = 0, ECHOD_SCHED_BATCH } echod_sched_policy_t;
typedef enum { ECHOD_FLUSH_LOOP_TAIL = 0, ECHOD_FLUSH_READ_COMPLETE, ECHOD_FLUSH_IMMEDIATE } echod_flush_t;
/* io.read_batch: how a loop serves the connections one wait found ready (docs/dispatch-model.md, section 6):
 * netty, in the order they became ready and all of them (Netty's selector loop); h2o, as libh2o's evloop
 * runs them: newest first, at most 256 events per wait. */
typedef enum { ECHOD_READ_BATCH_NETTY = 0, ECHOD_READ_BATCH_H2O } echod_read_batch_t;
/* transport.compression.respond: the response's grpc-encoding (a fixed one only when the client's
 * grpc-accept-encoding lists it, else identity) */
typedef enum {
    ECHOD_RESPOND_REQUEST = 0, /* the request's encoding */
    ECHOD_RESPOND_IDENTITY,
    ECHOD_RESPOND_GZIP,
    ECHOD_RESPOND_DEFLATE
} echod_compression_respond_t;

typedef struct echod_config {
    char *arm; /* free-form name, shown in logs and metrics */
    struct {
        char *grpc;  /* "host:port" */
        char *admin; /* "host:port" */
        char *rest;  /* "host:port" of the REST control arm; "" = off (default) */
    } listen;
    struct {
        char *cert; /* "" = no TLS */
        char *key;
    } tls;
    struct {
        unsigned event_loops;          /* I/O loop threads, SO_REUSEPORT listeners; default 1 */
        echod_read_batch_t read_batch; /* default netty */
    } io;
    struct {
        unsigned max_concurrent_streams;    /* advertised in SETTINGS; default 1000 */
        uint32_t max_receive_message_bytes; /* default 4 MiB */
        uint32_t initial_window_bytes;      /* per stream and connection; default 1 MiB */
        uint32_t max_send_buffer_bytes;     /* on_ready threshold per stream; default 32 KiB */
        bool flow_control_pings;            /* grpc-java's BDP PINGs, written at the end of each read; default off */
        echod_flush_t flush;
        uint64_t max_connection_age_ms;       /* 0 = off (default); gRPC A9, +-10% jitter */
        uint64_t max_connection_age_grace_ms; /* after the age GOAWAY; 0 = wait for the calls (default) */
        uint64_t idle_timeout_ms;             /* connection with no open stream; 0 = off; default 0 */
        uint64_t handshake_timeout_ms;        /* accept to first HTTP/2 frame (and TLS); 0 = off; default 10 s */
        uint32_t max_resets_per_second;       /* client RST_STREAMs/s per connection before GOAWAY
                                                 (ENHANCE_YOUR_CALM); 0 = no limit; default 1000 */
        uint32_t max_header_list_bytes;       /* request header block limit; default 16 KiB */
        struct {
            echod_compression_respond_t respond; /* default request */
            unsigned level;                      /* zlib's 1..9; default 6 */
            uint32_t min_bytes;                  /* smaller responses go uncompressed (flag 0); default 0 */
        } compression;
    } transport;
    struct {
        uint32_t max_calls_in_flight; /* 0 = unlimited; above it new calls get RESOURCE_EXHAUSTED */
        uint32_t max_connections;     /* 0 = unlimited; above it new connections are closed at once */
    } limits;
    struct {
        bool allow_metadata_overrides; /* default true */
        uint64_t max_cpu_ms;           /* cap on cpu_us (ms in config; 0..1 h; default 10 s) */
        uint64_t max_sleep_ms;         /* cap on sleep_us (0..1 h; default 10 s) */
        uint32_t max_response_bytes;   /* cap on response_bytes (default 4 MiB) */
        uint64_t seed;                 /* of every draw (distributions, error_rate); default 1 */
        echod_work_model_t model;      /* off by default */
        echod_work_t defaults;         /* every method without a per_method entry */
        /*
         * Used instead of `defaults` for that method. An entry starts from the values `defaults` has
         * when the entry is read (in a file, after the defaults of the same file whatever the key
         * order); the keys it names override them. Sorted by method after finish.
         */
        echod_method_work_t *per_method;
        size_t per_method_count;
    } work;
    struct {
        bool timing_trailer; /* echod-timing trailing metadata; default true */
    } telemetry;
    echod_exec_config_t executor;
    struct {
        echod_serialize_t serialize;
        /* grpc-java PR #5521 (never merged): a one-thread FIFO executor gets no serializer */
        bool unwrap_sequential;
        bool merge_lookup_and_start;
        bool coalesce_end_stream;
        echod_sched_policy_t sched_policy;
        echod_per_method_t *per_method;
        size_t per_method_count;
    } dispatch;
    struct {
        unsigned server_streaming_count; /* ServerStreamingEcho responses per request; default 10 */
    } echo;
    struct {
        uint64_t announce_ms;      /* NOT_SERVING before the first GOAWAY; default 0 */
        uint64_t drain_timeout_ms; /* default 10 s */
    } shutdown;
    struct {
        echod_log_level_t level;
        echod_log_format_t format;
    } log;
    char source[256]; /* file the config came from, "" for built-in defaults */
    char sha256[65];  /* hex digest of the effective config as printed by echod_config_dump */
    /* Where each key written by a file or --set got its value, for echod_config_where. */
    struct echod_config_origin *origins;
    size_t origin_count;
} echod_config_t;

/* Fills every field with the built-in defaults (identical to config/echod.yaml), each from its key's schema entry. */
void echod_config_init(echod_config_t *cfg);

/*
 * Reads a YAML file over the current values. On error returns -1 and writes one line to err:
 * "FILE:LINE:COL: key.path: what was expected, got VALUE". Unknown keys, wrong types and
 * out-of-range values are errors. A missing or unreadable file is an error naming the file.
 */
int echod_config_load_file(echod_config_t *cfg, const char *path, char *err, size_t errlen);

/*
 * Applies one "key.path=value" override with the same validation ("--set key.path: ...").
 * The value is read as YAML, so a quoted string, an empty value (null) or a flow mapping
 * (transport={flush: immediate}) work as they do in a file. Under dispatch.per_method and
 * work.per_method the method path is one segment despite its dots:
 * dispatch.per_method./pkg.Svc/Method.threads=2 creates or edits one entry,
 * dispatch.per_method./pkg.Svc/Method={mode: fixed} replaces it, dispatch.per_method={} clears
 * them all (work.per_method./pkg.Svc/Method.cpu_us=5 alike). On error the config is left unchanged.
 */
int echod_config_set(echod_config_t *cfg, const char *assignment, char *err, size_t errlen);

/*
 * Cross-field checks and derived fields (sha256). Call once after loading and overrides.
 * Checks that listen.rest (when set) shares no port with grpc or admin, and that work.defaults and
 * every work.per_method entry stay within the work caps. Also sorts dispatch.per_method and
 * work.per_method by method, which echod_config_method_exec and echod_config_method_work rely on.
 */
int echod_config_finish(echod_config_t *cfg, char *err, size_t errlen);

/*
 * Where `key` got its value, for errors found after loading (finish, the method registry), so
 * they name a line as load errors do: "FILE:LINE:COL" where a file wrote the key, "--set" where
 * an override did last, else the file's name or "(built-in defaults)". A key nobody wrote (a
 * per_method entry's field inherited from work.defaults) takes the place of the nearest
 * enclosing key that was written. `key` is a path as errors print it, a per_method entry being
 * "work.per_method./pkg.Svc/Method". Returns buf.
 */
const char *echod_config_where(const echod_config_t *cfg, const char *key, char *buf, size_t cap);

/* The per-method executor configured for a full method path, or NULL. Valid after finish. */
const echod_exec_config_t *echod_config_method_exec(const echod_config_t *cfg, const char *method);

/*
 * Splits a listen address as the config accepts it (echod_hostport_parse, port 1..65535). host receives "" for any
 * address ("*", empty), else "localhost", an IPv4 literal or an IPv6 literal without brackets. Returns 0 or -1.
 */
int echod_config_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port);

/* The work for a method: its per_method entry, else work.defaults. Any thread, after finish. */
const echod_work_t *echod_config_method_work(const echod_config_t *cfg, const char *method);

/* Writes the effective config as YAML that echod_config_load_file accepts. */
void echod_config_dump(const echod_config_t *cfg, FILE *out);

/* Parses "250ms", "10s", "2m" (a bare number is milliseconds). Returns 0 or -1. */
int echod_config_parse_duration(const char *s, uint64_t *ms);

const char *echod_exec_mode_name(echod_exec_mode_t mode);
const char *echod_flush_name(echod_flush_t flush);
const char *echod_read_batch_name(echod_read_batch_t b);
const char *echod_serialize_name(echod_serialize_t s);
const char *echod_sched_policy_name(echod_sched_policy_t p);
const char *echod_dist_name(echod_dist_kind_t kind);
/* "constant", "exponential" or "stall" -> 0 and *kind; anything else -1. */
int echod_dist_parse(const char *s, size_t len, echod_dist_kind_t *kind);
const char *echod_log_level_name(echod_log_level_t level);
const char *echod_log_format_name(echod_log_format_t format);

void echod_config_free(echod_config_t *cfg);

#endif
