/*
 * grpc.health.v1.Health (Check, Watch) from Debian's grpc-proto. "" is the server; every
 * registered service is known by name. Both methods are marked on_loop: a probe is answered on
 * the I/O loop, never queued behind a saturated executor.
 */
#ifndef ECHOD_HEALTH_H
#define ECHOD_HEALTH_H

#include "services/registry.h"

struct echod_server;

extern const echod_method_t *const echod_health_methods[];

/*
 * Any thread. Every known name reports SERVING (nonzero) or NOT_SERVING (0): main calls it
 * with 0 when a drain starts, and each open Watch stream is sent the new status. Echod starts
 * SERVING. The state is process-wide (one server per process); `server` keeps the call sites
 * honest should that change.
 */
void echod_health_set_serving(struct echod_server *server, int serving);

/* Any thread: the last value set (1 before any call). */
int echod_health_is_serving(const struct echod_server *server);

#endif
