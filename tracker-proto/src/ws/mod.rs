//! WebTorrent's tracker protocol: JSON text messages over a WebSocket, as
//! webtorrent's `bittorrent-tracker` and aquatic_ws speak it. Browsers
//! announce here and the tracker relays WebRTC offers and answers between
//! them; the peers then connect to each other directly.
//!
//! Both directions, pure: [`parse_client_message`] and the `write_*` answers
//! for the tracker; [`write_announce_request`], [`write_scrape_request`] and
//! [`parse_server_message`] for the load generator and the tests.
//!
//! Ids (`info_hash`, `peer_id`, `offer_id`, `to_peer_id`) are 20-character
//! strings of one byte per character (code points up to U+00FF), as
//! JavaScript's binary strings are; anything else is refused. Offers and
//! answers (the SDP) are relayed as the raw JSON text they came in, checked
//! only for size and for being an object: the tracker never looks inside.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::{AnnounceEvent, InfoHash, PeerId, ScrapeStats};

#[cfg(test)]
mod tests;

/// Names one offer, so that its answer can be matched to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct OfferId(pub [u8; 20]);

/// What a client message may carry; past these it is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageLimits {
    /// Offers in one announce (WebTorrent sends 10 at most).
    pub max_offers: usize,
    /// Bytes of one offer's or answer's raw JSON (its SDP, mostly).
    pub max_sdp_bytes: usize,
    /// Info-hashes in one scrape.
    pub max_scrape_hashes: usize,
}

impl Default for MessageLimits {
    fn default() -> Self {
        MessageLimits {
            max_offers: 10,
            max_sdp_bytes: 8192,
            max_scrape_hashes: 64,
        }
    }
}

/// The action a message is about, named in error answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Announce,
    Scrape,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Announce => "announce",
            Action::Scrape => "scrape",
        }
    }
}

/// A message from a client, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage<'a> {
    Announce(AnnounceMessage<'a>),
    Scrape(ScrapeMessage),
}

/// An announce: the peer's state in a torrent, the offers it makes to other
/// peers, and perhaps its answer to one offer it received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnounceMessage<'a> {
    pub info_hash: InfoHash,
    pub peer_id: PeerId,
    /// `update` and no event are both `None`.
    pub event: AnnounceEvent,
    /// Bytes left; `None` when absent or `null` (a client that has no
    /// metadata yet sends JavaScript's `Infinity`, which JSON writes as
    /// `null`).
    pub left: Option<u64>,
    pub numwant: Option<u32>,
    pub offers: Vec<Offer<'a>>,
    pub answer: Option<Answer<'a>>,
}

impl AnnounceMessage<'_> {
    /// A seeder: nothing left, or it says it completed.
    pub fn is_seeder(&self) -> bool {
        self.left == Some(0) || self.event == AnnounceEvent::Completed
    }
}

/// An offer to be handed to another peer of the torrent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer<'a> {
    pub offer_id: OfferId,
    /// The offer's raw JSON object (`{"type":"offer","sdp":...}`).
    pub offer: &'a str,
}

/// An answer to the offer `offer_id` that peer `to_peer_id` made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer<'a> {
    pub to_peer_id: PeerId,
    pub offer_id: OfferId,
    /// The answer's raw JSON object.
    pub answer: &'a str,
}

/// A scrape of some torrents, each named once; none named is a full scrape.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ScrapeMessage {
    pub info_hashes: Vec<InfoHash>,
}

/// Why a client message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageErrorKind {
    /// Not a JSON object, or a field of the wrong type.
    Malformed,
    UnknownAction,
    MissingInfoHash,
    InvalidInfoHash,
    MissingPeerId,
    InvalidPeerId,
    InvalidEvent,
    InvalidLeft,
    InvalidNumwant,
    InvalidOfferId,
    TooManyOffers,
    /// An offer or answer past `max_sdp_bytes`, or not an object.
    InvalidSdp,
    /// `answer` without `to_peer_id` and `offer_id`, or one of these invalid.
    InvalidAnswer,
    TooManyInfoHashes,
}

