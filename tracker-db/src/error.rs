//! What went wrong with the database, and whether trying again can help.

use std::fmt;
use std::io;

/// What kind of failure a [`DbError`] is; [`DbErrorKind::is_retryable`]
/// tells whether the same call, tried again later, can succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbErrorKind {
    /// A setting is wrong (the URL, the tracker id): fix the configuration.
    Config,
    /// Connecting failed or the connection broke: refused, reset, closed,
    /// the server gone (2006) or the connection lost (2013). Retryable.
    Connection,
    /// Connecting, reading or writing took longer than its timeout, or the
    /// server cut a statement short. Retryable.
    Timeout,
    /// The server rolled the transaction back to break a deadlock (1213).
    /// Retryable.
    Deadlock,
    /// A lock was not granted in time (1205). Retryable.
    LockWait,
    /// The server is shutting down, read-only (a failover), or out of
    /// connections. Retryable.
    Unavailable,
    /// A row referred to a user or torrent deleted while the flush ran
    /// (a foreign key, 1452). Retryable: the next try leaves those rows
    /// out.
    ForeignKey,
    /// A table, column or the database itself is missing (1146, 1054,
    /// 1049): the database is not the site's, or an older schema. The
    /// message names what is missing. Not retryable until the schema is
    /// fixed.
    Schema,
    /// The server refused the login or a privilege (1044, 1045, 1142...).
    /// Not retryable until the grants are fixed.
    AccessDenied,
    /// A value did not fit its Rust type (a site row out of range).
    Data,
    /// Anything else the server or the driver said.
    Other,
}

impl DbErrorKind {
    /// Whether the same call can succeed if tried again (with no one
    /// changing the configuration, the schema or the grants).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            DbErrorKind::Connection
                | DbErrorKind::Timeout
                | DbErrorKind::Deadlock
                | DbErrorKind::LockWait
                | DbErrorKind::Unavailable
                | DbErrorKind::ForeignKey
        )
    }

    /// Whether the failure says the server cannot be reached right now
    /// (as opposed to one that it answered).
    pub fn is_unreachable(self) -> bool {
        matches!(
            self,
            DbErrorKind::Connection | DbErrorKind::Timeout | DbErrorKind::Unavailable
        )
    }
}

/// A database failure: what was being done, what kind of failure, and the
/// driver's or server's words. It never holds a password or a passkey
/// (URLs in it are shown without the password).
#[derive(Debug)]
pub struct DbError {
    kind: DbErrorKind,
    doing: String,
    detail: String,
    code: Option<u16>,
}

impl DbError {
    pub(crate) fn new(
        kind: DbErrorKind,
        doing: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        DbError {
            kind,
            doing: doing.into(),
            detail: detail.into(),
            code: None,
        }
    }

    /// A driver error met while `doing` something.
    pub(crate) fn from_mysql(doing: impl Into<String>, error: mysql::Error) -> Self {
        let (kind, code) = classify(&error);
        DbError {
            kind,
            doing: doing.into(),
            detail: error.to_string(),
            code,
        }
    }

    pub fn kind(&self) -> DbErrorKind {
        self.kind
    }

    /// Whether trying again later can succeed (see [`DbErrorKind`]).
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    /// The server's error number, where the server answered with one.
    pub fn server_code(&self) -> Option<u16> {
        self.code
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.doing, self.detail)?;
        match self.kind {
            DbErrorKind::Schema => f.write_str(
                " (the database lacks a table or column the tracker needs: \
                 is it the site's (UNIT3D's or Gazelle's), and migrated?)",
            ),
            DbErrorKind::AccessDenied => {
                f.write_str(" (check the database user's password and grants)")
            }
            _ => Ok(()),
        }
    }
}

impl std::error::Error for DbError {}

// Server error numbers (MySQL's and MariaDB's share these).
const ER_DBACCESS_DENIED: u16 = 1044;
const ER_ACCESS_DENIED: u16 = 1045;
const ER_BAD_DB: u16 = 1049;
const ER_SERVER_SHUTDOWN: u16 = 1053;
const ER_BAD_FIELD: u16 = 1054;
const ER_CON_COUNT: u16 = 1040;
const ER_TABLEACCESS_DENIED: u16 = 1142;
const ER_COLUMNACCESS_DENIED: u16 = 1143;
const ER_NO_SUCH_TABLE: u16 = 1146;
const ER_NET_ERRORS: std::ops::RangeInclusive<u16> = 1158..=1161;
const ER_TOO_MANY_USER_CONNECTIONS: u16 = 1203;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_SPECIFIC_ACCESS_DENIED: u16 = 1227;
const ER_OPTION_PREVENTS_STATEMENT: u16 = 1290;
const ER_QUERY_INTERRUPTED: u16 = 1317;
const ER_NO_REFERENCED_ROW: u16 = 1452;
const ER_READ_ONLY_MODE: u16 = 1836;
const ER_CONNECTION_KILLED: u16 = 1927;
const ER_STATEMENT_TIMEOUT: u16 = 1969;
const ER_GONE_AWAY: u16 = 2006;
const ER_LOST_CONNECTION: u16 = 2013;
const ER_QUERY_TIMEOUT: u16 = 3024;
const ER_CLIENT_INTERACTION_TIMEOUT: u16 = 4031;

