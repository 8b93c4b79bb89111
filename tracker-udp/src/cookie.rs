//! Stateless connection ids: an id is a keyed hash of the client's IP and a
//! 120-second time window, so the tracker keeps no table of them and every
//! instance that shares the secret accepts the ids of the others.

use std::fs::File;
use std::io::{self, Read};
use std::net::IpAddr;

use tracker_proto::udp::ConnectionId;

/// Length of a time window; an id stays valid for one to two of them.
const WINDOW_SECS: u64 = 120;

/// Issues and checks connection ids under one secret.
#[derive(Clone)]
pub struct ConnectionCookies {
    key: [u8; 16],
}

impl ConnectionCookies {
    pub fn new(secret: [u8; 16]) -> Self {
        Self { key: secret }
    }

    /// A fresh secret from the kernel: ids then die with the process, which is
    /// fine as clients reconnect after an error or a time-out.
    pub fn random() -> io::Result<Self> {
        let mut secret = [0; 16];
        File::open("/dev/urandom")?.read_exact(&mut secret)?;
        Ok(Self::new(secret))
    }

    /// The id for `client_ip` at `now_secs` (any clock the instances agree on,
    /// e.g. Unix time).
    pub fn issue(&self, client_ip: IpAddr, now_secs: u64) -> ConnectionId {
        self.id(client_ip, now_secs / WINDOW_SECS)
    }

    /// Whether `id` was issued to `client_ip` in the current or previous window.
    pub fn is_valid(&self, id: ConnectionId, client_ip: IpAddr, now_secs: u64) -> bool {
        let window = now_secs / WINDOW_SECS;
        id == self.id(client_ip, window)
            || window
                .checked_sub(1)
                .is_some_and(|previous| id == self.id(client_ip, previous))
    }

    fn id(&self, client_ip: IpAddr, window: u64) -> ConnectionId {
        // IPv4 hashes as its IPv4-mapped IPv6 form, so a client is the same
        // whether it reaches an IPv4 or a dual-stack socket.
        let ip = match client_ip {
            IpAddr::V4(ip) => ip.to_ipv6_mapped(),
            IpAddr::V6(ip) => ip,
        };
        let mut message = [0; 24];
        let (ip_bytes, window_bytes) = message.split_at_mut(16);
        ip_bytes.copy_from_slice(&ip.octets());
        window_bytes.copy_from_slice(&window.to_le_bytes());
        ConnectionId(siphash24(&self.key, &message) as i64)
    }
}

/// SipHash-2-4 with a 64-bit output (Aumasson and Bernstein, 2012), written out
/// here because std's hashers promise no stable output across releases.
fn siphash24(key: &[u8; 16], message: &[u8]) -> u64 {
    fn le_u64(bytes: &[u8]) -> u64 {
        bytes
            .iter()
            .rev()
            .fold(0, |word, &byte| word << 8 | u64::from(byte))
    }

    fn rounds(v: &mut [u64; 4], count: usize) {
        for _ in 0..count {
            v[0] = v[0].wrapping_add(v[1]);
            v[1] = v[1].rotate_left(13) ^ v[0];
            v[0] = v[0].rotate_left(32);
            v[2] = v[2].wrapping_add(v[3]);
            v[3] = v[3].rotate_left(16) ^ v[2];
            v[0] = v[0].wrapping_add(v[3]);
            v[3] = v[3].rotate_left(21) ^ v[0];
            v[2] = v[2].wrapping_add(v[1]);
            v[1] = v[1].rotate_left(17) ^ v[2];
            v[2] = v[2].rotate_left(32);
        }
    }

    let (k0, k1) = key.split_at(8);
    let (k0, k1) = (le_u64(k0), le_u64(k1));
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let words = message.chunks_exact(8);
    // The last word holds the leftover bytes and the message length mod 256.
    let last = le_u64(words.remainder()) | (message.len() as u64) << 56;
    for word in words.map(le_u64).chain([last]) {
        v[3] ^= word;
        rounds(&mut v, 2);
        v[0] ^= word;
    }
    v[2] ^= 0xff;
    rounds(&mut v, 4);
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const KEY: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

    #[test]
    fn siphash_matches_the_reference_vectors() {
        let message: Vec<u8> = (0..64).collect();
        // From the reference implementation's vectors.h, read as little-endian.
        let cases = [
            (0, 0x726f_db47_dd0e_0e31),
            (8, 0x93f5_f579_9a93_2462),
            (15, 0xa129_ca61_49be_45e5),
        ];
        for (len, expected) in cases {
            assert_eq!(siphash24(&KEY, &message[..len]), expected, "{len} bytes");
        }
    }

    const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
    const START: u64 = 1_700_000_000;

    #[test]
    fn valid_in_same_and_next_window_only() {
        let cookies = ConnectionCookies::new(KEY);
        let window_start = START - START % WINDOW_SECS;
        let id = cookies.issue(CLIENT, window_start);
        assert!(cookies.is_valid(id, CLIENT, window_start + WINDOW_SECS - 1));
        assert!(cookies.is_valid(id, CLIENT, window_start + WINDOW_SECS));
        assert!(cookies.is_valid(id, CLIENT, window_start + 2 * WINDOW_SECS - 1));
        assert!(!cookies.is_valid(id, CLIENT, window_start + 2 * WINDOW_SECS));
        // Not from the future either.
        assert!(!cookies.is_valid(id, CLIENT, window_start - 1));
    }

    #[test]
    fn invalid_for_another_ip_or_secret() {
        let cookies = ConnectionCookies::new(KEY);
        let id = cookies.issue(CLIENT, START);
        let other = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 8));
        assert!(!cookies.is_valid(id, other, START));
        let mut secret = KEY;
        secret[0] ^= 1;
        assert!(!ConnectionCookies::new(secret).is_valid(id, CLIENT, START));
    }

    #[test]
    fn ipv4_and_its_mapped_ipv6_form_agree() {
        let cookies = ConnectionCookies::new(KEY);
        let mapped = IpAddr::V6(Ipv4Addr::new(198, 51, 100, 7).to_ipv6_mapped());
        let id = cookies.issue(CLIENT, START);
        assert!(cookies.is_valid(id, mapped, START));
        let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
        assert!(!cookies.is_valid(id, v6, START));
    }

    #[test]
    fn the_first_window_has_no_previous_one() {
        let cookies = ConnectionCookies::new(KEY);
        let id = cookies.issue(CLIENT, 0);
        assert!(cookies.is_valid(id, CLIENT, 0));
        assert!(cookies.is_valid(id, CLIENT, WINDOW_SECS));
    }

    #[test]
    fn random_secrets_differ() {
        let a = ConnectionCookies::random().expect("urandom");
        let b = ConnectionCookies::random().expect("urandom");
        assert_ne!(a.issue(CLIENT, START), b.issue(CLIENT, START));
    }
}
