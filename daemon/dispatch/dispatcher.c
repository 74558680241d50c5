#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dispatch/dispatcher.h"
#include "metrics/exposition.h"
#include "util/err.h"

/*
 * Stock grpc-java (ServerImpl.streamCreatedInternal): the reentrancy-safe inline runner for
 * direct when no executor supplier is set, a SerializingExecutor around every other executor,
 * one-thread FIFOs included. dispatch.unwrap_sequential is the proposal of grpc-java PR #5521
 * (never merged): a one-thread FIFO serializes by itself, so its steps pass straight through.
 * Judged on the executor as built, so `threads: 0` in a 1-CPU pod counts as one thread.
 */
static echod_ser_mode_t pick_mode(const echod_config_t *cfg, const echod_exec_t *exec)
{
    if (cfg->dispatch.serialize == ECHOD_SERIALIZE_ALWAYS || cfg->dispatch.per_method_count != 0)
        return ECHOD_SER_SERIALIZING;
    if (echod_exec_is_direct(exec))
        return ECHOD_SER_INLINE;
    if (cfg->dispatch.unwrap_sequential && echod_exec_is_sequential(exec))
        return ECHOD_SER_PASSTHROUGH;
    return ECHOD_SER_SERIALIZING;
}

int echod_dispatcher_init(echod_dispatcher_t *d, const echod_config_t *cfg, const echod_registry_t *reg, char *err,
                          size_t errlen)
{
    memset(d, 0, sizeof(*d));
    d->cfg = cfg;
    d->registry = reg;

    char name[16];
    snprintf(name, sizeof(name), "echod-%s", echod_exec_mode_name(cfg->executor.mode));
    if ((d->exec = echod_exec_create(&cfg->executor, name, err, errlen)) == NULL)
        return -1;
    d->mode = pick_mode(cfg, d->exec);
    /* the executor label is the mode (what a dashboard filters on); per-method ones add the method */
    d->exec_metrics = echod_metrics_add_exec(echod_exec_mode_name(cfg->executor.mode), d->exec);
    echod_exec_set_observer(d->exec, echod_metrics_observe_queue_wait, d->exec_metrics);

    if (cfg->dispatch.per_method_count != 0)
        d->per_method = echod_must(calloc(cfg->dispatch.per_method_count, sizeof(*d->per_method)), "per_method");
    for (size_t i = 0; i != cfg->dispatch.per_method_count; i++) {
        const echod_per_method_t *pm = &cfg->dispatch.per_method[i];
        const echod_method_t *m = echod_method_find(reg, pm->method, strlen(pm->method));
        assert(m != NULL); /* echod_registry_check_config refused unknown paths before */
        snprintf(name, sizeof(name), "echod-pm%zu", i);
        echod_method_exec_t *me = &d->per_method[d->per_method_count];
        if ((me->exec = echod_exec_create(&pm->exec, name, err, errlen)) == NULL)
            return -1;
        me->method = m;
        snprintf(me->label, sizeof(me->label), "%s:%s", echod_exec_mode_name(pm->exec.mode), m->name);
        me->metrics = echod_metrics_add_exec(me->label, me->exec);
        echod_exec_set_observer(me->exec, echod_metrics_observe_queue_wait, me->metrics);
        d->per_method_count++;
    }
    return 0;
}

const echod_method_exec_t *echod_dispatcher_find(const echod_dispatcher_t *d, const echod_method_t *method)
{
    for (size_t i = 0; i != d->per_method_count; i++)
        if (d->per_method[i].method == method)
            return &d->per_method[i];
    return NULL;
}

void echod_dispatcher_dispose(echod_dispatcher_t *d)
{
    for (size_t i = 0; i != d->per_method_count; i++)
        echod_exec_destroy(d->per_method[i].exec);
    free(d->per_method);
    if (d->exec != NULL)
        echod_exec_destroy(d->exec);
    memset(d, 0, sizeof(*d));
}
