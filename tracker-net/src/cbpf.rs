//! Classic BPF programs that pick a socket of a `SO_REUSEPORT` group
//! (`SO_ATTACH_REUSEPORT_CBPF`): the kernel runs one on each datagram, with
//! the packet starting at the UDP payload, and delivers the datagram to the
//! socket whose index in the group it returns; an index past the group's
//! size falls back to the kernel's own hash.
//!
//! What is here: the instructions (the kernel's `struct sock_filter`), a
//! small assembler for them, an interpreter of the same subset that the
//! kernel runs (so that a program can be tested against the Rust code it
//! mirrors without a socket), and the attach call.

use std::io;
use std::os::fd::AsRawFd;

/// One instruction, laid out as the kernel's `struct sock_filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Instruction {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

// Instruction classes, sizes, modes and operations (linux/bpf_common.h).
pub const LD: u16 = 0x00;
pub const LDX: u16 = 0x01;
pub const ST: u16 = 0x02;
pub const ALU: u16 = 0x04;
pub const JMP: u16 = 0x05;
pub const RET: u16 = 0x06;
pub const MISC: u16 = 0x07;
pub const W: u16 = 0x00;
pub const H: u16 = 0x08;
pub const B: u16 = 0x10;
pub const IMM: u16 = 0x00;
pub const ABS: u16 = 0x20;
pub const MEM: u16 = 0x60;
pub const LEN: u16 = 0x80;
pub const ADD: u16 = 0x00;
pub const SUB: u16 = 0x10;
pub const MUL: u16 = 0x20;
pub const DIV: u16 = 0x30;
pub const OR: u16 = 0x40;
pub const AND: u16 = 0x50;
pub const LSH: u16 = 0x60;
pub const RSH: u16 = 0x70;
pub const MOD: u16 = 0x90;
pub const XOR: u16 = 0xa0;
pub const JA: u16 = 0x00;
pub const JEQ: u16 = 0x10;
pub const JGT: u16 = 0x20;
pub const JGE: u16 = 0x30;
pub const JSET: u16 = 0x40;
/// Operand: the constant `k`.
pub const K: u16 = 0x00;
/// Operand: the index register X.
pub const X: u16 = 0x08;
/// `RET` of the accumulator rather than of `k`.
pub const RET_A: u16 = 0x10;
pub const TAX: u16 = 0x00;
pub const TXA: u16 = 0x80;

/// Scratch memory cells (`M[0..16]`).
pub const MEMORY_CELLS: u32 = 16;
/// The longest program the kernel takes (`BPF_MAXINSNS`).
pub const MAX_INSTRUCTIONS: usize = 4096;

