/*
 * The fiber switch itself (dispatch/fiber.c), on whichever switch this build has (x86-64 or
 * aarch64 assembly, or ucontext): round trips, every callee-saved register of the platform's
 * procedure call standard surviving a switch in both directions (general and, on aarch64, the
 * SIMD d8-d15), the stack alignment a new fiber starts with, and a fiber resumed on another
 * thread than the one it last ran on (what a virtual thread does when another carrier mounts it).
 * test_exec runs the switch inside the virtual executor.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "check.h"
#include "dispatch/exec.h"
#include "dispatch/fiber.h"

#define STACK_BYTES (64 * 1024)

/* A sanitizer's fiber bookkeeping costs far more than the switch: fewer round trips there. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define ROUND_TRIPS 5000
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define ROUND_TRIPS 5000
#endif
#endif
#ifndef ROUND_TRIPS
#define ROUND_TRIPS 100000
#endif

static unsigned stack_ids[4], nstacks;

/* A stack as exec_virtual.c makes one: mapped, and registered with valgrind (memcheck runs this
 * test too, and takes an unregistered switch for a huge stack change). */
static void *map_stack(void)
{
    void *p = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    stack_ids[nstacks++ % 4] = echod_fiber_stack_register(p, STACK_BYTES);
    return p;
}

static void unmap_stack(void *p)
{
    echod_fiber_stack_deregister(stack_ids[--nstacks % 4]);
    munmap(p, STACK_BYTES);
}

/*
 * regs_call(seed, fn, a, b), in fiber_regs.S: loads every callee-saved register with a value made
 * from seed, calls fn(a, b) straight from assembly (so no copy the compiler saved can hide a
 * register lost inside fn), and returns a bit mask of the registers that no longer hold their
 * value (0: all survived); it restores them for its own caller. regs_switch calls
 * echod_fiber_switch that way; regs_clobber breaks the contract on purpose.
 *   x86-64: bit 0 rbx, 1 rbp, 2-5 r12-r15.
 *   aarch64: bits 0-9 x19-x28, 10 x29 (fp, and sp back where it was), 11-18 d8-d15.
 */
uint64_t regs_call(uint64_t seed, void (*fn)(void *, void *), void *a, void *b);
void regs_clobber(void *a, void *b);

static uint64_t regs_switch(uint64_t seed, echod_fiber_t *from, echod_fiber_t *to)
{
    return regs_call(seed, (void (*)(void *, void *))echod_fiber_switch, from, to);
}

#if defined(__x86_64__)
#define REGS_ALL 0x3fu
#elif defined(__aarch64__)
#define REGS_ALL 0x7ffffu
#else
#error "test_fiber: no register check for this architecture (fiber_regs.S)"
#endif

/* ---- round trips ---- */

static echod_fiber_t main_ctx, fib_ctx;
static long pings;

static void ping_entry(void *arg)
{
    long *counter = arg;
    for (;;) {
        (*counter)++;
        echod_fiber_switch(&fib_ctx, &main_ctx);
    }
}

static void test_round_trips(void)
{
    void *stack = map_stack();
    CHECK(stack != NULL);
    echod_fiber_init_thread(&main_ctx);
    echod_fiber_make(&fib_ctx, stack, STACK_BYTES, ping_entry, &pings);
    pings = 0;
    for (long i = 1; i <= ROUND_TRIPS; i++) {
        echod_fiber_switch(&main_ctx, &fib_ctx);
        if (pings != i)
            break;
    }
    CHECK(pings == ROUND_TRIPS);
    CHECK(fib_ctx.resumed_by == &main_ctx && main_ctx.resumed_by == &fib_ctx);
    echod_fiber_dispose(&fib_ctx);
    unmap_stack(stack);
}

/* ---- callee-saved registers, both ways ---- */

static uint64_t fiber_bad; /* OR of the masks the fiber saw */
static uintptr_t fiber_frame;

static void regs_entry(void *arg)
{
    (void)arg;
    fiber_frame = (uintptr_t)__builtin_frame_address(0);
    for (uint64_t i = 0;; i++)
        fiber_bad |= regs_switch(0x5a5a000000000000u + (i << 8), &fib_ctx, &main_ctx);
}

