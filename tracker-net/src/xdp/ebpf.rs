//! The XDP program that hands the tracker's UDP datagrams to AF_XDP
//! sockets, written as eBPF instructions: no C compiler at build time and
//! no object file at run time.
//!
//! What is here: the instructions (the kernel's `struct bpf_insn`), the
//! opcodes they use, constructors for them, a small assembler that resolves
//! jumps to labels (so that no offset is counted by hand), and the program
//! built from the addresses the tracker serves. Pure: loading and running
//! it is `bpf`'s work, and this module's tests do both, so that the real
//! verifier and the real interpreter (`BPF_PROG_TEST_RUN`) judge it.
//!
//! Constants come from the kernel's `include/uapi/linux/bpf.h`,
//! `bpf_common.h` and `if_ether.h`.

use std::fmt;
use std::net::IpAddr;

/// One instruction, laid out as the kernel's `struct bpf_insn`:
/// `code`, then the destination register in the bitfield's first four
/// bits and the source register in its last four (the low and high nibble
/// on a little-endian host, the other way round on a big-endian one: see
/// [`Instruction::new`]), a signed 16-bit offset and a signed 32-bit
/// immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Instruction {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

/// The eleven registers: R0 holds a helper's and the program's return
/// value, R1 to R5 a helper's arguments (clobbered by a call), R6 to R9
/// survive calls, R10 is the read-only frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Reg {
    R0 = 0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
}

/// The width of a memory load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// 8 bits.
    B,
    /// 16 bits.
    H,
    /// 32 bits.
    W,
    /// 64 bits.
    DW,
}

impl Size {
    const fn code(self) -> u8 {
        match self {
            Size::B => SIZE_B,
            Size::H => SIZE_H,
            Size::W => SIZE_W,
            Size::DW => SIZE_DW,
        }
    }
}

// Instruction classes (bpf_common.h; JMP32 and ALU64 from bpf.h).
pub const CLASS_LD: u8 = 0x00;
pub const CLASS_LDX: u8 = 0x01;
pub const CLASS_ALU: u8 = 0x04;
pub const CLASS_JMP: u8 = 0x05;
/// Jumps that compare the low 32 bits of their operands (Linux 5.1).
pub const CLASS_JMP32: u8 = 0x06;
pub const CLASS_ALU64: u8 = 0x07;
// Load sizes and modes.
pub const SIZE_W: u8 = 0x00;
pub const SIZE_H: u8 = 0x08;
pub const SIZE_B: u8 = 0x10;
pub const SIZE_DW: u8 = 0x18;
pub const MODE_IMM: u8 = 0x00;
pub const MODE_MEM: u8 = 0x60;
// ALU operations.
pub const ALU_ADD: u8 = 0x00;
pub const ALU_AND: u8 = 0x50;
pub const ALU_MOV: u8 = 0xb0;
// Jump operations (unsigned comparisons).
pub const JMP_JA: u8 = 0x00;
pub const JMP_JEQ: u8 = 0x10;
pub const JMP_JGT: u8 = 0x20;
pub const JMP_JGE: u8 = 0x30;
pub const JMP_JSET: u8 = 0x40;
pub const JMP_JNE: u8 = 0x50;
pub const JMP_JLT: u8 = 0xa0;
pub const JMP_JLE: u8 = 0xb0;
pub const JMP_CALL: u8 = 0x80;
pub const JMP_EXIT: u8 = 0x90;
/// Operand: the immediate.
pub const SRC_K: u8 = 0x00;
/// Operand: the source register.
pub const SRC_X: u8 = 0x08;

/// The `src` of a 64-bit immediate load whose immediate is a map's fd: the
/// kernel replaces it with the map's address at load.
pub const PSEUDO_MAP_FD: u8 = 1;
/// Helper `long bpf_redirect_map(map, u32 key, u64 flags)`.
pub const FUNC_REDIRECT_MAP: i32 = 51;
/// The longest program that an unprivileged loader may load; privileged
/// ones may load a million instructions since Linux 5.2.
pub const MAX_INSTRUCTIONS: usize = 4096;

// What an XDP program returns (enum xdp_action).
pub const XDP_ABORTED: u32 = 0;
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const XDP_REDIRECT: u32 = 4;

// `struct xdp_md`, the program's context: 32-bit fields that the verifier
// rewrites into the kernel's own. `data` and `data_end` become packet
// pointers once loaded.
pub const XDP_MD_DATA: i16 = 0;
pub const XDP_MD_DATA_END: i16 = 4;
pub const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

impl Instruction {
    /// An instruction from its fields. `struct bpf_insn` declares
    /// `__u8 dst_reg:4; __u8 src_reg:4;`: C compilers for little-endian
    /// hosts put the first bitfield in the low bits, those for big-endian
    /// hosts in the high bits, and the kernel reads the struct as its own
    /// compiler laid it out.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Instruction {
        let (dst, src) = (dst & 0x0f, src & 0x0f);
        let regs = if cfg!(target_endian = "big") {
            (dst << 4) | src
        } else {
            dst | (src << 4)
        };
        Instruction {
            code,
            regs,
            off,
            imm,
        }
    }

    /// The destination register's number.
    pub const fn dst(&self) -> u8 {
        if cfg!(target_endian = "big") {
            self.regs >> 4
        } else {
            self.regs & 0x0f
        }
    }

    /// The source register's number (or the pseudo source of a 64-bit
    /// immediate load).
    pub const fn src(&self) -> u8 {
        if cfg!(target_endian = "big") {
            self.regs & 0x0f
        } else {
            self.regs >> 4
        }
    }

    /// Whether it is a jump whose offset the assembler may set: a jump of
    /// either class, but neither a call nor an exit.
    const fn is_jump(&self) -> bool {
        let class = self.code & 0x07;
        let op = self.code & 0xf0;
        (class == CLASS_JMP || class == CLASS_JMP32) && op != JMP_CALL && op != JMP_EXIT
    }
}

/// `dst = imm` (sign-extended to 64 bits).
pub const fn mov64_imm(dst: Reg, imm: i32) -> Instruction {
    Instruction::new(CLASS_ALU64 | ALU_MOV | SRC_K, dst as u8, 0, 0, imm)
}

/// `dst = src`.
pub const fn mov64_reg(dst: Reg, src: Reg) -> Instruction {
    Instruction::new(CLASS_ALU64 | ALU_MOV | SRC_X, dst as u8, src as u8, 0, 0)
}

/// `dst += imm` (64-bit; on a packet pointer, moves it by `imm` bytes).
pub const fn add64_imm(dst: Reg, imm: i32) -> Instruction {
    Instruction::new(CLASS_ALU64 | ALU_ADD | SRC_K, dst as u8, 0, 0, imm)
}

/// `dst &= imm` (64-bit, `imm` sign-extended).
pub const fn and64_imm(dst: Reg, imm: i32) -> Instruction {
    Instruction::new(CLASS_ALU64 | ALU_AND | SRC_K, dst as u8, 0, 0, imm)
}

/// `dst = *(size *)(src + off)`, zero-extended to 64 bits. The bytes are
/// read in the host's order: a big-endian field from the packet reads as
/// its byte-swapped value on a little-endian host (see [`net16`]).
pub const fn ldx(size: Size, dst: Reg, src: Reg, off: i16) -> Instruction {
    Instruction::new(
        CLASS_LDX | size.code() | MODE_MEM,
        dst as u8,
        src as u8,
        off,
        0,
    )
}

