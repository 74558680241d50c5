/*
 * What the cost model charges, by kind and by the kind of thread that burnt it: the enums live
 * here, with their owner (work/model.h), and metrics sizes its counters by them
 * (echod_work_model_cpu_seconds_total, echod_work_model_charges_total). Each enum's label values
 * are beside it, indexed by it (charges.c asserts one per value).
 */
#ifndef ECHOD_CHARGES_H
#define ECHOD_CHARGES_H

typedef enum {
    ECHOD_CHARGE_CALL = 0,          /* the transport's share of a call: request headers, then trailers */
    ECHOD_CHARGE_STEP,              /* one step that ran */
    ECHOD_CHARGE_HANDOFF,           /* one cross-thread hand-off, on the thread that received it */
    ECHOD_CHARGE_MESSAGE,           /* one message in or out */
    ECHOD_CHARGE_HANDOFF_WAKE,      /* on top of HANDOFF: the hand-off found its receiver parked and woke it */
    ECHOD_CHARGE_HANDOFF_WAKE_LOOP, /* on top of HANDOFF_WAKE: the receiver it woke was the loop */
    ECHOD_CHARGE_WAKEUP,            /* an I/O loop woken from its poll by I/O (the server's model: no call's) */
    ECHOD_CHARGE_BACKGROUND,        /* one slice of the steady background burn (work/background.h) */
    ECHOD_CHARGE__COUNT
} echod_charge_kind_t;
extern const char *const echod_charge_names[];

typedef enum {
    ECHOD_CHARGE_ON_LOOP = 0,   /* an I/O loop thread */
    ECHOD_CHARGE_ON_WORKER,     /* an executor worker (a carrier, for virtual threads) */
    ECHOD_CHARGE_ON_BACKGROUND, /* the background thread (echod-bg) */
    ECHOD_CHARGE_THREAD__COUNT
} echod_charge_thread_t;
extern const char *const echod_charge_thread_names[];

/* Draws of synthetic work (work/draw.h) observed in echod_work_drawn_seconds{kind}. */
typedef enum { ECHOD_DRAWN_CPU = 0, ECHOD_DRAWN_SLEEP, ECHOD_DRAWN__COUNT } echod_drawn_kind_t;
extern const char *const echod_drawn_names[];

#endif
