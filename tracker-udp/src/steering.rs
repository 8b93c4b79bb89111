//! Kernel steering: a classic BPF program on each `SO_REUSEPORT` group of
//! UDP sockets hands an announce to the socket of the worker that owns its
//! torrent, and a scrape to the owner of its first info-hash, so that they
//! are answered where they land instead of crossing the mesh twice.
//! Connects, and anything short or unknown, are left to the kernel's hash
//! (a connection id is valid on every worker).
//!
//! It rests on one invariant: worker `i`'s socket is index `i` of every
//! group. The kernel numbers a group's sockets in the order they join it,
//! so the binary binds each address for worker 0, 1, 2, ... in turn, and no
//! socket leaves a group while the workers serve (the process ends when a
//! worker does). Where the program cannot be attached, or steering is
//! turned off, requests still reach their owner over the mesh.

use std::io;
use std::os::fd::AsRawFd;

use tracker_net::cbpf::{self, jump, stmt, Instruction, ABS, JEQ, JGE, JMP, K, LD, LEN, RET, W};
use tracker_proto::udp::{
    ACTION_ANNOUNCE, ACTION_OFFSET, ACTION_SCRAPE, INFO_HASH_LEN, INFO_HASH_OFFSET,
};
use tracker_runtime::owner::Owners;

/// What the program returns to leave a datagram to the kernel's hash: any
/// index past the group's last socket.
pub const KERNEL_CHOOSES: u32 = u32::MAX;

/// The program for `owners`: the index of the socket (= worker) that a
/// datagram goes to.
pub fn program(owners: &Owners) -> Vec<Instruction> {
    let mut owner = Vec::new();
    owners.bpf_owner_of_hash_at(INFO_HASH_OFFSET as u32, &mut owner);
    // The jumps below skip the owner's instructions and its RET to reach
    // the fallback; classic BPF jumps are 8-bit offsets.
    let past = u8::try_from(owner.len() + 1).unwrap_or(u8::MAX);
    debug_assert!(owner.len() + 1 < usize::from(u8::MAX) - 2);
    let mut program = vec![
        // Every load below must stay inside the packet: one past its end
        // would end the program with 0, which is a socket, not the fallback.
        stmt(LD | W | LEN, 0),
        jump(
            JMP | JGE | K,
            (INFO_HASH_OFFSET + INFO_HASH_LEN) as u32,
            0,
            past + 3,
        ),
        stmt(LD | W | ABS, ACTION_OFFSET as u32),
        jump(JMP | JEQ | K, ACTION_ANNOUNCE as u32, 1, 0),
        jump(JMP | JEQ | K, ACTION_SCRAPE as u32, 0, past),
    ];
    program.extend(owner);
    program.push(stmt(RET | cbpf::RET_A, 0));
    program.push(stmt(RET | K, KERNEL_CHOOSES));
    program
}

/// Attaches the program for `owners` to the group of `socket`, a bound UDP
/// socket of the group whose socket `i` is worker `i`'s.
pub fn attach(socket: &impl AsRawFd, owners: &Owners) -> io::Result<()> {
    cbpf::attach_reuseport(socket, &program(owners))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tracker_proto::udp::{
        AnnounceOptions, AnnounceRequest, ConnectRequest, ConnectionId, Request, TransactionId,
    };
    use tracker_proto::{AnnounceEvent, InfoHash, PeerId};
    use tracker_runtime::owner::KEY_BYTES;

    fn announce(hash: [u8; 20]) -> Vec<u8> {
        let mut out = Vec::new();
        Request::Announce(AnnounceRequest {
            connection_id: ConnectionId(7),
            transaction_id: TransactionId(9),
            info_hash: InfoHash(hash),
            peer_id: PeerId([1; 20]),
            downloaded: 0,
            left: 0,
            uploaded: 0,
            event: AnnounceEvent::Started,
            ip_address: 0,
            key: 0,
            num_want: -1,
            port: 6881,
            options: AnnounceOptions::EMPTY,
        })
        .write(&mut out);
        out
    }

    fn scrape(hashes: &[[u8; 20]]) -> Vec<u8> {
        let mut out = Vec::new();
        let hashes: Vec<InfoHash> = hashes.iter().copied().map(InfoHash).collect();
        tracker_proto::udp::write_scrape_request(
            &mut out,
            ConnectionId(7),
            TransactionId(9),
            &hashes,
        );
        out
    }

    proptest! {
        #[test]
        fn announces_and_scrapes_go_to_the_owner_of_their_first_hash(
            key in any::<[u8; KEY_BYTES]>(),
            workers in 1usize..=32,
            hashes in prop::collection::vec(any::<[u8; 20]>(), 1..=74),
        ) {
            let owners = Owners::new(workers, key);
            let program = program(&owners);
            let first = InfoHash(hashes[0]);
            prop_assert_eq!(
                cbpf::run(&program, &announce(hashes[0])) as usize,
                owners.of(&first)
            );
            prop_assert_eq!(cbpf::run(&program, &scrape(&hashes)) as usize, owners.of(&first));
        }

        #[test]
        fn anything_else_is_left_to_the_kernel(
            key in any::<[u8; KEY_BYTES]>(),
            mut packet in prop::collection::vec(any::<u8>(), 0..200),
            action in prop::option::of(0i32..4),
        ) {
            // Mostly the actions that matter; random bytes would hardly ever
            // spell one.
            if let (Some(action), Some(field)) = (action, packet.get_mut(8..12)) {
                field.copy_from_slice(&action.to_be_bytes());
            }
            let program = program(&Owners::new(4, key));
            let action = packet.get(8..12).map(|a| i32::from_be_bytes(a.try_into().unwrap()));
            let steerable = packet.len() >= 36
                && matches!(action, Some(ACTION_ANNOUNCE) | Some(ACTION_SCRAPE));
            let chosen = cbpf::run(&program, &packet);
            prop_assert_eq!(chosen == KERNEL_CHOOSES, !steerable);
            prop_assert!(chosen < 4 || chosen == KERNEL_CHOOSES);
        }
    }

    #[test]
    fn connects_and_short_packets_are_left_to_the_kernel() {
        let program = program(&Owners::new(8, [3; KEY_BYTES]));
        let mut connect = Vec::new();
        Request::Connect(ConnectRequest {
            transaction_id: TransactionId(1),
        })
        .write(&mut connect);
        assert_eq!(cbpf::run(&program, &connect), KERNEL_CHOOSES);
        // An announce cut short of its info-hash.
        let short = announce([5; 20]);
        assert_eq!(cbpf::run(&program, &short[..35]), KERNEL_CHOOSES);
        assert_ne!(cbpf::run(&program, &short[..36]), KERNEL_CHOOSES);
        assert_eq!(cbpf::run(&program, &[]), KERNEL_CHOOSES);
    }

    #[test]
    fn the_program_fits_the_kernels_limits() {
        let program = program(&Owners::new(64, [9; KEY_BYTES]));
        assert!(program.len() < 250, "jumps are 8-bit: {}", program.len());
        assert!(program.len() <= cbpf::MAX_INSTRUCTIONS);
    }
}
