#!/usr/bin/env bash
# The container image, as docs/OPERATIONS.md ("Containers") runs it, with
# Debian's podman and runc, in a network namespace of this test's own
# (--network ns:..., where production uses --network host):
#   - deploy/container/seccomp.json is podman's default profile plus the
#     io_uring calls and nothing else (deploy/container/make-seccomp);
#   - under podman's default profile the image exits non-zero, its first line
#     naming the seccomp filter;
#   - under the profile, with its config and certificate from mounted files:
#     UDP, HTTP, HTTPS, ws:// and wss:// pass the protocol checks, metrics
#     answer on loopback, libtorrent completes a download with the seeder on
#     UDP and the leecher on HTTPS, SIGHUP serves a new certificate, the stop
#     saves the swarms in the volume and the next container restores them;
#   - deploy/container/kubernetes.yaml, played by `podman kube play` (the
#     pod's host network being this namespace): it serves, and after `kube
#     down` and a second play the new pod restores the swarms.
# Needs root, podman, runc, catatonit, openssl, python3-libtorrent, and the
# release tracker and load-test (tests/run.sh installs and builds them).
set -euo pipefail
# shellcheck source=tests/deploy/lib.sh
source "$(dirname "$0")/lib.sh"

for tool in podman runc catatonit openssl nsenter; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (tests/run.sh installs it)"
done
/usr/bin/python3 -c 'import libtorrent' 2>/dev/null || die "python3-libtorrent is not installed"

profile=$repo/deploy/container/seccomp.json
say "deploy/container/seccomp.json: podman's default profile plus io_uring"
diff -u <("$repo/deploy/container/make-seccomp") "$profile" >"$work/profile.diff" ||
    die "deploy/container/seccomp.json is not /usr/share/containers/seccomp.json plus io_uring; run deploy/container/make-seccomp >deploy/container/seccomp.json: $(cat "$work/profile.diff")"

image=localhost/tracker-test:$$
say "building $image with deploy/container/build"
"$repo/deploy/container/build" --binary "$tracker_bin" --tag "$image" >"$work/build.log" 2>&1 ||
    die "deploy/container/build failed: $(tail -n 20 "$work/build.log")"
on_exit "podman rmi -f $image"

make_netns
container_ulimits
run=(podman run --runtime runc --network "ns:/run/netns/$netns" "${ulimits[@]}")

# --- The runtime's default profile ------------------------------------------------
say "podman's default seccomp profile: the image must refuse to start, naming seccomp"
status=0
timeout 60 "${run[@]}" --rm "$image" >/dev/null 2>"$work/default.err" || status=$?
[ "$status" -ne 0 ] || die "the image served under podman's default profile"
first=$(head -n 1 "$work/default.err")
case "$first" in
    "tracker: io_uring_setup is blocked by this process's seccomp filter"*) say "exit $status: $first" ;;
    *) die "under the default profile the first line does not name seccomp: $(cat "$work/default.err")" ;;
esac

# --- The profile, a mounted config and certificate ----------------------------------
# The container's user (6969) reads them; the key stays unreadable to others.
mkdir -p "$work/etc/tls"
make_cert() { # name
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$work/$1.key" -out "$work/$1.pem" 2>/dev/null
}
install_cert() { # name
    install -m 0640 -o 0 -g 6969 "$work/$1.pem" "$work/etc/tls/cert.pem"
    install -m 0640 -o 0 -g 6969 "$work/$1.key" "$work/etc/tls/key.pem"
}
fingerprint() { openssl x509 -noout -fingerprint -sha256 -in "$1" | sed 's/.*=//'; }
make_cert first
make_cert second
install_cert first
cat >"$work/etc/config.toml" <<EOF
[runtime]
control_socket = ""
[udp]
connection_secret = "$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
[http]
tls_cert_file = "/etc/tracker/tls/cert.pem"
tls_key_file = "/etc/tracker/tls/key.pem"
[metrics]
listen = ["127.0.0.1:6971"]
[state]
file = "/var/lib/tracker/tracker.state"
EOF
chmod 0644 "$work/etc/config.toml"
volume=tracker-test-state-$$
podman volume create "$volume" >/dev/null
on_exit "podman volume rm -f $volume"
serve=("${run[@]}" -d --security-opt "seccomp=$profile" --stop-timeout 60
    -v "$volume:/var/lib/tracker" -v "$work/etc/config.toml:/etc/tracker/config.toml:ro"
    -v "$work/etc/tls:/etc/tracker/tls:ro")

start_container() { # name
    "${serve[@]}" --name "$1" "$image" >/dev/null
    on_exit "podman rm -f $1"
    wait_udp 6969 30
}
# Waits until the container's log has a line matching the pattern.
wait_log() { # container pattern seconds
    local deadline=$((SECONDS + $3))
    until podman logs "$1" 2>&1 | grep -- "$2" >/dev/null; do
        [ "$SECONDS" -lt "$deadline" ] || die "no '$2' in $1's log: $(podman logs "$1" 2>&1 | tail -n 20)"
        sleep 0.2
    done
}
# Stops the container as `podman stop` does (SIGTERM): it must exit 0 having
# saved the swarms; prints how many torrents it saved.
stop_container() { # name
    podman stop -t 60 "$1" >/dev/null
    local code
    code=$(podman inspect --format '{{.State.ExitCode}}' "$1")
    [ "$code" = 0 ] || die "$1 exited $code at the stop: $(podman logs "$1" 2>&1 | tail -n 20)"
    podman logs "$1" 2>&1 | sed -n 's/.*stopped: saved \([0-9]*\) torrents.*/\1/p' | tail -n 1
}

