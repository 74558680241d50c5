/*
 * Fibers for `executor.mode: virtual`: a saved CPU context on a stack of its own, and the one
 * operation on it, switch. Private to daemon/dispatch (exec_virtual.c) and its unit test.
 *
 * The switch is a few lines of assembly in fiber.c, for x86-64 and aarch64: it saves the
 * callee-saved registers and the stack pointer, nothing else (no signal mask, unlike glibc's
 * swapcontext, which makes an rt_sigprocmask system call per switch: docs/virtual-threads.md has
 * the measured difference). Other architectures, or -Dfiber=ucontext (ECHOD_FIBER_UCONTEXT), use
 * makecontext/swapcontext.
 *
 * Sanitizers and valgrind are told about every stack and switch: ASan
 * (__sanitizer_start/finish_switch_fiber), TSan (__tsan_*_fiber, which also carries the
 * happens-before edge of a switch), valgrind (VALGRIND_STACK_REGISTER) where its header exists.
 *
 * Threading: a fiber runs on one thread at a time; whoever switches to it owns it until it
 * switches away. Switching to a fiber on another thread than last time is allowed (that is the
 * point): code must not keep a thread-local's address across a switch.
 */
#ifndef ECHOD_FIBER_H
#define ECHOD_FIBER_H

#include <stddef.h>
#include <stdint.h>
#if !(defined(__x86_64__) || defined(__aarch64__)) || defined(ECHOD_FIBER_UCONTEXT)
#define ECHOD_FIBER_USE_UCONTEXT 1
#include <ucontext.h>
#endif

typedef struct echod_fiber {
#if ECHOD_FIBER_USE_UCONTEXT
    ucontext_t uc;
#else
    void *sp; /* saved stack pointer while switched away */
#endif
    /* The stack: [lo, lo + size). A thread's own stack (a carrier) is learned at the first switch. */
    void *stack_lo;
    size_t stack_size;
    void (*entry)(void *arg);
    void *arg;
    struct echod_fiber *resumed_by; /* set by whoever switches here: ASan learns its stack from it */
    void *asan_fake_stack;          /* ASan's per-fiber fake stack, saved across a switch */
    void *tsan_fiber;               /* TSan's context for this fiber (or the thread's own) */
    int tsan_owned;                 /* tsan_fiber was created here (not a thread's own) */
} echod_fiber_t;

/* The calling thread as a fiber (a carrier's scheduler context): no stack of its own to make. */
void echod_fiber_init_thread(echod_fiber_t *f);

/*
 * A fiber that starts at entry(arg) on [stack_lo, stack_lo + size) at the first switch to it.
 * entry never returns: a fiber lives as long as its stack (echod's run one virtual thread after
 * another), because a fiber abandoned mid-call would leave frames in TSan's shadow call stack.
 */
void echod_fiber_make(echod_fiber_t *f, void *stack_lo, size_t size, void (*entry)(void *), void *arg);

/* Saves the current context in `from` and resumes `to`; returns when someone resumes `from`. */
void echod_fiber_switch(echod_fiber_t *from, echod_fiber_t *to);

/* Forgets a suspended fiber (its TSan context, its stack's ASan poison) before its stack is freed. */
void echod_fiber_dispose(echod_fiber_t *f);

/* Which switch this build uses: "x86_64" or "aarch64" (fiber.c's assembly), or "ucontext". */
const char *echod_fiber_switch_name(void);

/* Tells valgrind a stack exists / is gone (no-ops without valgrind). */
unsigned echod_fiber_stack_register(void *lo, size_t size);
void echod_fiber_stack_deregister(unsigned id);
/* Before reading a suspended fiber's unused stack (the peak-use scan): valgrind is told it may. */
void echod_fiber_stack_peek(void *lo, size_t size);

#endif