static void test_callee_saved(void)
{
    void *stack = map_stack();
    CHECK(stack != NULL);
    echod_fiber_init_thread(&main_ctx);
    echod_fiber_make(&fib_ctx, stack, STACK_BYTES, regs_entry, NULL);
    fiber_bad = 0;
    uint64_t main_bad = 0;
    /* each side holds its own values across the other side's run, with the other's registers live */
    for (uint64_t i = 0; i < 1000; i++)
        main_bad |= regs_switch(0xa5a5000000000000u + (i << 8), &main_ctx, &fib_ctx);
    if (main_bad != 0 || fiber_bad != 0)
        fprintf(stderr, "callee-saved registers lost: main 0x%llx, fiber 0x%llx (of 0x%x)\n",
                (unsigned long long)main_bad, (unsigned long long)fiber_bad, REGS_ALL);
    CHECK(main_bad == 0);
    CHECK(fiber_bad == 0);
    /* a new fiber's first frame is 16-byte aligned, as both ABIs require at a call */
    CHECK(fiber_frame != 0 && fiber_frame % 16 == 0);
    CHECK(fiber_frame > (uintptr_t)stack && fiber_frame < (uintptr_t)stack + STACK_BYTES);
    echod_fiber_dispose(&fib_ctx);
    unmap_stack(stack);
}

/* The check must be able to fail: a function that changes one register is reported, exactly. */
#if defined(__x86_64__)
#define CLOBBER_BIT (1u << 5) /* r15 */
#else
#define CLOBBER_BIT (1u << 9) /* x28 */
#endif

static void test_check_can_fail(void)
{
    CHECK(regs_call(0x7777000000000000u, regs_clobber, NULL, NULL) == CLOBBER_BIT);
}

/* ---- a fiber resumed on another thread ---- */

static echod_fiber_t mig_fiber;
static pthread_t mig_seen[2];

static void mig_entry(void *arg)
{
    echod_fiber_t **carrier = arg;
    for (int turn = 0;; turn++) {
        mig_seen[turn & 1] = pthread_self();
        fiber_bad |= regs_switch(0x3c3c000000000000u + ((uint64_t)turn << 8), &mig_fiber, *carrier);
    }
}

static echod_fiber_t *mig_carrier;

static void *mig_thread(void *arg)
{
    (void)arg;
    echod_fiber_t ctx;
    echod_fiber_init_thread(&ctx);
    mig_carrier = &ctx;
    uint64_t bad = regs_switch(0x1111000000000000u, &ctx, &mig_fiber);
    return (void *)(uintptr_t)(bad + 1);
}

static void test_resume_on_another_thread(void)
{
    void *stack = map_stack();
    CHECK(stack != NULL);
    fiber_bad = 0;
    echod_fiber_make(&mig_fiber, stack, STACK_BYTES, mig_entry, &mig_carrier);
    /* two threads in turn, each mounting the fiber once, as two carriers would */
    void *ret[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        CHECK(pthread_create(&t[i], NULL, mig_thread, NULL) == 0);
        CHECK(pthread_join(t[i], &ret[i]) == 0);
        CHECK((uintptr_t)ret[i] == 1); /* the carrier's own registers came back */
    }
    CHECK(pthread_equal(mig_seen[0], t[0]) && pthread_equal(mig_seen[1], t[1]));
    CHECK(fiber_bad == 0); /* the fiber's registers crossed threads */
    echod_fiber_dispose(&mig_fiber);
    unmap_stack(stack);
}

int main(void)
{
    printf("fiber switch: %s\n", echod_fiber_switch_name());
#ifdef ECHOD_EXPECT_FIBER_SWITCH
    /* the build asked for this switch (meson: host CPU and -Dfiber): make sure it is the one tested */
    CHECK(strcmp(echod_fiber_switch_name(), ECHOD_EXPECT_FIBER_SWITCH) == 0);
#endif
    CHECK(strcmp(echod_fiber_switch_name(), echod_exec_fiber_switch()) == 0);
    test_round_trips();
    test_callee_saved();
    test_check_can_fail();
    test_resume_on_another_thread();
    return check_done();
}
