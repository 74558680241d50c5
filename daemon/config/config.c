/*
 * One schema table drives everything: the built-in defaults, loading a file, --set, and dump.
 * Each key's entry holds its range and its default; a key is found by walking the table, and
 * a value (a libyaml node) is applied by one setter per kind, so a file and a --set cannot
 * disagree on what a key accepts, and neither the defaults nor dump can forget a key.
 *
 * Load and --set work on a copy and swap it in only on success: a rejected file or override
 * leaves the caller's config exactly as it was.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <openssl/evp.h>
#include <yaml.h>
#include "config/config.h"
#include "util/err.h"
#include "util/listen.h"

/* Schema */

typedef enum {
    KEY_SECTION,      /* a mapping of further keys; assigning a mapping merges key by key */
    KEY_STRING,       /* char *, may be empty */
    KEY_NAME,         /* char *, must be non-empty */
    KEY_HOSTPORT,     /* char *, checked as host:port */
    KEY_HOSTPORT_OPT, /* char *, host:port as KEY_HOSTPORT, or empty (that listener is off) */
    KEY_UINT,         /* unsigned integer of `size` bytes, within [min, max] */
    KEY_INT,          /* signed integer of `size` bytes, within [(int64_t)min, (int64_t)max] */
    KEY_RATIO,        /* double from 0.0 to 1.0, decimal notation only */
    KEY_ENUM,         /* stored as unsigned int, the value of one of `names` */
    KEY_BOOL,         /* bool */
    KEY_DURATION,     /* uint64_t milliseconds, up to max */
    KEY_PER_METHOD,   /* a method path -> entry dictionary described by `map`; assigning it replaces it whole */
} key_kind_t;

/* An enum's names in config and dump, in the order the "one of ..." errors list them. */
typedef struct {
    const char *name;
    unsigned value;
} enum_name_t;

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A key's built-in default, in the member its kind reads. */
typedef union {
    uint64_t u;    /* KEY_UINT, KEY_DURATION (ms), KEY_ENUM (the enum's value) */
    int64_t i;     /* KEY_INT */
    double ratio;  /* KEY_RATIO */
    bool b;        /* KEY_BOOL */
    const char *s; /* KEY_STRING, KEY_NAME, KEY_HOSTPORT, KEY_HOSTPORT_OPT */
} key_default_t;

typedef struct key_def key_def_t;
typedef struct method_map method_map_t;
struct key_def {
    const char *name;
    key_kind_t kind;
    size_t offset; /* from the base of the enclosing section */
    size_t size;
    uint64_t min, max;
    key_default_t def;         /* what echod_config_init writes; a section's and a dictionary's are its keys' */
    const enum_name_t *names;  /* KEY_ENUM */
    size_t nnames;             /* KEY_ENUM */
    const key_def_t *children; /* KEY_SECTION, terminated by a NULL name */
    const method_map_t *map;   /* KEY_PER_METHOD */
};

/*
 * A per_method dictionary: an array of structs that start with `char *method`, followed by the
 * entry's values at `value`. dispatch.per_method and work.per_method share all the code that
 * loads, overrides, copies, frees, dumps, checks and sorts them through this description.
 */
struct method_map {
    const char *path;       /* "dispatch.per_method", for messages */
    size_t items;           /* offset in echod_config_t of the array pointer */
    size_t count;           /* offset in echod_config_t of the size_t count */
    size_t item_size;       /* sizeof one array element */
    size_t value;           /* offset of the entry's values in an element */
    const key_def_t *entry; /* the section that describes one entry's values */
    /* What an entry holds before its keys are applied (it replaces any earlier entry). */
    void (*init_entry)(const echod_config_t *cfg, void *value);
};

_Static_assert(offsetof(echod_per_method_t, method) == 0, "per_method items start with the method path");
_Static_assert(offsetof(echod_method_work_t, method) == 0, "per_method items start with the method path");

static const enum_name_t exec_mode_names[] = {{"direct", ECHOD_EXEC_DIRECT},
                                              {"fixed", ECHOD_EXEC_FIXED},
                                              {"cached", ECHOD_EXEC_CACHED},
                                              {"workstealing", ECHOD_EXEC_WORKSTEALING},
                                              {"virtual", ECHOD_EXEC_VIRTUAL}};
static const enum_name_t flush_names[] = {{"loop_tail", ECHOD_FLUSH_LOOP_TAIL},
                                          {"read_complete", ECHOD_FLUSH_READ_COMPLETE},
                                          {"immediate", ECHOD_FLUSH_IMMEDIATE}};
static const enum_name_t read_batch_names[] = {{"netty", ECHOD_READ_BATCH_NETTY}, {"h2o", ECHOD_READ_BATCH_H2O}};
static const enum_name_t respond_names[] = {{"request", ECHOD_RESPOND_REQUEST},
                                            {"identity", ECHOD_RESPOND_IDENTITY},
                                            {"gzip", ECHOD_RESPOND_GZIP},
                                            {"deflate", ECHOD_RESPOND_DEFLATE}};
static const enum_name_t serialize_names[] = {{"auto", ECHOD_SERIALIZE_AUTO}, {"always", ECHOD_SERIALIZE_ALWAYS}};
static const enum_name_t sched_policy_names[] = {{"other", ECHOD_SCHED_OTHER}, {"batch", ECHOD_SCHED_BATCH}};
static const enum_name_t log_level_names[] = {
    {"debug", ECHOD_LOG_DEBUG}, {"info", ECHOD_LOG_INFO}, {"warn", ECHOD_LOG_WARN}, {"error", ECHOD_LOG_ERROR}};
static const enum_name_t log_format_names[] = {{"text", ECHOD_LOG_TEXT}, {"json", ECHOD_LOG_JSON}};
static const enum_name_t dist_names[] = {
    {"constant", ECHOD_DIST_CONSTANT}, {"exponential", ECHOD_DIST_EXPONENTIAL}, {"stall", ECHOD_DIST_STALL}};

#define INT31_MAX 2147483647u
/* A day is "forever" for every duration here, and keeps ms -> ns conversions far from overflow. */
#define MAX_DURATION_MS (24 * 60 * 60 * 1000ull)
/* work.max_cpu and work.max_sleep: an hour, so that every value under the cap fits cpu_us/sleep_us (uint32_t). */
#define MAX_WORK_MS (60 * 60 * 1000ull)
#define MAX_WORK_US (MAX_WORK_MS * 1000)
#define MAX_STATUS  16 /* UNAUTHENTICATED, the last gRPC status code */

/*
 * One macro per kind, so that an entry names only what its kind uses: the member of TYPE it
 * sets, its range and its default. KEY_INT bounds travel in the unsigned min/max fields; the
 * setter converts them back.
 */
/* clang-format off */
#define FIELD(type, member) .offset = offsetof(type, member), .size = sizeof(((type *)0)->member)
#define STRING_KEY(n, k, type, member, d) {.name = n, .kind = k, FIELD(type, member), .def.s = d}
#define UINT_KEY(n, type, member, lo, hi, d) \
    {.name = n, .kind = KEY_UINT, FIELD(type, member), .min = lo, .max = hi, .def.u = d}
#define INT_KEY(n, type, member, lo, hi, d) \
    {.name = n, .kind = KEY_INT, FIELD(type, member), .min = (uint64_t)(int64_t)(lo), \
     .max = (uint64_t)(int64_t)(hi), .def.i = d}
#define RATIO_KEY(n, type, member, d) {.name = n, .kind = KEY_RATIO, FIELD(type, member), .def.ratio = d}
#define ENUM_KEY(n, type, member, table, d) \
    {.name = n, .kind = KEY_ENUM, FIELD(type, member), .def.u = d, .names = table, .nnames = COUNT(table)}
#define BOOL_KEY(n, type, member, d) {.name = n, .kind = KEY_BOOL, FIELD(type, member), .def.b = d}
#define DURATION_KEY(n, type, member, hi, d) \
    {.name = n, .kind = KEY_DURATION, FIELD(type, member), .max = hi, .def.u = d}
/* a section whose keys are relative to the same base as itself (0: the config)... */
#define SECTION_KEY(n, keys) {.name = n, .kind = KEY_SECTION, .children = keys}
/* ...or to a struct of its own, which per_method entries share (executor, work.defaults) */
#define SECTION_AT(n, type, member, keys) {.name = n, .kind = KEY_SECTION, FIELD(type, member), .children = keys}
#define PER_METHOD_KEY(n, m) {.name = n, .kind = KEY_PER_METHOD, .map = m}
#define END_OF_KEYS {.name = NULL}
/* clang-format on */

static void init_exec_entry(const echod_config_t *cfg, void *value);
static void init_work_entry(const echod_config_t *cfg, void *value);

/* Shared by `executor` and every dispatch.per_method entry, which are the same struct. */
static const key_def_t exec_keys[] = {
    ENUM_KEY("mode", echod_exec_config_t, mode, exec_mode_names, ECHOD_EXEC_DIRECT),
    UINT_KEY("threads", echod_exec_config_t, threads, 0, 1024, 0),
    UINT_KEY("max_threads", echod_exec_config_t, max_threads, 0, 4096, 0),
    DURATION_KEY("keep_alive", echod_exec_config_t, keep_alive_ms, MAX_DURATION_MS, 60000),
    /* docs/virtual-threads.md: sized by measurement */
    UINT_KEY("stack_bytes", echod_exec_config_t, stack_bytes, 16384, 64u << 20, ECHOD_EXEC_STACK_BYTES_DEFAULT),
    END_OF_KEYS,
};

/*
 * Shared by work.defaults and every work.per_method entry. The static ranges are the most any cap
 * allows; the caps of `work` (max_cpu, max_sleep, max_response_bytes) are checked in finish.
 */
