//! Gazelle's own calls and real clients' announces, as recorded on the
//! wire against Ocelot 2.1.3 (tests/fixtures/gazelle/ocelot-transcript.txt,
//! deploy/gazelle/record), taken through this module's pure layers in the
//! recorded order: every update Gazelle made parses and is applied to the
//! view as Ocelot applied it (its user reports agree with the view), and
//! every announce is admitted or refused by the site's rules as Ocelot
//! answered it, in its words. The query's own checks (`compact`, the peer
//! id) and the secrets in the path are the front end's, and left to it.

use sha1::{Digest, Sha1};
use tracker_proto::{AnnounceEvent, InfoHash, PeerId};

use super::request::{parse_report, parse_update, percent_decode, Params, Report, Update};
use super::site::{GazelleRecords, GazelleSite, GazelleTorrent, GazelleUser};
use super::LeechType;
use crate::admission::SiteRules;
use crate::announce::PrivateAnnounce;
use crate::batch::Agent;
use crate::site::Passkey;

const TRANSCRIPT: &str = include_str!("../../../tests/fixtures/gazelle/ocelot-transcript.txt");
const SITE_PASSWORD: &[u8] = b"siteSecretOfTheRecording00000000";
const REPORT_PASSWORD: &[u8] = b"reportKeyOfTheRecording000000000";
const WHITELIST_SEED: &str = include_str!("../../../deploy/gazelle/whitelist-seed.sql");

/// One exchange of the transcript: who made it, and the bytes each way.
struct Exchange {
    label: String,
    who: String,
    request: Vec<u8>,
    answer: Vec<u8>,
}

/// A line of BYTES, unescaped (see the transcript's header).
fn unescape(line: &str, out: &mut Vec<u8>) {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        match bytes[i + 1] {
            b'\\' => out.push(b'\\'),
            b'r' => out.push(b'\r'),
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'x' => {
                let hex = std::str::from_utf8(&bytes[i + 2..i + 4]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 2;
            }
            other => panic!("unknown escape \\{}", other as char),
        }
        i += 2;
    }
}

fn exchanges() -> Vec<Exchange> {
    let mut all: Vec<Exchange> = Vec::new();
    for line in TRANSCRIPT.lines() {
        if let Some(head) = line.strip_prefix("=== ") {
            let mut parts = head.splitn(3, ' ');
            let (_, who, label) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
            all.push(Exchange {
                label: label.to_string(),
                who: who.to_string(),
                request: Vec::new(),
                answer: Vec::new(),
            });
        } else if let Some(bytes) = line.strip_prefix("> ") {
            unescape(bytes, &mut all.last_mut().unwrap().request);
        } else if let Some(bytes) = line.strip_prefix("< ") {
            unescape(bytes, &mut all.last_mut().unwrap().answer);
        }
    }
    all
}

impl Exchange {
    /// The request target's path and query.
    fn target(&self) -> (&[u8], &[u8]) {
        let line = self.request.split(|&b| b == b'\r').next().unwrap();
        let target = line
            .strip_prefix(b"GET ")
            .and_then(|rest| rest.split(|&b| b == b' ').next())
            .unwrap_or_default();
        let mut halves = target.splitn(2, |&b| b == b'?');
        (halves.next().unwrap(), halves.next().unwrap_or_default())
    }

    /// `/{key}/{action}` split, if the path has that shape.
    fn key_and_action(&self) -> Option<(&[u8], &[u8])> {
        let path = self.target().0.strip_prefix(b"/")?;
        let slash = path.iter().position(|&b| b == b'/')?;
        Some((&path[..slash], &path[slash + 1..]))
    }

    fn body(&self) -> &[u8] {
        let at = self
            .answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("an answer with a head");
        &self.answer[at + 4..]
    }

    /// The failure reason of a bencoded failure body.
    fn failure(&self) -> Option<String> {
        let rest = self.body().strip_prefix(b"d14:failure reason")?;
        let colon = rest.iter().position(|&b| b == b':')?;
        let len: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
        Some(String::from_utf8(rest[colon + 1..colon + 1 + len].to_vec()).unwrap())
    }
}

/// The recording's site as Ocelot loaded it (deploy/gazelle/record/driver.php:
/// users 1 to 5 and 7 enabled, 5 paranoid; torrents 1 to 3, 5 and 6 with
/// stats rows; the token of user 3 on torrent 2 expired; Gazelle's seeded
/// whitelist).
fn recorded_site() -> GazelleSite {
    let passkey = |id: u32| {
        let letter = (b'A' + id as u8 - 1) as char;
        let text = format!(
            "user{letter}{}",
            letter.to_ascii_lowercase().to_string().repeat(27)
        );
        Passkey::parse(text.as_bytes()).unwrap()
    };
    let whitelist = WHITELIST_SEED
        .lines()
        .filter(|l| l.trim_start().starts_with('('))
        .filter_map(|l| l.split('\'').nth(1))
        .map(|p| p.as_bytes().to_vec())
        .collect::<Vec<_>>();
    assert_eq!(whitelist.len(), 32, "Gazelle's seeded whitelist");
    GazelleSite::from_records(
        GazelleRecords {
            users: [1, 2, 3, 4, 5, 7]
                .into_iter()
                .map(|id| GazelleUser {
                    id,
                    passkey: passkey(id),
                    can_leech: true,
                    protected: id == 5,
                })
                .collect(),
            torrents: [1, 2, 3, 5, 6]
                .into_iter()
                .map(|id| GazelleTorrent {
                    id,
                    info_hash: InfoHash(
                        Sha1::digest(format!("ocelot transcript torrent {id}")).into(),
                    ),
                    leech: LeechType::Normal,
                    snatched: 0,
                })
                .collect(),
            tokens: vec![],
            whitelist,
        },
        1800,
        240,
    )
}