/// `dst = the map whose fd is fd`: a 64-bit immediate load, two
/// instructions (the second holds the immediate's high half, 0 here).
pub const fn ld_map_fd(dst: Reg, fd: i32) -> [Instruction; 2] {
    [
        Instruction::new(
            CLASS_LD | SIZE_DW | MODE_IMM,
            dst as u8,
            PSEUDO_MAP_FD,
            0,
            fd,
        ),
        Instruction::new(0, 0, 0, 0, 0),
    ]
}

/// `if dst <op> imm goto +off`, comparing 64 bits (`imm` sign-extended).
/// The offset is left 0 for [`Assembler::jump`] to set.
pub const fn jump_imm(op: u8, dst: Reg, imm: i32) -> Instruction {
    Instruction::new(CLASS_JMP | op | SRC_K, dst as u8, 0, 0, imm)
}

/// `if (u32)dst <op> (u32)imm goto +off`: comparing the low 32 bits, so a
/// 32-bit constant with its top bit set compares as it reads (a 64-bit
/// comparison would sign-extend it and never match a zero-extended load).
pub const fn jump32_imm(op: u8, dst: Reg, imm: i32) -> Instruction {
    Instruction::new(CLASS_JMP32 | op | SRC_K, dst as u8, 0, 0, imm)
}

/// `if dst <op> src goto +off`, comparing 64 bits (the comparison of two
/// packet pointers that proves a load in bounds to the verifier).
pub const fn jump_reg(op: u8, dst: Reg, src: Reg) -> Instruction {
    Instruction::new(CLASS_JMP | op | SRC_X, dst as u8, src as u8, 0, 0)
}

/// `goto +off`.
pub const fn ja() -> Instruction {
    Instruction::new(CLASS_JMP | JMP_JA, 0, 0, 0, 0)
}

/// Calls helper `helper`: arguments in R1 to R5, the result in R0; R1 to
/// R5 are clobbered.
pub const fn call(helper: i32) -> Instruction {
    Instruction::new(CLASS_JMP | JMP_CALL, 0, 0, 0, helper)
}

/// Ends the program with R0.
pub const fn exit() -> Instruction {
    Instruction::new(CLASS_JMP | JMP_EXIT, 0, 0, 0, 0)
}

/// A 16-bit network-order field as a 16-bit load from the packet reads it
/// on this host: the bytes of `value` in network order, read in the host's
/// order (byte-swapped on x86 and arm64, which are little-endian; as is on
/// a big-endian host).
pub const fn net16(value: u16) -> i32 {
    u16::from_ne_bytes(value.to_be_bytes()) as i32
}

/// Four bytes of the packet (an IPv4 address, a quarter of an IPv6 one) as
/// a 32-bit load reads them on this host. For [`jump32_imm`] only: the
/// value may have its top bit set.
pub const fn net32(bytes: [u8; 4]) -> i32 {
    i32::from_ne_bytes(bytes)
}

/// A place in a program that jumps go to, made by [`Assembler::label`] and
/// put at a position by [`Assembler::bind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

/// What keeps the assembler from finishing a program: each is a bug in the
/// code that drives it, never a matter of input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AssemblyError {
    /// A jump to a label that was never bound.
    Unbound(Label),
    /// A label bound at two positions.
    BoundTwice(Label),
    /// A label of another assembler.
    UnknownLabel(Label),
    /// [`Assembler::jump`] given an instruction that is not a jump.
    NotAJump(Instruction),
    /// A jump whose offset does not fit 16 bits.
    OutOfRange(Label),
}

impl fmt::Display for AssemblyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssemblyError::Unbound(l) => write!(f, "label {} is never bound", l.0),
            AssemblyError::BoundTwice(l) => write!(f, "label {} is bound twice", l.0),
            AssemblyError::UnknownLabel(l) => write!(f, "label {} is not this program's", l.0),
            AssemblyError::NotAJump(i) => write!(f, "{i:?} is not a jump"),
            AssemblyError::OutOfRange(l) => write!(f, "label {} is out of a jump's range", l.0),
        }
    }
}

impl std::error::Error for AssemblyError {}

/// Builds a program whose jumps go to labels: a jump's offset (the number
/// of instructions it skips, counted from the next one) is set when the
/// program is finished, once every label has its position.
#[derive(Debug, Default)]
pub struct Assembler {
    program: Vec<Instruction>,
    /// The position each label is bound at.
    labels: Vec<Option<usize>>,
    /// Each jump's index in `program` and its label.
    jumps: Vec<(usize, Label)>,
    /// The first misuse, reported by `finish`.
    error: Option<AssemblyError>,
}

impl Assembler {
    pub fn new() -> Assembler {
        Assembler::default()
    }

    /// A new label, not yet at a position.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Puts `label` at the position of the next instruction.
    pub fn bind(&mut self, label: Label) {
        let here = self.program.len();
        match self.labels.get_mut(label.0) {
            Some(slot @ None) => *slot = Some(here),
            Some(Some(_)) => self.fail(AssemblyError::BoundTwice(label)),
            None => self.fail(AssemblyError::UnknownLabel(label)),
        }
    }

    /// Appends instructions that do not jump to labels.
    pub fn emit(&mut self, instructions: &[Instruction]) {
        self.program.extend_from_slice(instructions);
    }

    /// Appends `jump` (made by [`jump_imm`], [`jump32_imm`], [`jump_reg`]
    /// or [`ja`]), which goes to `to`.
    pub fn jump(&mut self, jump: Instruction, to: Label) {
        if !jump.is_jump() {
            self.fail(AssemblyError::NotAJump(jump));
        }
        self.jumps.push((self.program.len(), to));
        self.program.push(jump);
    }

    fn fail(&mut self, error: AssemblyError) {
        self.error.get_or_insert(error);
    }

    /// The program, with every jump's offset set.
    pub fn finish(mut self) -> Result<Vec<Instruction>, AssemblyError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        for &(at, label) in &self.jumps {
            let target = match self.labels.get(label.0) {
                Some(Some(target)) => *target,
                Some(None) => return Err(AssemblyError::Unbound(label)),
                None => return Err(AssemblyError::UnknownLabel(label)),
            };
            // Offsets count from the instruction after the jump.
            let off = i64::try_from(target)
                .ok()
                .zip(i64::try_from(at).ok())
                .and_then(|(target, at)| i16::try_from(target - at - 1).ok())
                .ok_or(AssemblyError::OutOfRange(label))?;
            if let Some(jump) = self.program.get_mut(at) {
                jump.off = off;
            }
        }
        Ok(self.program)
    }
}

/// A UDP address the program takes: `ip` unspecified takes every address
/// of its family (an unspecified IPv6 address takes IPv6 only: a
/// dual-stack socket's IPv4 datagrams need a 0.0.0.0 target too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub ip: IpAddr,
    pub port: u16,
}

/// The most targets a program takes.
pub const MAX_TARGETS: usize = 64;

/// What the program does with a datagram to a target when its queue has no
/// AF_XDP socket in the map: the low bits of `bpf_redirect_map`'s flags,
/// returned when the lookup fails (Linux 5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// Leave it to the kernel's stack: what the tracker uses, so that a
    /// datagram that reaches a queue without a socket is still answered
    /// by the stack's sockets (if any).
    Pass,
    /// Drop it. For tests: with an empty map, a datagram the program takes
    /// returns `XDP_DROP` while one it leaves returns `XDP_PASS`.
    Drop,
}

impl Fallback {
    /// The XDP action it stands for.
    pub const fn action(self) -> u32 {
        match self {
            Fallback::Pass => XDP_PASS,
            Fallback::Drop => XDP_DROP,
        }
    }
}

