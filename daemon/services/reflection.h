/*
 * Server reflection, grpc.reflection.v1 and grpc.reflection.v1alpha (ServerReflectionInfo),
 * answered from the FileDescriptorSet protoc made at build time (proto/meson.build): the
 * descriptors are protoc's bytes, never written by hand.
 */
#ifndef ECHOD_REFLECTION_H
#define ECHOD_REFLECTION_H

#include "services/registry.h"

extern const echod_method_t *const echod_reflection_methods[];

#endif
