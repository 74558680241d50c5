/* grpc.examples.echo.Echo: the four methods of the wire contract (proto/echo.proto). */
#ifndef ECHOD_ECHO_H
#define ECHOD_ECHO_H

#include <stddef.h>
#include <stdint.h>
#include "services/registry.h"

/* The method templates, NULL-terminated. The registry copies them. */
extern const echod_method_t *const echod_echo_methods[];

/*
 * Checks that a payload is a valid EchoRequest (field 1 a UTF-8 string, unknown fields well
 * formed) without decoding it: EchoRequest and EchoResponse share their layout, so a valid
 * request's bytes are sent back as the response as they are.
 */
int echod_echo_validate(const uint8_t *p, size_t len);

#endif
