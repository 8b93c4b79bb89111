//! The bodies of the answers Gazelle reads from its tracker, as Ocelot
//! writes them: one line of JSON and a line feed for a report (Gazelle
//! takes the body up to its last line feed and decodes it), `success` for
//! an update. Where Gazelle expects Ocelot 2.1.5, whose source is not
//! public, the fields its own code and tests read are added: `traced` in
//! the user report, and the torrent report.

use std::fmt::Write;

use super::request::LeechType;

/// Ocelot's number for a leech type (`freetype` in `ocelot.h`).
pub fn leech_number(leech: LeechType) -> u8 {
    match leech {
        LeechType::Normal => 0,
        LeechType::Free => 1,
        LeechType::Neutral => 2,
    }
}

/// What the user report says of a user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserReport {
    pub id: u32,
    /// The user's peers leeching and seeding, across the torrents.
    pub leeching: u32,
    pub seeding: u32,
    pub protected: bool,
    pub can_leech: bool,
    pub traced: bool,
}

/// `report?get=user&key=...`: Ocelot 2.1.3's fields in its order, then
/// 2.1.5's `traced`. A user the view has is never deleted (a removed one
/// is "Announce key not found").
pub fn user_report(u: &UserReport) -> String {
    format!(
        "{{\"id\":{},\"leeching\":{},\"seeding\":{},\"deleted\":0,\"protected\":{},\
         \"can_leech\":{},\"traced\":{}}}\n",
        u.id,
        u.leeching,
        u.seeding,
        u8::from(u.protected),
        u8::from(u.can_leech),
        u8::from(u.traced)
    )
}

/// What the torrent report (Ocelot 2.1.5's `report?get=torrent`) says of a
/// torrent: the eight fields Gazelle's staff page reads, and its leech
/// type as `info_torrent` gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TorrentReport {
    pub id: u32,
    pub completed: u32,
    pub balance: i64,
    /// When the tracker last wrote the torrent's row (unix seconds).
    pub last_flushed: u64,
    /// This tracker hands seeders out by its own order, not by Ocelot's
    /// cursor: empty.
    pub last_selected_seeder: String,
    pub leechers: Vec<u32>,
    pub seeders: Vec<u32>,
    pub tokens: Vec<u32>,
    pub leech: Option<LeechType>,
}

pub fn torrent_report(t: &TorrentReport) -> String {
    let list = |ids: &[u32]| {
        let mut text = String::from("[");
        for (i, id) in ids.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            let _ = write!(text, "{id}");
        }
        text.push(']');
        text
    };
    format!(
        "{{\"id\":{},\"completed\":{},\"balance\":{},\"last_flushed\":{},\
         \"last_selected_seeder\":{},\"leecher_list\":{},\"seeder_list\":{},\
         \"fltoken_list\":{},\"free\":{}}}\n",
        t.id,
        t.completed,
        t.balance,
        t.last_flushed,
        json_string(&t.last_selected_seeder),
        list(&t.leechers),
        list(&t.seeders),
        list(&t.tokens),
        t.leech.map_or(0, leech_number)
    )
}

/// `update?action=info_torrent`: the torrent's id and leech type, or
/// `fail`. Ocelot writes the info-hash's text unquoted, which no JSON
/// decoder takes; here it is a JSON string (Gazelle does not call it).
pub fn info_torrent(hex: &[u8], torrent: Option<(u32, LeechType)>) -> String {
    let hash = json_string(&String::from_utf8_lossy(hex));
    match torrent {
        Some((id, leech)) => format!(
            "{{\"hash\":{hash},\"id\":{id},\"free\":{}}}\n",
            leech_number(leech)
        ),
        None => format!("{{\"hash\":{hash},\"fail\":1}}\n"),
    }
}

/// A value of the stats report, typed as Ocelot types them.
#[derive(Clone, Debug, PartialEq)]
pub enum Stat {
    Number(u64),
    Byte(u64),
    /// Seconds.
    Elapsed(f64),
    Text(String),
}

/// `report?get=stats`: `{"label":{"type":...,"value":...},...}` and a line
/// feed. Gazelle reads `announce interval`, `announce jitter` and
/// `requests handled`.
pub fn stats_report(stats: &[(&str, Stat)]) -> String {
    let mut text = String::from("{");
    for (i, (label, stat)) in stats.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        let (kind, value) = match stat {
            Stat::Number(n) => ("number", n.to_string()),
            Stat::Byte(n) => ("byte", n.to_string()),
            Stat::Elapsed(s) => ("elapsed", s.to_string()),
            Stat::Text(t) => ("string", json_string(t)),
        };
        let _ = write!(
            text,
            "{}:{{\"type\":\"{kind}\",\"value\":{value}}}",
            json_string(label)
        );
    }
    text.push_str("}\n");
    text
}

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As Ocelot 2.1.3 answered Gazelle's userReport in the recording
    /// (tests/fixtures/gazelle/ocelot-transcript.txt, exchange 4), with
    /// 2.1.5's `traced` after.
    #[test]
    fn the_user_report_is_ocelots_with_traced() {
        let report = user_report(&UserReport {
            id: 5,
            leeching: 0,
            seeding: 0,
            protected: true,
            can_leech: true,
            traced: false,
        });
        let ocelot =
            "{\"id\":5,\"leeching\":0,\"seeding\":0,\"deleted\":0,\"protected\":1,\"can_leech\":1";
        assert_eq!(report, format!("{ocelot},\"traced\":0}}\n"));
        let json: serde_json::Value = serde_json::from_str(&report).unwrap();
        assert_eq!(
            json.as_object().unwrap().len(),
            7,
            "the 7 keys Gazelle's test reads"
        );
    }

    #[test]
    fn the_torrent_report_has_gazelles_nine_keys() {
        let report = torrent_report(&TorrentReport {
            id: 4,
            completed: 2,
            balance: -500,
            last_flushed: 1_700_000_000,
            leechers: vec![2, 6],
            seeders: vec![1],
            tokens: vec![3],
            leech: Some(LeechType::Free),
            ..TorrentReport::default()
        });
        assert!(report.ends_with("}\n") && !report[..report.len() - 1].contains('\n'));
        let json: serde_json::Value = serde_json::from_str(&report).unwrap();
        let json = json.as_object().unwrap();
        assert_eq!(json.len(), 9);
        assert_eq!(json["leecher_list"], serde_json::json!([2, 6]));
        assert_eq!(json["balance"], -500);
        assert_eq!(json["free"], 1);
    }

    #[test]
    fn info_torrent_and_stats_are_json() {
        let found = info_torrent(b"0a1b", Some((7, LeechType::Neutral)));
        assert_eq!(found, "{\"hash\":\"0a1b\",\"id\":7,\"free\":2}\n");
        let missing = info_torrent(b"\"x", None);
        let json: serde_json::Value = serde_json::from_str(&missing).unwrap();
        assert_eq!(json["fail"], 1);
        let stats = stats_report(&[
            ("version", Stat::Text("2.1.3".into())),
            ("requests handled", Stat::Number(10)),
            ("bytes read", Stat::Byte(109)),
            ("uptime", Stat::Elapsed(1.5)),
        ]);
        assert_eq!(
            stats,
            "{\"version\":{\"type\":\"string\",\"value\":\"2.1.3\"},\"requests handled\":\
             {\"type\":\"number\",\"value\":10},\"bytes read\":{\"type\":\"byte\",\"value\":109},\
             \"uptime\":{\"type\":\"elapsed\",\"value\":1.5}}\n"
        );
    }
}
