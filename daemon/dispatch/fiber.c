/*
 * The fiber switch (see fiber.h). On x86-64 a switch pushes the six callee-saved registers on the
 * old stack, swaps stack pointers and pops them off the new one: that is the whole System V
 * contract for a call, so nothing else needs saving. MXCSR and the x87 control word are
 * callee-saved too, but nothing in echod changes them, so every fiber shares the thread's.
 */
#include <stdint.h>
#include "dispatch/fiber.h"

#if defined(__SANITIZE_ADDRESS__)
#define FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FIBER_TSAN 1
#endif
#endif
#if FIBER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>) && __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#define FIBER_VALGRIND 1
#endif
#endif

/* The first code a fiber runs: finish the switch that brought us here, then enter. */
static void fiber_start(echod_fiber_t *f)
{
#if FIBER_ASAN
    const void *lo;
    size_t size;
    __sanitizer_finish_switch_fiber(NULL, &lo, &size);
    if (f->resumed_by != NULL && f->resumed_by->stack_lo == NULL) {
        f->resumed_by->stack_lo = (void *)lo;
        f->resumed_by->stack_size = size;
    }
#endif
    f->entry(f->arg);
    __builtin_trap(); /* entry never returns */
}

#if !ECHOD_FIBER_USE_UCONTEXT
/*
 * echod_fiber__jump(save, sp): *save = our stack pointer, then resume the context saved at sp.
 * echod_fiber__boot: where a new fiber's first jump "returns" to; r12 holds the fiber, r13
 * fiber_start (set up by echod_fiber_make), and the stack is 16-byte aligned for the call.
 */
void echod_fiber__jump(void **save, void *sp);
void echod_fiber__boot(void);
__asm__(".text\n"
        ".globl echod_fiber__jump\n"
        ".hidden echod_fiber__jump\n"
        ".type echod_fiber__jump, @function\n"
        "echod_fiber__jump:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size echod_fiber__jump, .-echod_fiber__jump\n"
        ".globl echod_fiber__boot\n"
        ".hidden echod_fiber__boot\n"
        ".type echod_fiber__boot, @function\n"
        "echod_fiber__boot:\n"
        "    movq %r12, %rdi\n"
        "    call *%r13\n"
        "    ud2\n"
        ".size echod_fiber__boot, .-echod_fiber__boot\n");
#else
/* makecontext passes ints only: the fiber pointer travels in two halves. */
static void uc_boot(unsigned hi, unsigned lo)
{
    fiber_start((echod_fiber_t *)(((uintptr_t)hi << 32) | (uintptr_t)lo));
}
#endif

void echod_fiber_init_thread(echod_fiber_t *f)
{
    *f = (echod_fiber_t){0};
#if FIBER_TSAN
    f->tsan_fiber = __tsan_get_current_fiber();
#endif
}

void echod_fiber_make(echod_fiber_t *f, void *stack_lo, size_t size, void (*entry)(void *), void *arg)
{
    *f = (echod_fiber_t){0};
    f->stack_lo = stack_lo;
    f->stack_size = size;
    f->entry = entry;
    f->arg = arg;
#if FIBER_ASAN
    /* munmap leaves ASan's shadow as it was: a new stack may sit where old frames were poisoned */
    ASAN_UNPOISON_MEMORY_REGION(stack_lo, size);
#endif
#if FIBER_TSAN
    f->tsan_fiber = __tsan_create_fiber(0);
    f->tsan_owned = 1;
#endif
#if !ECHOD_FIBER_USE_UCONTEXT
    /* What echod_fiber__jump pops: r15 r14 r13 r12 rbx rbp, then the return address (boot). */
    uintptr_t top = ((uintptr_t)stack_lo + size) & ~(uintptr_t)15;
    void **slot = (void **)(top - 72);
    slot[0] = slot[1] = NULL;
    slot[2] = (void *)fiber_start;
    slot[3] = f;
    slot[4] = slot[5] = NULL; /* rbp 0 ends frame-pointer walks (ASan's, perf's) here */
    slot[6] = (void *)echod_fiber__boot;
    f->sp = slot;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = stack_lo;
    f->uc.uc_stack.ss_size = size;
    f->uc.uc_link = NULL;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->uc, (void (*)(void))uc_boot, 2, (unsigned)(p >> 32), (unsigned)p);
#endif
}

void echod_fiber_switch(echod_fiber_t *from, echod_fiber_t *to)
{
    to->resumed_by = from;
#if FIBER_ASAN
    __sanitizer_start_switch_fiber(&from->asan_fake_stack, to->stack_lo, to->stack_size);
#endif
#if FIBER_TSAN
    __tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
#if !ECHOD_FIBER_USE_UCONTEXT
    echod_fiber__jump(&from->sp, to->sp);
#else
    swapcontext(&from->uc, &to->uc);
#endif
    /* Back in `from`, maybe on another thread: from->resumed_by says who switched here. */
#if FIBER_ASAN
    const void *lo;
    size_t size;
    __sanitizer_finish_switch_fiber(from->asan_fake_stack, &lo, &size);
    if (from->resumed_by != NULL && from->resumed_by->stack_lo == NULL) {
        from->resumed_by->stack_lo = (void *)lo;
        from->resumed_by->stack_size = size;
    }
#endif
}

void echod_fiber_dispose(echod_fiber_t *f)
{
#if FIBER_ASAN
    /* the suspended frames' redzones must not outlive the mapping (malloc may map there next) */
    if (f->stack_lo != NULL && f->entry != NULL)
        ASAN_UNPOISON_MEMORY_REGION(f->stack_lo, f->stack_size);
#endif
#if FIBER_TSAN
    if (f->tsan_owned)
        __tsan_destroy_fiber(f->tsan_fiber);
#endif
    f->tsan_fiber = NULL;
    f->tsan_owned = 0;
}

unsigned echod_fiber_stack_register(void *lo, size_t size)
{
#if FIBER_VALGRIND
    return VALGRIND_STACK_REGISTER(lo, (char *)lo + size);
#else
    (void)lo;
    (void)size;
    return 0;
#endif
}

void echod_fiber_stack_peek(void *lo, size_t size)
{
#if FIBER_VALGRIND
    /* below a suspended fiber's stack pointer memcheck says "no access"; the bytes are ours */
    (void)VALGRIND_MAKE_MEM_DEFINED(lo, size);
#else
    (void)lo;
    (void)size;
#endif
}

void echod_fiber_stack_deregister(unsigned id)
{
#if FIBER_VALGRIND
    VALGRIND_STACK_DEREGISTER(id);
#else
    (void)id;
#endif
}
