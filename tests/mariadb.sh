#!/usr/bin/env bash
# A private MariaDB server for the tests of private mode (tracker-db): its
# own data directory, unix socket and loopback TCP port, run as the calling
# user, apart from any system server. Needs Debian's mariadb-server and
# mariadb-client (tests/run.sh installs them).
#
#   tests/mariadb.sh setup DIR
#       Makes a data directory under DIR, picks a free port on 127.0.0.1,
#       starts the server, creates the test user, and prints `export` lines
#       for the tests (eval them):
#         TRACKER_TEST_MYSQL_URL       mysql://tracker_test:PASS@127.0.0.1:PORT
#                                      (no database: each test creates its own)
#         TRACKER_TEST_MARIADB_DATADIR the data directory
#         TRACKER_TEST_MARIADB_PORT    the TCP port
#         TRACKER_TEST_MARIADB_SOCKET  the unix socket (the OS user's admin
#                                      login: `mariadb --socket=... -u "$(id -un)"`)
#         TRACKER_TEST_MARIADB_PID     the server's process id when it started
#         TRACKER_TEST_MARIADB_CTL     this script, by its absolute path
#   tests/mariadb.sh stop DATADIR
#       Stops the server of DATADIR and waits until it has exited. A test may
#       stop it mid-run ("$TRACKER_TEST_MARIADB_CTL" stop "$TRACKER_TEST_MARIADB_DATADIR")
#       to see the database go away...
#   tests/mariadb.sh start DATADIR PORT
#       ...and start it again on the same data directory and port (the same
#       URL works again); it returns once the server answers. It prints the
#       new process id.
#   tests/mariadb.sh status DATADIR
#       Exits 0 when the server of DATADIR answers.
#
# The server is shared by every test of a run: a test that stops it must
# start it again before it ends, and tests running beside it see the outage.
set -euo pipefail

die() {
  echo "tests/mariadb.sh: $*" >&2
  exit 1
}

# Debian puts the server in /usr/sbin, which a plain user's PATH may lack.
find_tool() {
  local name
  for name in "$@"; do
    if command -v "$name" >/dev/null 2>&1; then
      command -v "$name"
      return
    fi
    if [ -x "/usr/sbin/$name" ]; then
      echo "/usr/sbin/$name"
      return
    fi
  done
  die "none of $* found: install mariadb-server and mariadb-client"
}

socket_of() { echo "$1/mysqld.sock"; }
pidfile_of() { echo "$1/mysqld.pid"; }

# The OS user's own admin login, over the unix socket (mariadb-install-db
# made it with the unix_socket plugin: no password).
client() {
  local datadir=$1
  shift
  "$(find_tool mariadb mysql)" --no-defaults --protocol=socket \
    --socket="$(socket_of "$datadir")" --user="$(id -un)" "$@"
}

answers() {
  "$(find_tool mariadb-admin mysqladmin)" --no-defaults --protocol=socket \
    --socket="$(socket_of "$1")" --user="$(id -un)" --connect-timeout=2 \
    ping >/dev/null 2>&1
}

start() {
  local datadir=$1 port=$2 pid
  [ -d "$datadir/mysql" ] || die "$datadir has no data directory (run setup first)"
  if answers "$datadir"; then
    cat "$(pidfile_of "$datadir")"
    return
  fi
  # --user: mariadbd refuses to run as root unless told to; as any other
  # user it runs as that user. --no-defaults: no /etc/mysql/my.cnf, so a
  # system server's settings (its socket, port, datadir) never leak in.
  # Small buffers: the test databases are tiny. A time zone other than
  # UTC, so that a client that forgets to set its session's to UTC writes
  # wrong DATETIMEs and the tests see it.
  "$(find_tool mariadbd mysqld)" --no-defaults \
    --user="$(id -un)" \
    --datadir="$datadir" \
    --socket="$(socket_of "$datadir")" \
    --pid-file="$(pidfile_of "$datadir")" \
    --log-error="$datadir/error.log" \
    --port="$port" --bind-address=127.0.0.1 --skip-name-resolve \
    --innodb-buffer-pool-size=64M --innodb-log-file-size=32M \
    --innodb-flush-log-at-trx-commit=2 \
    --max-connections=200 \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
    --default-time-zone=+02:00 \
    </dev/null >>"$datadir/server.out" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    if answers "$datadir"; then
      echo "$pid"
      return
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 30 "$datadir/error.log" >&2 || true
  # Not left running behind a failed setup.
  kill "$pid" 2>/dev/null || true
  die "the server of $datadir did not start (log: $datadir/error.log)"
}

stop() {
  local datadir=$1 pidfile pid
  pidfile=$(pidfile_of "$datadir")
  [ -s "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null || return 0
  # A clean shutdown takes a second or two; kill it after 30 s.
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# A port nothing listens on, below Linux's ephemeral range (32768-60999)
# (bash alone: a fresh Debian may lack python).
free_port() {
  local port
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  die "no free port found on 127.0.0.1"
}

setup() {
  local dir=$1 datadir port pid pass
  mkdir -p "$dir"
  datadir=$(cd "$dir" && pwd)/data
  mkdir -p "$datadir"
  # The system tables, with two admin logins (root and the OS user) that
  # the unix_socket plugin lets in without a password.
  "$(find_tool mariadb-install-db mysql_install_db)" --no-defaults \
    --user="$(id -un)" --datadir="$datadir" \
    --auth-root-authentication-method=socket --auth-root-socket-user="$(id -un)" \
    --skip-test-db >"$dir/install-db.log" 2>&1 ||
    { cat "$dir/install-db.log" >&2; die "mariadb-install-db failed"; }
  port=$(free_port)
  pid=$(start "$datadir" "$port")
  # The tests' login: a password, over TCP from 127.0.0.1 only, allowed
  # everything (each test creates and drops its own database, and some a
  # user with exactly the grants deploy/unit3d/grants.sql lists). OR REPLACE:
  # once here the setup failed with 1396 (the user existing already) on a
  # fresh data directory; a login of that name is replaced, not fatal.
  pass=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  client "$datadir" <<SQL
CREATE OR REPLACE USER 'tracker_test'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL PRIVILEGES ON *.* TO 'tracker_test'@'127.0.0.1' WITH GRANT OPTION;
SQL
  cat <<ENV
export TRACKER_TEST_MYSQL_URL='mysql://tracker_test:$pass@127.0.0.1:$port'
export TRACKER_TEST_MARIADB_DATADIR='$datadir'
export TRACKER_TEST_MARIADB_PORT='$port'
export TRACKER_TEST_MARIADB_SOCKET='$(socket_of "$datadir")'
export TRACKER_TEST_MARIADB_PID='$pid'
export TRACKER_TEST_MARIADB_CTL='$(cd "$(dirname "$0")" && pwd)/mariadb.sh'
ENV
}

case "${1:-}" in
setup)
  [ $# -eq 2 ] || die "usage: $0 setup DIR"
  setup "$2"
  ;;
start)
  [ $# -eq 3 ] || die "usage: $0 start DATADIR PORT"
  start "$2" "$3"
  ;;
stop)
  [ $# -eq 2 ] || die "usage: $0 stop DATADIR"
  stop "$2"
  ;;
status)
  [ $# -eq 2 ] || die "usage: $0 status DATADIR"
  answers "$2"
  ;;
*)
  die "usage: $0 setup DIR | start DATADIR PORT | stop DATADIR | status DATADIR"
  ;;
esac
