#!/usr/bin/env bash
# deploy/check-host in a Debian 12 container names podman's default seccomp
# profile as what blocks io_uring, and passes io_uring under the tracker's.
# The unit under a real systemd: Debian 12 booted in a podman container
# (systemd 252 as PID 1, `systemctl is-system-running` = running), its root
# file system made by mmdebstrap from Debian's packages, in a network
# namespace of this test's own, probed from the host. Twice:
#   - the package (deploy/package/build): installing it enables and starts
#     nothing; `systemctl enable --now tracker` serves UDP, HTTP, HTTPS, ws
#     and wss as the tracker user with the unit's sandbox on; `systemctl
#     reload` serves the new certificate; `systemctl kill -s USR2 tracker`
#     hands over to a new process under load with no answer lost, systemd's
#     MainPID moves to it, its own child, and systemd restarts it when it
#     dies; then tests/deploy/package-lib.sh's stops after hand-overs (issue
#     42): USR2, an upgrade of the package under load (the new binary takes
#     over, no answer lost), `systemctl stop` saves every torrent and exits 0
#     and the start restores them all; USR2 then `systemctl restart`, and
#     USR2 then removing the package, save every torrent too; purging it
#     removes the state (with apt-get, as docs/OPERATIONS.md says). The same
#     steps run under a cgroup-v2 systemd in tests/deploy/systemd-vm.sh;
#   - deploy/install --enable on a fresh system booted with a hard limit
#     of 1024 open files: deploy/check-host predicts what systemd makes of
#     the unit's LimitMEMLOCK= and LimitNOFILE=, which exceed the box's hard
#     limits (lowered to them, the unit runs: no FAIL), and the tracker gets
#     exactly that and says it lowered its connections to fit; it serves as
#     the tracker user; a second run with --enable changes nothing and
#     leaves the tracker running, a run with a new binary or a new unit
#     restarts it, and USR2 hands over.
# The unit runs as shipped, without a drop-in: its limits are above what
# systemd may set in the box (no CAP_SYS_RESOURCE), and systemd since v183
# sets the closest it may, the box's hard limits (8 MiB, and this host's
# open files or 1024), and runs the unit.
# Needs root, podman, runc, mmdebstrap, dpkg-dev, openssl, and the release
# tracker and load-test (tests/run.sh installs and builds them).
set -euo pipefail
# shellcheck source=tests/deploy/lib.sh
source "$(dirname "$0")/lib.sh"

for tool in podman runc mmdebstrap dpkg-deb openssl nsenter; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (tests/run.sh installs it)"
done
profile=$repo/deploy/container/seccomp.json

# --- Debian 12 with systemd, as a container image ---------------------------------
# Kept a week in target/deploy (DEPLOY_CACHE), made again after.
cache=${DEPLOY_CACHE:-$repo/target/deploy}
rootfs=$cache/debian12-systemd.tar
mkdir -p "$cache"
if [ -z "$(find "$rootfs" -mtime -7 2>/dev/null)" ]; then
    say "mmdebstrap: Debian 12 (minbase, systemd, dbus, procps)"
    mmdebstrap --quiet --format=tar --variant=minbase --include=systemd,systemd-sysv,dbus,procps \
        bookworm "$rootfs.new" >"$work/mmdebstrap.log" 2>&1 ||
        die "mmdebstrap failed: $(tail -n 20 "$work/mmdebstrap.log")"
    mv "$rootfs.new" "$rootfs"
fi
image=localhost/tracker-systemd-test:$$
podman import --quiet "$rootfs" "$image" >/dev/null
on_exit "podman rmi -f $image"

say "deploy/check-host in a container: podman's default profile, then the tracker's"
check_host() { # podman flags...
    podman run --rm --runtime runc --network none "${ulimits[@]}" "$@" \
        -v "$repo/deploy/check-host:/check-host:ro" "$image" bash /check-host 2>&1 |
        grep -E '^(OK|WARN|FAIL) +io_uring ' || true
}
container_ulimits
line=$(check_host)
case "$line" in
    "FAIL  io_uring         io_uring_setup is blocked by this process's seccomp filter"*) ;;
    *) die "check-host under podman's default profile: $line" ;;
esac
line=$(check_host --security-opt "seccomp=$profile")
case "$line" in
    "OK    io_uring "*) ;;
    *) die "check-host under deploy/container/seccomp.json: $line" ;;
esac

say "packages: deploy/package/build, twice (the second an upgrade)"
version=$("$tracker_bin" --version | awk '{ print $NF }')
deb=$("$repo/deploy/package/build" --binary "$tracker_bin" --out "$work/deb")
upgrade=$("$repo/deploy/package/build" --binary "$tracker_bin" --version "$version+test1" --out "$work/deb")

