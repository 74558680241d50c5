/*
 * Internal to daemon/metrics: the exposition as data.
 *
 * A family is described once, in a table: its name, type and help, what it has series for (the
 * process, or each registered executor, method or loop, whose labels lead), up to two enum labels
 * (each an enum's names, kept beside the enum), and where its values live: a field of the
 * counters (echod_metrics_t, summed over the shards), or a field of what the scrape read besides
 * them (echod_metrics__sample_t: the process, the cgroup, the admin state, the executors'
 * gauges). render.c walks the tables in order and writes Prometheus text; families.c holds the
 * serving tables and the start-up registration, process.c the process and cgroup collector (both
 * written in metrics/table.h's shorthand).
 * A family no table can say (an info family's labels, one computed series) has a `series`
 * function instead, which still takes its name from the table.
 *
 * Threading: the tables are constant; a scrape's render state is its own (any thread).
 */
#ifndef ECHOD_METRICS_INTERNAL_H
#define ECHOD_METRICS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "admin/stage.h"
#include "config/config.h"
#include "dispatch/exec.h"
#include "metrics/metrics.h"
#include "util/cgroup.h"

typedef enum { ECHOD_METRICS__COUNTER = 0, ECHOD_METRICS__GAUGE, ECHOD_METRICS__HISTOGRAM } echod_metrics__type_t;

/* What a family has series for. */
typedef enum {
    ECHOD_METRICS__PROCESS = 0, /* the process */
    ECHOD_METRICS__EACH_EXEC,   /* each registered executor: executor="name" */
    ECHOD_METRICS__EACH_METHOD, /* each registered method: grpc_type, grpc_service, grpc_method */
    ECHOD_METRICS__EACH_LOOP,   /* each I/O loop: loop="i" */
    ECHOD_METRICS__OVER_COUNT
} echod_metrics__over_t;

/* Where a family's values live. */
typedef enum {
    ECHOD_METRICS__COUNTERS = 0, /* echod_metrics_t, or the entity's struct in it: summed over the shards */
    ECHOD_METRICS__SAMPLE,       /* echod_metrics__sample_t, or the executor's echod_metrics__exec_sample_t */
} echod_metrics__from_t;

/* How a value is read and written. */
typedef enum {
    ECHOD_METRICS__U64 = 0, /* a uint64_t */
    ECHOD_METRICS__I64,     /* a gauge that goes down: a uint64_t sum read as two's complement, or an int64_t */
    ECHOD_METRICS__SCALED,  /* a uint64_t divided by `divisor` (ns to s, ppm to a ratio), as the shortest double */
    ECHOD_METRICS__DOUBLE,  /* a double (SAMPLE only), as the shortest double */
} echod_metrics__format_t;

/*
 * A label whose values are an enum's names: values[first] to values[count - 1]. The field of
 * value i is `stride * i` bytes past the family's offset (an array indexed by the enum), or at
 * fields[i] from it (separate fields, stride 0).
 */
typedef struct {
    const char *name;
    const char *const *values;
    unsigned first, count;
    size_t stride;
    const size_t *fields;
} echod_metrics__label_t;

/* An executor's gauges, read once per scrape (echod_exec_* getters). */
typedef struct {
    int has_exec;   /* an executor object is behind the label: its gauges have series */
    int is_virtual; /* executor.mode virtual: its virtual threads' series */
    uint64_t queue_depth, threads, busy_threads;
    uint64_t vt_started, vt_parks, vt_unparks, vt_live, vt_stack_bytes, vt_stack_peak_bytes;
} echod_metrics__exec_sample_t;

