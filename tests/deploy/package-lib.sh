# shellcheck shell=bash
# The package's hand-overs and stops, which tests/deploy/systemd.sh (systemd
# 252 in podman, on this host's cgroup v1) and tests/deploy/systemd-vm.sh
# (systemd 252 as init under qemu, on cgroup v2) both run; sourced after
# lib.sh. The caller defines:
#   in_box CMD...   runs CMD in the guest as root, its standard input passed
#   box_exe PID     the binary the guest's process PID runs
# and may set tracker_ip (where load-test reaches the guest's tracker from
# the test's namespace, default 127.0.0.1) and load_rate (the UDP load's
# requests a second, default 4000).
#
# Issue 42: after a hand-over, systemd took the successor for an "alien"
# main process (it had said MAINPID= while the old tracker was its parent),
# waited for no process at the stop and sent SIGKILL 0.3 ms after SIGTERM:
# nothing since the hand-over was saved. Each stop here comes after
# hand-overs, and must save every torrent the tracker holds, exit 0 as
# systemd records it, and give every torrent back at the next start.

tracker_ip=${tracker_ip:-127.0.0.1}
load_rate=${load_rate:-4000}

main_pid() { in_box systemctl show --property MainPID --value tracker.service; }
# The journal of the unit since the guest booted (systemd's lines about it
# too), without systemd's prefix.
journal() { in_box journalctl --unit tracker --output cat --no-pager; }
wait_journal() { # pattern seconds
    local deadline=$((SECONDS + $2))
    until journal | grep -- "$1" >/dev/null; do
        [ "$SECONDS" -lt "$deadline" ] || die "no '$1' in the journal: $(journal | tail -n 20)"
        sleep 0.2
    done
}

# Load in the background (UDP open loop, HTTPS keep-alive) for SECONDS;
# `finish_load` checks that no answer was lost or invalid.
start_load() { # seconds
    in_netns "$load_test" udp --target "$tracker_ip:6969" --workers 1 --duration "$1" --rate "$load_rate" \
        --mix 1:20:1 --sources 8 --timeout-ms 5000 --torrents 200 --peers 1000 --quiet \
        --json "$work/load-udp.json" >"$work/load-udp.out" 2>&1 &
    load_pids=($!)
    in_netns "$load_test" http --target "https://$tracker_ip:6970/announce" --insecure --workers 1 \
        --connections 4 --duration "$1" --timeout-ms 5000 --torrents 200 --peers 1000 --quiet \
        --json "$work/load-https.json" >"$work/load-https.out" 2>&1 &
    load_pids+=($!)
}
finish_load() {
    wait "${load_pids[@]}" || die "load-test failed: $(cat "$work"/load-*.out)"
    "$repo/tests/deploy/probe-ok" "udp=$work/load-udp.json" "https=$work/load-https.json" ||
        die "answers were lost or invalid (above)"
}

# Waits (30 s at most) until systemd's MainPID is no longer OLD; the new one.
wait_main_pid_moves() { # old
    local new=$1 deadline=$((SECONDS + 30))
    until [ "$new" != "$1" ] && [ "$new" != 0 ]; do
        [ "$SECONDS" -lt "$deadline" ] || die "MainPID is still $1 30 s on: $(journal | tail -n 20)"
        sleep 0.2
        new=$(main_pid)
    done
    echo "$new"
}

# The new main process is systemd's own: its child (the kernel gave it to
# PID 1 when the old tracker exited), never taken as "not our child"; the
# old one named it in the PID file as it exited (each keeps the file, so no
# successor had to name itself).
check_supervised() { # pid
    local parent
    parent=$(in_box ps -o ppid= -p "$1" | tr -d ' ')
    [ "$parent" = 1 ] || die "the main process $1 is the child of $parent, not of systemd (PID 1)"
    ! journal | grep "not our child" || die "systemd supervises a process that is not its child (above)"
    journal | grep "PID file /run/tracker/tracker.pid: pid $1, the new tracker" >/dev/null ||
        die "the old tracker did not name pid $1 in the PID file: $(journal | tail -n 20)"
    ! journal | grep "keeps none" || die "a successor found no PID file kept (above)"
}

# Hands over with `systemctl kill -s USR2` under load; the new main process.
hand_over() {
    local old new
    old=$(main_pid)
    start_load 6
    sleep 2
    in_box systemctl kill --signal=USR2 --kill-who=main tracker.service
    new=$(wait_main_pid_moves "$old")
    finish_load
    [ "$(in_box systemctl is-active tracker.service)" = active ] || die "the unit is not active after the hand-over"
    journal | grep "handed over .* to pid $new" >/dev/null || die "no hand-over to pid $new in the journal"
    check_supervised "$new"
    say "USR2: MainPID $old -> $new (systemd's child), no answer lost under load"
}

