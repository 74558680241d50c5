/*
 * The Prometheus text exposition (format 0.0.4): the family tables (metrics_internal.h) walked
 * in order, each family's HELP and TYPE, then its series.
 *
 * The renderer only ever does relaxed loads, summing the shared instance and every shard. A scrape
 * therefore sees each number exactly, but not all numbers at one instant: that is the price of
 * never taking a lock on the hot path, and Prometheus is built to tolerate it.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "metrics/exposition.h"
#include "metrics/metrics_internal.h"
#include "util/err.h"

typedef echod_metrics__buf_t buf_t;

static int buf_reserve(buf_t *b, size_t extra)
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

static void buf_append(buf_t *b, const char *s, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return;
    memcpy(b->base + b->len, s, n);
    b->len += n;
    b->base[b->len] = '\0';
}

static void buf_puts(buf_t *b, const char *s)
{
    buf_append(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void buf_printf(buf_t *b, const char *fmt, ...)
{
    va_list ap;
    if (buf_reserve(b, 128) != 0)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(b->base + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n >= b->cap - b->len) {
        if (buf_reserve(b, (size_t)n) != 0)
            return;
        va_start(ap, fmt);
        vsnprintf(b->base + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

/* Label values may come from configuration (executor names, the arm): escape per the format. */
static void buf_label_value(buf_t *b, const char *s)
{
    if (s == NULL)
        s = "";
    for (; *s != '\0'; ++s) {
        switch (*s) {
        case '\\':
            buf_append(b, "\\\\", 2);
            break;
        case '"':
            buf_append(b, "\\\"", 2);
            break;
        case '\n':
            buf_append(b, "\\n", 2);
            break;
        default:
            buf_append(b, s, 1);
            break;
        }
    }
}

void echod_metrics__label(echod_metrics__render_t *r, const char *name, const char *value)
{
    buf_t *b = &r->labels;
    if (b->len != 0)
        buf_append(b, ",", 1);
    buf_puts(b, name);
    buf_append(b, "=\"", 2);
    buf_label_value(b, value);
    buf_append(b, "\"", 1);
}

static const char *labels_text(const echod_metrics__render_t *r)
{
    return r->labels.len != 0 ? r->labels.base : "";
}

/*
 * Shortest text that reads back as the same double, so bucket bounds look like "5e-06", not noise;
 * whole numbers in full ("60", where %g's shortest is "6e+01"), as other exporters write them.
 */
static void format_double(char *dst, size_t cap, double v)
{
    if (v > -1e15 && v < 1e15 && v == (double)(int64_t)v) {
        snprintf(dst, cap, "%" PRId64, (int64_t)v);
        return;
    }
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

/* "name{labels} " or "name ", then the caller's value; the labels are spent. */
static void sample_head(echod_metrics__render_t *r, const echod_metrics__family_t *f)
{
    buf_puts(&r->out, f->name);
    if (r->labels.len != 0) {
        buf_append(&r->out, "{", 1);
        buf_append(&r->out, r->labels.base, r->labels.len);
        buf_append(&r->out, "}", 1);
    }
    buf_append(&r->out, " ", 1);
    r->labels.len = 0;
}

void echod_metrics__write_u64(echod_metrics__render_t *r, const echod_metrics__family_t *f, uint64_t v)
{
    sample_head(r, f);
    buf_printf(&r->out, "%" PRIu64 "\n", v);
}

void echod_metrics__write_inf(echod_metrics__render_t *r, const echod_metrics__family_t *f)
{
    sample_head(r, f);
    buf_puts(&r->out, "+Inf\n");
}

static void write_i64(echod_metrics__render_t *r, const echod_metrics__family_t *f, int64_t v)
{
    sample_head(r, f);
    buf_printf(&r->out, "%" PRId64 "\n", v);
}

static void write_double(echod_metrics__render_t *r, const echod_metrics__family_t *f, double v)
{
    char num[64];
    format_double(num, sizeof(num), v);
    sample_head(r, f);
    buf_puts(&r->out, num);
    buf_append(&r->out, "\n", 1);
}

/* One histogram series with r->labels (spent). */
static void histogram_series(echod_metrics__render_t *r, const char *name, const echod_histogram_t *h)
{
    const char *labels = labels_text(r);
    const char *lbrace = labels[0] != '\0' ? "{" : "", *rbrace = labels[0] != '\0' ? "}" : "";
    const char *sep = labels[0] != '\0' ? "," : "";
    buf_t *b = &r->out;
    char num[64];
    uint64_t cum = 0;
    size_t nbounds = h->bounds != NULL ? h->nbounds : 0;

    for (size_t i = 0; i < nbounds; ++i) {
        cum += echod_metrics_value(&h->buckets[i]);
        format_double(num, sizeof(num), scaled(h->bounds[i], h->scale));
        buf_printf(b, "%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", name, labels, sep, num, cum);
    }
    cum += echod_metrics_value(&h->buckets[nbounds]);
    buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, cum);

    uint64_t sum = echod_metrics_value(&h->sum);
    if (h->scale == 1) {
        snprintf(num, sizeof(num), "%" PRIu64, sum);
    } else {
        format_double(num, sizeof(num), scaled((double)sum, h->scale));
    }
    buf_printf(b, "%s_sum%s%s%s %s\n", name, lbrace, labels, rbrace, num);
    /* _count is the bucket total: the +Inf bucket and _count must never disagree. */
    buf_printf(b, "%s_count%s%s%s %" PRIu64 "\n", name, lbrace, labels, rbrace, cum);
    r->labels.len = 0;
}

