/*
 * Errors as values, and the one out-of-memory policy.
 *
 * A function that can fail for a reason the user should read returns -1 (or NULL) and writes
 * one line into the caller's buffer with echod_set_err. Running out of memory is not such a
 * reason: a per-call allocation has no sensible fallback, so echod says what it was allocating
 * and aborts (a core or a restart beats a call silently answered wrong). Every allocation in
 * daemon/ is echod_must's argument (test_source_rules checks it; docs/threads.md, "Out of
 * memory", has the few exceptions). Any thread.
 */
#ifndef ECHOD_ERR_H
#define ECHOD_ERR_H

#include <stddef.h>

/* printf into err (errlen bytes, always terminated); nothing when err is NULL or errlen is 0. */
void echod_set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "echod: out of memory: <what>" on stderr, then abort(). */
_Noreturn void echod_oom(const char *what);

/* p, or echod_oom(what) when p is NULL: `x = echod_must(malloc(n), "call step");` */
static inline void *echod_must(void *p, const char *what)
{
    if (p == NULL)
        echod_oom(what);
    return p;
}

#endif
