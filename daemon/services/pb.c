#include <stdlib.h>
#include "services/pb.h"
#include "util/err.h"

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    return echod_must(malloc(size), "protobuf message");
}

static void pb_free(void *data, void *ptr)
{
    (void)data;
    free(ptr);
}

ProtobufCAllocator echod_pb_allocator = {.alloc = pb_alloc, .free = pb_free, .allocator_data = NULL};