say "the profile, config and certificate mounted: serving"
start_container tracker-test-$$
podman logs tracker-test-$$ 2>&1 | grep "HTTPS certificate /etc/tracker/tls/cert.pem" >/dev/null ||
    die "the mounted certificate is not the one served: $(podman logs tracker-test-$$ 2>&1 | head)"
probe udp=127.0.0.1:6969 http=http://127.0.0.1:6969/announce https=https://127.0.0.1:6970/announce \
    ws=ws://127.0.0.1:6969/announce wss=wss://127.0.0.1:6970/announce
in_netns python3 -c '
import urllib.request
body = urllib.request.urlopen("http://127.0.0.1:6971/metrics", timeout=5).read().decode()
assert "tracker_" in body, body[:200]' || die "no metrics on 127.0.0.1:6971"

say "libtorrent: seeder on udp://, leecher on https://"
in_netns /usr/bin/python3 "$repo/tests/e2e/swarm.py" --tracker udp://127.0.0.1:6969/announce \
    --tracker https://127.0.0.1:6970/announce --insecure --timeout 60 >"$work/swarm.log" 2>&1 ||
    die "the libtorrent download through the container failed: $(tail -n 30 "$work/swarm.log")"
say "$(grep -m 1 -o 'OK: leecher downloaded.*' "$work/swarm.log")"

say "SIGHUP: the new certificate is served"
install_cert second
podman kill -s HUP tracker-test-$$ >/dev/null
wait_log tracker-test-$$ "SIGHUP: reloaded HTTPS certificate .*$(fingerprint "$work/second.pem")" 10
served=$(in_netns openssl s_client -connect 127.0.0.1:6970 -servername localhost </dev/null 2>/dev/null |
    openssl x509 -noout -fingerprint -sha256 | sed 's/.*=//')
[ "$served" = "$(fingerprint "$work/second.pem")" ] || die "after SIGHUP HTTPS serves $served"

say "podman stop saves the swarms in the volume; the next container restores them"
saved=$(stop_container tracker-test-$$)
[ "${saved:-0}" -gt 0 ] || die "the stop saved no torrents: $(podman logs tracker-test-$$ 2>&1 | tail -n 5)"
start_container tracker-test-$$-2
wait_log tracker-test-$$-2 "restored $saved torrents" 30
probe udp=127.0.0.1:6969 https=https://127.0.0.1:6970/announce
stop_container tracker-test-$$-2 >/dev/null

# --- Kubernetes: the manifest, played by podman ---------------------------------------
# podman reads the seccomp profile named in the manifest from its
# --seccomp-profile-root, as the kubelet does from /var/lib/kubelet/seccomp,
# and the ulimits from containers.conf, as containerd and CRI-O take theirs
# from their own configuration: Kubernetes has no per-pod ulimit.
say "deploy/container/kubernetes.yaml with podman kube play"
mkdir -p "$work/seccomp"
cp "$profile" "$work/seccomp/tracker.json"
printf '[containers]\ndefault_ulimits = [%s]\n' \
    "$(printf '"%s", ' "${ulimit_values[@]}" | sed 's/, $//')" >"$work/containers.conf"
sed "s|localhost/tracker:latest|$image|" "$repo/deploy/container/kubernetes.yaml" >"$work/kubernetes.yaml"
kube() { CONTAINERS_CONF=$work/containers.conf in_netns podman --runtime runc kube "$@"; }
on_exit "CONTAINERS_CONF=$work/containers.conf podman kube down $work/kubernetes.yaml; podman volume rm -f tracker-state tracker-config"
kube play --seccomp-profile-root "$work/seccomp" "$work/kubernetes.yaml" >"$work/kube.log" 2>&1 ||
    die "podman kube play failed: $(cat "$work/kube.log")"
wait_udp 6969 30
probe udp=127.0.0.1:6969 https=https://127.0.0.1:6970/announce wss=wss://127.0.0.1:6970/announce
pod=tracker-pod-0-tracker
[ "$(podman inspect --format '{{.Config.User}}' "$pod")" = 6969:6969 ] || die "the pod does not run as 6969"
# The Deployment's Recreate: the pod stops (SIGTERM: the swarms saved in
# the claim's volume), then a new one starts on the same claim. The second
# play leaves the claim out: podman 4.3 refuses to create a volume that
# exists ("volume already exists") where Kubernetes binds the claim again.
podman pod stop -t 60 tracker-pod-0 >/dev/null
saved=$(podman logs "$pod" 2>&1 | sed -n 's/.*stopped: saved \([0-9]*\) torrents.*/\1/p' | tail -n 1)
[ "${saved:-0}" -gt 0 ] || die "the pod's stop saved no torrents: $(podman logs "$pod" 2>&1 | tail -n 5)"
kube down "$work/kubernetes.yaml" >/dev/null
python3 - "$work/kubernetes.yaml" >"$work/kubernetes-again.yaml" <<'EOF'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
print("\n---\n".join(d for d in docs if "kind: PersistentVolumeClaim" not in d))
EOF
kube play --seccomp-profile-root "$work/seccomp" "$work/kubernetes-again.yaml" >"$work/kube.log" 2>&1 ||
    die "podman kube play (again) failed: $(cat "$work/kube.log")"
wait_log "$pod" "restored $saved torrents" 30
kube down "$work/kubernetes.yaml" >/dev/null