static const key_def_t work_entry_keys[] = {
    INT_KEY("response_bytes", echod_work_t, response_bytes, -1, INT31_MAX, -1),
    UINT_KEY("cpu_us", echod_work_t, cpu_us, 0, MAX_WORK_US, 0),
    ENUM_KEY("cpu_dist", echod_work_t, cpu_dist.kind, dist_names, ECHOD_DIST_CONSTANT),
    RATIO_KEY("cpu_stall_fraction", echod_work_t, cpu_dist.stall_fraction, 0.0),
    UINT_KEY("cpu_stall_us", echod_work_t, cpu_dist.stall_us, 0, MAX_WORK_US, 0),
    UINT_KEY("sleep_us", echod_work_t, sleep_us, 0, MAX_WORK_US, 0),
    ENUM_KEY("sleep_dist", echod_work_t, sleep_dist.kind, dist_names, ECHOD_DIST_CONSTANT),
    RATIO_KEY("sleep_stall_fraction", echod_work_t, sleep_dist.stall_fraction, 0.0),
    UINT_KEY("sleep_stall_us", echod_work_t, sleep_dist.stall_us, 0, MAX_WORK_US, 0),
    UINT_KEY("status", echod_work_t, status, 0, MAX_STATUS, 0),
    RATIO_KEY("error_rate", echod_work_t, error_rate, 0.0),
    BOOL_KEY("echo_metadata", echod_work_t, echo_metadata, false),
    END_OF_KEYS,
};

static const key_def_t exec_entry_key = SECTION_KEY("per_method entry", exec_keys);
static const key_def_t work_entry_key = SECTION_KEY("per_method entry", work_entry_keys);

static const method_map_t exec_map = {
    "dispatch.per_method",
    offsetof(echod_config_t, dispatch.per_method),
    offsetof(echod_config_t, dispatch.per_method_count),
    sizeof(echod_per_method_t),
    offsetof(echod_per_method_t, exec),
    &exec_entry_key,
    init_exec_entry,
};

static const method_map_t work_map = {
    "work.per_method",
    offsetof(echod_config_t, work.per_method),
    offsetof(echod_config_t, work.per_method_count),
    sizeof(echod_method_work_t),
    offsetof(echod_method_work_t, work),
    &work_entry_key,
    init_work_entry,
};

static const method_map_t *const all_maps[] = {&exec_map, &work_map};
#define NMAPS COUNT(all_maps)

/* The keys below are members of the config itself. */
#define CFG echod_config_t

static const key_def_t listen_keys[] = {
    STRING_KEY("grpc", KEY_HOSTPORT, CFG, listen.grpc, "0.0.0.0:50051"),
    STRING_KEY("admin", KEY_HOSTPORT, CFG, listen.admin, "0.0.0.0:8080"),
    STRING_KEY("rest", KEY_HOSTPORT_OPT, CFG, listen.rest, ""),
    END_OF_KEYS,
};

static const key_def_t tls_keys[] = {
    STRING_KEY("cert", KEY_STRING, CFG, tls.cert, ""),
    STRING_KEY("key", KEY_STRING, CFG, tls.key, ""),
    END_OF_KEYS,
};

static const key_def_t io_keys[] = {
    UINT_KEY("event_loops", CFG, io.event_loops, 1, 64, 1),
    ENUM_KEY("read_batch", CFG, io.read_batch, read_batch_names, ECHOD_READ_BATCH_NETTY),
    END_OF_KEYS,
};

static const key_def_t compression_keys[] = {
    ENUM_KEY("respond", CFG, transport.compression.respond, respond_names, ECHOD_RESPOND_REQUEST),
    UINT_KEY("level", CFG, transport.compression.level, 1, 9, 6),
    UINT_KEY("min_bytes", CFG, transport.compression.min_bytes, 0, INT31_MAX, 0),
    END_OF_KEYS,
};

static const key_def_t transport_keys[] = {
    UINT_KEY("max_concurrent_streams", CFG, transport.max_concurrent_streams, 1, INT31_MAX, 1000),
    UINT_KEY("max_receive_message_bytes", CFG, transport.max_receive_message_bytes, 1, INT31_MAX, 4u << 20),
    UINT_KEY("initial_window_bytes", CFG, transport.initial_window_bytes, 65535, INT31_MAX, 1u << 20),
    UINT_KEY("max_send_buffer_bytes", CFG, transport.max_send_buffer_bytes, 1024, 1u << 30, 32u << 10),
    ENUM_KEY("flush", CFG, transport.flush, flush_names, ECHOD_FLUSH_LOOP_TAIL),
    BOOL_KEY("flow_control_pings", CFG, transport.flow_control_pings, false),
    UINT_KEY("max_header_list_bytes", CFG, transport.max_header_list_bytes, 1024, 16u << 20, 16u << 10),
    UINT_KEY("max_resets_per_second", CFG, transport.max_resets_per_second, 0, 1000000, 1000),
    DURATION_KEY("handshake_timeout", CFG, transport.handshake_timeout_ms, MAX_DURATION_MS, 10000),
    DURATION_KEY("idle_timeout", CFG, transport.idle_timeout_ms, MAX_DURATION_MS, 0),
    DURATION_KEY("max_connection_age", CFG, transport.max_connection_age_ms, MAX_DURATION_MS, 0),
    DURATION_KEY("max_connection_age_grace", CFG, transport.max_connection_age_grace_ms, MAX_DURATION_MS, 0),
    SECTION_KEY("compression", compression_keys),
    END_OF_KEYS,
};

static const key_def_t limits_keys[] = {
    UINT_KEY("max_calls_in_flight", CFG, limits.max_calls_in_flight, 0, 10000000, 0),
    UINT_KEY("max_connections", CFG, limits.max_connections, 0, 1000000, 0),
    END_OF_KEYS,
};

static const key_def_t dispatch_keys[] = {
    ENUM_KEY("serialize", CFG, dispatch.serialize, serialize_names, ECHOD_SERIALIZE_AUTO),
    BOOL_KEY("unwrap_sequential", CFG, dispatch.unwrap_sequential, false),
    BOOL_KEY("merge_lookup_and_start", CFG, dispatch.merge_lookup_and_start, false),
    BOOL_KEY("coalesce_end_stream", CFG, dispatch.coalesce_end_stream, false),
    ENUM_KEY("sched_policy", CFG, dispatch.sched_policy, sched_policy_names, ECHOD_SCHED_OTHER),
    PER_METHOD_KEY("per_method", &exec_map),
    END_OF_KEYS,
};

static const key_def_t echo_keys[] = {
    UINT_KEY("server_streaming_count", CFG, echo.server_streaming_count, 1, 100000, 10),
    END_OF_KEYS,
};

/* work.model: each unit cost (the *_cpu_us) is capped by work.max_cpu, checked in finish. */
static const key_def_t model_keys[] = {
    BOOL_KEY("enabled", CFG, work.model.enabled, false),
    UINT_KEY("call_cpu_us", CFG, work.model.call_cpu_us, 0, MAX_WORK_US, 0),
    UINT_KEY("step_cpu_us", CFG, work.model.step_cpu_us, 0, MAX_WORK_US, 0),
    UINT_KEY("handoff_cpu_us", CFG, work.model.handoff_cpu_us, 0, MAX_WORK_US, 0),
    UINT_KEY("handoff_wake_cpu_us", CFG, work.model.handoff_wake_cpu_us, 0, MAX_WORK_US, 0),
    UINT_KEY("handoff_wake_loop_cpu_us", CFG, work.model.handoff_wake_loop_cpu_us, 0, MAX_WORK_US, 0),
    UINT_KEY("message_cpu_us", CFG, work.model.message_cpu_us, 0, MAX_WORK_US, 0),
    UINT_KEY("wakeup_cpu_us", CFG, work.model.wakeup_cpu_us, 0, MAX_WORK_US, 0),
    UINT_KEY("wakeup_short_cpu_us", CFG, work.model.wakeup_short_cpu_us, 0, MAX_WORK_US, 0),
    /* a sleep, not a cost: up to an idle minute */
    UINT_KEY("wakeup_full_sleep_us", CFG, work.model.wakeup_full_sleep_us, 0, 60000000, 0),
    RATIO_KEY("wakeup_sleep_exponent", CFG, work.model.wakeup_sleep_exponent, 0.5),
    /* one thread burns it: at most a whole CPU */
    UINT_KEY("background_millicores", CFG, work.model.background_millicores, 0, 1000, 0),
    END_OF_KEYS,
};

static const key_def_t work_keys[] = {
    BOOL_KEY("allow_metadata_overrides", CFG, work.allow_metadata_overrides, true),
    DURATION_KEY("max_cpu", CFG, work.max_cpu_ms, MAX_WORK_MS, 10000),
    DURATION_KEY("max_sleep", CFG, work.max_sleep_ms, MAX_WORK_MS, 10000),
    UINT_KEY("max_response_bytes", CFG, work.max_response_bytes, 0, INT31_MAX, 4u << 20),
    UINT_KEY("seed", CFG, work.seed, 0, UINT64_MAX, 1),
    SECTION_AT("defaults", CFG, work.defaults, work_entry_keys),
    PER_METHOD_KEY("per_method", &work_map),
    SECTION_KEY("model", model_keys),
    END_OF_KEYS,
};

static const key_def_t telemetry_keys[] = {
    BOOL_KEY("timing_trailer", CFG, telemetry.timing_trailer, true),
    END_OF_KEYS,
};

