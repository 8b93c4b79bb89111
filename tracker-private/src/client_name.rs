//! What a client is known by when it sends no user agent (UDP, BEP 15):
//! the name its peer id's prefix spells, as clients name their peers, so
//! that `peers.agent` and `history.agent` tell the site's staff which
//! client announced. Three encodings of the prefix are read:
//!
//! - Azureus style, `-` two letters four version characters `-`:
//!   `-qB4500-` is "qBittorrent 4.5.0.0" (`-lt0D80-` "rTorrent 0.13.8.0":
//!   a version character is a digit or a letter, A-Z counting 10 to 35).
//! - Shadow style, one letter three version characters `--`: `T03I--` is
//!   "BitTornado 0.3.18" (its characters count 0-9, A-Z, a-z, `.`).
//! - Mainline style, `M` then dash-separated numbers: `M7-4-3--` is
//!   "Mainline 7.4.3".
//!
//! A client whose two letters are not in the table below is named by its
//! letters (`-XY1200-` is "XY 1.2.0.0"); any other peer id by its first
//! eight bytes, `Unknown [........]`, where a byte that is not visible
//! ASCII is a dot. The name is ASCII, at most [`Agent::MAX`] bytes, made on
//! the stack: nothing is allocated per announce.

use crate::batch::Agent;
use std::io::Write;
use tracker_proto::PeerId;

/// The clients of the Azureus-style codes, sorted by code (bytewise), so
/// that a lookup is a binary search.
const AZUREUS: [(&[u8; 2], &str); 88] = [
    (b"7T", "aTorrent"),
    (b"AB", "AnyEvent::BitTorrent"),
    (b"AG", "Ares"),
    (b"AR", "Arctic"),
    (b"AT", "Artemis"),
    (b"AV", "Avicora"),
    (b"AX", "BitPump"),
    (b"AZ", "Vuze"),
    (b"A~", "Ares"),
    (b"BB", "BitBuddy"),
    (b"BC", "BitComet"),
    (b"BE", "Baretorrent"),
    (b"BF", "Bitflu"),
    (b"BG", "BTG"),
    (b"BI", "BiglyBT"),
    (b"BL", "BitBlinder"),
    (b"BP", "BitTorrent Pro"),
    (b"BR", "BitRocket"),
    (b"BS", "BTSlave"),
    (b"BT", "BitTorrent"),
    (b"BW", "BitWombat"),
    (b"BX", "BittorrentX"),
    (b"CD", "Enhanced CTorrent"),
    (b"CT", "CTorrent"),
    (b"DE", "Deluge"),
    (b"DP", "Propagate Data Client"),
    (b"EB", "EBit"),
    (b"ES", "electric sheep"),
    (b"FC", "FileCroc"),
    (b"FD", "Free Download Manager"),
    (b"FG", "FlashGet"),
    (b"FT", "FoxTorrent"),
    (b"FW", "FrostWire"),
    (b"FX", "Freebox BitTorrent"),
    (b"GS", "GSTorrent"),
    (b"HL", "Halite"),
    (b"HN", "Hydranode"),
    (b"KG", "KGet"),
    (b"KT", "KTorrent"),
    (b"LC", "LeechCraft"),
    (b"LH", "LH-ABC"),
    (b"LP", "Lphant"),
    (b"LT", "libtorrent"),
    (b"LW", "LimeWire"),
    (b"MO", "MonoTorrent"),
    (b"MP", "MooPolice"),
    (b"MR", "Miro"),
    (b"MT", "Moonlight Torrent"),
    (b"NX", "Net Transport"),
    (b"OS", "OneSwarm"),
    (b"OT", "OmegaTorrent"),
    (b"PD", "Pando"),
    (b"PI", "PicoTorrent"),
    (b"QD", "QQDownload"),
    (b"QT", "Qt 4 Torrent example"),
    (b"RT", "Retriever"),
    (b"RZ", "RezTorrent"),
    (b"SB", "Swiftbit"),
    (b"SD", "Thunder"),
    (b"SM", "SoMud"),
    (b"SP", "BitSpirit"),
    (b"SS", "SwarmScope"),
    (b"ST", "SymTorrent"),
    (b"SZ", "Shareaza"),
    (b"S~", "Shareaza"),
    (b"TB", "Torch"),
    (b"TL", "Tribler"),
    (b"TN", "TorrentDotNET"),
    (b"TR", "Transmission"),
    (b"TS", "Torrentstorm"),
    (b"TT", "TuoTu"),
    (b"UL", "uLeecher!"),
    (b"UM", "uTorrent Mac"),
    (b"UT", "uTorrent"),
    (b"UW", "uTorrent Web"),
    (b"VG", "Vagaa"),
    (b"WD", "WebTorrent Desktop"),
    (b"WT", "BitLet"),
    (b"WW", "WebTorrent"),
    (b"WY", "FireTorrent"),
    (b"XL", "Xunlei"),
    (b"XS", "XSwifter"),
    (b"XT", "XanTorrent"),
    (b"XX", "Xtorrent"),
    (b"ZT", "ZipTorrent"),
    (b"lt", "rTorrent"),
    (b"pX", "pHoeniX"),
    (b"qB", "qBittorrent"),
];

