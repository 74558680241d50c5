/*
 * What /metrics shows (Prometheus text 0.0.4) and the start-up registration of what it shows per
 * method, executor and loop. The counters themselves, and the API that updates them, are
 * metrics/metrics.h's; this header is for main, the registering modules and the admin listener.
 *
 * The exposition is a table (metrics/families.c): each family's name, type, help, labels and
 * where its values live, walked by the writer (metrics/render.c); the process and cgroup
 * collector (metrics/process.c) adds its own families to it.
 */
#ifndef ECHOD_EXPOSITION_H
#define ECHOD_EXPOSITION_H

#include <stddef.h>
#include "config/config.h"
#include "dispatch/method.h"
#include "metrics/metrics.h"

struct echod_exec;

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

/* Main thread, at start-up: a slot for loop `index`. */
echod_loop_metrics_t *echod_metrics_add_loop(unsigned index);

/* Renders the whole exposition into a malloc'd buffer; *len gets its length. NULL when an
 * allocation failed. Any thread. */
char *echod_metrics_render(size_t *len);

#endif
