//! A Gazelle site's database for the tests: Gazelle's schema and seeded
//! whitelist (deploy/gazelle/) under Gazelle's sql_mode, and logins with
//! exactly a grants file of deploy/gazelle/.

use mysql::prelude::Queryable;
use mysql::{Conn, Opts, OptsBuilder};

use super::{server_url, TestDb};

/// The sql_mode Gazelle runs its MySQL with (its docker-compose.yml and CI
/// start mysqld with it).
pub const GAZELLE_SQL_MODE: &str =
    "STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION";

/// A connection to `url` whose session runs under Gazelle's sql_mode.
pub fn gazelle_conn(url: &str) -> Conn {
    let opts = Opts::from_url(url).expect("the URL parses");
    let mut conn = Conn::new(
        OptsBuilder::from_opts(opts)
            .prefer_socket(false)
            .init(vec![format!("SET SESSION sql_mode = '{GAZELLE_SQL_MODE}'")]),
    )
    .expect("connect to the test server");
    let mode: String = conn
        .query_first("SELECT @@SESSION.sql_mode")
        .unwrap()
        .unwrap();
    assert_eq!(mode, GAZELLE_SQL_MODE);
    conn
}

/// A file of the repository, by its path from the root.
pub fn repo_file(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A fresh database with Gazelle's schema and seeded whitelist.
pub fn gazelle_db() -> TestDb {
    let db = TestDb::empty();
    let mut admin = gazelle_conn(&db.url);
    admin
        .query_drop(repo_file("deploy/gazelle/schema.sql"))
        .unwrap();
    admin
        .query_drop(repo_file("deploy/gazelle/whitelist-seed.sql"))
        .unwrap();
    db
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A database login, dropped with this value.
pub struct Login {
    account: String,
    pub url: String,
}

impl Login {
    /// A login on `db` named `prefix` and the end of the database's name,
    /// with exactly the grants of `grants` (a file of deploy/gazelle/,
    /// which names the database `gazelle` and the login `placeholder`),
    /// less what `revoke` revokes: a REVOKE statement's head, such as
    /// "REVOKE SELECT (`ID`) ON `{db}`.`users_main`", `{db}` standing for
    /// the database.
    pub fn new(
        db: &TestDb,
        prefix: &str,
        grants: &str,
        placeholder: &str,
        revoke: Option<&str>,
    ) -> Login {
        let mut admin = gazelle_conn(&db.url);
        let opts = Opts::from_url(&server_url()).unwrap();
        let host = opts.get_ip_or_hostname().to_string();
        let name = format!("{prefix}{}", &db.name[db.name.len().saturating_sub(12)..]);
        let account = format!("'{name}'@'{host}'");
        admin
            .query_drop(format!("DROP USER IF EXISTS {account}"))
            .unwrap();
        admin
            .query_drop(format!("CREATE USER {account} IDENTIFIED BY 'pw'"))
            .unwrap();
        let grants = repo_file(grants)
            .replace("`gazelle`", &format!("`{}`", db.name))
            .replace(placeholder, &account);
        admin.query_drop(grants).unwrap();
        if let Some(revoke) = revoke {
            admin
                .query_drop(format!(
                    "{} FROM {account}",
                    revoke.replace("{db}", &db.name)
                ))
                .unwrap();
        }
        let url = format!(
            "mysql://{name}:pw@{host}:{}/{}",
            opts.get_tcp_port(),
            db.name
        );
        Login { account, url }
    }
}

impl Drop for Login {
    fn drop(&mut self) {
        if let Ok(opts) = Opts::from_url(&server_url()) {
            if let Ok(mut admin) = Conn::new(OptsBuilder::from_opts(opts).prefer_socket(false)) {
                let _ = admin.query_drop(format!("DROP USER IF EXISTS {}", self.account));
            }
        }
    }
}
