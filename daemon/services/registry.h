/*
 * The methods echod serves: every service's method table, copied into one echod_registry_t
 * (dispatch/method.h) with each method's metrics index, and the check of config keys that
 * name methods.
 */
#ifndef ECHOD_REGISTRY_H
#define ECHOD_REGISTRY_H

#include "dispatch/method.h"

struct echod_config;

/* Registers every built-in method with metrics. Main thread, at start-up. */
void echod_registry_init(echod_registry_t *reg);

/*
 * A config may name methods (dispatch.per_method, work.per_method): 0 if each is served, else -1
 * with err naming the file, the key and the path. --check-config and start-up both run it, so a
 * typo in a path fails the check instead of silently configuring nothing.
 */
int echod_registry_check_config(const echod_registry_t *reg, const struct echod_config *cfg, char *err, size_t errlen);

void echod_registry_dispose(echod_registry_t *reg);

#endif
