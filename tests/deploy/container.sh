#!/usr/bin/env bash
# The container image, as docs/OPERATIONS.md ("Containers") runs it, with
# Debian's podman and runc, in a network namespace of this test's own (the
# documented `--network host`, with podman run inside that namespace):
#   - deploy/container/seccomp.json is podman's default profile plus the
#     io_uring calls and nothing else (deploy/container/make-seccomp);
#   - under podman's default profile the image exits non-zero, its first line
#     naming the seccomp filter;
#   - the documented `podman run`, its text taken from docs/OPERATIONS.md
#     (only the name, the volume and the image replaced), pasted into bash
#     under a hard limit of 4096 open files: it starts (its limits from
#     deploy/container/ulimits, at or under the caller's), the tracker says
#     it lowered its connections to fit, and runs with NoNewPrivs 1, a
#     seccomp filter and a read-only root; `podman stop` saves the swarms;
#   - the same command with a config and certificate mounted: the next
#     container restores the swarms, UDP, HTTP, HTTPS, ws:// and wss:// pass
#     the protocol checks, metrics answer on loopback, libtorrent completes a
#     download with the seeder on UDP and the leecher on HTTPS, SIGHUP serves
#     a new certificate, the stop saves the swarms in the volume and the next
#     container restores them;
#   - deploy/container/kubernetes.yaml under `podman kube play` (the pod's
#     host network being this namespace), played, stopped and cleaned up as
#     docs/OPERATIONS.md ("Kubernetes") says: a play that fails leaves its
#     pod, which `podman kube down` clears, and the next play serves; the
#     documented stop (`podman stop --time 60 --filter label=app=tracker`,
#     then `kube down`) saves every torrent and peer, and the next play
#     restores them all.
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
# The limits of every container here, as the documented command takes them.
read -r -a ulimits <<<"$("$repo/deploy/container/ulimits")"
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

# --- The documented command, as pasted ---------------------------------------------
# Its text from docs/OPERATIONS.md, from `podman run -d --name tracker` to the
# line without a trailing backslash. The test replaces the container's name,
# the volume and the image, and adds its mounts before the image; it runs
# the command with runc, in the namespace, from the checkout's root (the
# profile's path is relative), under a hard limit of 4096 open files.
documented_run=$(awk '/^    podman run -d --name tracker / { on = 1 }
    on { sub(/^    /, ""); print; if (!/\\$/) exit }' "$repo/docs/OPERATIONS.md")
for part in "podman run " "--name tracker " "tracker-state:" "localhost/tracker:latest"; do
    case "$documented_run" in
        *"$part"*) ;;
        *) die "the podman run of docs/OPERATIONS.md has no '$part' for the test to replace: $documented_run" ;;
    esac
done
volume=tracker-test-state-$$
podman volume create "$volume" >/dev/null
on_exit "podman volume rm -f $volume"
run_documented() { # name [podman flags before the image...]
    local name=$1 command extra=""
    shift
    [ "$#" -eq 0 ] || extra=$(printf '%q ' "$@")
    command=${documented_run/podman run /podman --runtime runc run }
    command=${command/--name tracker /--name $name }
    command=${command/tracker-state:/$volume:}
    command=${command/localhost\/tracker:latest/$extra$image}
    on_exit "podman rm -f $name"
    (cd "$repo" && in_netns prlimit --nofile=1024:4096 bash -c "$command") >"$work/run-$name.log" 2>&1 ||
        die "the documented podman run failed under a hard limit of 4096 open files: $(cat "$work/run-$name.log")
command: $command"
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
# Stops the container as `podman stop` does (SIGTERM, its --stop-timeout):
# it must exit 0 having saved the swarms; prints how many torrents it saved.
stop_container() { # name
    podman stop "$1" >/dev/null
    local code
    code=$(podman inspect --format '{{.State.ExitCode}}' "$1")
    [ "$code" = 0 ] || die "$1 exited $code at the stop: $(podman logs "$1" 2>&1 | tail -n 20)"
    podman logs "$1" 2>&1 | sed -n 's/.*stopped: saved \([0-9]*\) torrents.*/\1/p' | tail -n 1
}
# The kernel's view of the container's tracker: no new privileges, a
# seccomp filter, no capability, a read-only root; and its limits.
check_confined() { # container
    local pid status root
    pid=$(podman inspect --format '{{.State.Pid}}' "$1")
    status=$(cat "/proc/$pid/status")
    for want in "NoNewPrivs:	1" "Seccomp:	2" "CapEff:	0000000000000000"; do
        grep -qF "$want" <<<"$status" || die "the tracker of $1 (pid $pid) lacks '$want': $status"
    done
    root=$(awk '$5 == "/" { print $6 }' "/proc/$pid/mountinfo")
    case "$root" in
        ro,* | ro) ;;
        *) die "the root of $1 is mounted '$root', not read-only" ;;
    esac
}
# The container's hard limit of a resource, from /proc/PID/limits.
hard_limit() { # container "Max open files"
    local pid
    pid=$(podman inspect --format '{{.State.Pid}}' "$1")
    awk -v name="$2" 'index($0, name) == 1 { print $(NF - 1) }' "/proc/$pid/limits"
}

say "the documented podman run, pasted under a hard limit of 4096 open files"
run_documented tracker-test-$$-docs
check_confined tracker-test-$$-docs
[ "$(hard_limit tracker-test-$$-docs "Max open files")" = 4096 ] ||
    die "the container's open-file limit is $(hard_limit tracker-test-$$-docs "Max open files"), not the caller's 4096"
