#include <stdint.h>
#include "grpc/timeout.h"

/* PROTOCOL-HTTP2.md caps TimeoutValue at 8 digits, which also keeps the value itself far from overflowing. */
#define TIMEOUT_MAX_DIGITS 8

static uint64_t timeout_unit_ns(char unit)
{
    switch (unit) {
    case 'H':
        return UINT64_C(3600000000000);
    case 'M':
        return UINT64_C(60000000000);
    case 'S':
        return UINT64_C(1000000000);
    case 'm':
        return UINT64_C(1000000);
    case 'u':
        return UINT64_C(1000);
    case 'n':
        return 1;
    default:
        return 0;
    }
}

int echod_grpc_timeout_parse(const char *value, size_t len, uint64_t *ns)
{
    uint64_t v = 0, unit;
    size_t digits;

    if (len < 2 || len > TIMEOUT_MAX_DIGITS + 1)
        return -1;
    digits = len - 1;
    for (size_t i = 0; i < digits; i++) {
        /* Compared by hand rather than with isdigit(), whose answer depends on the locale. */
        if (value[i] < '0' || value[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(value[i] - '0');
    }
    if ((unit = timeout_unit_ns(value[digits])) == 0)
        return -1;

    /* 99999999H does not fit in 64 bits of nanoseconds; such a deadline is as good as none. */
    *ns = v > UINT64_MAX / unit ? UINT64_MAX : v * unit;
    return 0;
}