fn classify(error: &mysql::Error) -> (DbErrorKind, Option<u16>) {
    use mysql::DriverError as D;
    match error {
        mysql::Error::IoError(e) => (io_kind(e), None),
        mysql::Error::CodecError(_) => (DbErrorKind::Connection, None),
        mysql::Error::MySqlError(e) => (server_kind(e.code), Some(e.code)),
        mysql::Error::DriverError(e) => {
            let kind = match e {
                D::ConnectTimeout | D::Timeout => DbErrorKind::Timeout,
                D::CouldNotConnect(_) | D::PacketOutOfSync | D::UnexpectedPacket => {
                    DbErrorKind::Connection
                }
                D::UnknownAuthPlugin(_)
                | D::OldMysqlPasswordDisabled
                | D::CleartextPluginDisabled => DbErrorKind::AccessDenied,
                _ => DbErrorKind::Other,
            };
            (kind, None)
        }
        mysql::Error::UrlError(_) => (DbErrorKind::Config, None),
        mysql::Error::FromValueError(_) | mysql::Error::FromRowError(_) => {
            (DbErrorKind::Data, None)
        }
    }
}

fn io_kind(error: &io::Error) -> DbErrorKind {
    match error.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => DbErrorKind::Timeout,
        _ => DbErrorKind::Connection,
    }
}

fn server_kind(code: u16) -> DbErrorKind {
    match code {
        ER_LOCK_DEADLOCK => DbErrorKind::Deadlock,
        ER_LOCK_WAIT_TIMEOUT => DbErrorKind::LockWait,
        ER_GONE_AWAY | ER_LOST_CONNECTION | ER_CONNECTION_KILLED => DbErrorKind::Connection,
        code if ER_NET_ERRORS.contains(&code) => DbErrorKind::Connection,
        ER_QUERY_INTERRUPTED
        | ER_STATEMENT_TIMEOUT
        | ER_QUERY_TIMEOUT
        | ER_CLIENT_INTERACTION_TIMEOUT => DbErrorKind::Timeout,
        ER_SERVER_SHUTDOWN
        | ER_CON_COUNT
        | ER_TOO_MANY_USER_CONNECTIONS
        | ER_OPTION_PREVENTS_STATEMENT
        | ER_READ_ONLY_MODE => DbErrorKind::Unavailable,
        ER_NO_REFERENCED_ROW => DbErrorKind::ForeignKey,
        ER_NO_SUCH_TABLE | ER_BAD_FIELD | ER_BAD_DB => DbErrorKind::Schema,
        ER_DBACCESS_DENIED
        | ER_ACCESS_DENIED
        | ER_TABLEACCESS_DENIED
        | ER_COLUMNACCESS_DENIED
        | ER_SPECIFIC_ACCESS_DENIED => DbErrorKind::AccessDenied,
        _ => DbErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_codes_sort_into_retryable_or_not() {
        assert!(server_kind(1213).is_retryable());
        assert!(server_kind(1205).is_retryable());
        assert!(server_kind(2006).is_retryable());
        assert!(server_kind(1927).is_retryable());
        assert!(!server_kind(1146).is_retryable());
        assert!(!server_kind(1054).is_retryable());
        assert!(!server_kind(1045).is_retryable());
        assert_eq!(server_kind(1146), DbErrorKind::Schema);
        assert_eq!(server_kind(1064), DbErrorKind::Other);
    }

    #[test]
    fn io_failures_are_retryable() {
        let reset = mysql::Error::IoError(io::Error::from(io::ErrorKind::ConnectionReset));
        let e = DbError::from_mysql("flushing", reset);
        assert_eq!(e.kind(), DbErrorKind::Connection);
        assert!(e.is_retryable());
        let timeout = mysql::Error::IoError(io::Error::from(io::ErrorKind::WouldBlock));
        assert_eq!(
            DbError::from_mysql("x", timeout).kind(),
            DbErrorKind::Timeout
        );
    }
}