impl MessageErrorKind {
    /// The failure reason sent back.
    pub fn reason(self) -> &'static str {
        match self {
            MessageErrorKind::Malformed => "malformed message",
            MessageErrorKind::UnknownAction => "unknown action",
            MessageErrorKind::MissingInfoHash => "missing info_hash",
            MessageErrorKind::InvalidInfoHash => "invalid info_hash",
            MessageErrorKind::MissingPeerId => "missing peer_id",
            MessageErrorKind::InvalidPeerId => "invalid peer_id",
            MessageErrorKind::InvalidEvent => "invalid event",
            MessageErrorKind::InvalidLeft => "invalid left",
            MessageErrorKind::InvalidNumwant => "invalid numwant",
            MessageErrorKind::InvalidOfferId => "invalid offer_id",
            MessageErrorKind::TooManyOffers => "too many offers",
            MessageErrorKind::InvalidSdp => "invalid offer or answer",
            MessageErrorKind::InvalidAnswer => "invalid answer",
            MessageErrorKind::TooManyInfoHashes => "too many info_hash values",
        }
    }

    /// A name for metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageErrorKind::Malformed => "malformed",
            MessageErrorKind::UnknownAction => "unknown_action",
            MessageErrorKind::MissingInfoHash | MessageErrorKind::InvalidInfoHash => "info_hash",
            MessageErrorKind::MissingPeerId | MessageErrorKind::InvalidPeerId => "peer_id",
            MessageErrorKind::InvalidEvent
            | MessageErrorKind::InvalidLeft
            | MessageErrorKind::InvalidNumwant => "field",
            MessageErrorKind::InvalidOfferId
            | MessageErrorKind::TooManyOffers
            | MessageErrorKind::InvalidSdp => "offer",
            MessageErrorKind::InvalidAnswer => "answer",
            MessageErrorKind::TooManyInfoHashes => "too_many_info_hashes",
        }
    }
}

/// A refused message, with what the error answer can name: the action and
/// the info-hash, when they were read before the error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageError {
    pub kind: MessageErrorKind,
    pub action: Option<Action>,
    pub info_hash: Option<InfoHash>,
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.reason())
    }
}

impl std::error::Error for MessageError {}

/// A 20-byte id, written as a string of 20 characters up to U+00FF.
fn latin1_id(text: &str) -> Option<[u8; 20]> {
    let mut id = [0u8; 20];
    let mut chars = text.chars();
    for byte in &mut id {
        let c = u32::from(chars.next()?);
        *byte = u8::try_from(c).ok()?;
    }
    chars.next().is_none().then_some(id)
}

/// A string that should be a 20-byte id, read into one where it arrives
/// (escapes undone by serde_json's scratch buffer, never copied to the heap):
/// `None` when the string is not such an id, for the caller to name the
/// error. Anything but a string is malformed.
#[derive(Clone, Copy)]
struct Id20(Option<[u8; 20]>);

impl<'de> Deserialize<'de> for Id20 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id20;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Id20(latin1_id(v)))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// One id or a list of them (a scrape's `info_hash`).
enum Ids {
    One(Id20),
    Many(Vec<Id20>),
}

