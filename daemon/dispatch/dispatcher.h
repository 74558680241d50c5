/*
 * Which executor and which serializer wrapper a call gets (docs/dispatch-model.md, sections 3 and 4): the
 * default executor, the per-method executors (ServerCallExecutorSupplier) and the rule that
 * picks inline / serializing (pass-through with dispatch.unwrap_sequential). Built on the main thread at start-up,
 * read-only while serving, torn down after the loops stopped.
 */
#ifndef ECHOD_DISPATCHER_H
#define ECHOD_DISPATCHER_H

#include <stddef.h>
#include "config/config.h"
#include "dispatch/exec.h"
#include "dispatch/serializer.h"
#include "dispatch/method.h"

struct echod_exec_metrics;

typedef struct {
    const echod_method_t *method;
    echod_exec_t *exec;
    struct echod_exec_metrics *metrics;
    char label[96]; /* the executor label in /metrics: "fixed:BidirectionalStreamingEcho" */
} echod_method_exec_t;

typedef struct echod_dispatcher {
    const echod_config_t *cfg;
    const echod_registry_t *registry; /* the methods calls are looked up in */
    echod_exec_t *exec;               /* executor.mode */
    struct echod_exec_metrics *exec_metrics;
    echod_method_exec_t *per_method;
    size_t per_method_count;
    echod_ser_mode_t mode; /* the wrapper every call starts with */
} echod_dispatcher_t;

/* Starts the executors; every per_method path must be served (echod_registry_check_config). Returns
 * -1 with err filled when a thread cannot be started. */
int echod_dispatcher_init(echod_dispatcher_t *d, const echod_config_t *cfg, const echod_registry_t *reg, char *err,
                          size_t errlen);

/* The per-method executor for a method, or NULL when it uses the default. Any thread. */
const echod_method_exec_t *echod_dispatcher_find(const echod_dispatcher_t *d, const echod_method_t *method);

/* Runs queued work and joins every executor thread. Main thread, after the loops stopped. */
void echod_dispatcher_dispose(echod_dispatcher_t *d);

#endif