make_netns
box=""
# Boots a container with systemd as PID 1. CAP_SYS_ADMIN lets systemd make
# the unit's namespaces (ProtectSystem=, PrivateDevices=...); the
# container's seccomp filter is the tracker's profile (podman's default
# plus io_uring), under which the unit adds its own.
boot() { # name [podman flags...]
    box=$1
    shift
    podman run -d --name "$box" --runtime runc --systemd=always --network "ns:/run/netns/$netns" \
        "${ulimits[@]}" --cap-add SYS_ADMIN --security-opt "seccomp=$profile" "$@" \
        "$image" /sbin/init >/dev/null
    on_exit "podman rm -f $box"
    local state="" deadline=$((SECONDS + 60))
    until [ "$state" = running ]; do
        [ "$SECONDS" -lt "$deadline" ] || die "systemd in $box is '$state' after 60 s: $(in_box systemctl --failed --no-pager)"
        sleep 0.5
        state=$(in_box systemctl is-system-running 2>/dev/null || true)
    done
}
in_box() { podman exec -i "$box" "$@"; }
# The host's view of a process of the box: its binary, "(deleted)" once
# replaced on disk (root in the box may not read another user's).
box_exe() { # pid in the box
    local host_pid
    host_pid=$(podman top "$box" hpid pid | awk -v pid="$1" '$2 == pid { print $1 }')
    readlink "/proc/$host_pid/exe"
}
# main_pid, journal, the load, hand_over, upgrade_package and the stops
# after hand-overs.
# shellcheck source=tests/deploy/package-lib.sh
source "$repo/tests/deploy/package-lib.sh"

# The unit's sandbox, as the kernel shows it on the running tracker: its
# user, no new privileges, a seccomp filter, no capability held (the unit's
# CAP_NET_BIND_SERVICE given up once the ports are bound; the bounding set
# the unit's),
# the file system read-only but for its state directory, /home, /dev and
# /proc/sys shut; and systemd's own rating of the unit.
check_sandbox() {
    local pid uid status mounts rating
    pid=$(main_pid)
    uid=$(in_box id -u tracker)
    status=$(in_box cat "/proc/$pid/status")
    for want in "Uid:	$uid	$uid	$uid	$uid" "NoNewPrivs:	1" "Seccomp:	2" \
        "CapEff:	0000000000000000" "CapPrm:	0000000000000000" "CapInh:	0000000000000000" \
        "CapAmb:	0000000000000000" "CapBnd:	0000000000000400"; do
        grep -qF "$want" <<<"$status" || die "the tracker (pid $pid) lacks '$want': $status"
    done
    # shellcheck disable=SC2016 # awk's fields, not the shell's
    mounts=$(in_box awk '{ print $5, $6 }' "/proc/$pid/mountinfo")
    for want in "/ ro," "/var/lib/tracker rw," "/home ro," "/dev ro," "/proc/sys ro,"; do
        grep -q "^$want" <<<"$mounts" || die "the tracker's mounts lack '$want': $mounts"
    done
    rating=$(in_box systemd-analyze security tracker.service --no-pager | tail -n 1)
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) exit !($i <= 2.0); exit 1 }' <<<"$rating" ||
        die "systemd-analyze security rates the unit worse than 2.0: $rating"
    say "sandbox on: uid $uid, no capability held (bounding 0x400), Seccomp 2, / read-only; $rating"
}

make_cert() { # name
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$work/$1.key" -out "$work/$1.pem" 2>/dev/null
}
# The certificate files as an administrator puts them: root:tracker 0640.
install_cert() { # name
    in_box install -d -m 0750 -g tracker /etc/tracker/tls
    in_box sh -c 'cat >/etc/tracker/tls/cert.pem' <"$work/$1.pem"
    in_box sh -c 'cat >/etc/tracker/tls/key.pem' <"$work/$1.key"
    in_box chgrp tracker /etc/tracker/tls/cert.pem /etc/tracker/tls/key.pem
    in_box chmod 0640 /etc/tracker/tls/cert.pem /etc/tracker/tls/key.pem
}
fingerprint() { openssl x509 -noout -fingerprint -sha256 -in "$1" | sed 's/.*=//'; }
served_fingerprint() {
    in_netns openssl s_client -connect 127.0.0.1:6970 -servername localhost </dev/null 2>/dev/null |
        openssl x509 -noout -fingerprint -sha256 | sed 's/.*=//'
}
# --- The package ----------------------------------------------------------------
say "booting Debian 12 for the package"
boot tracker-systemd-$$
podman cp "$deb" "$box:/tmp/tracker.deb"
podman cp "$upgrade" "$box:/tmp/tracker-upgrade.deb"
in_box apt-get install -y -q /tmp/tracker.deb >"$work/dpkg.log" 2>&1 || die "apt-get install failed: $(cat "$work/dpkg.log")"
[ "$(in_box systemctl is-enabled tracker.service || true)" = disabled ] ||
    die "installing the package enabled the unit"