impl<'de> Deserialize<'de> for Ids {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ids;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Ids::One(Id20(latin1_id(v))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut all = Vec::new();
                while let Some(id) = seq.next_element::<Id20>()? {
                    all.push(id);
                }
                Ok(Ids::Many(all))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A string, borrowed from the message where it has no escapes.
struct BorrowedOrOwned<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for BorrowedOrOwned<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = BorrowedOrOwned<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(BorrowedOrOwned(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(BorrowedOrOwned(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// A number JavaScript sent: any JSON number, or null.
fn js_number(value: Option<&RawValue>) -> Result<Option<f64>, ()> {
    match value.map(RawValue::get) {
        None | Some("null") => Ok(None),
        Some(text) => text.parse::<f64>().map(Some).map_err(|_| ()),
    }
}

#[derive(Deserialize)]
struct RawOffer<'a> {
    #[serde(borrow)]
    offer: Option<&'a RawValue>,
    offer_id: Option<Id20>,
}

/// A client message as JSON has it, before any check.
#[derive(Deserialize)]
struct RawClientMessage<'a> {
    #[serde(borrow)]
    action: Option<BorrowedOrOwned<'a>>,
    info_hash: Option<Ids>,
    peer_id: Option<Id20>,
    #[serde(borrow)]
    event: Option<&'a RawValue>,
    #[serde(borrow)]
    left: Option<&'a RawValue>,
    #[serde(borrow)]
    numwant: Option<&'a RawValue>,
    #[serde(borrow)]
    offers: Option<Vec<RawOffer<'a>>>,
    #[serde(borrow)]
    answer: Option<&'a RawValue>,
    to_peer_id: Option<Id20>,
    offer_id: Option<Id20>,
}

/// A raw offer or answer, checked: an object, within the size limit.
fn sdp<'a>(value: &'a RawValue, limits: &MessageLimits) -> Option<&'a str> {
    let text = value.get();
    (text.len() <= limits.max_sdp_bytes && text.starts_with('{')).then_some(text)
}

/// Parses and checks one text message from a client.
pub fn parse_client_message<'a>(
    text: &'a [u8],
    limits: &MessageLimits,
) -> Result<ClientMessage<'a>, MessageError> {
    let raw: RawClientMessage<'a> = serde_json::from_slice(text).map_err(|_| MessageError {
        kind: MessageErrorKind::Malformed,
        action: None,
        info_hash: None,
    })?;
    let action = match raw.action.as_ref().map(|a| a.0.as_ref()) {
        Some("announce") => Action::Announce,
        Some("scrape") => Action::Scrape,
        _ => {
            return Err(MessageError {
                kind: MessageErrorKind::UnknownAction,
                action: None,
                info_hash: None,
            })
        }
    };
    let error = |kind, info_hash| MessageError {
        kind,
        action: Some(action),
        info_hash,
    };
    if action == Action::Scrape {
        let mut info_hashes = Vec::new();
        let hashes = match &raw.info_hash {
            None => &[][..],
            Some(Ids::One(one)) => std::slice::from_ref(one),
            Some(Ids::Many(many)) => many.as_slice(),
        };
        if hashes.len() > limits.max_scrape_hashes {
            return Err(error(MessageErrorKind::TooManyInfoHashes, None));
        }
        for hash in hashes {
            let hash = InfoHash(
                hash.0
                    .ok_or(error(MessageErrorKind::InvalidInfoHash, None))?,
            );
            // The answer is an object keyed by hash: a repeated one counts
            // once, or the answer would repeat a key.
            if !info_hashes.contains(&hash) {
                info_hashes.push(hash);
            }
        }
        return Ok(ClientMessage::Scrape(ScrapeMessage { info_hashes }));
    }
    let info_hash = match &raw.info_hash {
        None => return Err(error(MessageErrorKind::MissingInfoHash, None)),
        Some(Ids::One(one)) => InfoHash(
            one.0
                .ok_or(error(MessageErrorKind::InvalidInfoHash, None))?,
        ),
        Some(Ids::Many(_)) => return Err(error(MessageErrorKind::InvalidInfoHash, None)),
    };
    let error = |kind| error(kind, Some(info_hash));
    let peer_id = match &raw.peer_id {
        None => return Err(error(MessageErrorKind::MissingPeerId)),
        Some(id) => PeerId(id.0.ok_or(error(MessageErrorKind::InvalidPeerId))?),
    };
    let event = match raw.event.map(RawValue::get) {
        None | Some("null") | Some("\"update\"") | Some("\"\"") => AnnounceEvent::None,
        Some("\"started\"") => AnnounceEvent::Started,
        Some("\"stopped\"") => AnnounceEvent::Stopped,
        Some("\"completed\"") => AnnounceEvent::Completed,
        Some(_) => return Err(error(MessageErrorKind::InvalidEvent)),
    };
    let left = match js_number(raw.left) {
        Ok(None) => None,
        // Infinity (a client without metadata) is null; a huge number too.
        Ok(Some(n)) if n >= 0.0 => Some(if n >= u64::MAX as f64 {
            u64::MAX
        } else {
            n as u64
        }),
        _ => return Err(error(MessageErrorKind::InvalidLeft)),
    };
    let numwant = match js_number(raw.numwant) {
        Ok(None) => None,
        Ok(Some(n)) if n >= 0.0 => Some(if n >= f64::from(u32::MAX) {
            u32::MAX
        } else {
            n as u32
        }),
        _ => return Err(error(MessageErrorKind::InvalidNumwant)),
    };
    let raw_offers = raw.offers.unwrap_or_default();
    if raw_offers.len() > limits.max_offers {
        return Err(error(MessageErrorKind::TooManyOffers));
    }
    let mut offers = Vec::with_capacity(raw_offers.len());
    for raw_offer in &raw_offers {
        let offer_id = raw_offer
            .offer_id
            .and_then(|id| id.0)
            .ok_or(error(MessageErrorKind::InvalidOfferId))?;
        let offer = raw_offer
            .offer
            .and_then(|offer| sdp(offer, limits))
            .ok_or(error(MessageErrorKind::InvalidSdp))?;
        offers.push(Offer {
            offer_id: OfferId(offer_id),
            offer,
        });
    }
    let answer = match raw.answer {
        None => None,
        Some(answer) => {
            let answer = sdp(answer, limits).ok_or(error(MessageErrorKind::InvalidSdp))?;
            let id = |field: Option<Id20>| {
                field
                    .and_then(|id| id.0)
                    .ok_or(error(MessageErrorKind::InvalidAnswer))
            };
            Some(Answer {
                to_peer_id: PeerId(id(raw.to_peer_id)?),
                offer_id: OfferId(id(raw.offer_id)?),
                answer,
            })
        }
    };
    Ok(ClientMessage::Announce(AnnounceMessage {
        info_hash,
        peer_id,
        event,
        left,
        numwant,
        offers,
        answer,
    }))
}

