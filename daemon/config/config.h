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

typedef enum {
    ECHOD_EXEC_DIRECT = 0, /* run steps on the calling (loop) thread */
    ECHOD_EXEC_FIXED,      /* n threads, one shared FIFO under one lock */
    ECHOD_EXEC_CACHED,     /* hand-off to an idle thread or start one; idle threads expire */
    ECHOD_EXEC_WORKSTEALING /* n carriers with their own deques; idle carriers steal */
} echod_exec_mode_t;

typedef struct {
    echod_exec_mode_t mode;
    unsigned threads;      /* fixed, workstealing: 0 = CPUs the process may use */
    unsigned max_threads;  /* cached: 0 = no cap */
    uint64_t keep_alive_ms; /* cached: idle threads exit after this */
} echod_exec_config_t;

typedef struct {
    char *method; /* full gRPC path, "/grpc.examples.echo.Echo/BidirectionalStreamingEcho" */
    echod_exec_config_t exec;
} echod_per_method_t;

typedef enum { ECHOD_SERIALIZE_AUTO = 0, ECHOD_SERIALIZE_ALWAYS } echod_serialize_t;
typedef enum { ECHOD_FLUSH_LOOP_TAIL = 0, ECHOD_FLUSH_READ_COMPLETE, ECHOD_FLUSH_IMMEDIATE } echod_flush_t;
typedef enum { ECHOD_LOG_DEBUG = 0, ECHOD_LOG_INFO, ECHOD_LOG_WARN, ECHOD_LOG_ERROR } echod_log_level_t;
typedef enum { ECHOD_LOG_TEXT = 0, ECHOD_LOG_JSON } echod_log_format_t;

typedef struct echod_config {
    char *arm; /* free-form name, shown in logs and metrics */
    struct {
        char *grpc;  /* "host:port" */
        char *admin; /* "host:port" */
    } listen;
    struct {
        char *cert; /* "" = no TLS */
        char *key;
    } tls;
    struct {
        unsigned event_loops; /* I/O loop threads, SO_REUSEPORT listeners; default 1 */
    } io;
    struct {
        unsigned max_concurrent_streams;    /* advertised in SETTINGS; default 1000 */
        uint32_t max_receive_message_bytes; /* default 4 MiB */
        uint32_t initial_window_bytes;      /* per stream and connection; default 1 MiB */
        uint32_t max_send_buffer_bytes;     /* on_ready threshold per stream; default 32 KiB */
        echod_flush_t flush;
    } transport;
    echod_exec_config_t executor;
    struct {
        echod_serialize_t serialize;
        bool merge_lookup_and_start;
        bool coalesce_end_stream;
        echod_per_method_t *per_method;
        size_t per_method_count;
    } dispatch;
    struct {
        unsigned server_streaming_count; /* ServerStreamingEcho responses per request; default 10 */
    } echo;
    struct {
        uint64_t drain_timeout_ms; /* default 10 s */
    } shutdown;
    struct {
        echod_log_level_t level;
        echod_log_format_t format;
    } log;
    char source[256];    /* file the config came from, "" for built-in defaults */
    char sha256[65];     /* hex digest of the effective config as printed by echod_config_dump */
} echod_config_t;

/* Fills every field with the built-in defaults (identical to config/echod.yaml). */
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
 * (transport={flush: immediate}) work as they do in a file. Under dispatch.per_method the
 * method path is one segment despite its dots: dispatch.per_method./pkg.Svc/Method.threads=2
 * creates or edits one entry, dispatch.per_method./pkg.Svc/Method={mode: fixed} replaces it,
 * dispatch.per_method={} clears them all. On error the config is left unchanged.
 */
int echod_config_set(echod_config_t *cfg, const char *assignment, char *err, size_t errlen);

/*
 * Cross-field checks and derived fields (sha256). Call once after loading and overrides.
 * Also sorts dispatch.per_method by method, which echod_config_method_exec relies on.
 */
int echod_config_finish(echod_config_t *cfg, char *err, size_t errlen);

/* The per-method executor configured for a full method path, or NULL. Valid after finish. */
const echod_exec_config_t *echod_config_method_exec(const echod_config_t *cfg, const char *method);

/*
 * Splits a listen address as the config accepts it. host receives "" for any address ("*",
 * empty), else "localhost", an IPv4 literal or an IPv6 literal without brackets. Returns 0 or -1.
 */
int echod_config_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port);

/* Writes the effective config as YAML that echod_config_load_file accepts. */
void echod_config_dump(const echod_config_t *cfg, FILE *out);

/* Parses "250ms", "10s", "2m" (a bare number is milliseconds). Returns 0 or -1. */
int echod_config_parse_duration(const char *s, uint64_t *ms);

const char *echod_exec_mode_name(echod_exec_mode_t mode);
const char *echod_flush_name(echod_flush_t flush);
const char *echod_serialize_name(echod_serialize_t s);
const char *echod_log_level_name(echod_log_level_t level);
const char *echod_log_format_name(echod_log_format_t format);

void echod_config_free(echod_config_t *cfg);

#endif
