#!/usr/bin/env bash
# Installs what the test suite needs (Debian packages, and the npm packages
# of tests/webtorrent), then runs every test: unit and property tests,
# integration tests against the real binary, tracker-db's against a private
# MariaDB server (tests/mariadb.sh), the end-to-end tests with real
# BitTorrent clients (libtorrent; WebTorrent in headless Chromium), the dashboard
# and alerting rules against a real Prometheus, the checks of
# deploy/ (shellcheck, systemd-analyze verify), the deploy paths run for
# real (tests/deploy/: podman, systemd, qemu), and every fuzz target for
# FUZZ_SECONDS each (default 30; 0 skips them; fuzz/run.sh runs them longer).
# UNIT3D_CE_SRC, when it names a checkout of UNIT3D-Community-Edition, runs
# tracker-db's test on UNIT3D's real schema (its database/schema/ and
# database/migrations/, with deploy/unit3d/later-migrations.sql and exactly
# deploy/unit3d/grants.sql); unset, that test says it was skipped.
# Arguments are passed to `cargo test`.
set -euo pipefail
# Made absolute before the cd: the tests run in their crate's directory.
if [ -n "${UNIT3D_CE_SRC:-}" ]; then
  UNIT3D_CE_SRC=$(cd "$UNIT3D_CE_SRC" && pwd)
  export UNIT3D_CE_SRC
fi
cd "$(dirname "$0")/.."

need=()
/usr/bin/python3 -c 'import libtorrent' 2>/dev/null || need+=(python3-libtorrent)
# tests/prometheus.rs checks deploy/grafana and deploy/prometheus against a
# real Prometheus; the package also has promtool.
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
# tests/webtorrent.rs: WebTorrent in headless Chromium, node to drive it, and
# certutil for the NSS database that makes the browsers trust the test CA.
[ -x /usr/lib/chromium/chromium ] || need+=(chromium)
command -v certutil >/dev/null 2>&1 || need+=(libnss3-tools)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# tracker-db's tests flush into a real MariaDB (tests/mariadb.sh runs a
# private server for them, apart from any system one).
{ [ -x /usr/sbin/mariadbd ] && command -v mariadb-install-db && command -v mariadb; } >/dev/null 2>&1 ||
  need+=(mariadb-server mariadb-client)
# tests/deploy/: the container image under podman (Debian's, with runc;
# catatonit for its pods), a Debian 12 root made by mmdebstrap booted with
# systemd (in podman, and as init under qemu, driven over ssh), the Debian
# package (dpkg-dev builds it), older kernels under qemu (busybox-static
# makes their root file system); openssl makes their certificates, nsenter
# and ip their network namespace.
for tool in podman runc catatonit mmdebstrap qemu-system-x86_64 dpkg-shlibdeps openssl nsenter ip ssh; do
  command -v "$tool" >/dev/null 2>&1 || case "$tool" in
    qemu-system-x86_64) need+=(qemu-system-x86) ;;
    dpkg-shlibdeps) need+=(dpkg-dev) ;;
    nsenter) need+=(util-linux) ;;
    ip) need+=(iproute2) ;;
    ssh) need+=(openssh-client) ;;
    *) need+=("$tool") ;;
  esac
done
[ -x /bin/busybox ] && /bin/busybox --list | grep -x cpio >/dev/null || need+=(busybox-static)
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}"
fi
# The npm packages pinned in tests/webtorrent/package-lock.json, installed
# again whenever the lock file changes. No install scripts: the tests need
# none, and one of webtorrent's dependencies (ip-set) has one that refuses npm.
(
  cd tests/webtorrent
  if ! cmp -s package-lock.json node_modules/.installed-lock.json; then
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null
    cp package-lock.json node_modules/.installed-lock.json
  fi
)

# The private MariaDB server of tracker-db's tests, stopped and removed on
# any exit. Its settings reach the tests through the environment
# (TRACKER_TEST_MYSQL_URL and the others: see tests/mariadb.sh).
mariadb_dir=$(mktemp -d "${TMPDIR:-/tmp}/tracker-mariadb.XXXXXX")
stop_mariadb() {
  tests/mariadb.sh stop "$mariadb_dir/data" || true
  rm -rf "$mariadb_dir"
}
trap stop_mariadb EXIT
mariadb_env=$(tests/mariadb.sh setup "$mariadb_dir")
eval "$mariadb_env"

cargo test --workspace "$@"
deploy/verify
# The deploy paths, each run for real as root (tests/deploy/): the
# container image, the package and deploy/install under systemd (in podman,
# on this host's cgroups), the package's hand-overs and stops under systemd
# as init under qemu (cgroup v2), older kernels. They use the release
# tracker and load-test. DEPLOY_TESTS=0 skips them.
if [ "${DEPLOY_TESTS:-1}" != 0 ]; then
  cargo build --release --bin tracker --bin load-test
  for deploy_test in container systemd systemd-vm kernel; do
    tests/deploy/$deploy_test.sh
  done
fi
fuzz_seconds=${FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" -gt 0 ]; then
  fuzz/run.sh "$fuzz_seconds"
fi