/// Writes a 20-byte id as a JSON string of one character per byte.
pub fn write_id(out: &mut Vec<u8>, id: &[u8; 20]) {
    out.push(b'"');
    for &byte in id {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0..=0x1f => {
                let hex = |nibble: u8| match nibble {
                    0..=9 => b'0' + nibble,
                    _ => b'a' + nibble - 10,
                };
                out.extend_from_slice(b"\\u00");
                out.push(hex(byte >> 4));
                out.push(hex(byte & 0xf));
            }
            0x20..=0x7f => out.push(byte),
            // U+0080..U+00FF in UTF-8.
            _ => out.extend_from_slice(&[0xc0 | (byte >> 6), 0x80 | (byte & 0x3f)]),
        }
    }
    out.push(b'"');
}

/// Writes a JSON string (the few that are not ids: failure reasons).
fn write_text(out: &mut Vec<u8>, text: &str) {
    // serde_json escapes exactly as JSON wants; a String cannot fail to write.
    let _ = serde_json::to_writer(&mut *out, text);
}

fn write_number(out: &mut Vec<u8>, n: u64) {
    use std::io::Write;
    // Writing to a Vec cannot fail, and formats without allocating.
    let _ = write!(out, "{n}");
}

/// The answer to an announce: the torrent's WebRTC counts and the interval.
pub fn write_announce_response(
    out: &mut Vec<u8>,
    info_hash: &InfoHash,
    complete: u32,
    incomplete: u32,
    interval: u32,
) {
    out.extend_from_slice(b"{\"action\":\"announce\",\"interval\":");
    write_number(out, interval.into());
    out.extend_from_slice(b",\"info_hash\":");
    write_id(out, &info_hash.0);
    out.extend_from_slice(b",\"complete\":");
    write_number(out, complete.into());
    out.extend_from_slice(b",\"incomplete\":");
    write_number(out, incomplete.into());
    out.push(b'}');
}

/// An offer relayed to a peer: `from` made it.
pub fn write_offer(
    out: &mut Vec<u8>,
    info_hash: &InfoHash,
    from: &PeerId,
    offer_id: &OfferId,
    offer: &str,
) {
    write_relayed(out, b"offer", info_hash, from, offer_id, offer);
}

/// An answer relayed to the peer that made the offer: `from` answered.
pub fn write_answer(
    out: &mut Vec<u8>,
    info_hash: &InfoHash,
    from: &PeerId,
    offer_id: &OfferId,
    answer: &str,
) {
    write_relayed(out, b"answer", info_hash, from, offer_id, answer);
}

fn write_relayed(
    out: &mut Vec<u8>,
    kind: &[u8],
    info_hash: &InfoHash,
    from: &PeerId,
    offer_id: &OfferId,
    raw: &str,
) {
    out.extend_from_slice(b"{\"action\":\"announce\",\"");
    out.extend_from_slice(kind);
    out.extend_from_slice(b"\":");
    out.extend_from_slice(raw.as_bytes());
    out.extend_from_slice(b",\"offer_id\":");
    write_id(out, &offer_id.0);
    out.extend_from_slice(b",\"peer_id\":");
    write_id(out, &from.0);
    out.extend_from_slice(b",\"info_hash\":");
    write_id(out, &info_hash.0);
    out.push(b'}');
}