static const key_def_t shutdown_keys[] = {
    DURATION_KEY("announce", CFG, shutdown.announce_ms, MAX_DURATION_MS, 0),
    DURATION_KEY("drain_timeout", CFG, shutdown.drain_timeout_ms, MAX_DURATION_MS, 10000),
    END_OF_KEYS,
};

static const key_def_t log_keys[] = {
    ENUM_KEY("level", CFG, log.level, log_level_names, ECHOD_LOG_INFO),
    ENUM_KEY("format", CFG, log.format, log_format_names, ECHOD_LOG_TEXT),
    END_OF_KEYS,
};

/*
 * The order here is the order of dump and of the "valid keys" lists. config/echod.yaml shows
 * the same defaults, commented; test_config holds the two equal.
 */
static const key_def_t top_keys[] = {
    STRING_KEY("arm", KEY_NAME, CFG, arm, "default"),
    SECTION_KEY("listen", listen_keys),
    SECTION_KEY("tls", tls_keys),
    SECTION_KEY("io", io_keys),
    SECTION_KEY("transport", transport_keys),
    SECTION_KEY("limits", limits_keys),
    SECTION_AT("executor", CFG, executor, exec_keys),
    SECTION_KEY("dispatch", dispatch_keys),
    SECTION_KEY("echo", echo_keys),
    SECTION_KEY("work", work_keys),
    SECTION_KEY("telemetry", telemetry_keys),
    SECTION_KEY("shutdown", shutdown_keys),
    SECTION_KEY("log", log_keys),
    END_OF_KEYS,
};

#undef CFG

static const key_def_t root_key = SECTION_KEY("", top_keys);

/* Small helpers */

/* Config is built once at startup; there is nothing sensible to do without memory. */
static char *xstrdup(const char *s)
{
    return echod_must(strdup(s), "config string");
}

static void *xrealloc(void *p, size_t n)
{
    p = echod_must(realloc(p, n), "config array");
    return p;
}

static void set_string(char **field, const char *value)
{
    char *copy = xstrdup(value);
    free(*field);
    *field = copy;
}

static void store_uint(void *field, size_t size, uint64_t v)
{
    switch (size) {
    case sizeof(uint8_t): {
        uint8_t x = (uint8_t)v;
        memcpy(field, &x, size);
    } break;
    case sizeof(uint16_t): {
        uint16_t x = (uint16_t)v;
        memcpy(field, &x, size);
    } break;
    case sizeof(uint32_t): {
        uint32_t x = (uint32_t)v;
        memcpy(field, &x, size);
    } break;
    default: {
        uint64_t x = v;
        memcpy(field, &x, sizeof(x));
    } break;
    }
}

static uint64_t load_uint(const void *field, size_t size)
{
    switch (size) {
    case sizeof(uint8_t): {
        uint8_t x;
        memcpy(&x, field, size);
        return x;
    }
    case sizeof(uint16_t): {
        uint16_t x;
        memcpy(&x, field, size);
        return x;
    }
    case sizeof(uint32_t): {
        uint32_t x;
        memcpy(&x, field, size);
        return x;
    }
    default: {
        uint64_t x;
        memcpy(&x, field, sizeof(x));
        return x;
    }
    }
}

static void store_int(void *field, size_t size, int64_t v)
{
    if (size == sizeof(int32_t)) {
        int32_t x = (int32_t)v;
        memcpy(field, &x, size);
    } else {
        memcpy(field, &v, sizeof(v));
    }
}

static int64_t load_int(const void *field, size_t size)
{
    if (size == sizeof(int32_t)) {
        int32_t x;
        memcpy(&x, field, size);
        return x;
    }
    int64_t x;
    memcpy(&x, field, sizeof(x));
    return x;
}

/* Renders a user value for an error message: quoted, one line, bounded, so the message stays one line. */
static void quote_value(char *dst, size_t cap, const char *src)
{
    size_t o = 0, max_chars = 64;
    dst[o++] = '"';
    for (size_t i = 0; src[i] != '\0' && o + 8 < cap; i++) {
        if (i == max_chars) {
            o += (size_t)snprintf(dst + o, cap - o, "...");
            break;
        }
        unsigned char c = (unsigned char)src[i];
        if (c == '"' || c == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
        } else {
            dst[o++] = (char)c;
        }
    }
    dst[o++] = '"';
    dst[o] = '\0';
}

static void list_names(char *dst, size_t cap, const enum_name_t *names, size_t n)
{
    size_t o = 0;
    dst[0] = '\0';
    for (size_t i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(dst + o, cap - o, "%s%s", i ? ", " : "", names[i].name);
}

static void list_keys(char *dst, size_t cap, const key_def_t *keys)
{
    size_t o = 0;
    dst[0] = '\0';
    for (size_t i = 0; keys[i].name != NULL && o < cap; i++)
        o += (size_t)snprintf(dst + o, cap - o, "%s%s", i ? ", " : "", keys[i].name);
}

/* Value parsers (shared by the setters, finish and the public helpers) */

/* The value of the name s[0..len) in an enum's table, or -1. */
static int parse_enum(const enum_name_t *names, size_t n, const char *s, size_t len, unsigned *value)
{
    for (size_t i = 0; i < n; i++) {
        if (strlen(names[i].name) == len && memcmp(names[i].name, s, len) == 0) {
            *value = names[i].value;
            return 0;
        }
    }
    return -1;
}

/* The name of an enum's value, "unknown" for a value the table does not have. */
static const char *enum_name(const enum_name_t *names, size_t n, unsigned value)
{
    for (size_t i = 0; i < n; i++)
        if (names[i].value == value)
            return names[i].name;
    return "unknown";
}

static int parse_uint(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int echod_config_parse_duration(const char *s, uint64_t *ms)
{
    if (s == NULL)
        return -1;
    size_t digits = strspn(s, "0123456789");
    if (digits == 0 || digits > 20)
        return -1;
    char num[21];
    memcpy(num, s, digits);
    num[digits] = '\0';
    uint64_t v, scale;
    if (parse_uint(num, &v) != 0)
        return -1;
    const char *unit = s + digits;
    if (strcmp(unit, "") == 0 || strcmp(unit, "ms") == 0)
        scale = 1;
    else if (strcmp(unit, "s") == 0)
        scale = 1000;
    else if (strcmp(unit, "m") == 0)
        scale = 60000;
    else
        return -1;
    if (v > UINT64_MAX / scale)
        return -1;
    *ms = v * scale;
    return 0;
}

/* An optional '-' and decimal digits, nothing else: "+1", " 1" and "1.0" are not integers here. */
static int parse_int(const char *s, int64_t *out)
{
    int neg = s[0] == '-';
    uint64_t mag;
    if (parse_uint(s + neg, &mag) != 0 || mag > (uint64_t)INT64_MAX + (uint64_t)neg)
        return -1;
    *out = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    return 0;
}

/*
 * A fraction in decimal notation (0, 0.25, 1.0, 5e-3). strtod alone would also take "nan",
 * "inf", hex floats and leading blanks, so the characters are checked first; the result must be
 * finite and within [0, 1]. -0 becomes 0 so that it dumps as 0.0.
 */
static int parse_ratio(const char *s, double *out)
{
    if (s[0] == '\0' || strspn(s, "0123456789.eE+-") != strlen(s))
        return -1;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(v) || v < 0.0 || v > 1.0)
        return -1;
    *out = v == 0.0 ? 0.0 : v;
    return 0;
}

/*
 * The shortest "%.*g" that reads back as exactly v, with a '.' in the mantissa so that YAML 1.1
 * readers (PyYAML) see a float too: 0.0, 0.1, 1.0e-05, 0.30000000000000004.
 */
static void format_ratio(char *dst, size_t cap, double v)
{
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    size_t mant = strcspn(buf, "e");
    if (strchr(buf, '.') != NULL || strchr(buf, 'n') != NULL || strchr(buf, 'i') != NULL)
        snprintf(dst, cap, "%s", buf);
    else
        snprintf(dst, cap, "%.*s.0%s", (int)mant, buf, buf + mant);
}

/* YAML 1.1's booleans, in any case (True, NO). */
static int parse_bool(const char *s, bool *out)
{
    static const enum_name_t words[] = {{"true", 1}, {"false", 0}, {"yes", 1}, {"no", 0}, {"on", 1}, {"off", 0}};
    for (size_t i = 0; i < COUNT(words); i++) {
        if (strcasecmp(s, words[i].name) == 0) {
            *out = words[i].value != 0;
            return 0;
        }
    }
    return -1;
}

int echod_config_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port)
{
    uint16_t p;
    if (echod_hostport_parse(s, host, hostlen, &p) != 0 || p == 0) /* a listener needs a real port */
        return -1;
    if (port != NULL)
        *port = p;
    return 0;
}

/*
 * "/package.Service/Method": exactly two slashes, neither part empty, nothing that cannot be in a
 * path. A :path is ASCII (RFC 3986), and a byte above it from --set would also make the dump invalid YAML.
 */
