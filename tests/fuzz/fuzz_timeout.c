/*
 * libFuzzer: the grpc-timeout parser (daemon/grpc/timeout.c) against the grammar of
 * PROTOCOL-HTTP2.md: TimeoutValue (1 to 8 ASCII digits) then TimeoutUnit (H M S m u n).
 */
#include <stdint.h>
#include <stdlib.h>
#include "grpc/timeout.h"

static uint64_t unit_ns(char c)
{
    switch (c) {
    case 'H':
        return 3600000000000ull;
    case 'M':
        return 60000000000ull;
    case 'S':
        return 1000000000ull;
    case 'm':
        return 1000000ull;
    case 'u':
        return 1000ull;
    case 'n':
        return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *v = (const char *)data;
    uint64_t ns = 0xDEADBEEF;
    int rv = echod_grpc_timeout_parse(v, size, &ns);

    int valid = size >= 2 && size <= 9 && unit_ns(v[size - 1]) != 0;
    unsigned __int128 want = 0;
    for (size_t i = 0; valid && i + 1 < size; i++) {
        if (v[i] < '0' || v[i] > '9')
            valid = 0;
        else
            want = want * 10 + (unsigned)(v[i] - '0');
    }
    if (valid != (rv == 0))
        abort();
    if (valid) {
        want *= unit_ns(v[size - 1]);
        uint64_t sat = want > UINT64_MAX ? UINT64_MAX : (uint64_t)want;
        if (ns != sat)
            abort();
    } else if (ns != 0xDEADBEEF) {
        abort(); /* a malformed value must leave the output alone */
    }
    return 0;
}
