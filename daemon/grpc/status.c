#include <stdint.h>
#include "grpc/status.h"

/* Indexed by code, so a renumbered enum cannot silently shift the names. */
const char *const echod_status_names[] = {
    [ECHOD_OK] = "OK",
    [ECHOD_CANCELLED] = "CANCELLED",
    [ECHOD_UNKNOWN] = "UNKNOWN",
    [ECHOD_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
    [ECHOD_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
    [ECHOD_NOT_FOUND] = "NOT_FOUND",
    [ECHOD_ALREADY_EXISTS] = "ALREADY_EXISTS",
    [ECHOD_PERMISSION_DENIED] = "PERMISSION_DENIED",
    [ECHOD_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
    [ECHOD_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
    [ECHOD_ABORTED] = "ABORTED",
    [ECHOD_OUT_OF_RANGE] = "OUT_OF_RANGE",
    [ECHOD_UNIMPLEMENTED] = "UNIMPLEMENTED",
    [ECHOD_INTERNAL] = "INTERNAL",
    [ECHOD_UNAVAILABLE] = "UNAVAILABLE",
    [ECHOD_DATA_LOSS] = "DATA_LOSS",
    [ECHOD_UNAUTHENTICATED] = "UNAUTHENTICATED",
};
_Static_assert(sizeof(echod_status_names) / sizeof(echod_status_names[0]) == ECHOD_STATUS__COUNT, "a name per code");

const char *echod_status_name(int code)
{
    if (code < 0 || code >= ECHOD_STATUS__COUNT)
        return "UNKNOWN";
    return echod_status_names[code];
}

static int status_must_escape(uint8_t c)
{
    return c < 0x20 || c > 0x7E || c == '%';
}

static int status_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    /* We only emit uppercase, but peers that follow RFC 3986 may send lowercase. */
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

size_t echod_status_encode_message(char *dst, size_t cap, const char *msg)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t out = 0;

    if (cap == 0)
        return 0;
    for (const char *p = msg; p != NULL && *p != '\0'; p++) {
        uint8_t c = (uint8_t)*p;
        if (status_must_escape(c)) {
            /* Stop rather than emit half an escape: "%E" would decode to garbage or be rejected. */
            if (cap - 1 - out < 3)
                break;
            dst[out++] = '%';
            dst[out++] = hex[c >> 4];
            dst[out++] = hex[c & 0x0F];
        } else {
            if (cap - 1 - out < 1)
                break;
            dst[out++] = (char)c;
        }
    }
    dst[out] = '\0';
    return out;
}

size_t echod_status_decode_message(char *dst, size_t cap, const char *src, size_t len)
{
    size_t out = 0, i = 0;

    if (cap == 0)
        return 0;
    while (i < len && out < cap - 1) {
        int hi, lo;
        /* A broken escape is kept verbatim, as PROTOCOL-HTTP2.md asks us never to drop the message. */
        if (src[i] == '%' && len - i >= 3 && (hi = status_hex_value(src[i + 1])) >= 0 &&
            (lo = status_hex_value(src[i + 2])) >= 0) {
            dst[out++] = (char)(hi << 4 | lo);
            i += 3;
        } else {
            dst[out++] = src[i++];
        }
    }
    dst[out] = '\0';
    return out;
}