static int valid_method_path(const char *s)
{
    if (s[0] != '/')
        return 0;
    const char *second = strchr(s + 1, '/');
    if (second == NULL || second == s + 1 || second[1] == '\0' || strchr(second + 1, '/') != NULL)
        return 0;
    for (const char *p = s; *p != '\0'; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            return 0;
    return 1;
}

/* Applying YAML nodes */

typedef struct {
    yaml_document_t *doc;
    const char *file; /* NULL for --set */
    echod_config_t *cfg;
    char *err;
    size_t errlen;
    char path[512]; /* dotted key path of the node being applied */
} apply_ctx_t;

static void node_error(apply_ctx_t *ctx, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void node_error(apply_ctx_t *ctx, const yaml_node_t *node, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *path = ctx->path[0] != '\0' ? ctx->path : "(top level)";
    if (ctx->file != NULL)
        echod_set_err(ctx->err, ctx->errlen, "%s:%zu:%zu: %s: %s", ctx->file, node->start_mark.line + 1,
                      node->start_mark.column + 1, path, msg);
    else
        echod_set_err(ctx->err, ctx->errlen, "--set %s: %s", path, msg);
}

/* Pushes one segment onto ctx->path; returns the old length so the caller can pop it. */
static size_t path_push(apply_ctx_t *ctx, const char *segment)
{
    size_t len = strlen(ctx->path);
    snprintf(ctx->path + len, sizeof(ctx->path) - len, "%s%s", len ? "." : "", segment);
    return len;
}

static void path_pop(apply_ctx_t *ctx, size_t len)
{
    ctx->path[len] = '\0';
}

/*
 * Origins: where each key written by a file or --set got its value. Errors that only the whole
 * config can reveal (finish, the method registry) use them to name a line as load errors do.
 */
struct echod_config_origin {
    char *key;    /* dotted path, as ctx->path */
    char *where;  /* "FILE:LINE:COL" or "--set" */
    uint64_t seq; /* order of writing: of two keys in one error, the one written last is named */
};

static struct echod_config_origin *origin_of(const echod_config_t *cfg, const char *key)
{
    for (size_t i = 0; i < cfg->origin_count; i++)
        if (strcmp(cfg->origins[i].key, key) == 0)
            return &cfg->origins[i];
    return NULL;
}

/* Records that the key at ctx->path is being written, from `node` of a file or from --set. */
static void note_origin(apply_ctx_t *ctx, const yaml_node_t *node)
{
    echod_config_t *cfg = ctx->cfg;
    char where[320];
    if (ctx->file != NULL)
        snprintf(where, sizeof(where), "%s:%zu:%zu", ctx->file, node->start_mark.line + 1, node->start_mark.column + 1);
    else
        snprintf(where, sizeof(where), "--set");
    uint64_t seq = 1;
    for (size_t i = 0; i < cfg->origin_count; i++)
        if (cfg->origins[i].seq >= seq)
            seq = cfg->origins[i].seq + 1;
    struct echod_config_origin *o = origin_of(cfg, ctx->path);
    if (o == NULL) {
        cfg->origins = xrealloc(cfg->origins, (cfg->origin_count + 1) * sizeof(*o));
        o = &cfg->origins[cfg->origin_count++];
        o->key = xstrdup(ctx->path);
    } else {
        free(o->where);
    }
    o->where = xstrdup(where);
    o->seq = seq;
}

/* The key itself, else the last written key below it (a --set of one field of a new entry). */
static const struct echod_config_origin *origin_at_or_below(const echod_config_t *cfg, const char *key)
{
    const struct echod_config_origin *below = origin_of(cfg, key);
    if (below != NULL)
        return below;
    size_t n = strlen(key);
    for (size_t i = 0; i < cfg->origin_count; i++) {
        const struct echod_config_origin *o = &cfg->origins[i];
        if (strncmp(o->key, key, n) == 0 && o->key[n] == '.' && (below == NULL || o->seq > below->seq))
            below = o;
    }
    return below;
}

/* As origin_at_or_below, else the nearest enclosing key that was written. */
static const struct echod_config_origin *find_origin(const echod_config_t *cfg, const char *key)
{
    const struct echod_config_origin *o = origin_at_or_below(cfg, key);
    char path[512];
    snprintf(path, sizeof(path), "%s", key);
    /* A method path's own dots cut it into prefixes that match nothing, which is harmless. */
    for (char *dot; o == NULL && (dot = strrchr(path, '.')) != NULL;) {
        *dot = '\0';
        o = origin_of(cfg, path);
    }
    return o;
}

const char *echod_config_where(const echod_config_t *cfg, const char *key, char *buf, size_t cap)
{
    const struct echod_config_origin *o = find_origin(cfg, key);
    snprintf(buf, cap, "%s", o != NULL ? o->where : cfg->source[0] != '\0' ? cfg->source : "(built-in defaults)");
    return buf;
}

/* For an error about two keys: where the one written last got its value. */
static const char *where_either(const echod_config_t *cfg, const char *a, const char *b, char *buf, size_t cap)
{
    const struct echod_config_origin *oa = origin_at_or_below(cfg, a), *ob = origin_at_or_below(cfg, b);
    if (oa == NULL || (ob != NULL && ob->seq > oa->seq))
        return echod_config_where(cfg, ob != NULL ? b : a, buf, cap);
    return echod_config_where(cfg, a, buf, cap);
}

static void free_origins(echod_config_t *cfg)
{
    for (size_t i = 0; i < cfg->origin_count; i++) {
        free(cfg->origins[i].key);
        free(cfg->origins[i].where);
    }
    free(cfg->origins);
    cfg->origins = NULL;
    cfg->origin_count = 0;
}

static void copy_origins(echod_config_t *dst, const echod_config_t *src)
{
    dst->origins = src->origin_count != 0 ? xrealloc(NULL, src->origin_count * sizeof(*dst->origins)) : NULL;
    for (size_t i = 0; i < src->origin_count; i++) {
        dst->origins[i].key = xstrdup(src->origins[i].key);
        dst->origins[i].where = xstrdup(src->origins[i].where);
        dst->origins[i].seq = src->origins[i].seq;
    }
}

/* An empty plain scalar, "~" or "null": written as `key:` with nothing after it. */
static int is_null(const yaml_node_t *node)
{
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *v = (const char *)node->data.scalar.value;
    return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
           strcmp(v, "NULL") == 0;
}

/* Describes what a node is for "got ..." when its type is wrong. */
static void describe_node(char *dst, size_t cap, const yaml_node_t *node)
{
    switch (node->type) {
    case YAML_SCALAR_NODE:
        quote_value(dst, cap, (const char *)node->data.scalar.value);
        break;
    case YAML_SEQUENCE_NODE:
        snprintf(dst, cap, "a sequence");
        break;
    case YAML_MAPPING_NODE:
        snprintf(dst, cap, "a mapping");
        break;
    default:
        snprintf(dst, cap, "nothing");
        break;
    }
}

/* "1440m (a day)": a duration limit as the error messages show it. */
static void describe_max_duration(char *dst, size_t cap, uint64_t ms)
{
    const char *gloss = ms == MAX_DURATION_MS ? " (a day)" : ms == 3600000 ? " (an hour)" : "";
    if (ms != 0 && ms % 60000 == 0)
        snprintf(dst, cap, "%llum%s", (unsigned long long)(ms / 60000), gloss);
    else if (ms != 0 && ms % 1000 == 0)
        snprintf(dst, cap, "%llus%s", (unsigned long long)(ms / 1000), gloss);
    else
        snprintf(dst, cap, "%llums%s", (unsigned long long)ms, gloss);
}

static void expected_what(char *dst, size_t cap, const key_def_t *key)
{
    char names[256];
    switch (key->kind) {
    case KEY_SECTION:
    case KEY_PER_METHOD:
        snprintf(dst, cap, "a mapping");
        break;
    case KEY_STRING:
        snprintf(dst, cap, "a string");
        break;
    case KEY_NAME:
        snprintf(dst, cap, "a non-empty string");
        break;
    case KEY_HOSTPORT:
        snprintf(dst, cap,
                 "host:port with port 1..65535 and host an IPv4 address, [IPv6 address], localhost, * or "
                 "empty");
        break;
    case KEY_HOSTPORT_OPT:
        snprintf(dst, cap,
                 "\"\" (off) or host:port with port 1..65535 and host an IPv4 address, [IPv6 address], localhost, "
                 "* or empty");
        break;
    case KEY_UINT:
        snprintf(dst, cap, "an integer from %llu to %llu", (unsigned long long)key->min, (unsigned long long)key->max);
        break;
    case KEY_INT:
        snprintf(dst, cap, "an integer from %lld to %lld", (long long)(int64_t)key->min, (long long)(int64_t)key->max);
        break;
    case KEY_RATIO:
        snprintf(dst, cap, "a number from 0.0 to 1.0 such as 0.001 or 0.25 (decimal notation; not NaN or infinity)");
        break;
    case KEY_ENUM:
        list_names(names, sizeof(names), key->names, key->nnames);
        snprintf(dst, cap, "one of %s", names);
        break;
    case KEY_BOOL:
        snprintf(dst, cap, "a boolean (true/false, yes/no, on/off)");
        break;
    case KEY_DURATION:
        describe_max_duration(names, sizeof(names), key->max);
        snprintf(dst, cap, "a duration up to %s such as 250ms, 10s or 2m (a bare number is milliseconds)", names);
        break;
    }
}

static int type_error(apply_ctx_t *ctx, const key_def_t *key, const yaml_node_t *node)
{
    char want[512], got[128];
    expected_what(want, sizeof(want), key);
    describe_node(got, sizeof(got), node);
    node_error(ctx, node, "expected %s, got %s", want, got);
    return -1;
}

static int apply_node(apply_ctx_t *ctx, const key_def_t *key, char *base, yaml_node_t *node);

/* Every key of a mapping must be a scalar and appear once; libyaml itself accepts duplicates silently. */
static int check_mapping_key(apply_ctx_t *ctx, yaml_node_t *mapping, yaml_node_pair_t *pair, yaml_node_t **key_out)
{
    yaml_node_t *k = yaml_document_get_node(ctx->doc, pair->key);
    if (k->type != YAML_SCALAR_NODE) {
        char got[128];
        describe_node(got, sizeof(got), k);
        node_error(ctx, k, "expected a string as key, got %s", got);
        return -1;
    }
    for (yaml_node_pair_t *p = mapping->data.mapping.pairs.start; p < pair; p++) {
        yaml_node_t *earlier = yaml_document_get_node(ctx->doc, p->key);
        if (earlier->type == YAML_SCALAR_NODE &&
            strcmp((const char *)earlier->data.scalar.value, (const char *)k->data.scalar.value) == 0) {
            char q[128];
            quote_value(q, sizeof(q), (const char *)k->data.scalar.value);
            path_push(ctx, (const char *)k->data.scalar.value);
            node_error(ctx, k, "duplicate key %s (first at line %zu)", q, earlier->start_mark.line + 1);
            return -1;
        }
    }
    *key_out = k;
    return 0;
}

static const key_def_t *find_child(const key_def_t *section, const char *name)
{
    const key_def_t *child = section->children;
    while (child->name != NULL && strcmp(child->name, name) != 0)
        child++;
    return child;
}

/*
 * Two passes: every key but per_method dictionaries first, then those. A work.per_method entry
 * starts from work.defaults, so it must see the defaults of the same mapping wherever they are
 * written in it, before or after per_method.
 */
static int apply_section(apply_ctx_t *ctx, const key_def_t *section, char *base, yaml_node_t *node)
{
    if (is_null(node))
        return 0;
    if (node->type != YAML_MAPPING_NODE)
        return type_error(ctx, section, node);
    base += section->offset;
    for (int pass = 0; pass < 2; pass++) {
        for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
            yaml_node_t *k = yaml_document_get_node(ctx->doc, pair->key);
            if (pass == 0 && check_mapping_key(ctx, node, pair, &k) != 0)
                return -1;
            const char *name = (const char *)k->data.scalar.value;
            const key_def_t *child = find_child(section, name);
            if (child->name != NULL && (child->kind == KEY_PER_METHOD) != (pass == 1))
                continue;
            size_t saved = path_push(ctx, name);
            if (child->name == NULL) {
                char keys[512], q[128];
                list_keys(keys, sizeof(keys), section->children);
                quote_value(q, sizeof(q), name);
                node_error(ctx, k, "unknown key %s; valid keys %s%s: %s", q, saved ? "of " : "at the top level",
                           saved ? section->name : "", keys);
                return -1;
            }
            yaml_node_t *value = yaml_document_get_node(ctx->doc, pair->value);
            /* a value where it is written; a mapping where its key is (its own keys note themselves) */
            note_origin(ctx, value->type == YAML_SCALAR_NODE ? value : k);
            if (apply_node(ctx, child, base, value) != 0)
                return -1;
            path_pop(ctx, saved);
        }
    }
    return 0;
}

/* per_method dictionaries, through their method_map_t */

static void *map_items(const echod_config_t *cfg, const method_map_t *map)
{
    void *items;
    memcpy(&items, (const char *)cfg + map->items, sizeof(items));
    return items;
}

static size_t *map_count(echod_config_t *cfg, const method_map_t *map)
{
    return (size_t *)((char *)cfg + map->count);
}

static size_t map_count_of(const echod_config_t *cfg, const method_map_t *map)
{
    size_t n;
    memcpy(&n, (const char *)cfg + map->count, sizeof(n));
    return n;
}

/* Element i of a dictionary; its first member is the `char *method`. */
static char *map_item(const echod_config_t *cfg, const method_map_t *map, size_t i)
{
    return (char *)map_items(cfg, map) + i * map->item_size;
}

static const char *item_method(const char *item)
{
    const char *method;
    memcpy(&method, item, sizeof(method));
    return method;
}

static char *find_entry(echod_config_t *cfg, const method_map_t *map, const char *method)
{
    for (size_t i = 0; i < map_count_of(cfg, map); i++)
        if (strcmp(item_method(map_item(cfg, map, i)), method) == 0)
            return map_item(cfg, map, i);
    return NULL;
}

/* Writes the default of every key in `keys` (and in their sections) into the struct at base. */
static void init_keys(const key_def_t *keys, char *base)
{
    for (const key_def_t *k = keys; k->name != NULL; k++) {
        void *field = base + k->offset;
        switch (k->kind) {
        case KEY_SECTION:
            init_keys(k->children, base + k->offset);
            break;
        case KEY_PER_METHOD:
            break; /* no entries: the struct starts zeroed */
        case KEY_STRING:
        case KEY_NAME:
        case KEY_HOSTPORT:
        case KEY_HOSTPORT_OPT:
            set_string(field, k->def.s);
            break;
        case KEY_UINT:
        case KEY_ENUM:
        case KEY_DURATION:
            store_uint(field, k->size, k->def.u);
            break;
        case KEY_INT:
            store_int(field, k->size, k->def.i);
            break;
        case KEY_RATIO:
            memcpy(field, &k->def.ratio, sizeof(k->def.ratio));
            break;
        case KEY_BOOL:
            memcpy(field, &k->def.b, sizeof(k->def.b));
            break;
        }
    }
}

/* dispatch.per_method entries start from the built-in executor defaults, not from `executor`. */
static void init_exec_entry(const echod_config_t *cfg, void *value)
{
    (void)cfg;
    init_keys(exec_keys, value);
}

/* work.per_method entries start from work.defaults as they are when the entry is read. */
static void init_work_entry(const echod_config_t *cfg, void *value)
{
    memcpy(value, &cfg->work.defaults, sizeof(cfg->work.defaults));
}

/* A method's entry, created with the map's starting values if it does not exist yet. */
static char *get_entry(echod_config_t *cfg, const method_map_t *map, const char *method)
{
    char *item = find_entry(cfg, map, method);
    if (item != NULL)
        return item;
    size_t *n = map_count(cfg, map);
    void *items = xrealloc(map_items(cfg, map), (*n + 1) * map->item_size);
    memcpy((char *)cfg + map->items, &items, sizeof(items));
    item = (char *)items + (*n)++ * map->item_size;
    memset(item, 0, map->item_size);
    char *copy = xstrdup(method);
    memcpy(item, &copy, sizeof(copy));
    map->init_entry(cfg, item + map->value);
    return item;
}

static void clear_entries(echod_config_t *cfg, const method_map_t *map)
{
    for (size_t i = 0; i < map_count_of(cfg, map); i++)
        free((char *)item_method(map_item(cfg, map, i)));
    free(map_items(cfg, map));
    void *none = NULL;
    memcpy((char *)cfg + map->items, &none, sizeof(none));
    *map_count(cfg, map) = 0;
}

/* After a struct copy of src into dst: gives dst its own array and method strings. */
static void copy_entries(echod_config_t *dst, const echod_config_t *src, const method_map_t *map)
{
    size_t n = map_count_of(src, map);
    void *items = NULL;
    if (n != 0) {
        items = xrealloc(NULL, n * map->item_size);
        memcpy(items, map_items(src, map), n * map->item_size);
        for (size_t i = 0; i < n; i++) {
            char *item = (char *)items + i * map->item_size;
            char *copy = xstrdup(item_method(item));
            memcpy(item, &copy, sizeof(copy));
        }
    }
    memcpy((char *)dst + map->items, &items, sizeof(items));
}

static int check_method_name(apply_ctx_t *ctx, const yaml_node_t *at, const char *method)
{
    if (valid_method_path(method))
        return 0;
    char q[128];
    quote_value(q, sizeof(q), method);
    node_error(ctx, at, "expected a method path \"/package.Service/Method\" as key, got %s", q);
    return -1;
}

/*
 * Assigning an entry replaces it: fields it does not name take the map's starting values (the
 * executor defaults, or work.defaults), not whatever an earlier file or --set left in the entry,
 * so an entry means the same wherever it appears.
 */
static int apply_method_entry(apply_ctx_t *ctx, const method_map_t *map, const char *method, yaml_node_t *node)
{
    char *item = get_entry(ctx->cfg, map, method);
    map->init_entry(ctx->cfg, item + map->value);
    return apply_section(ctx, map->entry, item + map->value, node);
}

/* The dictionary is a value, not a section: assigning it replaces every entry, so `{}` clears it. */
static int apply_per_method(apply_ctx_t *ctx, const key_def_t *key, yaml_node_t *node)
{
    if (!is_null(node) && node->type != YAML_MAPPING_NODE)
        return type_error(ctx, key, node);
    clear_entries(ctx->cfg, key->map);
    if (is_null(node))
        return 0;
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *k;
        if (check_mapping_key(ctx, node, pair, &k) != 0)
            return -1;
        const char *method = (const char *)k->data.scalar.value;
        size_t saved = path_push(ctx, method);
        note_origin(ctx, k);
        if (check_method_name(ctx, k, method) != 0 ||
            apply_method_entry(ctx, key->map, method, yaml_document_get_node(ctx->doc, pair->value)) != 0)
            return -1;
        path_pop(ctx, saved);
    }
    return 0;
}

