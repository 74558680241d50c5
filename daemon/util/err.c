#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "util/err.h"

void echod_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void echod_oom(const char *what)
{
    /* no stdio buffer, no malloc: one write(2) of a line built on the stack */
    char line[160];
    int n = snprintf(line, sizeof(line), "echod: out of memory: %s\n", what);
    if (n > 0)
        (void)!write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
    abort();
}
