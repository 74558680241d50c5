#include <math.h>
#include <string.h>
#include "metrics/metrics.h"
#include "work/burn.h"
#include "work/model.h"

void echod_model_init(echod_model_t *m, const echod_work_model_t *cfg)
{
    memset(m, 0, sizeof(*m));
    if (!cfg->enabled)
        return;
    m->us[ECHOD_CHARGE_CALL] = cfg->call_cpu_us;
    m->us[ECHOD_CHARGE_STEP] = cfg->step_cpu_us;
    m->us[ECHOD_CHARGE_HANDOFF] = cfg->handoff_cpu_us;
    m->us[ECHOD_CHARGE_MESSAGE] = cfg->message_cpu_us;
    m->us[ECHOD_CHARGE_HANDOFF_WAKE] = cfg->handoff_wake_cpu_us;
    m->us[ECHOD_CHARGE_HANDOFF_WAKE_LOOP] = cfg->handoff_wake_loop_cpu_us; /* the server's: no header sets it */
    m->us[ECHOD_CHARGE_WAKEUP] = cfg->wakeup_cpu_us;                       /* the loop's, from the server's model */
    m->wakeup_short_us = cfg->wakeup_short_cpu_us;
    m->wakeup_full_sleep_ns = (uint64_t)cfg->wakeup_full_sleep_us * 1000;
    m->wakeup_exponent = cfg->wakeup_sleep_exponent;
    /* the charges a call makes; a wake-up or the background is nobody's call */
    m->on = cfg->call_cpu_us != 0 || cfg->step_cpu_us != 0 || cfg->handoff_cpu_us != 0 || cfg->message_cpu_us != 0 ||
            cfg->handoff_wake_cpu_us != 0 || cfg->handoff_wake_loop_cpu_us != 0;
}

/* What was burnt, in the counters: its nanoseconds, and one charge when `count`. */
static void account(echod_charge_kind_t kind, echod_charge_thread_t thread, uint64_t ns, int count)
{
    ECHOD_ADD(echod_metrics.work_model_cpu_ns[kind][thread], ns);
    if (count)
        ECHOD_COUNT(echod_metrics.work_model_charges[kind][thread]);
}

void echod_model_charge_us(echod_charge_kind_t kind, echod_charge_thread_t thread, uint32_t us)
{
    echod_burn_ns((uint64_t)us * 1000);
    account(kind, thread, (uint64_t)us * 1000, 1);
}

void echod_model_charge(const echod_model_t *m, echod_charge_kind_t kind, echod_charge_thread_t thread)
{
    if (m->us[kind] != 0)
        echod_model_charge_us(kind, thread, m->us[kind]);
}

void echod_model_charge_wakeup(const echod_model_t *m, uint64_t slept_ns)
{
    uint64_t ns = (uint64_t)m->us[ECHOD_CHARGE_WAKEUP] * 1000;
    if (ns == 0)
        return;
    if (slept_ns < m->wakeup_full_sleep_ns) {
        double shortest = m->wakeup_short_us * 1000.0, part = (double)slept_ns / (double)m->wakeup_full_sleep_ns;
        ns = (uint64_t)(shortest + ((double)ns - shortest) * pow(part, m->wakeup_exponent));
    }
    echod_burn_ns(ns);
    account(ECHOD_CHARGE_WAKEUP, ECHOD_CHARGE_ON_LOOP, ns, 1);
}

void echod_model_charge_handoff(const echod_model_t *m, echod_charge_thread_t thread, int parked)
{
    uint64_t ns = (uint64_t)m->us[ECHOD_CHARGE_HANDOFF] * 1000;
    uint64_t wake = parked ? (uint64_t)m->us[ECHOD_CHARGE_HANDOFF_WAKE] * 1000 : 0;
    uint64_t loop =
        parked && thread == ECHOD_CHARGE_ON_LOOP ? (uint64_t)m->us[ECHOD_CHARGE_HANDOFF_WAKE_LOOP] * 1000 : 0;
    /* one burn: each ends with a clock read that a second would pay again */
    echod_burn_ns(ns + wake + loop);
    if (ns != 0)
        account(ECHOD_CHARGE_HANDOFF, thread, ns, 1);
    if (wake != 0)
        account(ECHOD_CHARGE_HANDOFF_WAKE, thread, wake, 1);
    if (loop != 0)
        account(ECHOD_CHARGE_HANDOFF_WAKE_LOOP, thread, loop, 1);
}

void echod_model_charge_call(const echod_model_t *m, int trailers)
{
    uint64_t ns = (uint64_t)m->us[ECHOD_CHARGE_CALL] * 1000, headers = ns / 2;
    if (ns == 0)
        return;
    ns = trailers ? ns - headers : headers;
    echod_burn_ns(ns);
    account(ECHOD_CHARGE_CALL, ECHOD_CHARGE_ON_LOOP, ns, !trailers);
}