static int apply_node(apply_ctx_t *ctx, const key_def_t *key, char *base, yaml_node_t *node)
{
    if (key->kind == KEY_SECTION)
        return apply_section(ctx, key, base, node);
    if (key->kind == KEY_PER_METHOD)
        return apply_per_method(ctx, key, node);
    if (node->type != YAML_SCALAR_NODE)
        return type_error(ctx, key, node);

    const char *v = (const char *)node->data.scalar.value;
    void *field = base + key->offset;
    uint64_t u;
    int64_t i;
    double d;
    bool b;
    switch (key->kind) {
    case KEY_STRING:
        set_string(field, is_null(node) ? "" : v);
        return 0;
    case KEY_NAME:
        if (is_null(node) || v[0] == '\0')
            return type_error(ctx, key, node);
        set_string(field, v);
        return 0;
    case KEY_HOSTPORT:
        if (echod_config_parse_hostport(v, NULL, 0, NULL) != 0)
            return type_error(ctx, key, node);
        set_string(field, v);
        return 0;
    case KEY_HOSTPORT_OPT:
        if (is_null(node) || v[0] == '\0') {
            set_string(field, "");
            return 0;
        }
        if (echod_config_parse_hostport(v, NULL, 0, NULL) != 0)
            return type_error(ctx, key, node);
        set_string(field, v);
        return 0;
    case KEY_UINT:
        if (parse_uint(v, &u) != 0 || u < key->min || u > key->max)
            return type_error(ctx, key, node);
        store_uint(field, key->size, u);
        return 0;
    case KEY_INT:
        if (parse_int(v, &i) != 0 || i < (int64_t)key->min || i > (int64_t)key->max)
            return type_error(ctx, key, node);
        store_int(field, key->size, i);
        return 0;
    case KEY_RATIO:
        if (parse_ratio(v, &d) != 0)
            return type_error(ctx, key, node);
        memcpy(field, &d, sizeof(d));
        return 0;
    case KEY_ENUM: {
        unsigned e;
        if (parse_enum(key->names, key->nnames, v, strlen(v), &e) != 0)
            return type_error(ctx, key, node);
        store_uint(field, key->size, e);
        return 0;
    }
    case KEY_BOOL:
        if (parse_bool(v, &b) != 0)
            return type_error(ctx, key, node);
        memcpy(field, &b, sizeof(b));
        return 0;
    case KEY_DURATION:
        if (echod_config_parse_duration(v, &u) != 0 || u > key->max)
            return type_error(ctx, key, node);
        store_uint(field, key->size, u);
        return 0;
    default:
        return -1;
    }
}

