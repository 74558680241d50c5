/*
 * protobuf-c under echod's out-of-memory policy (util/err.h). With protobuf-c's own allocator a
 * *_unpack returns NULL both for bytes that are not the message and for a failed malloc, and a
 * handler answered the second "Invalid protobuf byte sequence". echod_pb_allocator aborts
 * instead, so NULL from an unpack means bad bytes only. Pass it to every *_unpack and to the
 * *_free_unpacked of what it made. Any thread.
 */
#ifndef ECHOD_PB_H
#define ECHOD_PB_H

#include <protobuf-c/protobuf-c.h>

/* Not const only because protobuf-c's functions take it so; never written. */
extern ProtobufCAllocator echod_pb_allocator;

#endif