/// The answer to a scrape.
pub fn write_scrape_response<'a>(
    out: &mut Vec<u8>,
    files: impl IntoIterator<Item = &'a (InfoHash, ScrapeStats)>,
) {
    out.extend_from_slice(b"{\"action\":\"scrape\",\"files\":{");
    for (i, (hash, stats)) in files.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_id(out, &hash.0);
        out.extend_from_slice(b":{\"complete\":");
        write_number(out, stats.seeders.into());
        out.extend_from_slice(b",\"incomplete\":");
        write_number(out, stats.leechers.into());
        out.extend_from_slice(b",\"downloaded\":");
        write_number(out, stats.completed.into());
        out.push(b'}');
    }
    out.extend_from_slice(b"}}");
}

/// A failure answer; the client shows `reason`, and routes it to the torrent
/// by `info_hash` when given.
pub fn write_error(
    out: &mut Vec<u8>,
    action: Option<Action>,
    info_hash: Option<&InfoHash>,
    reason: &str,
) {
    out.extend_from_slice(b"{\"failure reason\":");
    write_text(out, reason);
    if let Some(action) = action {
        out.extend_from_slice(b",\"action\":\"");
        out.extend_from_slice(action.as_str().as_bytes());
        out.push(b'"');
    }
    if let Some(info_hash) = info_hash {
        out.extend_from_slice(b",\"info_hash\":");
        write_id(out, &info_hash.0);
    }
    out.push(b'}');
}

/// Writes an announce as a client sends it (the load generator's and the
/// tests' side). `uploaded` and `downloaded` are written as 0, which the
/// tracker does not read.
pub fn write_announce_request(out: &mut Vec<u8>, m: &AnnounceMessage<'_>) {
    out.extend_from_slice(b"{\"action\":\"announce\",\"info_hash\":");
    write_id(out, &m.info_hash.0);
    out.extend_from_slice(b",\"peer_id\":");
    write_id(out, &m.peer_id.0);
    let event: &[u8] = match m.event {
        AnnounceEvent::None => b"",
        AnnounceEvent::Started => b"started",
        AnnounceEvent::Stopped => b"stopped",
        AnnounceEvent::Completed => b"completed",
    };
    if !event.is_empty() {
        out.extend_from_slice(b",\"event\":\"");
        out.extend_from_slice(event);
        out.push(b'"');
    }
    out.extend_from_slice(b",\"uploaded\":0,\"downloaded\":0");
    if let Some(left) = m.left {
        out.extend_from_slice(b",\"left\":");
        write_number(out, left);
    }
    if let Some(numwant) = m.numwant {
        out.extend_from_slice(b",\"numwant\":");
        write_number(out, numwant.into());
    }
    if !m.offers.is_empty() {
        out.extend_from_slice(b",\"offers\":[");
        for (i, offer) in m.offers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"offer\":");
            out.extend_from_slice(offer.offer.as_bytes());
            out.extend_from_slice(b",\"offer_id\":");
            write_id(out, &offer.offer_id.0);
            out.push(b'}');
        }
        out.push(b']');
    }
    if let Some(answer) = &m.answer {
        out.extend_from_slice(b",\"answer\":");
        out.extend_from_slice(answer.answer.as_bytes());
        out.extend_from_slice(b",\"to_peer_id\":");
        write_id(out, &answer.to_peer_id.0);
        out.extend_from_slice(b",\"offer_id\":");
        write_id(out, &answer.offer_id.0);
    }
    out.push(b'}');
}

/// Writes a scrape as a client sends it; no hashes is a full scrape.
pub fn write_scrape_request(out: &mut Vec<u8>, info_hashes: &[InfoHash]) {
    out.extend_from_slice(b"{\"action\":\"scrape\"");
    if !info_hashes.is_empty() {
        out.extend_from_slice(b",\"info_hash\":[");
        for (i, hash) in info_hashes.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_id(out, &hash.0);
        }
        out.push(b']');
    }
    out.push(b'}');
}

/// A message from the tracker, as a client reads it.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerMessage<'a> {
    AnnounceResponse {
        info_hash: InfoHash,
        complete: u32,
        incomplete: u32,
        interval: u32,
    },
    /// An offer from `peer_id`, to be answered.
    Offer {
        info_hash: InfoHash,
        peer_id: PeerId,
        offer_id: OfferId,
        offer: &'a str,
    },
    /// `peer_id`'s answer to our offer `offer_id`.
    Answer {
        info_hash: InfoHash,
        peer_id: PeerId,
        offer_id: OfferId,
        answer: &'a str,
    },
    Scrape {
        files: Vec<(InfoHash, ScrapeStats)>,
    },
    Error {
        reason: Cow<'a, str>,
        action: Option<Action>,
        info_hash: Option<InfoHash>,
    },
}

