//! The common body of every trampoline, and its two hooks.

use crate::stubs::{SLOTS, SYMBOLS, TABLES};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Trampoline indices: symbols first, then `TABLES * SLOTS` table slots.
pub const TOTAL: usize = SYMBOLS + TABLES * SLOTS;

/// The function each trampoline forwards to (0: not resolved yet).
pub static TARGET: [AtomicUsize; TOTAL] = [const { AtomicUsize::new(0) }; TOTAL];

/// The common body: entered by `jmp` from a trampoline with the index in
/// `r11d`, the caller's return address on top of the stack and its
/// arguments in place. Saves the argument registers, asks [`before`] for
/// the function, calls it with the same register arguments and 16 stack
/// slots copied from the caller's, hands the result to [`after`], and
/// returns it to the caller. Both hooks also get the saved general
/// argument registers (six words).
#[unsafe(naked)]
pub unsafe extern "C" fn common() {
    core::arch::naked_asm!(
        "push rbp",
        "mov rbp, rsp",
        "push rbx",
        "push r12",
        "mov ebx, r11d",
        // Argument registers: 6 general, 8 vector (176 bytes, keeps the
        // stack 16-byte aligned).
        "sub rsp, 176",
        "mov [rsp], rdi; mov [rsp + 8], rsi; mov [rsp + 16], rdx",
        "mov [rsp + 24], rcx; mov [rsp + 32], r8; mov [rsp + 40], r9",
        "movdqu [rsp + 48], xmm0; movdqu [rsp + 64], xmm1; movdqu [rsp + 80], xmm2; movdqu [rsp + 96], xmm3",
        "movdqu [rsp + 112], xmm4; movdqu [rsp + 128], xmm5; movdqu [rsp + 144], xmm6; movdqu [rsp + 160], xmm7",
        "mov rdi, rbx",
        "mov rsi, rsp",
        "call {before}",
        "mov r12, rax",
        // The caller's stack arguments, above its return address.
        "sub rsp, 128",
        "xor ecx, ecx",
        "2:",
        "mov rax, [rbp + 16 + rcx * 8]",
        "mov [rsp + rcx * 8], rax",
        "inc ecx",
        "cmp ecx, 16",
        "jb 2b",
        // The saved argument registers, now 128 bytes further up.
        "mov rdi, [rsp + 128]; mov rsi, [rsp + 136]; mov rdx, [rsp + 144]",
        "mov rcx, [rsp + 152]; mov r8, [rsp + 160]; mov r9, [rsp + 168]",
        "movdqu xmm0, [rsp + 176]; movdqu xmm1, [rsp + 192]; movdqu xmm2, [rsp + 208]; movdqu xmm3, [rsp + 224]",
        "movdqu xmm4, [rsp + 240]; movdqu xmm5, [rsp + 256]; movdqu xmm6, [rsp + 272]; movdqu xmm7, [rsp + 288]",
        "call r12",
        "mov r12, rax",
        "add rsp, 128",
        "mov rdi, rbx",
        "mov rsi, r12",
        "mov rdx, rsp",
        "call {after}",
        "mov rax, r12",
        "add rsp, 176",
        "pop r12",
        "pop rbx",
        "pop rbp",
        "ret",
        before = sym before,
        after = sym after,
    )
}

/// Answers `CUDA_ERROR_NOT_SUPPORTED` for a symbol the forwarded library
/// lacks.
extern "C" fn missing() -> u32 {
    801
}

/// The function trampoline `i` forwards to; `args` are the caller's six
/// general argument registers.
extern "C" fn before(i: usize, args: *const [usize; 6]) -> usize {
    let f = match TARGET.get(i).map(|t| t.load(Ordering::Acquire)) {
        Some(0) | None => crate::driver::resolve(i).unwrap_or(missing as *const () as usize),
        Some(f) => f,
    };
    crate::report::called(i);
    if i >= crate::stubs::SYMBOLS {
        // SAFETY: `common` passes the six words it saved.
        crate::args::before(i, unsafe { &*args });
    }
    f
}

/// Records what trampoline `i`'s function returned.
extern "C" fn after(i: usize, ret: usize, args: *const [usize; 6]) {
    crate::report::returned(i, ret as u32);
    if i >= crate::stubs::SYMBOLS {
        // SAFETY: as in `before`.
        crate::args::after(i, ret, unsafe { &*args });
    }
}
