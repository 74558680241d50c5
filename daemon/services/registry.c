#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config/config.h"
#include "metrics/exposition.h"
#include "services/benchmark.h"
#include "services/echo.h"
#include "services/health.h"
#include "services/reflection.h"
#include "services/registry.h"
#include "util/err.h"

/* Every service echod serves: one NULL-terminated method table each. */
static const echod_method_t *const *const services[] = {echod_echo_methods, echod_health_methods,
                                                        echod_reflection_methods, echod_benchmark_methods, NULL};

void echod_registry_init(echod_registry_t *reg)
{
    size_t n = 0;
    for (size_t s = 0; services[s] != NULL; s++)
        for (size_t i = 0; services[s][i] != NULL; i++)
            n++;
    /* copies, so that the metrics index lives in the registry and the tables stay const */
    echod_method_t *copies = echod_must(calloc(n, sizeof(*copies)), "method registry");
    reg->methods = echod_must(calloc(n, sizeof(*reg->methods)), "method registry");
    reg->count = n;
    size_t k = 0;
    for (size_t s = 0; services[s] != NULL; s++) {
        for (size_t i = 0; services[s][i] != NULL; i++, k++) {
            copies[k] = *services[s][i];
            copies[k].metrics_index = echod_metrics_add_method(copies[k].service, copies[k].name, copies[k].type);
            reg->methods[k] = &copies[k];
        }
    }
}

static int check_path(const echod_registry_t *reg, const echod_config_t *cfg, const char *key, const char *path,
                      char *err, size_t errlen)
{
    if (echod_method_find(reg, path, strlen(path)) != NULL)
        return 0;
    char entry[512], at[320];
    snprintf(entry, sizeof(entry), "%s.%s", key, path);
    snprintf(err, errlen, "%s: %s: no such method \"%s\" (a full path, e.g. /grpc.examples.echo.Echo/UnaryEcho)",
             echod_config_where(cfg, entry, at, sizeof(at)), key, path);
    return -1;
}

int echod_registry_check_config(const echod_registry_t *reg, const echod_config_t *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i != cfg->dispatch.per_method_count; i++)
        if (check_path(reg, cfg, "dispatch.per_method", cfg->dispatch.per_method[i].method, err, errlen) != 0)
            return -1;
    for (size_t i = 0; i != cfg->work.per_method_count; i++)
        if (check_path(reg, cfg, "work.per_method", cfg->work.per_method[i].method, err, errlen) != 0)
            return -1;
    return 0;
}

void echod_registry_dispose(echod_registry_t *reg)
{
    if (reg->count != 0)
        free((void *)reg->methods[0]);
    free(reg->methods);
    reg->methods = NULL;
    reg->count = 0;
}
