//! Where the database is and how long to wait for it: the URL, parsed by
//! the `mysql` crate, and the timeouts; [`DbConfig::connect`] opens a
//! connection set up the way [`crate::load`] and [`crate::flush`] expect.

use crate::error::{DbError, DbErrorKind};
use mysql::{Conn, Opts, OptsBuilder};
use std::fmt;
use std::time::Duration;

/// How to reach the site's database.
#[derive(Clone, PartialEq, Eq)]
pub struct DbConfig {
    /// `mysql://USER:PASSWORD@HOST:PORT/DATABASE`, the form UNIT3D-Announce's
    /// `DATABASE_URL` takes. Over a unix socket:
    /// `mysql://USER:PASSWORD@localhost/DATABASE?socket=/run/mysqld/mysqld.sock`.
    /// Percent-encode reserved characters of the password.
    pub url: String,
    /// Limit on opening a TCP connection.
    pub connect_timeout: Duration,
    /// Limit on each read from, and each write to, the server: what one
    /// statement (or a COMMIT) may take before the connection counts as
    /// lost.
    pub io_timeout: Duration,
}

impl DbConfig {
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(30);

    /// `url` with the default timeouts.
    pub fn new(url: impl Into<String>) -> DbConfig {
        DbConfig {
            url: url.into(),
            connect_timeout: DbConfig::DEFAULT_CONNECT_TIMEOUT,
            io_timeout: DbConfig::DEFAULT_IO_TIMEOUT,
        }
    }

    /// The URL with its password replaced by `***`: what errors and logs
    /// show.
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }

    /// The driver's options: the URL's, plus the timeouts, and
    /// - `prefer_socket` off: the driver would otherwise switch a loopback
    ///   TCP connection over to the server's unix socket behind the
    ///   configuration's back (a URL's `?socket=` still picks the socket);
    /// - the session time zone set to UTC (`SET time_zone = '+00:00'`, as
    ///   sqlx does for UNIT3D-Announce): the rows carry unix seconds, which
    ///   the flush writes with `FROM_UNIXTIME`, so `DATETIME` columns
    ///   (`history.completed_at`) hold UTC, as Laravel writes them with
    ///   UNIT3D's default `APP_TIMEZONE`, and `TIMESTAMP` columns are exact
    ///   whatever the server's own time zone.
    pub fn opts(&self) -> Result<Opts, DbError> {
        let bad_url = |detail: String| {
            DbError::new(
                DbErrorKind::Config,
                format!("the database URL {}", self.redacted_url()),
                detail,
            )
        };
        if !self.url.starts_with("mysql://") {
            return Err(bad_url("must start with mysql://".into()));
        }
        let opts = Opts::from_url(&self.url).map_err(|e| bad_url(e.to_string()))?;
        if opts.get_db_name().is_none_or(str::is_empty) {
            return Err(bad_url(
                "names no database (mysql://USER:PASSWORD@HOST:PORT/DATABASE)".into(),
            ));
        }
        let builder = OptsBuilder::from_opts(opts)
            .prefer_socket(false)
            .tcp_connect_timeout(Some(self.connect_timeout))
            .read_timeout(Some(self.io_timeout))
            .write_timeout(Some(self.io_timeout))
            .init(vec!["SET time_zone = '+00:00'"]);
        Ok(Opts::from(builder))
    }

    /// Opens a connection (see [`DbConfig::opts`]).
    pub fn connect(&self) -> Result<Conn, DbError> {
        let opts = self.opts()?;
        Conn::new(opts).map_err(|e| {
            DbError::from_mysql(
                format!("connecting to the database at {}", self.redacted_url()),
                e,
            )
        })
    }
}

impl fmt::Debug for DbConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbConfig")
            .field("url", &self.redacted_url())
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .finish()
    }
}

/// `scheme://user:password@host...` as `scheme://user:***@host...`. The
/// password ends at the last `@` of the whole URL, not of its authority: a
/// password may hold an unencoded `/` or `?`, and hiding too much is the
/// safe mistake.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host_and_tail)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host_and_tail}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_the_password_only() {
        assert_eq!(
            redact("mysql://u:secret@127.0.0.1:3306/db?socket=/x"),
            "mysql://u:***@127.0.0.1:3306/db?socket=/x"
        );
        assert_eq!(redact("mysql://u@h/db"), "mysql://u@h/db");
        assert_eq!(redact("mysql://h/db"), "mysql://h/db");
        assert_eq!(redact("mysql://u:p@ss@h/db"), "mysql://u:***@h/db");
        assert_eq!(redact("mysql://u:pa/ss?x@h/db"), "mysql://u:***@h/db");
        let debug = format!("{:?}", DbConfig::new("mysql://u:hunter2@h/db"));
        assert!(!debug.contains("hunter2"), "{debug}");
    }

    #[test]
    fn urls_without_a_database_or_of_another_scheme_are_refused() {
        for url in [
            "mysql://u:p@h:3306",
            "mysql://u:p@h:3306/",
            "postgres://u@h/db",
        ] {
            let e = DbConfig::new(url).opts().unwrap_err();
            assert_eq!(e.kind(), DbErrorKind::Config, "{url}: {e}");
            assert!(!e.to_string().contains(":p@"), "{e}");
        }
        assert!(DbConfig::new("mysql://u:p@h:3306/db").opts().is_ok());
    }
}
