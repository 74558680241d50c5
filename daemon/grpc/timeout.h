/* The grpc-timeout header: 1 to 8 ASCII digits then a unit, H M S m u n. Pure function. */
#ifndef ECHOD_TIMEOUT_H
#define ECHOD_TIMEOUT_H

#include <stddef.h>
#include <stdint.h>

/* Parses value[0..len) into nanoseconds (saturating). Returns 0, or -1 when malformed. */
int echod_grpc_timeout_parse(const char *value, size_t len, uint64_t *ns);

#endif