[ "$(in_box systemctl is-active tracker.service || true)" = inactive ] ||
    die "installing the package started the unit"
[ "$(in_box stat -c '%U:%G %a' /etc/tracker/config.toml)" = "root:tracker 640" ] ||
    die "/etc/tracker/config.toml is $(in_box stat -c '%U:%G %a' /etc/tracker/config.toml)"
say "installed, neither enabled nor started: $(grep -o 'not enabled.*' "$work/dpkg.log")"

make_cert first
make_cert second
install_cert first
in_box sed -i -e 's|^tls_cert_file = ""|tls_cert_file = "/etc/tracker/tls/cert.pem"|' \
    -e 's|^tls_key_file = ""|tls_key_file = "/etc/tracker/tls/key.pem"|' \
    -e "s|^connection_secret = \"\"|connection_secret = \"$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')\"|" \
    -e 's|^listen = \[\]$|listen = ["127.0.0.1:6971"]|' \
    /etc/tracker/config.toml
in_box systemctl enable --now tracker.service >/dev/null 2>&1
wait_udp 6969 30
[ "$(served_fingerprint)" = "$(fingerprint "$work/first.pem")" ] || die "HTTPS does not serve the configured certificate"
check_sandbox
probe udp=127.0.0.1:6969 http=http://127.0.0.1:6969/announce https=https://127.0.0.1:6970/announce \
    ws=ws://127.0.0.1:6969/announce wss=wss://127.0.0.1:6970/announce

say "systemctl reload: the new certificate"
install_cert second
in_box systemctl reload tracker.service
wait_journal "SIGHUP: reloaded HTTPS certificate .*$(fingerprint "$work/second.pem")" 10
[ "$(served_fingerprint)" = "$(fingerprint "$work/second.pem")" ] || die "after the reload HTTPS serves $(served_fingerprint)"