/// A statement: an instruction that does not jump.
pub const fn stmt(code: u16, k: u32) -> Instruction {
    Instruction {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// A conditional jump: on true skip `jt` instructions, on false `jf`.
pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Instruction {
    Instruction { code, jt, jf, k }
}

/// Runs `program` on `packet` as the kernel does, for the instructions this
/// module names: a load past the packet's end, or a division by a zero X,
/// ends the program with 0, as in the kernel. A program that jumps out of
/// itself or ends without `RET` also gives 0 (the kernel refuses such a
/// program at attach).
pub fn run(program: &[Instruction], packet: &[u8]) -> u32 {
    let (mut a, mut x) = (0u32, 0u32);
    let mut memory = [0u32; MEMORY_CELLS as usize];
    let mut pc = 0usize;
    while let Some(&Instruction { code, jt, jf, k }) = program.get(pc) {
        pc += 1;
        let operand = if code & X != 0 { x } else { k };
        match code & 0x07 {
            LD | LDX => {
                let value = match code & 0xe0 {
                    IMM => k,
                    LEN => packet.len() as u32,
                    MEM => match memory.get(k as usize) {
                        Some(&v) => v,
                        None => return 0,
                    },
                    ABS => match load(packet, k as usize, code & 0x18) {
                        Some(v) => v,
                        None => return 0,
                    },
                    _ => return 0,
                };
                if code & 0x07 == LD {
                    a = value;
                } else {
                    x = value;
                }
            }
            ST => match memory.get_mut(k as usize) {
                Some(cell) => *cell = a,
                None => return 0,
            },
            ALU => {
                a = match code & 0xf0 {
                    ADD => a.wrapping_add(operand),
                    SUB => a.wrapping_sub(operand),
                    MUL => a.wrapping_mul(operand),
                    DIV => match a.checked_div(operand) {
                        Some(v) => v,
                        None => return 0,
                    },
                    MOD => match a.checked_rem(operand) {
                        Some(v) => v,
                        None => return 0,
                    },
                    OR => a | operand,
                    AND => a & operand,
                    XOR => a ^ operand,
                    LSH => a.checked_shl(operand).unwrap_or(0),
                    RSH => a.checked_shr(operand).unwrap_or(0),
                    _ => return 0,
                }
            }
            JMP => {
                let taken = match code & 0xf0 {
                    JA => {
                        pc += k as usize;
                        continue;
                    }
                    JEQ => a == operand,
                    JGT => a > operand,
                    JGE => a >= operand,
                    JSET => a & operand != 0,
                    _ => return 0,
                };
                pc += usize::from(if taken { jt } else { jf });
            }
            RET => return if code & RET_A != 0 { a } else { k },
            MISC => {
                if code & 0xf8 == TXA {
                    a = x;
                } else {
                    x = a;
                }
            }
            _ => return 0,
        }
    }
    0
}

/// The big-endian word, half-word or byte of `size` at `offset`.
fn load(packet: &[u8], offset: usize, size: u16) -> Option<u32> {
    let bytes = packet.get(offset..)?;
    match size {
        W => bytes.first_chunk::<4>().map(|b| u32::from_be_bytes(*b)),
        H => bytes
            .first_chunk::<2>()
            .map(|b| u16::from_be_bytes(*b).into()),
        B => bytes.first().map(|&b| b.into()),
        _ => None,
    }
}

/// Attaches `program` to the `SO_REUSEPORT` group of `socket` (which must
/// be bound): from then on it picks the socket of the group that each
/// datagram goes to. One attach serves the whole group, whichever of its
/// sockets it is made on.
pub fn attach_reuseport(socket: &impl AsRawFd, program: &[Instruction]) -> io::Result<()> {
    let len = u16::try_from(program.len())
        .ok()
        .filter(|&n| n > 0 && usize::from(n) <= MAX_INSTRUCTIONS)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "program length"))?;
    let fprog = libc::sock_fprog {
        len,
        // The kernel copies the program and only reads it.
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `Instruction` has the layout of `sock_filter`; `fprog` points
    // at `len` of them, alive for the call; the fd is a socket we hold.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_have_the_kernels_layout() {
        assert_eq!(
            std::mem::size_of::<Instruction>(),
            std::mem::size_of::<libc::sock_filter>()
        );
        assert_eq!(std::mem::align_of::<Instruction>(), 4);
    }

    #[test]
    fn loads_are_big_endian_and_a_load_past_the_end_gives_zero() {
        let program = [stmt(LD | W | ABS, 1), stmt(RET | RET_A, 0)];
        assert_eq!(run(&program, &[9, 1, 2, 3, 4]), 0x0102_0304);
        assert_eq!(run(&program, &[9, 1, 2, 3]), 0);
        let half = [stmt(LD | H | ABS, 0), stmt(RET | RET_A, 0)];
        assert_eq!(run(&half, &[0xab, 0xcd]), 0xabcd);
        let byte = [stmt(LD | B | ABS, 2), stmt(RET | RET_A, 0)];
        assert_eq!(run(&byte, &[1, 2, 3]), 3);
    }

    #[test]
    fn arithmetic_wraps_and_a_division_by_zero_gives_zero() {
        let program = [
            stmt(LD | IMM, 0xffff_fff0),
            stmt(ALU | ADD | K, 0x20),
            stmt(ALU | MUL | K, 3),
            stmt(MISC | TAX, 0),
            stmt(ALU | XOR | X, 0),
            stmt(ALU | OR | K, 0x30),
            stmt(RET | RET_A, 0),
        ];
        assert_eq!(run(&program, &[]), 0x30);
        let by_zero = [stmt(LDX | IMM, 0), stmt(ALU | MOD | X, 0), stmt(RET | K, 7)];
        assert_eq!(run(&by_zero, &[]), 0);
    }

    #[test]
    fn jumps_skip_forward_by_their_offsets() {
        let program = [
            stmt(LD | W | LEN, 0),
            jump(JMP | JGE | K, 4, 0, 1),
            stmt(RET | K, 1),
            stmt(RET | K, 2),
        ];
        assert_eq!(run(&program, &[0; 4]), 1);
        assert_eq!(run(&program, &[0; 3]), 2);
        let always = [stmt(JMP | JA, 1), stmt(RET | K, 1), stmt(RET | K, 2)];
        assert_eq!(run(&always, &[]), 2);
        let memory = [
            stmt(LD | IMM, 5),
            stmt(ST, 3),
            stmt(LD | IMM, 0),
            stmt(LDX | MEM, 3),
            stmt(MISC | TXA, 0),
            stmt(RET | RET_A, 0),
        ];
        assert_eq!(run(&memory, &[]), 5);
    }

    #[test]
    fn a_program_without_ret_gives_zero() {
        assert_eq!(run(&[stmt(LD | IMM, 5)], &[]), 0);
        assert_eq!(run(&[stmt(JMP | JA, 9)], &[]), 0);
    }
}