/// Why no program was built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgramError {
    /// No target: a program that takes nothing has no use.
    NoTargets,
    /// More than [`MAX_TARGETS`] targets.
    TooManyTargets { count: usize },
    /// The assembler refused the program (a bug here).
    Assembly(AssemblyError),
}

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProgramError::NoTargets => write!(f, "an XDP program needs at least one address"),
            ProgramError::TooManyTargets { count } => write!(
                f,
                "{count} addresses for the XDP program, past its limit of {MAX_TARGETS}"
            ),
            ProgramError::Assembly(e) => write!(f, "assembling the XDP program: {e}"),
        }
    }
}

impl std::error::Error for ProgramError {}

impl From<AssemblyError> for ProgramError {
    fn from(e: AssemblyError) -> Self {
        ProgramError::Assembly(e)
    }
}

// Frame layout (if_ether.h, RFC 791, RFC 8200, RFC 768), in bytes from the
// frame's start.
const ETH_HLEN: i32 = 14;
/// The destination MAC address: a 32-bit word, then a 16-bit one.
const ETH_DEST: i16 = 0;
const ETH_DEST_LOW: i16 = 4;
const ETH_TYPE: i16 = 12;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const IPPROTO_UDP: i32 = 17;
const UDP_HLEN: i32 = 8;
/// Offset of a UDP header's destination port.
const UDP_DEST: i32 = 2;
// IPv4 without options: version and IHL in the first byte (0x45), flags
// and fragment offset at 6, protocol at 9, source address at 12,
// destination at 16.
const IPV4_HLEN: i32 = 20;
const IPV4_VERSION_IHL: i16 = ETH_HLEN as i16;
const IPV4_VERSION_4_IHL_5: i32 = 0x45;
const IPV4_FRAG: i16 = ETH_HLEN as i16 + 6;
/// More-fragments flag and the fragment offset; DF (0x4000) is allowed.
const IPV4_MF_OFFSET: u16 = 0x3fff;
const IPV4_PROTOCOL: i16 = ETH_HLEN as i16 + 9;
const IPV4_SADDR: i16 = ETH_HLEN as i16 + 12;
const IPV4_DADDR: i16 = ETH_HLEN as i16 + 16;
const IPV4_UDP_DEST: i16 = (ETH_HLEN + IPV4_HLEN + UDP_DEST) as i16;
// IPv6: version in the first byte's high nibble, next header at 6, source
// address at 8, destination at 24.
const IPV6_HLEN: i32 = 40;
const IPV6_VERSION: i16 = ETH_HLEN as i16;
const IPV6_VERSION_MASK: i32 = 0xf0;
const IPV6_VERSION_6: i32 = 0x60;
const IPV6_NEXTHDR: i16 = ETH_HLEN as i16 + 6;
const IPV6_SADDR: i16 = ETH_HLEN as i16 + 8;
const IPV6_DADDR: i16 = ETH_HLEN as i16 + 24;
const IPV6_UDP_DEST: i16 = (ETH_HLEN + IPV6_HLEN + UDP_DEST) as i16;

// Registers of the program. R1 to R5 are the helper's arguments and lose
// their values at the call; the rest survive.
/// The context, on entry.
const CTX: Reg = Reg::R1;
/// The frame's start.
const DATA: Reg = Reg::R2;
const DATA_END: Reg = Reg::R3;
/// Scratch: the end of the bytes a block is about to read.
const END: Reg = Reg::R4;
/// The ethertype, then a field being checked, then an address word.
const FIELD: Reg = Reg::R5;
/// The queue the frame arrived on: the map's key.
const QUEUE: Reg = Reg::R6;
/// The UDP destination port, as loaded.
const PORT: Reg = Reg::R7;
/// The destination address: IPv4 in ADDR[0], IPv6 in ADDR[0..4].
const ADDR: [Reg; 4] = [Reg::R5, Reg::R4, Reg::R8, Reg::R9];

/// What a steering program is made of.
#[derive(Clone, Copy, Debug)]
pub struct Steering<'a> {
    /// The UDP addresses it takes (1 to [`MAX_TARGETS`]).
    pub targets: &'a [Target],
    /// The interface's Ethernet address: a frame sent to another (another
    /// host's, a multicast or the broadcast address) is the kernel's to
    /// take or drop.
    pub mac: [u8; 6],
    /// Whether IPv4 sources in 127.0.0.0/8 are the kernel's to drop, as
    /// they are unless `route_localnet` is set for the interface.
    pub loopback_is_martian: bool,
    /// The `XSKMAP` of the queues' AF_XDP sockets.
    pub xsk_map_fd: i32,
    /// What a taken datagram becomes when its queue has no socket.
    pub fallback: Fallback,
}