say "systemctl kill -s USR2 under load"
hand_over
check_sandbox
restarts=$(in_box systemctl show --property NRestarts --value tracker.service)
killed=$(main_pid)
in_box systemctl kill --signal=KILL --kill-who=main tracker.service
deadline=$((SECONDS + 30))
until [ "$(in_box systemctl show --property NRestarts --value tracker.service)" -gt "$restarts" ] &&
    [ "$(in_box systemctl is-active tracker.service || true)" = active ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "systemd did not restart the successor $killed after SIGKILL"
    sleep 0.2
done
wait_udp 6969 30
say "the successor is systemd's: killed, it was restarted (pid $killed -> $(main_pid))"

say "USR2, then the package upgraded under load, then systemctl stop: every torrent saved, and back at the start"
hand_over
announce_new 2
upgrade_package /tmp/tracker-upgrade.deb "$version+test1"
check_sandbox
announce_new 3
stop_saves_every_torrent systemctl stop tracker.service
start_restores_every_torrent
wait_udp 6969 30

say "USR2, then systemctl restart: every torrent saved, and back"
hand_over
announce_new 4
stop_saves_every_torrent systemctl restart tracker.service
restores_every_torrent
wait_udp 6969 30

say "USR2, then apt-get remove stops and saves every torrent; apt-get purge removes the state"
hand_over
announce_new 5
stop_saves_every_torrent apt-get remove -y -q bittorrent-tracker
[ "$(in_box systemctl is-active tracker.service || true)" != active ] || die "the tracker runs after its removal"
in_box test -s /var/lib/tracker/tracker.state || die "no state file after the removal"
in_box apt-get purge -y -q bittorrent-tracker >/dev/null 2>&1
in_box test ! -e /var/lib/tracker || die "/var/lib/tracker is left after the purge"
in_box test ! -e /etc/systemd/system/multi-user.target.wants/tracker.service || die "the unit is still enabled after the purge"
podman rm -f "$box" >/dev/null

# --- deploy/install ---------------------------------------------------------------
# A hard limit of 1024 open files, as on the host of issue 42, where
# check-host had said the unit would fail (205/LIMITS) and systemd ran it.
say "booting Debian 12 for deploy/install, with a hard limit of 1024 open files"
boot tracker-install-$$ --ulimit nofile=1024:1024
podman cp "$repo/deploy" "$box:/opt/deploy"
podman cp "$tracker_bin" "$box:/opt/deploy/tracker"
in_box bash /opt/deploy/check-host >"$work/check-host.log" 2>&1 || true
# shellcheck disable=SC2016 # awk's fields, not the shell's
memlock_kib=$(($(in_box awk '/^Max locked memory/ { print $(NF - 1) }' /proc/1/limits) / 1024))
if [ "$memlock_kib" -lt 131072 ]; then
    memlock_line="^OK +memlock_host +systemd 252 lowers LimitMEMLOCK 131072 KiB to $memlock_kib KiB, PID 1's hard limit"
else
    memlock_kib=131072
    memlock_line="^OK +memlock_host +the unit's LimitMEMLOCK 131072 KiB can be applied"
fi
grep -E "$memlock_line" "$work/check-host.log" >/dev/null ||
    die "check-host's memlock_host: $(grep memlock_host "$work/check-host.log")"
predicted=$(sed -n 's/^WARN  nofile  *systemd 252 lowers LimitNOFILE=1048576 to 1024, .*room for about \([0-9]*\) connections per worker.*/\1/p' \
    "$work/check-host.log")
[ -n "$predicted" ] || die "check-host's nofile: $(grep -E ' nofile ' "$work/check-host.log")"
! grep ^FAIL "$work/check-host.log" || die "check-host fails the box (above)"
in_box /opt/deploy/install --binary /opt/deploy/tracker --enable >"$work/install.log" 2>&1 ||
    die "deploy/install failed: $(cat "$work/install.log")"
wait_udp 6969 30
limits=$(in_box cat "/proc/$(main_pid)/limits")
for want in "Max open files  *1024  *1024 " "Max locked memory  *$((memlock_kib * 1024))  *$((memlock_kib * 1024)) "; do
    grep -E "$want" <<<"$limits" >/dev/null || die "the tracker's limits lack '$want': $limits"
done
wait_journal "the file-descriptor limit (RLIMIT_NOFILE) is 1024: .* lowered to" 10
lowered=$(journal | sed -n 's/.*RLIMIT_NOFILE) is 1024: .* lowered to \([0-9]*\);.*/\1/p' | tail -n 1)
say "check-host: LimitMEMLOCK lowered to $memlock_kib KiB, LimitNOFILE to 1024, about $predicted connections per worker; the unit ran with those, the tracker lowered its connections to $lowered"
check_sandbox
probe udp=127.0.0.1:6969 https=https://127.0.0.1:6970/announce wss=wss://127.0.0.1:6970/announce

say "deploy/install --enable again: nothing changed, the tracker left running"
running=$(main_pid)
in_box /opt/deploy/install --binary /opt/deploy/tracker --enable >"$work/install-again.log" 2>&1 ||
    die "deploy/install (again) failed: $(cat "$work/install-again.log")"
grep "^install: installed " "$work/install-again.log" && die "a second deploy/install changed files"
grep "left running" "$work/install-again.log" >/dev/null || die "the second deploy/install did not leave the tracker running: $(cat "$work/install-again.log")"
[ "$(main_pid)" = "$running" ] || die "the second deploy/install --enable restarted the tracker (pid $running -> $(main_pid))"
[ "$(in_box systemctl show --property NRestarts --value tracker.service)" = 0 ] || die "the tracker restarted"

say "deploy/install --enable with a new binary, then a new unit: each restarts the tracker"
# Another file that is the same program: bytes after the ELF's end.
in_box sh -c 'cat /opt/deploy/tracker >/opt/deploy/tracker-new && printf x >>/opt/deploy/tracker-new && chmod 0755 /opt/deploy/tracker-new'
in_box /opt/deploy/install --binary /opt/deploy/tracker-new --enable >"$work/install-binary.log" 2>&1 ||
    die "deploy/install (new binary) failed: $(cat "$work/install-binary.log")"
grep "restarted tracker, which ran an older /usr/local/bin/tracker" "$work/install-binary.log" >/dev/null ||
    die "a new binary did not restart the tracker: $(cat "$work/install-binary.log")"
[ "$(main_pid)" != "$running" ] || die "the tracker still runs as pid $running after a new binary"
wait_udp 6969 30
running=$(main_pid)
in_box sh -c 'printf "# a local note\n" >>/opt/deploy/tracker.service'
in_box /opt/deploy/install --binary /opt/deploy/tracker-new --enable >"$work/install-unit.log" 2>&1 ||
    die "deploy/install (new unit) failed: $(cat "$work/install-unit.log")"
grep "restarted tracker, which ran an older /etc/systemd/system/tracker.service" "$work/install-unit.log" >/dev/null ||
    die "a new unit did not restart the tracker: $(cat "$work/install-unit.log")"
[ "$(main_pid)" != "$running" ] || die "the tracker still runs as pid $running after a new unit"
wait_udp 6969 30
hand_over
