/*
 * The fiber switch (see fiber.h). A switch saves what the platform's procedure call standard
 * says a call preserves on the old stack, swaps stack pointers and restores the same off the new
 * one; whatever else a fiber had live, its compiler already saved around the call.
 *  - x86-64 (System V): rbx, rbp, r12-r15 and rsp. MXCSR and the x87 control word are
 *    callee-saved too, but nothing in echod changes them, so every fiber shares the thread's.
 *  - aarch64 (AAPCS64): x19-x28, the frame pointer x29, the link register x30, sp, and the low
 *    64 bits of v8-v15 (d8-d15: the upper halves and v0-v7, v16-v31 are caller-saved). The FPCR's
 *    modes are global to the thread like MXCSR, the FPSR's flags are not preserved by a call,
 *    and x18 (the platform register) is the thread's: none of them is switched.
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
 * echod_fiber__boot: where a new fiber's first jump "returns" to, with the fiber and fiber_start
 * in two callee-saved registers (set up by echod_fiber_make) and the stack 16-byte aligned for
 * the call. Both are hidden: only this file calls them.
 */
void echod_fiber__jump(void **save, void *sp);
void echod_fiber__boot(void);
#if defined(__x86_64__)
/* The frame jump pushes, from the new stack pointer up: r15 r14 r13 r12 rbx rbp, return address. */
#define FIBER_FRAME_WORDS 7
#define FIBER_FRAME_ARG   3 /* r12: the fiber */
#define FIBER_FRAME_START 2 /* r13: fiber_start */
#define FIBER_FRAME_FP    5 /* rbp */
#define FIBER_FRAME_RET   6 /* the return address */
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
#elif defined(__aarch64__)
/*
 * The frame (160 bytes, so sp stays 16-byte aligned as AArch64 requires of it at every access),
 * from the new stack pointer up: x19 ... x28, x29 (fp), x30 (lr), d8 ... d15. The jump returns
 * through the restored x30, so a new fiber's first jump lands in echod_fiber__boot.
 */
#define FIBER_FRAME_WORDS 20
#define FIBER_FRAME_ARG   0  /* x19: the fiber */
#define FIBER_FRAME_START 1  /* x20: fiber_start */
#define FIBER_FRAME_FP    10 /* x29 */
#define FIBER_FRAME_RET   11 /* x30 */
__asm__(".text\n"
        ".p2align 2\n"
        ".globl echod_fiber__jump\n"
        ".hidden echod_fiber__jump\n"
        ".type echod_fiber__jump, %function\n"
        "echod_fiber__jump:\n"
        "    sub sp, sp, #160\n"
        "    stp x19, x20, [sp, #0]\n"
        "    stp x21, x22, [sp, #16]\n"
        "    stp x23, x24, [sp, #32]\n"
        "    stp x25, x26, [sp, #48]\n"
        "    stp x27, x28, [sp, #64]\n"
        "    stp x29, x30, [sp, #80]\n"
        "    stp d8, d9, [sp, #96]\n"
        "    stp d10, d11, [sp, #112]\n"
        "    stp d12, d13, [sp, #128]\n"
        "    stp d14, d15, [sp, #144]\n"
        "    mov x9, sp\n"
        "    str x9, [x0]\n"
        "    mov sp, x1\n"
        "    ldp x19, x20, [sp, #0]\n"
        "    ldp x21, x22, [sp, #16]\n"
        "    ldp x23, x24, [sp, #32]\n"
        "    ldp x25, x26, [sp, #48]\n"
        "    ldp x27, x28, [sp, #64]\n"
        "    ldp x29, x30, [sp, #80]\n"
        "    ldp d8, d9, [sp, #96]\n"
        "    ldp d10, d11, [sp, #112]\n"
        "    ldp d12, d13, [sp, #128]\n"
        "    ldp d14, d15, [sp, #144]\n"
        "    add sp, sp, #160\n"
        "    ret\n"
        ".size echod_fiber__jump, .-echod_fiber__jump\n"
        ".p2align 2\n"
        ".globl echod_fiber__boot\n"
        ".hidden echod_fiber__boot\n"
        ".type echod_fiber__boot, %function\n"
        "echod_fiber__boot:\n"
        "    mov x0, x19\n"
        "    blr x20\n"
        "    brk #1\n"
        ".size echod_fiber__boot, .-echod_fiber__boot\n");
#endif
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
    /* The frame echod_fiber__jump restores: a zero frame pointer ends frame-pointer walks
     * (ASan's, perf's) here; the return address is boot. */
    uintptr_t top = ((uintptr_t)stack_lo + size) & ~(uintptr_t)15;
    void **slot = (void **)(top - FIBER_FRAME_WORDS * sizeof(void *));
    for (int i = 0; i < FIBER_FRAME_WORDS; i++)
        slot[i] = NULL;
    slot[FIBER_FRAME_ARG] = f;
    slot[FIBER_FRAME_START] = (void *)fiber_start;
    slot[FIBER_FRAME_FP] = NULL;
    slot[FIBER_FRAME_RET] = (void *)echod_fiber__boot;
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

const char *echod_fiber_switch_name(void)
{
#if ECHOD_FIBER_USE_UCONTEXT
    return "ucontext";
#elif defined(__x86_64__)
    return "x86_64";
#else
    return "aarch64";
#endif
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
