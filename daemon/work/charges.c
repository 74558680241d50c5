/* The label values of work/charges.h's enums, each indexed by its enum. */
#include "work/charges.h"

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

const char *const echod_charge_names[] = {
    [ECHOD_CHARGE_CALL] = "call",
    [ECHOD_CHARGE_STEP] = "step",
    [ECHOD_CHARGE_HANDOFF] = "handoff",
    [ECHOD_CHARGE_MESSAGE] = "message",
    [ECHOD_CHARGE_HANDOFF_WAKE] = "handoff_wake",
    [ECHOD_CHARGE_HANDOFF_WAKE_LOOP] = "handoff_wake_loop",
    [ECHOD_CHARGE_WAKEUP] = "wakeup",
    [ECHOD_CHARGE_BACKGROUND] = "background",
};
_Static_assert(NELEMS(echod_charge_names) == ECHOD_CHARGE__COUNT, "a name per charge kind");

const char *const echod_charge_thread_names[] = {
    [ECHOD_CHARGE_ON_LOOP] = "loop",
    [ECHOD_CHARGE_ON_WORKER] = "worker",
    [ECHOD_CHARGE_ON_BACKGROUND] = "background",
};
_Static_assert(NELEMS(echod_charge_thread_names) == ECHOD_CHARGE_THREAD__COUNT, "a name per kind of thread");

const char *const echod_drawn_names[] = {
    [ECHOD_DRAWN_CPU] = "cpu",
    [ECHOD_DRAWN_SLEEP] = "sleep",
};
_Static_assert(NELEMS(echod_drawn_names) == ECHOD_DRAWN__COUNT, "a name per kind of draw");
