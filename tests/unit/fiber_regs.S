/*
 * regs_call(seed, fn, a, b) for test_fiber.c: every callee-saved register of the platform's
 * procedure call standard set from seed, fn(a, b) called, and on return a mask of the registers
 * that changed (see test_fiber.c for the bits). regs_clobber is a function that breaks the
 * contract (one register changed), to show the check catches it.
 */
#if defined(__x86_64__)
        .text
        .globl regs_call
        .type regs_call, @function
regs_call:
        pushq %rbp
        pushq %rbx
        pushq %r12
        pushq %r13
        pushq %r14
        pushq %r15
        pushq %rdi                      /* 16(%rsp): the seed */
        pushq %rsi                      /* 8(%rsp): fn */
        subq $8, %rsp                   /* 9 words pushed: rsp 16-byte aligned for the call */
        leaq 1(%rdi), %rbx
        leaq 2(%rdi), %rbp
        leaq 3(%rdi), %r12
        leaq 4(%rdi), %r13
        leaq 5(%rdi), %r14
        leaq 6(%rdi), %r15
        movq %rdx, %rdi
        movq %rcx, %rsi
        call *8(%rsp)
        movq 16(%rsp), %rcx
        xorl %eax, %eax
        .macro chk reg, n, bit
        leaq \n(%rcx), %rdx
        xorl %r8d, %r8d
        cmpq %rdx, \reg
        setne %r8b
        shlq $\bit, %r8
        orq %r8, %rax
        .endm
        chk %rbx, 1, 0
        chk %rbp, 2, 1
        chk %r12, 3, 2
        chk %r13, 4, 3
        chk %r14, 5, 4
        chk %r15, 6, 5
        addq $24, %rsp
        popq %r15
        popq %r14
        popq %r13
        popq %r12
        popq %rbx
        popq %rbp
        ret
        .size regs_call, .-regs_call

        .globl regs_clobber
        .type regs_clobber, @function
regs_clobber:                           /* breaks the contract on purpose: r15 changed */
        xorq $1, %r15
        ret
        .size regs_clobber, .-regs_clobber
#elif defined(__aarch64__)
        .text
        .p2align 2
        .globl regs_call
        .type regs_call, %function
regs_call:
        stp x29, x30, [sp, #-176]!
        mov x29, sp
        stp x19, x20, [sp, #16]
        stp x21, x22, [sp, #32]
        stp x23, x24, [sp, #48]
        stp x25, x26, [sp, #64]
        stp x27, x28, [sp, #80]
        stp d8, d9, [sp, #96]
        stp d10, d11, [sp, #112]
        stp d12, d13, [sp, #128]
        stp d14, d15, [sp, #144]
        stp x0, x1, [sp, #160]          /* the seed, fn */
        .irp n, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28
        add x\n, x0, #\n
        .endr
        .irp n, 8, 9, 10, 11, 12, 13, 14, 15
        add x10, x0, #\n
        fmov d\n, x10
        .endr
        ldr x16, [sp, #168]
        mov x0, x2
        mov x1, x3
        blr x16
        ldr x9, [sp, #160]
        mov x0, #0
        .macro chk reg, n, bit
        add x10, x9, #\n
        cmp \reg, x10
        cset x11, ne
        orr x0, x0, x11, lsl #\bit
        .endm
        chk x19, 19, 0
        chk x20, 20, 1
        chk x21, 21, 2
        chk x22, 22, 3
        chk x23, 23, 4
        chk x24, 24, 5
        chk x25, 25, 6
        chk x26, 26, 7
        chk x27, 27, 8
        chk x28, 28, 9
        mov x10, sp                     /* x29 was sp on entry, and sp must be back there */
        cmp x29, x10
        cset x11, ne
        orr x0, x0, x11, lsl #10
        .macro chkd n, bit
        fmov x12, d\n
        add x10, x9, #\n
        cmp x12, x10
        cset x11, ne
        orr x0, x0, x11, lsl #\bit
        .endm
        chkd 8, 11
        chkd 9, 12
        chkd 10, 13
        chkd 11, 14
        chkd 12, 15
        chkd 13, 16
        chkd 14, 17
        chkd 15, 18
        ldp x19, x20, [sp, #16]
        ldp x21, x22, [sp, #32]
        ldp x23, x24, [sp, #48]
        ldp x25, x26, [sp, #64]
        ldp x27, x28, [sp, #80]
        ldp d8, d9, [sp, #96]
        ldp d10, d11, [sp, #112]
        ldp d12, d13, [sp, #128]
        ldp d14, d15, [sp, #144]
        ldp x29, x30, [sp], #176
        ret
        .size regs_call, .-regs_call

        .p2align 2
        .globl regs_clobber
        .type regs_clobber, %function
regs_clobber:                           /* breaks the contract on purpose: x28 changed */
        eor x28, x28, #1
        ret
        .size regs_clobber, .-regs_clobber
#endif
        .section .note.GNU-stack, "", %progbits