/* Copying, so that a failed load or --set changes nothing */

static void copy_config(echod_config_t *dst, const echod_config_t *src)
{
    *dst = *src;
    dst->arm = xstrdup(src->arm);
    dst->listen.grpc = xstrdup(src->listen.grpc);
    dst->listen.admin = xstrdup(src->listen.admin);
    dst->listen.rest = xstrdup(src->listen.rest);
    dst->tls.cert = xstrdup(src->tls.cert);
    dst->tls.key = xstrdup(src->tls.key);
    for (size_t m = 0; m < NMAPS; m++)
        copy_entries(dst, src, all_maps[m]);
    copy_origins(dst, src);
}

static void commit_config(echod_config_t *cfg, echod_config_t *work)
{
    echod_config_free(cfg);
    *cfg = *work;
    /* Whatever was digested before no longer describes this config; finish computes it again. */
    cfg->sha256[0] = '\0';
}

/* Public API */

void echod_config_init(echod_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    init_keys(top_keys, (char *)cfg);
}

void echod_config_free(echod_config_t *cfg)
{
    free(cfg->arm);
    free(cfg->listen.grpc);
    free(cfg->listen.admin);
    free(cfg->listen.rest);
    free(cfg->tls.cert);
    free(cfg->tls.key);
    for (size_t m = 0; m < NMAPS; m++)
        clear_entries(cfg, all_maps[m]);
    free_origins(cfg);
    memset(cfg, 0, sizeof(*cfg));
}

/* libyaml reports reader errors (bad encoding) by byte offset only; turn that into line:col. */
static void offset_to_mark(const char *buf, size_t len, size_t offset, size_t *line, size_t *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < offset && i < len; i++) {
        if (buf[i] == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

static void yaml_error(const yaml_parser_t *parser, const char *where, const char *buf, size_t len, char *err,
                       size_t errlen)
{
    size_t line = parser->problem_mark.line + 1, col = parser->problem_mark.column + 1;
    const char *problem = parser->problem != NULL ? parser->problem : "unknown error";
    if (parser->error == YAML_READER_ERROR)
        offset_to_mark(buf, len, parser->problem_offset, &line, &col);
    if (parser->context != NULL)
        echod_set_err(err, errlen, "%s:%zu:%zu: YAML syntax error: %s (%s at line %zu, column %zu)", where, line, col,
                      problem, parser->context, parser->context_mark.line + 1, parser->context_mark.column + 1);
    else
        echod_set_err(err, errlen, "%s:%zu:%zu: YAML syntax error: %s", where, line, col, problem);
}

static int read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        echod_set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    char *data = xrealloc(NULL, cap);
    for (;;) {
        size_t got = fread(data + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
        if (n == cap)
            data = xrealloc(data, cap *= 2);
    }
    /* fopen succeeds on a directory; the read is what fails, with EISDIR. */
    if (ferror(f)) {
        int e = errno;
        fclose(f);
        free(data);
        echod_set_err(err, errlen, "cannot read %s: %s", path, strerror(e));
        return -1;
    }
    fclose(f);
    *buf = data;
    *len = n;
    return 0;
}

int echod_config_load_file(echod_config_t *cfg, const char *path, char *err, size_t errlen)
{
    char *buf;
    size_t len;
    if (read_file(path, &buf, &len, err, errlen) != 0)
        return -1;

    yaml_parser_t parser;
    yaml_document_t doc;
    int ret = -1, have_doc = 0;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_error(&parser, path, buf, len, err, errlen);
        goto out;
    }
    have_doc = 1;

    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root != NULL) {
        /* A second document would be ignored silently by a single load; make it loud instead. */
        yaml_document_t extra;
        if (!yaml_parser_load(&parser, &extra)) {
            yaml_error(&parser, path, buf, len, err, errlen);
            goto out;
        }
        yaml_node_t *extra_root = yaml_document_get_root_node(&extra);
        if (extra_root != NULL) {
            echod_set_err(err, errlen, "%s:%zu:%zu: only one YAML document is allowed", path, extra.start_mark.line + 1,
                          extra.start_mark.column + 1);
            yaml_document_delete(&extra);
            goto out;
        }
        yaml_document_delete(&extra);

        echod_config_t work;
        copy_config(&work, cfg);
        apply_ctx_t ctx = {.doc = &doc, .file = path, .cfg = &work, .err = err, .errlen = errlen};
        if (apply_node(&ctx, &root_key, (char *)&work, root) != 0) {
            echod_config_free(&work);
            goto out;
        }
        commit_config(cfg, &work);
    } else {
        cfg->sha256[0] = '\0';
    }
    snprintf(cfg->source, sizeof(cfg->source), "%s", path);
    ret = 0;

out:
    if (have_doc)
        yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    free(buf);
    return ret;
}

/*
 * Finds the key a --set path names. Segments are split on '.', except below per_method: a
 * method path has dots of its own ("/grpc.examples.echo.Echo/UnaryEcho"), and gRPC method
 * names have none, so the method ends at the first '.' after its second '/', or at the end.
 */
typedef struct {
    const key_def_t *key;
    char *base;
    const method_map_t *map; /* set with method */
    char method[256];        /* set when the target is a per_method entry or a field of one */
} set_target_t;

static int resolve_set_path(apply_ctx_t *ctx, const char *path, set_target_t *t)
{
    const key_def_t *section = &root_key;
    char *base = (char *)ctx->cfg;
    const char *p = path;
    t->map = NULL;
    t->method[0] = '\0';

    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot != NULL ? (size_t)(dot - p) : strlen(p);
        const key_def_t *child = section->children;
        while (child->name != NULL && (strlen(child->name) != n || strncmp(child->name, p, n) != 0))
            child++;
        if (child->name == NULL) {
            char keys[512], seg[128], q[160];
            list_keys(keys, sizeof(keys), section->children);
            snprintf(seg, sizeof(seg), "%.*s", (int)n, p);
            quote_value(q, sizeof(q), seg);
            echod_set_err(ctx->err, ctx->errlen, "--set %s: unknown key %s; valid keys %s%s: %s", path, q,
                          section == &root_key ? "at the top level" : "of ", section == &root_key ? "" : section->name,
                          keys);
            return -1;
        }
        if (dot == NULL) {
            t->key = child;
            t->base = base;
            return 0;
        }
        p = dot + 1;
        if (child->kind == KEY_SECTION) {
            section = child;
            base += child->offset;
            continue;
        }
        if (child->kind != KEY_PER_METHOD) {
            echod_set_err(ctx->err, ctx->errlen, "--set %s: %.*s is not a mapping, it takes a value itself", path,
                          (int)(p - 1 - path), path);
            return -1;
        }
        const char *second = p[0] == '/' ? strchr(p + 1, '/') : NULL;
        const char *field = second != NULL ? strchr(second, '.') : p[0] != '/' ? strchr(p, '.') : NULL;
        size_t mlen = field != NULL ? (size_t)(field - p) : strlen(p);
        snprintf(t->method, sizeof(t->method), "%.*s", (int)mlen, p);
        if (!valid_method_path(t->method) || mlen >= sizeof(t->method)) {
            char q[160];
            quote_value(q, sizeof(q), t->method);
            echod_set_err(ctx->err, ctx->errlen,
                          "--set %s: expected a method path \"/package.Service/Method\" after %s., got %s", path,
                          child->map->path, q);
            return -1;
        }
        t->map = child->map;
        if (field == NULL) {
            t->key = child->map->entry;
            t->base = NULL;
            return 0;
        }
        section = child->map->entry;
        base = NULL; /* the entry may not exist yet; the caller creates it once the value is known to be good */
        p = field + 1;
    }
}