/// The announce a client's request makes, where its query passes the
/// front end's own checks.
fn announce_of(ex: &Exchange) -> Option<PrivateAnnounce> {
    let (key, _) = ex.key_and_action()?;
    let params = Params::parse(ex.target().1);
    if params.get("compact") != Some(b"1") {
        return None;
    }
    let peer_id: [u8; 20] = percent_decode(params.get("peer_id")?).try_into().ok()?;
    let number = |name| -> u64 {
        params
            .get(name)
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(0)
    };
    Some(PrivateAnnounce {
        info_hash: InfoHash(percent_decode(params.get("info_hash")?).try_into().ok()?),
        peer_id: PeerId(peer_id),
        passkey: Passkey::parse(key)?,
        ip: "127.0.0.1".parse().unwrap(),
        port: number("port") as u16,
        event: match params.get("event") {
            Some(b"started") => AnnounceEvent::Started,
            Some(b"stopped") => AnnounceEvent::Stopped,
            Some(b"completed") => AnnounceEvent::Completed,
            _ => AnnounceEvent::None,
        },
        uploaded: number("uploaded"),
        downloaded: number("downloaded"),
        left: number("left"),
        agent: Agent::new(b"qBittorrent/4.2.5"),
        numwant: 50,
    })
}

/// The site's refusals (those of the front end aside).
const SITE_WORDS: [&str; 3] = [
    "Passkey not found",
    "Unregistered torrent",
    "Your client is not on the whitelist",
];

#[test]
fn the_recorded_calls_and_announces_are_taken_as_ocelot_took_them() {
    let mut site = recorded_site();
    let (mut updates, mut reports, mut announces) = (0, 0, 0);
    for (n, ex) in exchanges().iter().enumerate() {
        let now = n as u64;
        let what = format!("exchange {} ({})", n + 1, ex.label);
        match ex.who.as_str() {
            "gazelle" => {
                let (key, action) = ex.key_and_action().expect(&what);
                let query = ex.target().1;
                if action == b"update" && key == SITE_PASSWORD {
                    let update = parse_update(query);
                    assert!(
                        !matches!(update, Update::Ignored { .. }),
                        "{what}: {update:?}"
                    );
                    assert_eq!(ex.body(), b"success", "{what}");
                    site.apply(&update, now);
                    updates += 1;
                } else if action == b"report" && key == REPORT_PASSWORD {
                    if let Report::User(passkey) = parse_report(query) {
                        let json: Option<serde_json::Value> =
                            serde_json::from_slice(ex.body()).ok();
                        let user = site.user(&passkey);
                        match json {
                            Some(json) => {
                                let user =
                                    user.unwrap_or_else(|| panic!("{what}: not in the view"));
                                assert_eq!(json["id"], user.id, "{what}");
                                assert_eq!(json["protected"] == 1, user.protected, "{what}");
                                assert_eq!(json["can_leech"] == 1, user.can_leech, "{what}");
                            }
                            None => {
                                assert_eq!(ex.failure().as_deref(), Some("Announce key not found"));
                                assert!(user.is_none(), "{what}: still in the view");
                            }
                        }
                        reports += 1;
                    }
                }
            }
            "client" if ex.key_and_action().is_some_and(|(_, a)| a == b"announce") => {
                let Some(a) = announce_of(ex) else { continue };
                let ocelot = ex.failure();
                let ours = site.admit(&a);
                match ocelot.as_deref() {
                    Some(words) if SITE_WORDS.iter().any(|w| words.starts_with(w)) => {
                        let refusal = ours.expect_err(&what);
                        assert_eq!(refusal.reason(), words, "{what}");
                    }
                    Some("Access denied, leeching forbidden") => {
                        let admitted = ours.expect(&what);
                        assert_eq!(admitted.download_slots, Some(0), "{what}");
                        assert!(a.left > 0, "{what}");
                    }
                    Some(other) => panic!("{what}: Ocelot's {other:?}, not the site's"),
                    None => {
                        let admitted = ours.unwrap_or_else(|r| panic!("{what}: refused: {r}"));
                        assert!(admitted.download_slots.is_none() || a.left == 0, "{what}");
                    }
                }
                announces += 1;
            }
            _ => {}
        }
    }
    // Every one the recording holds was taken: 20 updates, 6 user
    // reports, 29 announces past the front end's checks.
    assert_eq!((updates, reports, announces), (20, 6, 29));
}