# Upgrades the package (apt-get install DEB, of VERSION) under load: the
# postinst hands over to the new binary.
upgrade_package() { # deb version
    local old new
    old=$(main_pid)
    start_load 8
    sleep 2
    in_box apt-get install -y -q "$1" >"$work/upgrade.log" 2>&1 || die "the upgrade failed: $(cat "$work/upgrade.log")"
    finish_load
    new=$(main_pid)
    grep "handed over to the new binary (pid $old to pid $new)" "$work/upgrade.log" >/dev/null ||
        die "the upgrade did not hand over: $(cat "$work/upgrade.log")"
    [ "$(box_exe "$new")" = /usr/bin/tracker ] || die "pid $new runs $(box_exe "$new"), not the new /usr/bin/tracker"
    # shellcheck disable=SC2016 # dpkg-query's field, not the shell's
    [ "$(in_box dpkg-query -W -f '${Version}' bittorrent-tracker)" = "$2" ] || die "the upgrade is not installed"
    check_supervised "$new"
    say "package upgraded to $2 under load: pid $old -> $new, no answer lost"
}

# The torrents the tracker holds, from its metrics (the config's
# metrics.listen = ["127.0.0.1:6971"]), asked in the guest.
torrents() {
    in_box bash -c 'exec 3<>/dev/tcp/127.0.0.1/6971 &&
        printf "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n" >&3 && cat <&3' |
        awk '/^tracker_torrents[{ ]/ { n += $NF } END { print n + 0 }'
}

# Announces to SEED's torrents, new ones: changes since the last hand-over.
announce_new() { # seed
    in_netns "$load_test" udp --target "$tracker_ip:6969" --workers 1 --duration 2 --rate 1000 \
        --mix 1:20:1 --sources 8 --timeout-ms 5000 --torrents 300 --peers 3000 --zipf-exponent 0 \
        --seed "$1" --quiet --json "$work/announce-$1.json" >"$work/announce-$1.out" 2>&1 ||
        die "load-test (seed $1) failed: $(cat "$work/announce-$1.out")"
    "$repo/tests/deploy/probe-ok" "announces=$work/announce-$1.json" >/dev/null || die "announces were lost (seed $1)"
}

# Runs COMMAND (a stop: `systemctl stop tracker`, `systemctl restart
# tracker`, `apt-get remove ...`) after hand-overs: the tracker must save
# every torrent it holds and exit 0, and systemd record a success, not a
# SIGKILL. Sets `saved`, and `stop_mark`, the journal's length before it.
stop_saves_every_torrent() { # command...
    local held log
    held=$(torrents)
    [ "$held" -gt 0 ] || die "the tracker holds no torrent before the stop"
    stop_mark=$(journal | wc -l)
    in_box "$@" >"$work/stop.log" 2>&1 || die "$* failed: $(cat "$work/stop.log")"
    # The journal's lines since the command.
    log=$(journal | tail -n +$((stop_mark + 1)))
    ! grep -E "SIGKILL|Failed with result|code=killed" <<<"$log" ||
        die "$*: systemd killed the tracker (above): $(tail -n 15 <<<"$log")"
    saved=$(sed -n 's/.*stopped: saved \([0-9]*\) torrents.*/\1/p' <<<"$log" | tail -n 1)
    [ -n "$saved" ] || die "$*: the tracker saved nothing: $(tail -n 15 <<<"$log")"
    [ "$saved" = "$held" ] || die "$*: saved $saved torrents of the $held it held"
    grep "Deactivated successfully" <<<"$log" >/dev/null ||
        die "$*: systemd did not record a clean exit: $(tail -n 15 <<<"$log")"
    say "$*: saved all $held torrents, exit 0 (systemd: Deactivated successfully)"
}

# After a stop (`saved` set): the tracker gives back the torrents it saved,
# every one, from its state file.
restores_every_torrent() {
    local deadline=$((SECONDS + 30))
    until journal | tail -n +$((stop_mark + 1)) | grep "restored [0-9]* torrents .* from tracker.state" >/dev/null; do
        [ "$SECONDS" -lt "$deadline" ] || die "no restore after the stop: $(journal | tail -n 20)"
        sleep 0.2
    done
    journal | tail -n +$((stop_mark + 1)) | grep "restored $saved torrents and [0-9]* peers from tracker.state" >/dev/null ||
        die "the start restored $(journal | tail -n +$((stop_mark + 1)) | grep -o 'restored [0-9]* torrents'), not $saved"
    [ "$(torrents)" = "$saved" ] || die "after the start the tracker holds $(torrents) torrents, not $saved"
    say "restored all $saved torrents"
}
start_restores_every_torrent() {
    in_box systemctl start tracker.service
    restores_every_torrent
}
