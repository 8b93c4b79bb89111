//! UNIT3D-Announce's checks of the client itself, made by the front end
//! before any lookup: its user agent (HTTP only: UDP has none) and its port.

use std::fmt;
use tracker_proto::AnnounceEvent;

/// The answer to every scrape, over HTTP and UDP alike: UNIT3D-Announce
/// serves none, and a scrape would tell anyone every swarm's size (BEP 15
/// scrapes carry no passkey, and a passkey is no reason to tell a member
/// more than announces do).
pub const SCRAPES_NOT_SERVED: &str = "Scrapes are not served.";

/// The longest user agent accepted (`peers.agent` is `varchar(64)`).
pub const MAX_USER_AGENT: usize = 64;

/// Words of a browser's, crawler's or scraper's user agent, lower case.
const BROWSERS: [&[u8]; 10] = [
    b"mozilla",
    b"browser",
    b"chrome",
    b"safari",
    b"applewebkit",
    b"opera",
    b"links",
    b"lynx",
    b"bot",
    b"unknown",
];

/// Ports refused (the well-known ones, and those of services other peers
/// would be sent to): UNIT3D-Announce's list.
fn is_illegal_port(port: u16) -> bool {
    port < 1024 || matches!(port, 1214 | 3389 | 4662 | 6346 | 6347 | 6699 | 8080 | 8081)
}

/// Why a client is refused, in UNIT3D-Announce's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientRefusal {
    /// A header only browsers send (`tracker_proto::http::BROWSER_HEADERS`).
    BrowserHeaders,
    /// No user agent, or one with bytes that are not visible ASCII.
    InvalidUserAgent,
    UserAgentTooLong,
    Browser,
    IllegalPort(u16),
}

impl fmt::Display for ClientRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientRefusal::BrowserHeaders => f.write_str("Abnormal access blocked."),
            ClientRefusal::InvalidUserAgent => f.write_str("Invalid user agent."),
            ClientRefusal::UserAgentTooLong => {
                f.write_str("The user agent of this client is too long.")
            }
            ClientRefusal::Browser => f.write_str("Browser, crawler or cheater is not allowed."),
            ClientRefusal::IllegalPort(port) => write!(
                f,
                "Illegal port: {port}. Port should be between 6881-64999."
            ),
        }
    }
}

/// Checks an HTTP client's headers, in UNIT3D-Announce's order: none that
/// only browsers send, then its user agent (`None`: the header was missing).
pub fn check_headers(browser_headers: bool, agent: Option<&[u8]>) -> Result<(), ClientRefusal> {
    if browser_headers {
        return Err(ClientRefusal::BrowserHeaders);
    }
    check_user_agent(agent)
}

/// Checks a user agent (`None`: the header was missing).
fn check_user_agent(agent: Option<&[u8]>) -> Result<(), ClientRefusal> {
    let agent = agent.unwrap_or_default();
    if agent.is_empty() || !agent.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        return Err(ClientRefusal::InvalidUserAgent);
    }
    if agent.len() > MAX_USER_AGENT {
        return Err(ClientRefusal::UserAgentTooLong);
    }
    let browser = BROWSERS.iter().any(|word| {
        agent
            .windows(word.len())
            .any(|w| w.eq_ignore_ascii_case(word))
    });
    if browser {
        return Err(ClientRefusal::Browser);
    }
    Ok(())
}

/// Checks the port a peer announces (a stop announces none that matters).
pub fn check_port(port: u16, event: AnnounceEvent) -> Result<(), ClientRefusal> {
    if event != AnnounceEvent::Stopped && is_illegal_port(port) {
        return Err(ClientRefusal::IllegalPort(port));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agents_as_unit3d_announce_takes_them() {
        for ok in [
            &b"qBittorrent/5.0.1"[..],
            b"Transmission/4.0.6",
            b"libtorrent/2.0.8",
            b"Deluge 2.1.1",
        ] {
            assert_eq!(
                check_user_agent(Some(ok)),
                Ok(()),
                "{}",
                String::from_utf8_lossy(ok)
            );
        }
        assert_eq!(check_user_agent(None), Err(ClientRefusal::InvalidUserAgent));
        assert_eq!(
            check_user_agent(Some(b"")),
            Err(ClientRefusal::InvalidUserAgent)
        );
        assert_eq!(
            check_user_agent(Some(b"ua\x00")),
            Err(ClientRefusal::InvalidUserAgent)
        );
        assert_eq!(
            check_user_agent(Some(&[b'a'; 65])),
            Err(ClientRefusal::UserAgentTooLong)
        );
        assert_eq!(check_user_agent(Some(&[b'a'; 64])), Ok(()));
        for browser in [&b"Mozilla/5.0 (X11)"[..], b"Googlebot/2.1", b"curl-UNKNOWN"] {
            assert_eq!(check_user_agent(Some(browser)), Err(ClientRefusal::Browser));
        }
        assert_eq!(
            ClientRefusal::IllegalPort(8080).to_string(),
            "Illegal port: 8080. Port should be between 6881-64999."
        );
    }

    #[test]
    fn a_browser_header_is_refused_before_the_user_agent_is_read() {
        let agent = Some(&b"qBittorrent/5.0.1"[..]);
        assert_eq!(check_headers(false, agent), Ok(()));
        assert_eq!(
            check_headers(true, agent),
            Err(ClientRefusal::BrowserHeaders)
        );
        assert_eq!(
            check_headers(true, None),
            Err(ClientRefusal::BrowserHeaders)
        );
        assert_eq!(
            check_headers(false, None),
            Err(ClientRefusal::InvalidUserAgent)
        );
        assert_eq!(
            ClientRefusal::BrowserHeaders.to_string(),
            "Abnormal access blocked."
        );
    }

    #[test]
    fn ports_as_unit3d_announce_takes_them() {
        use AnnounceEvent::{None as Empty, Stopped};
        for port in [0, 80, 1023, 1214, 3389, 4662, 6346, 6347, 6699, 8080, 8081] {
            assert_eq!(
                check_port(port, Empty),
                Err(ClientRefusal::IllegalPort(port))
            );
            assert_eq!(
                check_port(port, Stopped),
                Ok(()),
                "a stop's port is not checked"
            );
        }
        for port in [1024, 6881, 51413, 65535] {
            assert_eq!(check_port(port, Empty), Ok(()));
        }
    }
}
