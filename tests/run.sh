#!/usr/bin/env bash
# Installs what the test suite needs (Debian packages), then runs every test:
# unit and property tests, integration tests against the real binary, and the
# end-to-end test with a real BitTorrent client (libtorrent).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
/usr/bin/python3 -c 'import libtorrent' 2>/dev/null || need+=(python3-libtorrent)
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}"
fi

cargo test --workspace "$@"