int echod_config_set(echod_config_t *cfg, const char *assignment, char *err, size_t errlen)
{
    const char *eq = strchr(assignment, '=');
    if (eq == NULL) {
        echod_set_err(err, errlen, "--set %s: expected key.path=value", assignment);
        return -1;
    }
    char path[512];
    if ((size_t)(eq - assignment) >= sizeof(path) || eq == assignment) {
        echod_set_err(err, errlen, "--set %s: expected key.path=value with a key path of 1 to %zu characters",
                      assignment, sizeof(path) - 1);
        return -1;
    }
    memcpy(path, assignment, (size_t)(eq - assignment));
    path[eq - assignment] = '\0';
    const char *value = eq + 1;

    echod_config_t work;
    copy_config(&work, cfg);
    apply_ctx_t ctx = {.doc = NULL, .file = NULL, .cfg = &work, .err = err, .errlen = errlen};
    snprintf(ctx.path, sizeof(ctx.path), "%s", path);
    set_target_t t;
    if (resolve_set_path(&ctx, path, &t) != 0) {
        echod_config_free(&work);
        return -1;
    }

    /* The value is YAML, so `--set x=` is null, `--set 'x="a b"'` is a string and a flow mapping works too. */
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)value, strlen(value));
    int ok = yaml_parser_load(&parser, &doc);
    if (!ok) {
        char q[160];
        quote_value(q, sizeof(q), value);
        echod_set_err(err, errlen,
                      "--set %s: cannot parse %s as a YAML value: %s (put a string that starts with [ { * & ! | > %% @ "
                      "or ` in double quotes)",
                      path, q, parser.problem != NULL ? parser.problem : "unknown error");
        yaml_parser_delete(&parser);
        echod_config_free(&work);
        return -1;
    }
    yaml_parser_delete(&parser);

    /* An empty value has no root node; treat it as the null it means (`key:` in a file). */
    yaml_node_t *node = yaml_document_get_root_node(&doc);
    if (node == NULL) {
        int id = yaml_document_add_scalar(&doc, NULL, (yaml_char_t *)"", 0, YAML_PLAIN_SCALAR_STYLE);
        node = id != 0 ? yaml_document_get_node(&doc, id) : NULL;
    }
    ctx.doc = &doc;
    int ret = -1;
    if (node != NULL)
        note_origin(&ctx, node);
    if (node == NULL) {
        echod_set_err(err, errlen, "--set %s: out of memory", path);
    } else if (t.map != NULL && t.key == t.map->entry) {
        ret = apply_method_entry(&ctx, t.map, t.method, node);
    } else if (t.map != NULL) {
        /* Created only now, so a bad field name above never leaves an empty entry behind. */
        char *item = get_entry(&work, t.map, t.method);
        ret = apply_node(&ctx, t.key, item + t.map->value, node);
    } else {
        ret = apply_node(&ctx, t.key, t.base, node);
    }
    yaml_document_delete(&doc);
    if (ret != 0) {
        echod_config_free(&work);
        return -1;
    }
    commit_config(cfg, &work);
    return 0;
}

/* Dump */

static void dump_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* Whole seconds when exact, so the defaults read as they do in config/echod.yaml. */
static void dump_duration(FILE *out, uint64_t ms)
{
    if (ms != 0 && ms % 1000 == 0)
        fprintf(out, "%llus", (unsigned long long)(ms / 1000));
    else
        fprintf(out, "%llums", (unsigned long long)ms);
}

static void dump_keys(FILE *out, const key_def_t *keys, const char *base, const echod_config_t *cfg, int indent)
{
    for (const key_def_t *k = keys; k->name != NULL; k++) {
        const void *field = base + k->offset;
        fprintf(out, "%*s%s:", indent, "", k->name);
        switch (k->kind) {
        case KEY_SECTION:
            fputc('\n', out);
            dump_keys(out, k->children, base + k->offset, cfg, indent + 2);
            continue;
        case KEY_PER_METHOD:
            if (map_count_of(cfg, k->map) == 0) {
                fputs(" {}\n", out);
                continue;
            }
            fputc('\n', out);
            for (size_t i = 0; i < map_count_of(cfg, k->map); i++) {
                const char *item = map_item(cfg, k->map, i);
                fprintf(out, "%*s", indent + 2, "");
                dump_string(out, item_method(item));
                fputs(":\n", out);
                dump_keys(out, k->map->entry->children, item + k->map->value, cfg, indent + 4);
            }
            continue;
        case KEY_STRING:
        case KEY_NAME:
        case KEY_HOSTPORT:
        case KEY_HOSTPORT_OPT: {
            const char *s;
            memcpy(&s, field, sizeof(s));
            fputc(' ', out);
            dump_string(out, s);
        } break;
        case KEY_UINT:
            fprintf(out, " %llu", (unsigned long long)load_uint(field, k->size));
            break;
        case KEY_INT:
            fprintf(out, " %lld", (long long)load_int(field, k->size));
            break;
        case KEY_RATIO: {
            double d;
            char buf[40];
            memcpy(&d, field, sizeof(d));
            format_ratio(buf, sizeof(buf), d);
            fprintf(out, " %s", buf);
        } break;
        case KEY_ENUM:
            fprintf(out, " %s", enum_name(k->names, k->nnames, (unsigned)load_uint(field, k->size)));
            break;
        case KEY_BOOL: {
            bool b;
            memcpy(&b, field, sizeof(b));
            fputs(b ? " true" : " false", out);
        } break;
        case KEY_DURATION:
            fputc(' ', out);
            dump_duration(out, load_uint(field, k->size));
            break;
        }
        fputc('\n', out);
    }
}

void echod_config_dump(const echod_config_t *cfg, FILE *out)
{
    dump_keys(out, top_keys, (const char *)cfg, cfg, 0);
}

/* Finish */

/* Items of either dictionary, by their leading method path. */
static int cmp_method(const void *a, const void *b)
{
    return strcmp(item_method(a), item_method(b));
}

static int digest_dump(echod_config_t *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL)
        return -1;
    echod_config_dump(cfg, mem);
    if (fclose(mem) != 0) {
        free(text);
        return -1;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    int ok = EVP_Digest(text, len, md, &mdlen, EVP_sha256(), NULL);
    free(text);
    if (!ok || mdlen != 32)
        return -1;
    for (unsigned i = 0; i < mdlen; i++)
        snprintf(cfg->sha256 + 2 * i, 3, "%02x", md[i]);
    return 0;
}

static int is_any_host(const char *host)
{
    return host[0] == '\0' || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0;
}

/* Two listeners collide on the same port when either binds every address or both bind the same one. */
static int listeners_overlap(const char *host_a, uint16_t port_a, const char *host_b, uint16_t port_b)
{
    return port_a == port_b && (is_any_host(host_a) || is_any_host(host_b) || strcmp(host_a, host_b) == 0);
}

/* echod_config_where of PATH.FIELD */
static const char *where_field(const echod_config_t *cfg, const char *path, const char *field, char *buf, size_t cap)
{
    char key[512];
    snprintf(key, sizeof(key), "%s.%s", path, field);
    return echod_config_where(cfg, key, buf, cap);
}

/* PATH.KEY, microseconds of CPU or sleep, against the cap CAP_KEY (in ms); an error names where it was written. */
static int check_us_cap(const echod_config_t *cfg, const char *path, const char *key, uint64_t us, const char *cap_key,
                        uint64_t cap_ms, char *err, size_t errlen)
{
    if (cap_ms >= UINT64_MAX / 1000 || us <= cap_ms * 1000)
        return 0;
    char cap[64], at[320];
    describe_max_duration(cap, sizeof(cap), cap_ms);
    echod_set_err(err, errlen, "%s: %s.%s: %llu us is more than %s allows (%s = %llu us); raise %s or lower the value",
                  where_field(cfg, path, key, at, sizeof(at)), path, key, (unsigned long long)us, cap_key, cap,
                  (unsigned long long)cap_ms * 1000, cap_key);
    return -1;
}

/*
 * One work entry (work.defaults or a per_method one) against the ranges and the caps of `work`.
 * The ranges were checked on the way in; they are checked again because a caller may have written
 * the struct directly.
 */
static int check_work(const echod_config_t *cfg, const char *path, const echod_work_t *w, char *err, size_t errlen)
{
    char at[320];
    if (w->response_bytes < -1 || w->response_bytes > (int64_t)cfg->work.max_response_bytes) {
        echod_set_err(err, errlen,
                      "%s: %s.response_bytes: %lld is outside -1..%u, where the top is work.max_response_bytes; raise "
                      "work.max_response_bytes or lower the value",
                      where_field(cfg, path, "response_bytes", at, sizeof(at)), path, (long long)w->response_bytes,
                      cfg->work.max_response_bytes);
        return -1;
    }
    if (check_us_cap(cfg, path, "cpu_us", w->cpu_us, "work.max_cpu", cfg->work.max_cpu_ms, err, errlen) != 0 ||
        check_us_cap(cfg, path, "cpu_stall_us", w->cpu_dist.stall_us, "work.max_cpu", cfg->work.max_cpu_ms, err,
                     errlen) != 0 ||
        check_us_cap(cfg, path, "sleep_us", w->sleep_us, "work.max_sleep", cfg->work.max_sleep_ms, err, errlen) != 0 ||
        check_us_cap(cfg, path, "sleep_stall_us", w->sleep_dist.stall_us, "work.max_sleep", cfg->work.max_sleep_ms, err,
                     errlen) != 0)
        return -1;
    if (w->status > MAX_STATUS) {
        echod_set_err(err, errlen, "%s: %s.status: expected a gRPC status code from 0 to %d, got %u",
                      where_field(cfg, path, "status", at, sizeof(at)), path, MAX_STATUS, w->status);
        return -1;
    }
    if (!(w->error_rate >= 0.0 && w->error_rate <= 1.0)) {
        echod_set_err(err, errlen, "%s: %s.error_rate: expected a number from 0.0 to 1.0, got %g",
                      where_field(cfg, path, "error_rate", at, sizeof(at)), path, w->error_rate);
        return -1;
    }
    return 0;
}

