#include <string.h>
#include "dispatch/method.h"

const echod_method_t *echod_method_find(const echod_registry_t *reg, const char *path, size_t len)
{
    if (path == NULL)
        return NULL;
    for (size_t i = 0; i != reg->count; i++) {
        const char *p = reg->methods[i]->path;
        if (strlen(p) == len && memcmp(p, path, len) == 0)
            return reg->methods[i];
    }
    return NULL;
}