/// The XDP program: a UDP datagram to one of `targets` goes to the AF_XDP
/// socket in `xsk_map_fd` (an `XSKMAP`) at the index of the queue it
/// arrived on, `bpf_redirect_map(map, rx_queue_index, fallback)`, which
/// returns `fallback` when the queue has no socket there; everything else
/// passes to the kernel untouched. The tracker passes [`Fallback::Pass`].
///
/// It takes untagged Ethernet II frames sent to the interface's own
/// address, over IPv4 without options (IHL 5) that is not a fragment, or
/// IPv6 whose next header is UDP (no extension header), with a destination
/// address and port of a target, from a source the kernel would not drop
/// as a martian: not in 0.0.0.0/8, 224.0.0.0/4 (multicast), nor
/// 255.255.255.255, nor 127.0.0.0/8 when `loopback_is_martian`; over IPv6
/// not multicast, not ::1, not :: and not IPv4-mapped. Everything else
/// passes, for the kernel to answer over its sockets or to drop as it
/// always does: frames to another MAC address, VLAN-tagged frames (the
/// kernel knows which VLANs the host has), other ethertypes and protocols,
/// IPv4 options and fragments, IPv6 extension headers, martian sources,
/// and any frame too short for the headers the program reads, each of
/// whose loads follows a bounds check against `data_end`. Whether the
/// kernel would route an answer to the source back out of this interface
/// is the worker's to check (`route`): it needs the routing table.
///
/// The program's length grows with the targets (at most 6 instructions
/// each, about 470 for [`MAX_TARGETS`]).
pub fn steering_program(steering: &Steering<'_>) -> Result<Vec<Instruction>, ProgramError> {
    let targets = steering.targets;
    if targets.is_empty() {
        return Err(ProgramError::NoTargets);
    }
    if targets.len() > MAX_TARGETS {
        return Err(ProgramError::TooManyTargets {
            count: targets.len(),
        });
    }
    // Each family's targets: the port as a load reads it, and the address
    // words as loads read them (None: any address).
    let mut v4: Vec<(i32, Option<i32>)> = Vec::new();
    let mut v6: Vec<(i32, Option<[i32; 4]>)> = Vec::new();
    for target in targets {
        let port = net16(target.port);
        match target.ip {
            IpAddr::V4(ip) => v4.push((port, (!ip.is_unspecified()).then(|| net32(ip.octets())))),
            IpAddr::V6(ip) => v6.push((port, (!ip.is_unspecified()).then(|| words(ip.octets())))),
        }
    }

    let mut asm = Assembler::new();
    let pass = asm.label();
    let redirect = asm.label();

    // The queue, before the helper's arguments take R1; the frame's bounds.
    asm.emit(&[
        ldx(Size::W, QUEUE, CTX, XDP_MD_RX_QUEUE_INDEX),
        ldx(Size::W, DATA, CTX, XDP_MD_DATA),
        ldx(Size::W, DATA_END, CTX, XDP_MD_DATA_END),
    ]);

    // Ethernet: destination, source, ethertype. Shorter than 14 bytes: pass.
    bounds(&mut asm, ETH_HLEN, pass);
    // To this interface's address, or the kernel's to judge: it drops a
    // frame to another host's (PACKET_OTHERHOST) and takes multicast and
    // broadcast ones as it sees fit.
    let [m0, m1, m2, m3, m4, m5] = steering.mac;
    asm.emit(&[ldx(Size::W, FIELD, DATA, ETH_DEST)]);
    asm.jump(jump32_imm(JMP_JNE, FIELD, net32([m0, m1, m2, m3])), pass);
    asm.emit(&[ldx(Size::H, FIELD, DATA, ETH_DEST_LOW)]);
    asm.jump(
        jump32_imm(JMP_JNE, FIELD, net16(u16::from_be_bytes([m4, m5]))),
        pass,
    );

    // Dispatch on the ethertype: only the families that have targets. A
    // VLAN tag (0x8100, 0x88a8) passes: the kernel drops a frame of a VLAN
    // the host has no interface for, and routes the rest.
    asm.emit(&[ldx(Size::H, FIELD, DATA, ETH_TYPE)]);
    let ipv4 = asm.label();
    let ipv6 = asm.label();
    if !v4.is_empty() {
        asm.jump(jump32_imm(JMP_JEQ, FIELD, net16(ETH_P_IP)), ipv4);
    }
    if !v6.is_empty() {
        asm.jump(jump32_imm(JMP_JEQ, FIELD, net16(ETH_P_IPV6)), ipv6);
    }
    asm.jump(ja(), pass);

    if !v4.is_empty() {
        asm.bind(ipv4);
        let source = asm.label();
        // IPv4 and UDP headers, 42 bytes from the start.
        bounds(&mut asm, ETH_HLEN + IPV4_HLEN + UDP_HLEN, pass);
        // Version 4 with a 20-byte header: options pass (the UDP header
        // would not be at a fixed offset).
        asm.emit(&[ldx(Size::B, FIELD, DATA, IPV4_VERSION_IHL)]);
        asm.jump(jump32_imm(JMP_JNE, FIELD, IPV4_VERSION_4_IHL_5), pass);
        // Not a fragment: MF clear and offset 0 (only a first fragment has
        // the UDP header, and only the stack reassembles).
        asm.emit(&[ldx(Size::H, FIELD, DATA, IPV4_FRAG)]);
        asm.jump(jump32_imm(JMP_JSET, FIELD, net16(IPV4_MF_OFFSET)), pass);
        // UDP.
        asm.emit(&[ldx(Size::B, FIELD, DATA, IPV4_PROTOCOL)]);
        asm.jump(jump32_imm(JMP_JNE, FIELD, IPPROTO_UDP), pass);
        // The destination port and address.
        asm.emit(&[ldx(Size::H, PORT, DATA, IPV4_UDP_DEST)]);
        if v4.iter().any(|(_, ip)| ip.is_some()) {
            asm.emit(&[ldx(Size::W, ADDR[0], DATA, IPV4_DADDR)]);
        }
        // Each target in turn: its port, then its address if it names one.
        for &(port, ip) in &v4 {
            match ip {
                None => asm.jump(jump32_imm(JMP_JEQ, PORT, port), source),
                Some(word) => {
                    let next = asm.label();
                    asm.jump(jump32_imm(JMP_JNE, PORT, port), next);
                    asm.jump(jump32_imm(JMP_JEQ, ADDR[0], word), source);
                    asm.bind(next);
                }
            }
        }
        asm.jump(ja(), pass);

        // The source: ip_route_input_slow's martians pass, for the kernel
        // to drop and count.
        asm.bind(source);
        asm.emit(&[ldx(Size::B, FIELD, DATA, IPV4_SADDR)]);
        asm.jump(jump32_imm(JMP_JEQ, FIELD, 0), pass);
        if steering.loopback_is_martian {
            asm.jump(jump32_imm(JMP_JEQ, FIELD, 127), pass);
        }
        asm.emit(&[and64_imm(FIELD, 0xf0)]);
        asm.jump(jump32_imm(JMP_JEQ, FIELD, 0xe0), pass);
        asm.emit(&[ldx(Size::W, FIELD, DATA, IPV4_SADDR)]);
        asm.jump(jump32_imm(JMP_JEQ, FIELD, net32([255; 4])), pass);
        asm.jump(ja(), redirect);
    }

    if !v6.is_empty() {
        asm.bind(ipv6);
        let source = asm.label();
        // IPv6 and UDP headers, 62 bytes from the start.
        bounds(&mut asm, ETH_HLEN + IPV6_HLEN + UDP_HLEN, pass);
        // Version 6.
        asm.emit(&[
            ldx(Size::B, FIELD, DATA, IPV6_VERSION),
            and64_imm(FIELD, IPV6_VERSION_MASK),
        ]);
        asm.jump(jump32_imm(JMP_JNE, FIELD, IPV6_VERSION_6), pass);
        // UDP right after the fixed header: extension headers pass.
        asm.emit(&[ldx(Size::B, FIELD, DATA, IPV6_NEXTHDR)]);
        asm.jump(jump32_imm(JMP_JNE, FIELD, IPPROTO_UDP), pass);
        // The destination port and address (four 32-bit words).
        asm.emit(&[ldx(Size::H, PORT, DATA, IPV6_UDP_DEST)]);
        if v6.iter().any(|(_, ip)| ip.is_some()) {
            for (reg, off) in ADDR.into_iter().zip((IPV6_DADDR..).step_by(4)) {
                asm.emit(&[ldx(Size::W, reg, DATA, off)]);
            }
        }
        // Each target in turn: its port, then its address word by word.
        for &(port, ip) in &v6 {
            match ip {
                None => asm.jump(jump32_imm(JMP_JEQ, PORT, port), source),
                Some([w0, w1, w2, w3]) => {
                    let next = asm.label();
                    asm.jump(jump32_imm(JMP_JNE, PORT, port), next);
                    asm.jump(jump32_imm(JMP_JNE, ADDR[0], w0), next);
                    asm.jump(jump32_imm(JMP_JNE, ADDR[1], w1), next);
                    asm.jump(jump32_imm(JMP_JNE, ADDR[2], w2), next);
                    asm.jump(jump32_imm(JMP_JEQ, ADDR[3], w3), source);
                    asm.bind(next);
                }
            }
        }
        asm.jump(ja(), pass);

        // The source: what ip6_rcv_core drops passes (a multicast or the
        // loopback address, or an IPv4-mapped one), and the unspecified
        // address, which an answer could not reach.
        asm.bind(source);
        asm.emit(&[ldx(Size::B, FIELD, DATA, IPV6_SADDR)]);
        asm.jump(jump32_imm(JMP_JEQ, FIELD, 0xff), pass);
        // Past 64 zero bits: ::ffff:0:0/96, ::/128, ::1/128.
        asm.emit(&[ldx(Size::W, FIELD, DATA, IPV6_SADDR)]);
        asm.jump(jump32_imm(JMP_JNE, FIELD, 0), redirect);
        asm.emit(&[ldx(Size::W, FIELD, DATA, IPV6_SADDR + 4)]);
        asm.jump(jump32_imm(JMP_JNE, FIELD, 0), redirect);
        asm.emit(&[ldx(Size::W, FIELD, DATA, IPV6_SADDR + 8)]);
        asm.jump(jump32_imm(JMP_JEQ, FIELD, net32([0, 0, 0xff, 0xff])), pass);
        asm.jump(jump32_imm(JMP_JNE, FIELD, 0), redirect);
        asm.emit(&[ldx(Size::W, FIELD, DATA, IPV6_SADDR + 12)]);
        asm.jump(jump32_imm(JMP_JEQ, FIELD, 0), pass);
        asm.jump(jump32_imm(JMP_JEQ, FIELD, net32([0, 0, 0, 1])), pass);
        asm.jump(ja(), redirect);
    }

    // Taken: return bpf_redirect_map(map, queue, fallback), XDP_REDIRECT
    // when the queue's slot holds a socket, else `fallback`.
    asm.bind(redirect);
    asm.emit(&ld_map_fd(Reg::R1, steering.xsk_map_fd));
    asm.emit(&[
        mov64_reg(Reg::R2, QUEUE),
        mov64_imm(Reg::R3, steering.fallback.action() as i32),
        call(FUNC_REDIRECT_MAP),
        exit(),
    ]);

    // Left to the kernel.
    asm.bind(pass);
    asm.emit(&[mov64_imm(Reg::R0, XDP_PASS as i32), exit()]);

    Ok(asm.finish()?)
}

