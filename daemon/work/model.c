#include "metrics/metrics.h"
#include "work/burn.h"
#include "work/model.h"

void echod_model_init(echod_model_t *m, const echod_work_model_t *cfg)
{
    m->us[ECHOD_CHARGE_CALL] = cfg->call_cpu_us;
    m->us[ECHOD_CHARGE_STEP] = cfg->step_cpu_us;
    m->us[ECHOD_CHARGE_HANDOFF] = cfg->handoff_cpu_us;
    m->us[ECHOD_CHARGE_MESSAGE] = cfg->message_cpu_us;
    m->on = 0;
    for (int k = 0; k != ECHOD_CHARGE__COUNT; k++)
        m->on |= cfg->enabled && m->us[k] != 0;
}

static void charge_ns(echod_charge_kind_t kind, echod_charge_thread_t thread, uint64_t ns, int count)
{
    echod_burn_ns(ns);
    ECHOD_ADD(echod_metrics.work_model_cpu_ns[kind][thread], ns);
    if (count)
        ECHOD_COUNT(echod_metrics.work_model_charges[kind][thread]);
}

void echod_model_charge(const echod_model_t *m, echod_charge_kind_t kind, echod_charge_thread_t thread)
{
    if (m->us[kind] != 0)
        charge_ns(kind, thread, (uint64_t)m->us[kind] * 1000, 1);
}

void echod_model_charge_call(const echod_model_t *m, int trailers)
{
    uint64_t ns = (uint64_t)m->us[ECHOD_CHARGE_CALL] * 1000, headers = ns / 2;
    if (ns != 0)
        charge_ns(ECHOD_CHARGE_CALL, ECHOD_CHARGE_ON_LOOP, trailers ? ns - headers : headers, !trailers);
}