/// The clients of the Shadow-style letters.
const SHADOW: [(u8, &str); 7] = [
    (b'A', "ABC"),
    (b'O', "Osprey Permaseed"),
    (b'Q', "BTQueue"),
    (b'R', "Tribler"),
    (b'S', "Shadow"),
    (b'T', "BitTornado"),
    (b'U', "UPnP NAT Bit Torrent"),
];

/// The name `peer_id` spells, as the agent of an announce that has no
/// user agent.
pub fn agent_of(peer_id: &PeerId) -> Agent {
    let mut name = [0u8; Agent::MAX];
    let mut out = &mut name[..];
    // A name longer than the buffer is cut where it ends (the columns are
    // 64 bytes); none of the forms below comes near it.
    let _ = write_name(&mut out, &peer_id.0);
    let len = Agent::MAX - out.len();
    Agent::new(name.get(..len).unwrap_or_default())
}

fn write_name(out: &mut &mut [u8], id: &[u8; 20]) -> std::io::Result<()> {
    if let Some((code, version)) = azureus(id) {
        let known = AZUREUS
            .binary_search_by(|(c, _)| c[..].cmp(code))
            .ok()
            .and_then(|i| AZUREUS.get(i));
        match known {
            Some((_, name)) => out.write_all(name.as_bytes())?,
            None => out.write_all(code)?,
        }
        return write_version(out, version.map(u16::from));
    }
    if let Some((name, version)) = shadow(id) {
        out.write_all(name.as_bytes())?;
        return write_version(out, version.map(u16::from));
    }
    if let Some(version) = mainline(id) {
        out.write_all(b"Mainline")?;
        return write_version(out, version);
    }
    out.write_all(b"Unknown [")?;
    for &byte in &id[..8] {
        let shown = if byte.is_ascii_graphic() { byte } else { b'.' };
        out.write_all(&[shown])?;
    }
    out.write_all(b"]")
}

/// ` 1.2.3`: by hand, as `write!` costs as much again as the rest.
fn write_version<const N: usize>(out: &mut &mut [u8], version: [u16; N]) -> std::io::Result<()> {
    for (i, number) in version.into_iter().enumerate() {
        out.write_all(if i == 0 { b" " } else { b"." })?;
        let digits = [number / 100 % 10, number / 10 % 10, number % 10].map(|d| b'0' + d as u8);
        let first = match number {
            100.. => 0,
            10..=99 => 1,
            _ => 2,
        };
        out.write_all(digits.get(first..).unwrap_or_default())?;
    }
    Ok(())
}

