//! A private tracker's load: the passkeys its users announce with and the
//! info-hashes it has registered (it serves no others), read from files,
//! and where a passkey goes in a request: the path `/announce/{passkey}`
//! over HTTP, the same path in BEP 41's URLData over UDP (as UNIT3D and
//! UNIT3D-Announce give them out), or over HTTP `/{passkey}/announce`
//! (Ocelot's, which Gazelle sites give out). Pure but for reading the files.

use std::path::Path;
use std::sync::Arc;

use tracker_proto::udp::AnnounceOptions;
use tracker_proto::InfoHash;

use crate::config::TrafficConfig;

/// Bytes in a passkey (UNIT3D makes 32 hex digits).
pub const PASSKEY_LEN: usize = 32;

/// One user's passkey: 32 ASCII letters or digits, which go into a URL path
/// as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Passkey(pub [u8; PASSKEY_LEN]);

impl Passkey {
    pub fn parse(text: &str) -> Result<Passkey, String> {
        let bytes = text.as_bytes();
        if bytes.len() != PASSKEY_LEN || !bytes.iter().all(u8::is_ascii_alphanumeric) {
            return Err(format!(
                "`{text}` is not a passkey ({PASSKEY_LEN} ASCII letters or digits)"
            ));
        }
        let mut out = [0u8; PASSKEY_LEN];
        out.copy_from_slice(bytes);
        Ok(Passkey(out))
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII letters and digits get in.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The lines of a list file that hold something: trimmed, with empty lines
/// and `#` comments left out, each with its line number.
fn entries(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
}

/// A passkey a line. At least one.
pub fn parse_passkeys(text: &str) -> Result<Vec<Passkey>, String> {
    let keys = entries(text)
        .map(|(n, line)| Passkey::parse(line).map_err(|e| format!("line {n}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err("no passkeys in the list".into());
    }
    Ok(keys)
}

/// One info-hash a line, 40 hex digits (either case). At least one.
pub fn parse_info_hashes(text: &str) -> Result<Vec<InfoHash>, String> {
    let hashes = entries(text)
        .map(|(n, line)| parse_info_hash(line).map_err(|e| format!("line {n}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if hashes.is_empty() {
        return Err("no info-hashes in the list".into());
    }
    Ok(hashes)
}

fn parse_info_hash(text: &str) -> Result<InfoHash, String> {
    InfoHash::from_hex(text.as_bytes())
        .ok_or_else(|| format!("`{text}` is not an info-hash (40 hex digits)"))
}

/// The lists a private load draws from; empty for a public one.
#[derive(Clone, Debug, Default)]
pub struct Lists {
    /// Each peer announces with one of these, always the same one.
    pub passkeys: Option<Arc<[Passkey]>>,
    /// The torrents, in order of popularity (the first is the most asked
    /// for); they replace the model's made-up info-hashes.
    pub info_hashes: Option<Arc<[InfoHash]>>,
}

impl Lists {
    /// Reads the files `traffic.passkeys` and `traffic.info_hashes` name.
    pub fn load(traffic: &TrafficConfig) -> Result<Lists, String> {
        fn read<T>(
            path: &Path,
            what: &str,
            parse: fn(&str) -> Result<Vec<T>, String>,
        ) -> Result<Arc<[T]>, String> {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the {what} file {}: {e}", path.display()))?;
            Ok(parse(&text)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .into())
        }
        Ok(Lists {
            passkeys: match &traffic.passkeys {
                Some(path) => Some(read(path, "passkey", parse_passkeys)?),
                None => None,
            },
            info_hashes: match &traffic.info_hashes {
                Some(path) => Some(read(path, "info-hash", parse_info_hashes)?),
                None => None,
            },
        })
    }
}

const ANNOUNCE: &[u8] = b"/announce/";

/// The path of an announce with `passkey`, `/announce/{passkey}`, built on
/// the stack: it goes into every private UDP announce.
pub fn announce_path(passkey: &Passkey) -> [u8; ANNOUNCE.len() + PASSKEY_LEN] {
    let mut path = [0u8; ANNOUNCE.len() + PASSKEY_LEN];
    let (prefix, key) = path.split_at_mut(ANNOUNCE.len());
    prefix.copy_from_slice(ANNOUNCE);
    key.copy_from_slice(&passkey.0);
    path
}

/// Puts `passkey` into the HTTP request target that `start..` of `out`
/// holds, `{prefix}/announce?...`: it becomes `{prefix}/announce/{passkey}?...`.
pub fn insert_passkey(out: &mut Vec<u8>, start: usize, passkey: &Passkey) {
    let at = start
        + out[start..]
            .iter()
            .position(|&b| b == b'?')
            .unwrap_or(out.len() - start);
    let mut segment = [0u8; PASSKEY_LEN + 1];
    segment[0] = b'/';
    segment[1..].copy_from_slice(&passkey.0);
    out.splice(at..at, segment);
}

/// Puts `passkey` first in the HTTP request target that `start..` of `out`
/// holds, `/announce?...` (after any prefix): it becomes
/// `/{passkey}/announce?...`, Ocelot's form (the passkey at a fixed offset,
/// before the action), and `/scrape?...` becomes `/{passkey}/scrape?...`.
pub fn insert_passkey_first(out: &mut Vec<u8>, start: usize, passkey: &Passkey) {
    let mut segment = [0u8; PASSKEY_LEN + 1];
    segment[0] = b'/';
    segment[1..].copy_from_slice(&passkey.0);
    out.splice(start..start, segment);
}

/// Appends BEP 41 URLData options carrying `/announce/{passkey}` to an
/// announce datagram.
pub fn write_url_data(out: &mut Vec<u8>, passkey: &Passkey) {
    AnnounceOptions::write_url_data(out, &announce_path(passkey));
}

#[cfg(test)]
mod tests;
