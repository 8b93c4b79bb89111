# shellcheck shell=bash
# What the deploy tests share (sourced, not run): messages, clean-up on
# exit, a network namespace of the test's own, and the protocol probes
# (the release load-test, every answer checked by tests/deploy/probe-ok).
# DEPLOY_KEEP=1 keeps the test's files (logs, consoles) for a look after.
# The tests run as root: they start containers, namespaces and a VM.

# The tests run under `set -o pipefail`: a `... | grep -q` fails when grep
# stops reading early and the writer gets SIGPIPE, so they grep to
# /dev/null instead.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
test_name=$(basename "$0" .sh)
tracker_bin=${TRACKER_BIN:-$repo/target/release/tracker}
load_test=${LOAD_TEST_BIN:-$repo/target/release/load-test}
work=$(mktemp -d "${TMPDIR:-/tmp}/tracker-$test_name.XXXXXX")
started=$SECONDS

say() { printf '%s [%3ds]: %s\n' "$test_name" $((SECONDS - started)) "$*"; }
die() {
    printf '%s: FAIL: %s\n' "$test_name" "$*" >&2
    exit 1
}

# Commands run at exit, last added first.
cleanups=()
on_exit() { cleanups=("$*" "${cleanups[@]}"); }
run_cleanups() {
    local status=$?
    local command
    for command in "${cleanups[@]}"; do
        eval "$command" >/dev/null 2>&1 || true
    done
    if [ -n "${DEPLOY_KEEP:-}" ]; then
        say "kept $work (DEPLOY_KEEP)"
    else
        rm -rf "$work"
    fi
    if [ "$status" -eq 0 ]; then
        say "passed in $((SECONDS - started)) s"
    fi
    exit "$status"
}
trap run_cleanups EXIT

[ "$(id -u)" = 0 ] || die "run as root (containers, network namespaces, a VM)"
for file in "$tracker_bin" "$load_test"; do
    [ -x "$file" ] || die "no $file: cargo build --release --bin tracker --bin load-test"
done

# A network namespace with only loopback, removed at exit: the test's ports
# are its own, and nothing leaves the machine.
make_netns() {
    netns=tracker-$test_name-$$
    ip netns add "$netns"
    on_exit "ip netns delete $netns"
    ip -n "$netns" link set lo up
}

# Runs a command in the test's network namespace. nsenter, not `ip netns
# exec`: that remounts /sys, which hides the cgroup file systems podman uses.
in_netns() { nsenter --net="/run/netns/$netns" "$@"; }

# Waits until a BEP 15 connect to 127.0.0.1:PORT in the namespace is
# answered, for at most SECONDS.
wait_udp() { # port seconds
    in_netns python3 - "$1" "$2" <<'EOF' || die "nothing answers UDP on 127.0.0.1:$1 after $2 s"
import socket, struct, sys, time
port, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.2)
while time.monotonic() < deadline:
    s.sendto(struct.pack(">qii", 0x41727101980, 0, 7), ("127.0.0.1", port))
    try:
        if len(s.recv(64)) == 16:
            sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
EOF
}

# The protocol checks: load-test against each URL in the namespace for
# PROBE_SECONDS (default 2), every answer validated, none missing.
# Arguments: NAME=TARGET..., e.g. udp=127.0.0.1:6969 https=https://127.0.0.1:6970/announce
probe() {
    local spec name target kind results=()
    for spec in "$@"; do
        name=${spec%%=*}
        target=${spec#*=}
        case "$target" in
            ws://* | wss://*) kind=(ws --connections 16 --offers 2 --insecure) ;;
            http://* | https://*) kind=(http --connections 4 --insecure) ;;
            # Open loop, few connects: the production config takes 100
            # connects a second from one address.
            *) kind=(udp --rate 3000 --mix 1:20:1 --sources 8) ;;
        esac
        in_netns "$load_test" "${kind[@]}" --target "$target" --workers 1 \
            --duration "${PROBE_SECONDS:-2}" --timeout-ms 5000 --torrents 200 --peers 1000 \
            --quiet --json "$work/probe-$name.json" >"$work/probe-$name.out" 2>&1 ||
            die "load-test $target failed: $(cat "$work/probe-$name.out")"
        results+=("$name=$work/probe-$name.json")
    done
    "$repo/tests/deploy/probe-ok" "${results[@]}" || die "a probe failed (above)"
}

# --ulimit values at or under this host's hard limits: the runtime may not
# raise one (no CAP_SYS_RESOURCE here), and runc fails to start a container
# whose limit it cannot set. nproc: the tracker needs a thread per worker
# and a few; podman's own default is above what runc may set here.
container_ulimits() {
    local memlock nofile value
    memlock=$(ulimit -H -l)
    [ "$memlock" = unlimited ] && memlock=$((64 * 1024))
    memlock=$((memlock * 1024))
    nofile=$(ulimit -H -n)
    ulimit_values=("memlock=$memlock:$memlock" "nofile=$nofile:$nofile" nproc=4096:4096)
    ulimits=()
    for value in "${ulimit_values[@]}"; do
        ulimits+=(--ulimit "$value")
    done
}
