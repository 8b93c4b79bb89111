#!/usr/bin/env bash
# Installs what the test suite needs (Debian packages), then runs every test:
# unit and property tests, integration tests against the real binary, the
# end-to-end tests with a real BitTorrent client (libtorrent), the dashboard
# and alerting rules against a real Prometheus, the checks of
# deploy/ (shellcheck, systemd-analyze verify), and every fuzz target for
# FUZZ_SECONDS each (default 30; 0 skips them; fuzz/run.sh runs them longer).
# Arguments are passed to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
/usr/bin/python3 -c 'import libtorrent' 2>/dev/null || need+=(python3-libtorrent)
# tests/prometheus.rs checks deploy/grafana and deploy/prometheus against a
# real Prometheus; the package also has promtool.
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}"
fi

cargo test --workspace "$@"
deploy/verify
fuzz_seconds=${FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" -gt 0 ]; then
  fuzz/run.sh "$fuzz_seconds"
fi
