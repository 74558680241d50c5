/* gRPC status codes and the grpc-message percent-encoding (PROTOCOL-HTTP2.md). Pure functions. */
#ifndef ECHOD_STATUS_H
#define ECHOD_STATUS_H

#include <stddef.h>

typedef enum {
    ECHOD_OK = 0,
    ECHOD_CANCELLED = 1,
    ECHOD_UNKNOWN = 2,
    ECHOD_INVALID_ARGUMENT = 3,
    ECHOD_DEADLINE_EXCEEDED = 4,
    ECHOD_NOT_FOUND = 5,
    ECHOD_ALREADY_EXISTS = 6,
    ECHOD_PERMISSION_DENIED = 7,
    ECHOD_RESOURCE_EXHAUSTED = 8,
    ECHOD_FAILED_PRECONDITION = 9,
    ECHOD_ABORTED = 10,
    ECHOD_OUT_OF_RANGE = 11,
    ECHOD_UNIMPLEMENTED = 12,
    ECHOD_INTERNAL = 13,
    ECHOD_UNAVAILABLE = 14,
    ECHOD_DATA_LOSS = 15,
    ECHOD_UNAUTHENTICATED = 16,
    ECHOD_STATUS__COUNT
} echod_status_code_t;

/* "OK", "CANCELLED", ...: label values indexed by code (status.c asserts one per code). */
extern const char *const echod_status_names[];

/* echod_status_names[code]; "UNKNOWN" for out-of-range codes. */
const char *echod_status_name(int code);

/*
 * Percent-encodes a grpc-message value: bytes outside 0x20..0x7E and '%' become %XX.
 * Writes at most cap-1 bytes plus a NUL (truncating at a whole escape); returns the length.
 */
size_t echod_status_encode_message(char *dst, size_t cap, const char *msg);

/* Decodes %XX escapes (malformed escapes are copied as they are). Returns the length. */
size_t echod_status_decode_message(char *dst, size_t cap, const char *src, size_t len);

#endif