wait_log tracker-test-$$-docs "file-descriptor limit (RLIMIT_NOFILE) is 4096: .* lowered to" 10
probe udp=127.0.0.1:6969
saved=$(stop_container tracker-test-$$-docs)
[ "${saved:-0}" -gt 0 ] || die "the stop saved no torrents: $(podman logs tracker-test-$$-docs 2>&1 | tail -n 5)"
say "NoNewPrivs 1, seccomp, no capability, / read-only, 4096 open files (connections lowered to fit); stopped: saved $saved torrents"

# --- The same command with a config and certificate mounted ----------------------------
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
start_container() { # name
    run_documented "$1" -v "$work/etc/config.toml:/etc/tracker/config.toml:ro" -v "$work/etc/tls:/etc/tracker/tls:ro"
}

say "the same command with the config and certificate mounted: restoring, serving"
start_container tracker-test-$$
wait_log tracker-test-$$ "restored $saved torrents" 30
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

# --- Kubernetes: the manifest, played by podman as the docs say -------------------------
# docs/OPERATIONS.md ("Kubernetes"): the profile where kube play looks for it
# (--seccomp-profile-root here, where the docs put it in the kubelet's
# directory), the limits from `deploy/container/ulimits --conf` in
# CONTAINERS_CONF (kube play has no --ulimit), the manifest as shipped but
# for the image's name. The claim's volume and the ConfigMap's have the
# manifest's names: the test refuses to run beside a deployment of it.
say "deploy/container/kubernetes.yaml with podman kube play, as documented"
for name in tracker-state tracker-config; do
    if podman volume exists "$name"; then
        die "a volume $name exists (kubernetes.yaml deployed on this machine?): remove it (podman volume rm $name) to run this test"
    fi
done
mkdir -p "$work/seccomp" "$work/no-seccomp"
cp "$profile" "$work/seccomp/tracker.json"
"$repo/deploy/container/ulimits" --conf >"$work/tracker-limits.conf"
sed "s|localhost/tracker:latest|$image|" "$repo/deploy/container/kubernetes.yaml" >"$work/kubernetes.yaml"
grep -- "kind: PersistentVolumeClaim" "$work/kubernetes.yaml" >/dev/null &&
    die "kubernetes.yaml has a claim: podman 4.3 refuses to play it again once its volume exists"
kube_play() { # seccomp profile root
    CONTAINERS_CONF=$work/tracker-limits.conf in_netns podman --runtime runc kube play \
        --seccomp-profile-root "$1" "$work/kubernetes.yaml"
}
# The documented stop: SIGTERM and up to 60 s to save, then the pod removed.
kube_down() {
    podman stop --time 60 --filter label=app=tracker >/dev/null
    podman kube down "$work/kubernetes.yaml" >/dev/null
}
on_exit "podman kube down $work/kubernetes.yaml; podman volume rm -f tracker-state tracker-config"
# The tracker's container in the pod (tracker-pod-0-tracker in podman 4.3,
# tracker-pod-tracker from 4.4).
pod_tracker() { podman ps --all --filter label=app=tracker --format '{{.Names}}' | head -n 1; }
# Torrents and peers the running pod's tracker holds, from its metrics.
swarms() {
    in_netns python3 -c '
import re, urllib.request
body = urllib.request.urlopen("http://127.0.0.1:6971/metrics", timeout=5).read().decode()
def total(family):
    return sum(int(float(v)) for v in re.findall(r"^" + family + r"\{[^}]*\} (\S+)$", body, re.M))
print(total("tracker_torrents"), total("tracker_peers"))'
}

say "a failed play (the profile not where kube play looks) leaves its pod; kube down clears it"
kube_play "$work/no-seccomp" >"$work/kube-failed.log" 2>&1 && die "kube play served without its seccomp profile"
grep "seccomp profile" "$work/kube-failed.log" >/dev/null ||
    die "the failed play does not name the profile: $(cat "$work/kube-failed.log")"
podman kube down "$work/kubernetes.yaml" >/dev/null
kube_play "$work/seccomp" >"$work/kube.log" 2>&1 ||
    die "podman kube play after the clean-up failed: $(cat "$work/kube.log")"
wait_udp 6969 30
probe udp=127.0.0.1:6969 https=https://127.0.0.1:6970/announce wss=wss://127.0.0.1:6970/announce
pod=$(pod_tracker)
[ "$(podman inspect --format '{{.Config.User}}' "$pod")" = 6969:6969 ] || die "the pod does not run as 6969"
check_confined "$pod"

say "the documented stop and kube down, then a new play: every torrent and peer back"
read -r torrents peers <<<"$(swarms)"
[ "$torrents" -gt 0 ] || die "the pod holds no torrents after the probes"
kube_down
[ -z "$(podman pod ps --quiet --filter label=app=tracker)" ] || die "kube down left the pod"
mountpoint=$(podman volume inspect --format '{{.Mountpoint}}' tracker-state)
[ -s "$mountpoint/tracker.state" ] || die "no state file in the volume tracker-state after the stop"
kube_play "$work/seccomp" >"$work/kube.log" 2>&1 ||
    die "podman kube play (again) failed: $(cat "$work/kube.log")"
pod=$(pod_tracker)
wait_log "$pod" "restored $torrents torrents and $peers peers" 30
say "$torrents torrents and $peers peers saved by the documented stop, restored by the next play"
kube_down