/* What one scrape reads besides the counters: the `shown_if` flags and the SAMPLE values. */
typedef struct {
    /* the registrations and the configuration (families.c) */
    int any_loop, any_virtual, rest_on;
    echod_metrics__exec_sample_t execs[ECHOD_METRICS_MAX_EXECUTORS];
    /* the admin module's state */
    int64_t ready, draining;
    echod_stage_t stage;
    /* the cgroup (process.c) */
    echod_cgroup_cpu_t cgroup;
    int has_quota, has_cpuset;
    uint64_t cpuset_cpus, effective_cpus;
    /* the process (process.c) */
    int has_rusage, has_statm, has_fds, has_max_fds, has_start_time, has_threads;
    double cpu_seconds, start_time;
    int64_t context_switches[2]; /* voluntary, involuntary */
    uint64_t virtual_bytes, resident_bytes, open_fds, threads;
    int max_fds_unlimited;
    uint64_t max_fds;
} echod_metrics__sample_t;

/* A growing text buffer; `failed` once a format failed (vsnprintf: the render is then discarded). */
typedef struct {
    char *base;
    size_t len, cap;
    int failed;
} echod_metrics__buf_t;

/* One scrape. */
typedef struct {
    echod_metrics__buf_t out;
    echod_metrics__buf_t labels; /* the labels of the series being written */
    size_t count[ECHOD_METRICS__OVER_COUNT];
    echod_metrics__sample_t sample;
} echod_metrics__render_t;

typedef struct echod_metrics__family echod_metrics__family_t;

struct echod_metrics__family {
    const char *name;
    echod_metrics__type_t type;
    const char *help;
    echod_metrics__over_t over;
    echod_metrics__label_t label[2]; /* after the entity's labels, outer first; .name NULL if unused */
    echod_metrics__from_t from;
    size_t offset; /* of the value: in echod_metrics_t or the entity's struct; in the sample or the executor's */
    echod_metrics__format_t format;
    double divisor;      /* SCALED */
    size_t shown_if;     /* ECHOD_METRICS__IF: an int of the sample; 0 leaves the family out. 0: always */
    size_t series_if;    /* ECHOD_METRICS__EXEC_IF: an int of the executor's sample; 0 leaves its series out */
    unsigned sparse : 1; /* a 0 is left out, but for the first label's first value (rate() needs one) */
    /* A family no field can say writes its own series (echod_metrics__label, echod_metrics__write). */
    void (*series)(echod_metrics__render_t *r, const echod_metrics__family_t *f);
};

#define ECHOD_METRICS__IF(member)      (offsetof(echod_metrics__sample_t, member) + 1)
#define ECHOD_METRICS__EXEC_IF(member) (offsetof(echod_metrics__exec_sample_t, member) + 1)

typedef struct {
    const echod_metrics__family_t *families;
    size_t count;
} echod_metrics__table_t;

/* Every family, in the order a scrape shows them (families.c). */
extern const echod_metrics__table_t *const echod_metrics__tables[];
extern const size_t echod_metrics__ntables;

/* The collector's families (process.c): the cgroup's among the saturation families, the
 * process's last. */
extern const echod_metrics__table_t echod_metrics__cgroup_table, echod_metrics__process_table;

/* families.c: fills the sample (the collector's part through echod_metrics__read_process). */
void echod_metrics__read_sample(echod_metrics__render_t *r);

/* process.c: at start-up, when the process started (process_start_time_seconds). Main thread. */
void echod_metrics__process_init(void);
/* process.c: the cgroup and process part of a scrape's sample. */
void echod_metrics__read_process(echod_metrics__sample_t *s);

/* metrics.c, from echod_metrics_init: zeroes the instance and every shard, and remembers cfg (it
 * decides how calls_admitted is kept; echod_build_info shows it). */
void echod_metrics__reset(const echod_config_t *cfg);
/* The configuration given to echod_metrics_init, or NULL. */
const echod_config_t *echod_metrics__config(void);

/* render.c, for `series` functions: appends name="value" (escaped) to r->labels; writes one
 * sample of f with r->labels, and empties them. */
void echod_metrics__label(echod_metrics__render_t *r, const char *name, const char *value);
void echod_metrics__write_u64(echod_metrics__render_t *r, const echod_metrics__family_t *f, uint64_t v);
void echod_metrics__write_inf(echod_metrics__render_t *r, const echod_metrics__family_t *f);

#endif
