/*
 * The shorthand the family tables are written in (metrics/families.c, metrics/process.c only): an
 * entry reads {"name", COUNTER, "help", FIELD(member), ...}, each part a designated initializer of
 * echod_metrics__family_t (metrics_internal.h).
 */
#ifndef ECHOD_METRICS_TABLE_H
#define ECHOD_METRICS_TABLE_H

#include "metrics/metrics_internal.h"

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

#define COUNTER   .type = ECHOD_METRICS__COUNTER
#define GAUGE     .type = ECHOD_METRICS__GAUGE
#define HISTOGRAM .type = ECHOD_METRICS__HISTOGRAM

/* Where the value lives: a member of the counters, of an executor's, method's or loop's counters,
 * of the scrape's sample or of an executor's sample. */
#define FIELD(m)        .offset = offsetof(echod_metrics_t, m)
#define EXEC_FIELD(m)   .over = ECHOD_METRICS__EACH_EXEC, .offset = offsetof(echod_exec_metrics_t, m)
#define METHOD_FIELD(m) .over = ECHOD_METRICS__EACH_METHOD, .offset = offsetof(echod_method_metrics_t, m)
#define LOOP_FIELD(m)   .over = ECHOD_METRICS__EACH_LOOP, .offset = offsetof(echod_loop_metrics_t, m)
#define SAMPLE(m)       .from = ECHOD_METRICS__SAMPLE, .offset = offsetof(echod_metrics__sample_t, m)
#define EXEC_SAMPLE(m)                                                                                                 \
    .over = ECHOD_METRICS__EACH_EXEC, .from = ECHOD_METRICS__SAMPLE, .offset = offsetof(echod_metrics__exec_sample_t, m)

/* How it is written, when not as an unsigned integer. */
#define SIGNED       .format = ECHOD_METRICS__I64
#define DOUBLE       .format = ECHOD_METRICS__DOUBLE
#define SCALED(by)   .format = ECHOD_METRICS__SCALED, .divisor = (by)
#define SHOWN_IF(m)  .shown_if = ECHOD_METRICS__IF(m)
#define SERIES_IF(m) .series_if = ECHOD_METRICS__EXEC_IF(m)

/* clang-format off */
/* A label over an enum's names, whose fields are an array of `size`-byte elements. */
#define LABEL(name_, values_, count_, size) \
    {.name = (name_), .values = (values_), .count = (count_), .stride = (size)}
/* A label over names whose fields are the counters' members listed. */
#define LABEL_FIELDS(name_, values_, ...) \
    {.name = (name_), .values = (values_), .count = NELEMS(((const size_t[]){__VA_ARGS__})), \
     .fields = (const size_t[]){__VA_ARGS__}}
/* clang-format on */
#define M(m) offsetof(echod_metrics_t, m)

/* Strides: a counter's size (a label over an array of counters), a row's (the outer label over a
 * two-dimensional member of the counters). */
#define U64    sizeof(_Atomic uint64_t)
#define ROW(m) sizeof(((echod_metrics_t *)0)->m[0])

#endif