/// `if DATA + len > DATA_END goto pass`: after it, the verifier lets the
/// program read `len` bytes from DATA.
fn bounds(asm: &mut Assembler, len: i32, pass: Label) {
    asm.emit(&[mov64_reg(END, DATA), add64_imm(END, len)]);
    asm.jump(jump_reg(JMP_JGT, END, DATA_END), pass);
}

/// An IPv6 address as four 32-bit loads read it.
fn words(octets: [u8; 16]) -> [i32; 4] {
    let mut words = [0; 4];
    for (word, chunk) in words.iter_mut().zip(octets.chunks_exact(4)) {
        let mut bytes = [0; 4];
        bytes.copy_from_slice(chunk);
        *word = net32(bytes);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::super::bpf;
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::os::fd::{AsFd, AsRawFd, OwnedFd};

    // ---- the instructions and the assembler ----

    #[test]
    fn instructions_have_the_kernels_layout() {
        assert_eq!(std::mem::size_of::<Instruction>(), 8);
        assert_eq!(std::mem::align_of::<Instruction>(), 4);
        let i = ldx(Size::H, Reg::R5, Reg::R2, 12);
        assert_eq!(i.code, 0x69, "BPF_LDX | BPF_H | BPF_MEM");
        assert_eq!((i.dst(), i.src(), i.off), (5, 2, 12));
        #[cfg(target_endian = "little")]
        assert_eq!(i.regs, 0x25);
        assert_eq!(mov64_imm(Reg::R0, 2).code, 0xb7);
        assert_eq!(exit().code, 0x95);
        assert_eq!(call(FUNC_REDIRECT_MAP).code, 0x85);
        assert_eq!(jump32_imm(JMP_JNE, Reg::R1, 7).code, 0x56);
        assert_eq!(jump_reg(JMP_JGT, Reg::R4, Reg::R3).code, 0x2d);
        let [lo, hi] = ld_map_fd(Reg::R1, 9);
        assert_eq!((lo.code, lo.dst(), lo.src(), lo.imm), (0x18, 1, 1, 9));
        assert_eq!(hi, Instruction::new(0, 0, 0, 0, 0));
    }

    #[test]
    fn network_order_constants_read_as_loads_do() {
        let bytes = [0x86u8, 0xdd];
        assert_eq!(net16(0x86dd), i32::from(u16::from_ne_bytes(bytes)));
        assert_eq!(
            net32([192, 168, 1, 200]),
            i32::from_ne_bytes([192, 168, 1, 200])
        );
        #[cfg(target_endian = "little")]
        assert_eq!(net16(0x0800), 0x0008);
    }

    #[test]
    fn the_assembler_resolves_forward_and_backward_jumps() {
        let mut asm = Assembler::new();
        let (end, top) = (asm.label(), asm.label());
        asm.bind(top);
        asm.jump(jump_imm(JMP_JEQ, Reg::R1, 0), end);
        asm.emit(&[mov64_imm(Reg::R0, 1), mov64_imm(Reg::R0, 2)]);
        asm.jump(ja(), top);
        asm.bind(end);
        asm.emit(&[exit()]);
        let program = asm.finish().unwrap();
        assert_eq!(program[0].off, 3);
        assert_eq!(program[3].off, -4);
    }

    #[test]
    fn the_assembler_reports_misuse() {
        let mut asm = Assembler::new();
        let l = asm.label();
        asm.jump(ja(), l);
        assert_eq!(asm.finish(), Err(AssemblyError::Unbound(Label(0))));

        let mut asm = Assembler::new();
        let l = asm.label();
        asm.bind(l);
        asm.bind(l);
        assert_eq!(asm.finish(), Err(AssemblyError::BoundTwice(l)));

        let mut asm = Assembler::new();
        let l = asm.label();
        asm.bind(l);
        asm.jump(exit(), l);
        assert!(matches!(asm.finish(), Err(AssemblyError::NotAJump(_))));

        let mut asm = Assembler::new();
        asm.jump(ja(), Label(5));
        assert_eq!(asm.finish(), Err(AssemblyError::UnknownLabel(Label(5))));

        let mut asm = Assembler::new();
        let l = asm.label();
        asm.jump(ja(), l);
        asm.emit(&vec![mov64_imm(Reg::R0, 0); 40_000]);
        asm.bind(l);
        assert_eq!(asm.finish(), Err(AssemblyError::OutOfRange(l)));
    }

    #[test]
    fn target_counts_are_bounded() {
        assert_eq!(
            steering_program(&steering(&[], 3, Fallback::Pass)),
            Err(ProgramError::NoTargets)
        );
        let many = vec![v4([0, 0, 0, 0], 1); MAX_TARGETS + 1];
        assert_eq!(
            steering_program(&steering(&many, 3, Fallback::Pass)),
            Err(ProgramError::TooManyTargets {
                count: MAX_TARGETS + 1
            })
        );
        for targets in [&many[..MAX_TARGETS], &vec![v6("fd00::1", 1); MAX_TARGETS]] {
            let program = steering_program(&steering(targets, 3, Fallback::Pass)).unwrap();
            assert!(program.len() < 500, "{}", program.len());
        }
    }

    // ---- the program, judged by the kernel ----

    fn v4(ip: [u8; 4], port: u16) -> Target {
        Target {
            ip: IpAddr::V4(Ipv4Addr::from(ip)),
            port,
        }
    }

    fn v6(ip: &str, port: u16) -> Target {
        Target {
            ip: IpAddr::V6(ip.parse::<Ipv6Addr>().unwrap()),
            port,
        }
    }

    /// The program for `targets`, loaded with fallback DROP and an empty
    /// map: DROP means taken, PASS left to the kernel.
    struct Loaded {
        program: OwnedFd,
        _map: OwnedFd,
    }

    const TAKEN: u32 = XDP_DROP;
    const LEFT: u32 = XDP_PASS;

    /// The program's description for `targets` on an interface whose
    /// address is `MAC_DST`, 127.0.0.0/8 martian.
    fn steering(targets: &[Target], xsk_map_fd: i32, fallback: Fallback) -> Steering<'_> {
        Steering {
            targets,
            mac: MAC_DST,
            loopback_is_martian: true,
            xsk_map_fd,
            fallback,
        }
    }

    fn load(targets: &[Target]) -> Loaded {
        load_with(&steering(targets, -1, Fallback::Drop))
    }

    /// `steering` loaded with fallback DROP and an empty map of its own.
    fn load_with(steering: &Steering<'_>) -> Loaded {
        let map = bpf::create_xsk_map(4).unwrap();
        let steering = Steering {
            xsk_map_fd: map.as_raw_fd(),
            fallback: Fallback::Drop,
            ..*steering
        };
        let program = steering_program(&steering).unwrap();
        let program = match bpf::load_xdp(&program, "steering_test") {
            Ok(fd) => fd,
            Err(e) => panic!("{e}"),
        };
        Loaded { program, _map: map }
    }

    impl Loaded {
        fn run(&self, frame: &[u8]) -> u32 {
            bpf::test_run(self.program.as_fd(), frame).unwrap()
        }
    }

    // A test-only frame builder.
    const MAC_DST: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
    const MAC_SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

    /// Ethernet with `tags` (their TPIDs, VLAN id 100) before `ethertype`.
    fn eth(tags: &[u16], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&MAC_DST);
        f.extend_from_slice(&MAC_SRC);
        for tpid in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&100u16.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// IPv4 (checksum left 0: the program does not look at it).
    fn ipv4(protocol: u8, dst: [u8; 4], frag: u16, options: &[u8], payload: &[u8]) -> Vec<u8> {
        assert_eq!(options.len() % 4, 0);
        let ihl = 5 + options.len() / 4;
        let total = (ihl * 4 + payload.len()) as u16;
        let mut p = vec![0x40 | ihl as u8, 0];
        p.extend_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&[0, 1]);
        p.extend_from_slice(&frag.to_be_bytes());
        p.extend_from_slice(&[64, protocol, 0, 0]);
        p.extend_from_slice(&[10, 9, 9, 9]);
        p.extend_from_slice(&dst);
        p.extend_from_slice(options);
        p.extend_from_slice(payload);
        p
    }

    fn ipv6(next_header: u8, dst: &str, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        p.extend_from_slice(&[next_header, 64]);
        p.extend_from_slice(&"fd00::99".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&dst.parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(payload);
        p
    }

    fn udp(dst_port: u16, payload: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&40000u16.to_be_bytes());
        p.extend_from_slice(&dst_port.to_be_bytes());
        p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        p
    }

    /// A TCP header's first bytes: ports where UDP has them.
    fn tcp(dst_port: u16) -> Vec<u8> {
        let mut p = udp(dst_port, &[]);
        p.extend_from_slice(&[0; 12]);
        p
    }

    /// A hop-by-hop options header (8 bytes: PadN) before `next`.
    fn hop_by_hop(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![next, 0, 1, 4, 0, 0, 0, 0];
        p.extend_from_slice(payload);
        p
    }

    const ETH_IP: u16 = 0x0800;
    const ETH_IPV6: u16 = 0x86dd;
    const VLAN: u16 = 0x8100;
    const QINQ: u16 = 0x88a8;
    const UDP: u8 = 17;
    const HOST4: [u8; 4] = [192, 168, 1, 200];
    const HOST6: &str = "fd00:8000::c8";

    fn udp4(tags: &[u16], dst: [u8; 4], port: u16) -> Vec<u8> {
        eth(
            tags,
            ETH_IP,
            &ipv4(UDP, dst, 0, &[], &udp(port, b"announce")),
        )
    }

    fn udp6(tags: &[u16], dst: &str, port: u16) -> Vec<u8> {
        eth(tags, ETH_IPV6, &ipv6(UDP, dst, &udp(port, b"announce")))
    }

    #[test]
    fn the_verifier_accepts_every_shape_of_program() {
        let shapes: Vec<Vec<Target>> = vec![
            vec![v4([0, 0, 0, 0], 6969)],
            vec![v4(HOST4, 6969)],
            vec![v6("::", 6969)],
            vec![v6(HOST6, 6969)],
            vec![
                v4(HOST4, 6969),
                v4([0, 0, 0, 0], 1337),
                v6(HOST6, 6969),
                v6("::", 80),
            ],
            (0..MAX_TARGETS as u16)
                .map(|i| v4([10, 0, (i >> 8) as u8, i as u8], 6000 + i))
                .collect(),
            (0..MAX_TARGETS as u16)
                .map(|i| v6(&format!("fd00::{i:x}"), 6000 + i))
                .collect(),
            (0..MAX_TARGETS as u16)
                .map(|i| match i % 4 {
                    0 => v4([0; 4], i),
                    1 => v4([172, 16, 0, i as u8], i),
                    2 => v6("::", i),
                    _ => v6(&format!("2001:db8::{i:x}"), i),
                })
                .collect(),
        ];
        for targets in shapes {
            let map = bpf::create_xsk_map(1).unwrap();
            for (fallback, loopback_is_martian) in [
                (Fallback::Pass, true),
                (Fallback::Drop, true),
                (Fallback::Pass, false),
            ] {
                let program = steering_program(&Steering {
                    loopback_is_martian,
                    ..steering(&targets, map.as_raw_fd(), fallback)
                })
                .unwrap();
                if let Err(e) = bpf::load_xdp(&program, "steering") {
                    panic!("{} targets: {e}", targets.len());
                }
            }
        }
    }

    #[test]
    fn datagrams_to_a_target_are_taken() {
        let p = load(&[v4(HOST4, 6969), v6(HOST6, 6969)]);
        assert_eq!(p.run(&udp4(&[], HOST4, 6969)), TAKEN);
        assert_eq!(p.run(&udp6(&[], HOST6, 6969)), TAKEN);
        // With the fallback the tracker uses, the same datagram passes
        // while its queue has no socket.
        let map = bpf::create_xsk_map(4).unwrap();
        let targets = [v4(HOST4, 6969)];
        let passing = steering_program(&steering(&targets, map.as_raw_fd(), Fallback::Pass));
        let passing = bpf::load_xdp(&passing.unwrap(), "steering").unwrap();
        let frame = udp4(&[], HOST4, 6969);
        assert_eq!(bpf::test_run(passing.as_fd(), &frame).unwrap(), XDP_PASS);
    }

    #[test]
    fn the_port_and_a_named_address_must_match() {
        let p = load(&[v4(HOST4, 6969), v6(HOST6, 6969)]);
        assert_eq!(p.run(&udp4(&[], HOST4, 6970)), LEFT);
        assert_eq!(p.run(&udp4(&[], HOST4, 0x391b)), LEFT, "port byte-swapped");
        assert_eq!(p.run(&udp4(&[], [192, 168, 1, 201], 6969)), LEFT);
        assert_eq!(p.run(&udp4(&[], [200, 1, 168, 192], 6969)), LEFT);
        assert_eq!(p.run(&udp6(&[], HOST6, 6970)), LEFT);
        assert_eq!(p.run(&udp6(&[], "fd00:8000::c9", 6969)), LEFT);
        assert_eq!(p.run(&udp6(&[], "fd01:8000::c8", 6969)), LEFT);
        assert_eq!(p.run(&udp6(&[], "fd00:8000:0:1::c8", 6969)), LEFT);
        assert_eq!(p.run(&udp6(&[], "fd00:8000:0:0:1::c8", 6969)), LEFT);
        // An IPv4 target does not take IPv6, nor the other way round.
        let p4 = load(&[v4([0; 4], 6969)]);
        assert_eq!(p4.run(&udp6(&[], HOST6, 6969)), LEFT);
        let p6 = load(&[v6("::", 6969)]);
        assert_eq!(p6.run(&udp4(&[], HOST4, 6969)), LEFT);
        assert_eq!(p6.run(&udp6(&[], "2001:db8::1", 6969)), TAKEN);
    }

    #[test]
    fn an_unspecified_address_takes_every_address_of_its_family() {
        let p = load(&[v4([0; 4], 6969), v6("::", 1337)]);
        for dst in [HOST4, [10, 0, 0, 1], [255, 255, 255, 255], [0, 0, 0, 0]] {
            assert_eq!(p.run(&udp4(&[], dst, 6969)), TAKEN);
        }
        assert_eq!(p.run(&udp4(&[], HOST4, 1337)), LEFT);
        for dst in [HOST6, "::1", "ff02::1", "2001:db8::ffff:ffff"] {
            assert_eq!(p.run(&udp6(&[], dst, 1337)), TAKEN);
        }
        assert_eq!(p.run(&udp6(&[], HOST6, 6969)), LEFT);
    }

    #[test]
    fn vlan_tagged_frames_pass() {
        let p = load(&[v4(HOST4, 6969), v6(HOST6, 6969)]);
        assert_eq!(p.run(&udp4(&[], HOST4, 6969)), TAKEN);
        assert_eq!(p.run(&udp6(&[], HOST6, 6969)), TAKEN);
        for tags in [&[VLAN][..], &[VLAN, VLAN], &[QINQ], &[QINQ, VLAN]] {
            assert_eq!(p.run(&udp4(tags, HOST4, 6969)), LEFT, "{tags:x?}");
            assert_eq!(p.run(&udp6(tags, HOST6, 6969)), LEFT, "{tags:x?}");
        }
    }

    #[test]
    fn frames_to_another_link_address_pass() {
        let p = load(&[v4(HOST4, 6969), v6(HOST6, 6969)]);
        let others: [[u8; 6]; 5] = [
            [0x02, 0, 0, 0, 0, 0x03],
            [0x03, 0, 0, 0, 0, 0x01],
            [0x02, 0, 0, 0, 1, 0x01],
            [0x01, 0x00, 0x5e, 0, 0, 0x01],
            [0xff; 6],
        ];
        for mac in others {
            for mut frame in [udp4(&[], HOST4, 6969), udp6(&[], HOST6, 6969)] {
                frame[..6].copy_from_slice(&mac);
                assert_eq!(p.run(&frame), LEFT, "{mac:x?}");
            }
        }
    }

    /// `frame` (IPv4 or IPv6, untagged) from `source` instead.
    fn from(mut frame: Vec<u8>, source: IpAddr) -> Vec<u8> {
        match source {
            IpAddr::V4(ip) => frame[26..30].copy_from_slice(&ip.octets()),
            IpAddr::V6(ip) => frame[22..38].copy_from_slice(&ip.octets()),
        }
        frame
    }

    #[test]
    fn martian_sources_pass() {
        let p = load(&[v4(HOST4, 6969), v6(HOST6, 6969)]);
        let martians4 = [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.0.9",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
        ];
        for source in martians4 {
            let frame = from(udp4(&[], HOST4, 6969), source.parse().unwrap());
            assert_eq!(p.run(&frame), LEFT, "{source}");
        }
        let martians6 = ["::1", "::", "ff02::1", "ff05::2", "::ffff:10.0.0.1"];
        for source in martians6 {
            let frame = from(udp6(&[], HOST6, 6969), source.parse().unwrap());
            assert_eq!(p.run(&frame), LEFT, "{source}");
        }
        // Their neighbours are ordinary sources, for the worker's routes.
        let ordinary = [
            "1.0.0.0",
            "126.255.255.255",
            "128.0.0.1",
            "223.255.255.255",
            "240.0.0.1",
            "255.255.255.254",
            "::2",
            "::1:0:0:1",
            "::fffe:10.0.0.1",
            "1::1",
            "fe80::1",
            "fc00::1",
        ];
        for source in ordinary {
            let source: IpAddr = source.parse().unwrap();
            let frame = if source.is_ipv4() {
                from(udp4(&[], HOST4, 6969), source)
            } else {
                from(udp6(&[], HOST6, 6969), source)
            };
            assert_eq!(p.run(&frame), TAKEN, "{source}");
        }
        // With route_localnet, 127.0.0.0/8 is taken too.
        let targets = [v4(HOST4, 6969)];
        let localnet = load_with(&Steering {
            loopback_is_martian: false,
            ..steering(&targets, -1, Fallback::Drop)
        });
        let frame = from(udp4(&[], HOST4, 6969), "127.1.0.7".parse().unwrap());
        assert_eq!(localnet.run(&frame), TAKEN);
        let frame = from(udp4(&[], HOST4, 6969), "224.0.0.1".parse().unwrap());
        assert_eq!(localnet.run(&frame), LEFT);
    }

    #[test]
    fn other_protocols_pass() {
        let p = load(&[v4([0; 4], 6969), v6("::", 6969)]);
        // ARP request, padded to the minimum frame.
        let mut arp = vec![0, 1, 8, 0, 6, 4, 0, 1];
        arp.extend_from_slice(&MAC_SRC);
        arp.extend_from_slice(&[10, 9, 9, 9, 0, 0, 0, 0, 0, 0]);
        arp.extend_from_slice(&HOST4);
        arp.resize(46, 0);
        assert_eq!(p.run(&eth(&[], 0x0806, &arp)), LEFT);
        // ICMP echo, with bytes where a UDP port would be.
        let icmp = ipv4(1, HOST4, 0, &[], &udp(6969, &[0; 8]));
        assert_eq!(p.run(&eth(&[], ETH_IP, &icmp)), LEFT);
        // ICMPv6 (neighbour solicitation's type) likewise.
        let icmp6 = ipv6(58, HOST6, &udp(6969, &[0; 16]));
        assert_eq!(p.run(&eth(&[], ETH_IPV6, &icmp6)), LEFT);
        // TCP to the port.
        let tcp4 = ipv4(6, HOST4, 0, &[], &tcp(6969));
        assert_eq!(p.run(&eth(&[], ETH_IP, &tcp4)), LEFT);
        let tcp6 = ipv6(6, HOST6, &tcp(6969));
        assert_eq!(p.run(&eth(&[], ETH_IPV6, &tcp6)), LEFT);
        // A wrong IP version under the right ethertype.
        let mut bad = udp4(&[], HOST4, 6969);
        bad[14] = 0x65;
        assert_eq!(p.run(&bad), LEFT);
        let mut bad = udp6(&[], HOST6, 6969);
        bad[14] = 0x40;
        assert_eq!(p.run(&bad), LEFT);
        // An IPv6 version byte with traffic class bits is still IPv6.
        let mut tc = udp6(&[], HOST6, 6969);
        tc[14] = 0x6f;
        assert_eq!(p.run(&tc), TAKEN);
    }

    #[test]
    fn ipv4_options_and_fragments_pass_but_dont_fragment_is_taken() {
        let p = load(&[v4([0; 4], 6969)]);
        let with_options = ipv4(UDP, HOST4, 0, &[1, 1, 1, 0], &udp(6969, b"x"));
        assert_eq!(p.run(&eth(&[], ETH_IP, &with_options)), LEFT);
        for frag in [0x2000, 0x0001, 0x1fff, 0x2001, 0x6000, 0x0100] {
            let fragment = ipv4(UDP, HOST4, frag, &[], &udp(6969, b"x"));
            assert_eq!(p.run(&eth(&[], ETH_IP, &fragment)), LEFT, "{frag:#x}");
        }
        // DF alone; the reserved bit (0x8000) is not a fragment either.
        for frag in [0x4000, 0x8000] {
            let whole = ipv4(UDP, HOST4, frag, &[], &udp(6969, b"x"));
            assert_eq!(p.run(&eth(&[], ETH_IP, &whole)), TAKEN, "{frag:#x}");
        }
    }

    #[test]
    fn ipv6_extension_headers_pass() {
        let p = load(&[v6("::", 6969)]);
        let hbh = ipv6(0, HOST6, &hop_by_hop(UDP, &udp(6969, b"x")));
        assert_eq!(p.run(&eth(&[], ETH_IPV6, &hbh)), LEFT);
        // Fragment header (44) before UDP.
        let frag = ipv6(44, HOST6, &hop_by_hop(UDP, &udp(6969, b"x")));
        assert_eq!(p.run(&eth(&[], ETH_IPV6, &frag)), LEFT);
    }

    #[test]
    fn truncated_frames_pass_and_the_minimum_is_taken() {
        let p = load(&[v4(HOST4, 6969), v6(HOST6, 6969)]);
        let frames = [
            (
                eth(&[], ETH_IP, &ipv4(UDP, HOST4, 0, &[], &udp(6969, &[]))),
                42,
            ),
            (eth(&[], ETH_IPV6, &ipv6(UDP, HOST6, &udp(6969, &[]))), 62),
        ];
        for (frame, minimum) in frames {
            assert_eq!(frame.len(), minimum);
            // The minimum: headers and an empty payload.
            assert_eq!(p.run(&frame), TAKEN);
            for len in 14..minimum {
                assert_eq!(p.run(&frame[..len]), LEFT, "{len} of {minimum}");
            }
            // The kernel runs XDP on at least an Ethernet header.
            for len in 0..14 {
                let e = bpf::test_run(p.program.as_fd(), &frame[..len]).unwrap_err();
                assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
            }
        }
    }

    // ---- random frames against a model of the program ----

    /// What the program should do with `frame`: whether it is taken.
    fn model(targets: &[Target], frame: &[u8]) -> bool {
        let be16 = |at: usize| {
            frame
                .get(at..at + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
        };
        if frame.get(..6) != Some(&MAC_DST[..]) {
            return false;
        }
        let (source, ip, port): (IpAddr, IpAddr, u16) = match be16(12) {
            Some(ETH_IP) => {
                if frame.len() < 42
                    || frame[14] != 0x45
                    || be16(20).unwrap() & 0x3fff != 0
                    || frame[23] != UDP
                {
                    return false;
                }
                let src: [u8; 4] = frame[26..30].try_into().unwrap();
                let dst: [u8; 4] = frame[30..34].try_into().unwrap();
                (IpAddr::from(src), IpAddr::from(dst), be16(36).unwrap())
            }
            Some(ETH_IPV6) => {
                if frame.len() < 62 || frame[14] >> 4 != 6 || frame[20] != UDP {
                    return false;
                }
                let src: [u8; 16] = frame[22..38].try_into().unwrap();
                let dst: [u8; 16] = frame[38..54].try_into().unwrap();
                (IpAddr::from(src), IpAddr::from(dst), be16(56).unwrap())
            }
            _ => return false,
        };
        let martian = match source {
            IpAddr::V4(s) => {
                s.octets()[0] == 0 || s.is_loopback() || s.is_multicast() || s.is_broadcast()
            }
            IpAddr::V6(s) => {
                s.is_multicast()
                    || s.is_loopback()
                    || s.is_unspecified()
                    || s.to_ipv4_mapped().is_some()
            }
        };
        !martian
            && targets.iter().any(|t| {
                t.port == port
                    && t.ip.is_ipv4() == ip.is_ipv4()
                    && (t.ip.is_unspecified() || t.ip == ip)
            })
    }

    /// xorshift64*: deterministic, so a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<T: Copy>(&mut self, items: &[T]) -> T {
            items[self.below(items.len())]
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    /// A frame near the ones the program takes: each field either one the
    /// program looks for or a random one, then perhaps cut short.
    fn near_miss(rng: &mut Rng, targets: &[Target]) -> Vec<u8> {
        let target = rng.pick(targets);
        let port = if rng.below(4) == 0 {
            rng.next() as u16
        } else {
            rng.pick(targets).port
        };
        let v6 = match rng.below(5) {
            0 => true,
            1 => false,
            _ => target.ip.is_ipv6(),
        };
        let mut frame = if v6 {
            let dst = match (target.ip, rng.below(3)) {
                (IpAddr::V6(ip), 0 | 1) if !ip.is_unspecified() => ip,
                _ => Ipv6Addr::from(<[u8; 16]>::try_from(rng.bytes(16)).unwrap()),
            };
            let any = rng.next() as u8;
            let next = rng.pick(&[UDP, UDP, UDP, 6, 0, 58, any]);
            eth(
                &[],
                ETH_IPV6,
                &ipv6(next, &dst.to_string(), &udp(port, b"")),
            )
        } else {
            let dst = match (target.ip, rng.below(3)) {
                (IpAddr::V4(ip), 0 | 1) if !ip.is_unspecified() => ip.octets(),
                _ => <[u8; 4]>::try_from(rng.bytes(4)).unwrap(),
            };
            let (any, any_frag) = (rng.next() as u8, rng.next() as u16);
            let protocol = rng.pick(&[UDP, UDP, UDP, 6, 1, any]);
            let frag = rng.pick(&[0, 0, 0x4000, 0x2000, 0x0001, any_frag]);
            let mut f = eth(
                &[],
                ETH_IP,
                &ipv4(protocol, dst, frag, &[], &udp(port, b"")),
            );
            if rng.below(8) == 0 {
                let any = rng.next() as u8;
                f[14] = rng.pick(&[0x46, 0x55, 0x44, any]);
            }
            f
        };
        // The source: as built, a martian or its neighbour, or random.
        if rng.below(3) == 0 {
            let source: IpAddr = if v6 {
                let pick = rng.pick(&["::1", "::", "ff02::1", "::ffff:1.2.3.4", "::2", "fe80::1"]);
                pick.parse().unwrap()
            } else {
                let pick = rng.pick(&[
                    "0.0.0.1",
                    "127.0.0.1",
                    "224.0.0.1",
                    "255.255.255.255",
                    "1.0.0.0",
                    "240.0.0.1",
                ]);
                pick.parse().unwrap()
            };
            let random = rng.bytes(16);
            frame = from(frame, source);
            if rng.below(2) == 0 {
                let at = if v6 { 22..38 } else { 26..30 };
                let len = at.len();
                frame[at].copy_from_slice(&random[..len]);
            }
        }
        // The destination MAC: ours, or one bit off.
        if rng.below(8) == 0 {
            frame[rng.below(6)] ^= 1 << rng.below(8);
        }
        match rng.below(8) {
            0 => {
                let tpid = rng.pick(&[VLAN, VLAN, QINQ]);
                frame.splice(12..12, tpid.to_be_bytes().into_iter().chain([0, 7]));
            }
            1 => frame
                .splice(12..12, [0x81, 0, 0, 7, 0x81, 0, 0, 8])
                .for_each(drop),
            2 => frame[12..14].copy_from_slice(&(rng.next() as u16).to_be_bytes()),
            _ => {}
        }
        let trailer = rng.below(20);
        frame.extend(rng.bytes(trailer));
        if rng.below(3) == 0 {
            frame.truncate(14 + rng.below(frame.len() - 13));
        }
        frame
    }

    #[test]
    fn random_frames_get_only_pass_or_the_fallback_as_the_model_says() {
        let targets = [
            v4(HOST4, 6969),
            v4([0; 4], 1337),
            v4([10, 0, 0, 1], 80),
            v6(HOST6, 6969),
            v6("::", 1337),
            v6("fe80::ffff:ffff:ffff:fffe", 443),
        ];
        let p = load(&targets);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut taken = 0;
        for i in 0..6000 {
            let frame = if i % 3 == 0 {
                let len = 14 + rng.below(200);
                rng.bytes(len)
            } else {
                near_miss(&mut rng, &targets)
            };
            let action = p.run(&frame);
            assert!(
                action == LEFT || action == TAKEN,
                "{action} for {frame:02x?}"
            );
            assert_eq!(
                action == TAKEN,
                model(&targets, &frame),
                "frame {i}: {frame:02x?}"
            );
            taken += usize::from(action == TAKEN);
        }
        // The generator reaches both outcomes often (162 taken with this
        // seed).
        assert!(taken > 100, "{taken}");
        assert!(taken < 5000, "{taken}");
    }
}
