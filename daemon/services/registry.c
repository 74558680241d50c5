#include <stdlib.h>
#include <string.h>
#include "services/echo.h"
#include "services/registry.h"

void echod_registry_init(echod_registry_t *reg)
{
    size_t n = 0;
    while (echod_echo_methods[n] != NULL)
        n++;
    echod_method_t *copies = calloc(n, sizeof(*copies));
    reg->methods = calloc(n, sizeof(*reg->methods));
    reg->count = n;
    for (size_t i = 0; i != n; i++) {
        copies[i] = *echod_echo_methods[i];
        copies[i].metrics_index = echod_metrics_add_method(copies[i].service, copies[i].name, copies[i].type);
        reg->methods[i] = &copies[i];
    }
}

const echod_method_t *echod_registry_find(const echod_registry_t *reg, const char *path, size_t len)
{
    for (size_t i = 0; i != reg->count; i++) {
        const char *p = reg->methods[i]->path;
        if (strlen(p) == len && memcmp(p, path, len) == 0)
            return reg->methods[i];
    }
    return NULL;
}

void echod_registry_dispose(echod_registry_t *reg)
{
    if (reg->count != 0)
        free((void *)reg->methods[0]);
    free(reg->methods);
    reg->methods = NULL;
    reg->count = 0;
}