/// `-XY1234-`: the two-letter code and four version numbers.
fn azureus(id: &[u8; 20]) -> Option<(&[u8], [u8; 4])> {
    let (code, rest) = id.strip_prefix(b"-")?.split_at_checked(2)?;
    if !code.iter().all(|b| b.is_ascii_graphic() && *b != b'-') || rest.get(4) != Some(&b'-') {
        return None;
    }
    let mut version = [0; 4];
    for (number, &c) in version.iter_mut().zip(rest) {
        *number = match c {
            b'0'..=b'9' => c - b'0',
            b'A'..=b'Z' => c - b'A' + 10,
            b'a'..=b'z' => c - b'a' + 10,
            _ => return None,
        };
    }
    Some((code, version))
}

/// `T03I--`: a known letter, three version characters, two dashes.
fn shadow(id: &[u8; 20]) -> Option<(&'static str, [u8; 3])> {
    let &(_, name) = SHADOW.iter().find(|(letter, _)| *letter == id[0])?;
    if &id[4..6] != b"--" {
        return None;
    }
    let mut version = [0; 3];
    for (number, &c) in version.iter_mut().zip(&id[1..4]) {
        *number = match c {
            b'0'..=b'9' => c - b'0',
            b'A'..=b'Z' => c - b'A' + 10,
            b'a'..=b'z' => c - b'a' + 36,
            b'.' => 62,
            _ => return None,
        };
    }
    Some((name, version))
}

/// `M7-4-3--`: three numbers of one to three digits, each ended by a dash.
fn mainline(id: &[u8; 20]) -> Option<[u16; 3]> {
    let mut rest = id.strip_prefix(b"M")?;
    let mut version = [0; 3];
    for number in &mut version {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if !(1..=3).contains(&digits) || rest.get(digits) != Some(&b'-') {
            return None;
        }
        for &d in rest.get(..digits)? {
            *number = *number * 10 + u16::from(d - b'0');
        }
        rest = rest.get(digits + 1..)?;
    }
    Some(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(prefix: &[u8]) -> String {
        let mut id = [b'x'; 20];
        id[..prefix.len()].copy_from_slice(prefix);
        String::from_utf8(agent_of(&PeerId(id)).as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn clients_are_named_by_their_prefix() {
        for (prefix, expected) in [
            (&b"-qB4500-"[..], "qBittorrent 4.5.0.0"),
            (b"-TR3000-", "Transmission 3.0.0.0"),
            (b"-lt0D80-", "rTorrent 0.13.8.0"),
            (b"-LT2080-", "libtorrent 2.0.8.0"),
            (b"-DE13F0-", "Deluge 1.3.15.0"),
            (b"-UT355W-", "uTorrent 3.5.5.32"),
            (b"-XY1200-", "XY 1.2.0.0"),
            (b"T03I--", "BitTornado 0.3.18"),
            (b"S58B-----", "Shadow 5.8.11"),
            (b"M7-4-3--", "Mainline 7.4.3"),
            (b"M4-20-8-", "Mainline 4.20.8"),
            (b"-qB45%0-", "Unknown [-qB45%0-]"),
            (b"\x00\x01abc\xff", "Unknown [..abc.xx]"),
            (b"M7-4-3x", "Unknown [M7-4-3xx]"),
            (b"Z03I--", "Unknown [Z03I--xx]"),
        ] {
            assert_eq!(
                name(prefix),
                expected,
                "{:?}",
                String::from_utf8_lossy(prefix)
            );
        }
    }

    #[test]
    fn the_table_is_sorted_for_its_binary_search() {
        assert!(AZUREUS.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn every_peer_id_gets_a_short_ascii_name() {
        let mut id = [0u8; 20];
        for first in 0..=255u8 {
            for second in [b'-', b'q', 0xff] {
                id[0] = first;
                id[1] = second;
                let agent = agent_of(&PeerId(id));
                let bytes = agent.as_bytes();
                assert!(!bytes.is_empty() && bytes.len() <= Agent::MAX);
                assert!(bytes.iter().all(|b| b.is_ascii_graphic() || *b == b' '));
            }
        }
    }
}