#[derive(Deserialize)]
struct RawScrapeStats {
    complete: Option<u32>,
    incomplete: Option<u32>,
    downloaded: Option<u32>,
}

#[derive(Deserialize)]
struct RawServerMessage<'a> {
    #[serde(borrow)]
    action: Option<BorrowedOrOwned<'a>>,
    #[serde(borrow, rename = "failure reason")]
    failure_reason: Option<BorrowedOrOwned<'a>>,
    info_hash: Option<Id20>,
    peer_id: Option<Id20>,
    offer_id: Option<Id20>,
    #[serde(borrow)]
    offer: Option<&'a RawValue>,
    #[serde(borrow)]
    answer: Option<&'a RawValue>,
    complete: Option<u32>,
    incomplete: Option<u32>,
    interval: Option<u32>,
    files: Option<ScrapeFiles>,
}

/// A scrape answer's `files`: an object keyed by info-hash, kept in order.
struct ScrapeFiles(Vec<(Id20, RawScrapeStats)>);

impl<'de> Deserialize<'de> for ScrapeFiles {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ScrapeFiles;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of scrape counts")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut files = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    files.push(entry);
                }
                Ok(ScrapeFiles(files))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// Why a tracker's message could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerMessageError(pub &'static str);

impl fmt::Display for ServerMessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Reads one message from a tracker.
pub fn parse_server_message(text: &[u8]) -> Result<ServerMessage<'_>, ServerMessageError> {
    let raw: RawServerMessage<'_> =
        serde_json::from_slice(text).map_err(|_| ServerMessageError("not a tracker message"))?;
    let id = |field: Option<Id20>, what: &'static str| {
        field.and_then(|id| id.0).ok_or(ServerMessageError(what))
    };
    let action = match raw.action.as_ref().map(|a| a.0.as_ref()) {
        Some("announce") => Some(Action::Announce),
        Some("scrape") => Some(Action::Scrape),
        None => None,
        Some(_) => return Err(ServerMessageError("unknown action")),
    };
    if let Some(reason) = raw.failure_reason {
        return Ok(ServerMessage::Error {
            reason: reason.0,
            action,
            info_hash: raw.info_hash.and_then(|h| h.0).map(InfoHash),
        });
    }
    match action {
        Some(Action::Scrape) => {
            let files = raw
                .files
                .ok_or(ServerMessageError("scrape without files"))?
                .0;
            let mut out = Vec::with_capacity(files.len());
            for (hash, stats) in files {
                let hash = hash.0.ok_or(ServerMessageError("invalid info_hash"))?;
                out.push((
                    InfoHash(hash),
                    ScrapeStats {
                        seeders: stats.complete.unwrap_or(0),
                        completed: stats.downloaded.unwrap_or(0),
                        leechers: stats.incomplete.unwrap_or(0),
                    },
                ));
            }
            Ok(ServerMessage::Scrape { files: out })
        }
        Some(Action::Announce) => {
            let info_hash = InfoHash(id(raw.info_hash, "invalid info_hash")?);
            if let Some(offer) = raw.offer {
                return Ok(ServerMessage::Offer {
                    info_hash,
                    peer_id: PeerId(id(raw.peer_id, "invalid peer_id")?),
                    offer_id: OfferId(id(raw.offer_id, "invalid offer_id")?),
                    offer: offer.get(),
                });
            }
            if let Some(answer) = raw.answer {
                return Ok(ServerMessage::Answer {
                    info_hash,
                    peer_id: PeerId(id(raw.peer_id, "invalid peer_id")?),
                    offer_id: OfferId(id(raw.offer_id, "invalid offer_id")?),
                    answer: answer.get(),
                });
            }
            Ok(ServerMessage::AnnounceResponse {
                info_hash,
                complete: raw.complete.ok_or(ServerMessageError("missing complete"))?,
                incomplete: raw
                    .incomplete
                    .ok_or(ServerMessageError("missing incomplete"))?,
                interval: raw.interval.ok_or(ServerMessageError("missing interval"))?,
            })
        }
        None => Err(ServerMessageError("no action")),
    }
}