/* Every unit cost of work.model is CPU a call burns: each is capped by work.max_cpu. */
static int check_model(const echod_config_t *cfg, char *err, size_t errlen)
{
    const echod_work_model_t *m = &cfg->work.model;
    const struct {
        const char *key;
        uint32_t us;
    } units[] = {{"call_cpu_us", m->call_cpu_us},
                 {"step_cpu_us", m->step_cpu_us},
                 {"handoff_cpu_us", m->handoff_cpu_us},
                 {"handoff_wake_cpu_us", m->handoff_wake_cpu_us},
                 {"handoff_wake_loop_cpu_us", m->handoff_wake_loop_cpu_us},
                 {"message_cpu_us", m->message_cpu_us},
                 {"wakeup_cpu_us", m->wakeup_cpu_us},
                 {"wakeup_short_cpu_us", m->wakeup_short_cpu_us}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (check_us_cap(cfg, "work.model", units[i].key, units[i].us, "work.max_cpu", cfg->work.max_cpu_ms, err,
                         errlen) != 0)
            return -1;
    return 0;
}

int echod_config_finish(echod_config_t *cfg, char *err, size_t errlen)
{
    const char *src = cfg->source[0] != '\0' ? cfg->source : "(built-in defaults)";
    char at[320]; /* where the key an error names got its value: FILE:LINE:COL, --set or the file */

    if ((cfg->tls.cert[0] == '\0') != (cfg->tls.key[0] == '\0')) {
        echod_set_err(err, errlen,
                      "%s: tls.cert and tls.key: set both to serve TLS, or leave both empty for plaintext h2c "
                      "(only tls.%s is set)",
                      where_either(cfg, "tls.cert", "tls.key", at, sizeof(at)),
                      cfg->tls.cert[0] != '\0' ? "cert" : "key");
        return -1;
    }

    /* Checked again here because a caller may have written the struct directly. */
    char grpc_host[64], admin_host[64];
    uint16_t grpc_port, admin_port;
    static const char hostport_rule[] =
        "expected host:port with port 1..65535 and host an IPv4 address, [IPv6 address], localhost, * or empty";
    if (echod_config_parse_hostport(cfg->listen.grpc, grpc_host, sizeof(grpc_host), &grpc_port) != 0) {
        char q[128];
        quote_value(q, sizeof(q), cfg->listen.grpc);
        echod_set_err(err, errlen, "%s: listen.grpc: %s, got %s",
                      echod_config_where(cfg, "listen.grpc", at, sizeof(at)), hostport_rule, q);
        return -1;
    }
    if (echod_config_parse_hostport(cfg->listen.admin, admin_host, sizeof(admin_host), &admin_port) != 0) {
        char q[128];
        quote_value(q, sizeof(q), cfg->listen.admin);
        echod_set_err(err, errlen, "%s: listen.admin: %s, got %s",
                      echod_config_where(cfg, "listen.admin", at, sizeof(at)), hostport_rule, q);
        return -1;
    }
    if (listeners_overlap(grpc_host, grpc_port, admin_host, admin_port)) {
        echod_set_err(err, errlen,
                      "%s: listen.grpc and listen.admin: both bind port %u on overlapping addresses (\"%s\" and "
                      "\"%s\"); give the admin listener its own port",
                      where_either(cfg, "listen.grpc", "listen.admin", at, sizeof(at)), grpc_port, cfg->listen.grpc,
                      cfg->listen.admin);
        return -1;
    }
    if (cfg->listen.rest[0] != '\0') {
        char rest_host[64];
        uint16_t rest_port;
        if (echod_config_parse_hostport(cfg->listen.rest, rest_host, sizeof(rest_host), &rest_port) != 0) {
            char q[128];
            quote_value(q, sizeof(q), cfg->listen.rest);
            echod_set_err(err, errlen, "%s: listen.rest: %s, or \"\" for no REST listener, got %s",
                          echod_config_where(cfg, "listen.rest", at, sizeof(at)), hostport_rule, q);
            return -1;
        }
        const struct {
            const char *name, *key, *addr, *host;
            uint16_t port;
        } others[] = {{"grpc", "listen.grpc", cfg->listen.grpc, grpc_host, grpc_port},
                      {"admin", "listen.admin", cfg->listen.admin, admin_host, admin_port}};
        for (size_t i = 0; i < COUNT(others); i++) {
            if (listeners_overlap(rest_host, rest_port, others[i].host, others[i].port)) {
                echod_set_err(err, errlen,
                              "%s: listen.rest and listen.%s: both bind port %u on overlapping addresses (\"%s\" and "
                              "\"%s\"); give the REST listener its own port",
                              where_either(cfg, "listen.rest", others[i].key, at, sizeof(at)), others[i].name,
                              rest_port, cfg->listen.rest, others[i].addr);
                return -1;
            }
        }
    }

    if (cfg->dispatch.merge_lookup_and_start && cfg->dispatch.per_method_count != 0) {
        echod_set_err(
            err, errlen,
            "%s: dispatch.merge_lookup_and_start and dispatch.per_method (%zu entr%s, first \"%s\") cannot be "
            "combined: method_lookup and start_call are separate steps so that method_lookup can switch the call "
            "to its per-method executor before start_call runs there; merged, there is no point at which to "
            "switch. Drop one of the two",
            where_either(cfg, "dispatch.merge_lookup_and_start", "dispatch.per_method", at, sizeof(at)),
            cfg->dispatch.per_method_count, cfg->dispatch.per_method_count == 1 ? "y" : "ies",
            cfg->dispatch.per_method[0].method);
        return -1;
    }
    for (size_t m = 0; m < NMAPS; m++) {
        const method_map_t *map = all_maps[m];
        for (size_t i = 0; i < map_count_of(cfg, map); i++) {
            const char *method = item_method(map_item(cfg, map, i));
            if (!valid_method_path(method)) {
                char q[128];
                quote_value(q, sizeof(q), method);
                echod_set_err(err, errlen, "%s: %s: expected a method path \"/package.Service/Method\" as key, got %s",
                              where_field(cfg, map->path, method, at, sizeof(at)), map->path, q);
                return -1;
            }
        }
    }

    if (check_work(cfg, "work.defaults", &cfg->work.defaults, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < cfg->work.per_method_count; i++) {
        char path[320];
        snprintf(path, sizeof(path), "work.per_method.%s", cfg->work.per_method[i].method);
        if (check_work(cfg, path, &cfg->work.per_method[i].work, err, errlen) != 0)
            return -1;
    }
    if (check_model(cfg, err, errlen) != 0)
        return -1;

    /* Sorted so the digest does not depend on the order entries were given in, and lookups can bsearch. */
    for (size_t m = 0; m < NMAPS; m++)
        if (map_count_of(cfg, all_maps[m]) > 1)
            qsort(map_items(cfg, all_maps[m]), map_count_of(cfg, all_maps[m]), all_maps[m]->item_size, cmp_method);

    if (digest_dump(cfg) != 0) {
        echod_set_err(err, errlen, "%s: cannot compute the config digest", src);
        return -1;
    }
    return 0;
}

const echod_exec_config_t *echod_config_method_exec(const echod_config_t *cfg, const char *method)
{
    echod_per_method_t keyv = {.method = (char *)method};
    const echod_per_method_t *pm;
    if (cfg->dispatch.per_method_count == 0)
        return NULL;
    pm = bsearch(&keyv, cfg->dispatch.per_method, cfg->dispatch.per_method_count, sizeof(*pm), cmp_method);
    return pm != NULL ? &pm->exec : NULL;
}

const echod_work_t *echod_config_method_work(const echod_config_t *cfg, const char *method)
{
    echod_method_work_t keyv = {.method = (char *)method};
    const echod_method_work_t *mw = NULL;
    if (cfg->work.per_method_count != 0)
        mw = bsearch(&keyv, cfg->work.per_method, cfg->work.per_method_count, sizeof(*mw), cmp_method);
    return mw != NULL ? &mw->work : &cfg->work.defaults;
}

const char *echod_exec_mode_name(echod_exec_mode_t mode)
{
    return enum_name(exec_mode_names, COUNT(exec_mode_names), (unsigned)mode);
}

const char *echod_flush_name(echod_flush_t flush)
{
    return enum_name(flush_names, COUNT(flush_names), (unsigned)flush);
}

const char *echod_read_batch_name(echod_read_batch_t b)
{
    return enum_name(read_batch_names, COUNT(read_batch_names), (unsigned)b);
}

const char *echod_serialize_name(echod_serialize_t s)
{
    return enum_name(serialize_names, COUNT(serialize_names), (unsigned)s);
}

const char *echod_sched_policy_name(echod_sched_policy_t p)
{
    return enum_name(sched_policy_names, COUNT(sched_policy_names), (unsigned)p);
}

const char *echod_dist_name(echod_dist_kind_t kind)
{
    return enum_name(dist_names, COUNT(dist_names), (unsigned)kind);
}

int echod_dist_parse(const char *s, size_t len, echod_dist_kind_t *kind)
{
    unsigned v;
    if (parse_enum(dist_names, COUNT(dist_names), s, len, &v) != 0)
        return -1;
    *kind = (echod_dist_kind_t)v;
    return 0;
}

const char *echod_log_level_name(echod_log_level_t level)
{
    return enum_name(log_level_names, COUNT(log_level_names), (unsigned)level);
}

const char *echod_log_format_name(echod_log_format_t format)
{
    return enum_name(log_format_names, COUNT(log_format_names), (unsigned)format);
}