/* Where entity e's values live, and its labels. */
static uintptr_t entity_base(const echod_metrics__render_t *r, const echod_metrics__family_t *f, size_t e)
{
    if (f->from == ECHOD_METRICS__SAMPLE)
        return f->over == ECHOD_METRICS__EACH_EXEC ? (uintptr_t)&r->sample.execs[e] : (uintptr_t)&r->sample;
    switch (f->over) {
    case ECHOD_METRICS__EACH_EXEC:
        return (uintptr_t)&echod_metrics.execs[e];
    case ECHOD_METRICS__EACH_METHOD:
        return (uintptr_t)&echod_metrics.methods[e];
    case ECHOD_METRICS__EACH_LOOP:
        return (uintptr_t)&echod_metrics.loops[e];
    default:
        return (uintptr_t)&echod_metrics;
    }
}

static void entity_labels(echod_metrics__render_t *r, echod_metrics__over_t over, size_t e)
{
    char index[24];
    switch (over) {
    case ECHOD_METRICS__EACH_EXEC:
        echod_metrics__label(r, "executor", echod_metrics.execs[e].name);
        break;
    case ECHOD_METRICS__EACH_METHOD:
        echod_metrics__label(r, "grpc_type", echod_metrics.methods[e].grpc_type);
        echod_metrics__label(r, "grpc_service", echod_metrics.methods[e].service);
        echod_metrics__label(r, "grpc_method", echod_metrics.methods[e].method);
        break;
    case ECHOD_METRICS__EACH_LOOP:
        snprintf(index, sizeof(index), "%zu", e);
        echod_metrics__label(r, "loop", index);
        break;
    default:
        break;
    }
}

/* The field of label value i, from the family's offset. */
static size_t label_offset(const echod_metrics__label_t *l, unsigned i)
{
    if (l->name == NULL)
        return 0;
    return l->fields != NULL ? l->fields[i] : l->stride * i;
}

static int flag_set(uintptr_t base, size_t flag)
{
    return flag == 0 || *(const int *)(base + flag - 1) != 0;
}

/* The series at `at`; `first`: the family's first label value (a sparse family always shows it). */
static void write_series(echod_metrics__render_t *r, const echod_metrics__family_t *f, uintptr_t at, int first)
{
    if (f->type == ECHOD_METRICS__HISTOGRAM) {
        histogram_series(r, f->name, (const echod_histogram_t *)at);
        return;
    }
    if (f->format == ECHOD_METRICS__DOUBLE) {
        write_double(r, f, *(const double *)at);
        return;
    }
    uint64_t v =
        f->from == ECHOD_METRICS__COUNTERS ? echod_metrics_value((const _Atomic uint64_t *)at) : *(const uint64_t *)at;
    if (f->sparse && v == 0 && !first) {
        r->labels.len = 0;
        return;
    }
    if (f->format == ECHOD_METRICS__I64)
        write_i64(r, f, (int64_t)v); /* the shards' deltas wrap: the unsigned sum is two's complement */
    else if (f->format == ECHOD_METRICS__SCALED)
        write_double(r, f, (double)v / f->divisor);
    else
        echod_metrics__write_u64(r, f, v);
}

static void write_family(echod_metrics__render_t *r, const echod_metrics__family_t *f)
{
    static const char *const types[] = {
        [ECHOD_METRICS__COUNTER] = "counter",
        [ECHOD_METRICS__GAUGE] = "gauge",
        [ECHOD_METRICS__HISTOGRAM] = "histogram",
    };
    if (!flag_set((uintptr_t)&r->sample, f->shown_if))
        return;
    buf_printf(&r->out, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, types[f->type]);
    if (f->series != NULL) {
        f->series(r, f);
        return;
    }
    const echod_metrics__label_t *outer = &f->label[0], *inner = &f->label[1];
    unsigned o0 = outer->name != NULL ? outer->first : 0, o1 = outer->name != NULL ? outer->count : 1;
    unsigned i0 = inner->name != NULL ? inner->first : 0, i1 = inner->name != NULL ? inner->count : 1;
    for (size_t e = 0; e < r->count[f->over]; e++) {
        uintptr_t base = entity_base(r, f, e);
        if (!flag_set(base, f->series_if))
            continue;
        for (unsigned o = o0; o < o1; o++) {
            for (unsigned i = i0; i < i1; i++) {
                r->labels.len = 0;
                entity_labels(r, f->over, e);
                if (outer->name != NULL)
                    echod_metrics__label(r, outer->name, outer->values[o]);
                if (inner->name != NULL)
                    echod_metrics__label(r, inner->name, inner->values[i]);
                write_series(r, f, base + f->offset + label_offset(outer, o) + label_offset(inner, i),
                             o == o0 && i == i0);
            }
        }
    }
}

char *echod_metrics_render(size_t *len)
{
    echod_metrics__render_t r;
    memset(&r, 0, sizeof(r));
    echod_metrics__read_sample(&r);
    for (size_t t = 0; t < echod_metrics__ntables; t++)
        for (size_t i = 0; i < echod_metrics__tables[t]->count; i++)
            write_family(&r, &echod_metrics__tables[t]->families[i]);
    free(r.labels.base);
    if (r.out.failed || r.labels.failed) {
        free(r.out.base);
        *len = 0;
        return NULL;
    }
    *len = r.out.len;
    return r.out.base;
}
