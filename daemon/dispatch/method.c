#include <string.h>
#include "dispatch/method.h"

const char *const echod_grpc_type_names[] = {
    [ECHOD_GRPC_UNARY] = "unary",
    [ECHOD_GRPC_CLIENT_STREAM] = "client_stream",
    [ECHOD_GRPC_SERVER_STREAM] = "server_stream",
    [ECHOD_GRPC_BIDI_STREAM] = "bidi_stream",
};
_Static_assert(sizeof(echod_grpc_type_names) / sizeof(echod_grpc_type_names[0]) == ECHOD_GRPC_TYPE__COUNT,
               "a name per RPC type");

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
