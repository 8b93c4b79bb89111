//! Why a site API request fails, and the HTTP status of each reason.

use crate::site::{TorrentId, UserId};
use std::fmt;

/// Why a site API request fails; [`ApiError::status`] is its HTTP status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiError {
    /// No such route (404, as a wrong path is in UNIT3D-Announce).
    NoRoute,
    /// The route exists, not with this method (405).
    MethodNotAllowed,
    /// A route this tracker refuses (501), and why.
    Unsupported(&'static str),
    /// The body is not the JSON the route takes (400); the message is
    /// serde's, with string values blanked.
    Json(String),
    /// A field or path segment holds a value refused (400).
    Invalid {
        field: &'static str,
        why: &'static str,
    },
    /// GET of a user the site view does not have (404).
    UnknownUser(UserId),
    /// GET of a torrent the site view does not have (404).
    UnknownTorrent(TorrentId),
}

impl ApiError {
    pub fn status(&self) -> u16 {
        match self {
            ApiError::NoRoute | ApiError::UnknownUser(_) | ApiError::UnknownTorrent(_) => 404,
            ApiError::MethodNotAllowed => 405,
            ApiError::Unsupported(_) => 501,
            ApiError::Json(_) | ApiError::Invalid { .. } => 400,
        }
    }
}

/// The HTTP status of a change's outcome: 200 (empty body) or the error's.
pub fn status_of(outcome: &Result<(), ApiError>) -> u16 {
    outcome.as_ref().map_or_else(ApiError::status, |()| 200)
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::NoRoute => f.write_str("Not found."),
            ApiError::MethodNotAllowed => f.write_str("Method not allowed."),
            ApiError::Unsupported(why) => f.write_str(why),
            ApiError::Json(message) => write!(f, "Invalid JSON body: {message}"),
            ApiError::Invalid { field, why } => write!(f, "Invalid '{field}': {why}."),
            ApiError::UnknownUser(id) => write!(f, "User {id} not found."),
            ApiError::UnknownTorrent(id) => write!(f, "Torrent {id} not found."),
        }
    }
}

impl std::error::Error for ApiError {}
