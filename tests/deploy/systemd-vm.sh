#!/usr/bin/env bash
# The package under a real cgroup-v2 systemd: Debian 12 booted with qemu
# (TCG: KVM here cannot run a guest) with Debian 12's kernel and systemd
# 252 as PID 1 on the unified hierarchy, as most hosts run it, where
# tests/deploy/systemd.sh's podman box has this host's cgroup v1. Its root
# file system is made by mmdebstrap from Debian's packages (minbase,
# systemd, dbus, procps, openssh-server, kmod, iproute2) and loaded as the
# initramfs, so the guest runs from memory and needs no disk image.
#
# The guest is reached from the host through a tap device in a network
# namespace of the test's own (nothing touches the host's interfaces):
# ssh to 10.9.0.2 drives it, and load-test, which sends only between
# loopback addresses, reaches the tracker at 127.77.0.1, routed over the
# tap on both sides (route_localnet), so the tracker sees each client's
# own address as under podman.
#
# In the guest, the package's steps of tests/deploy/package-lib.sh: the
# package installed and enabled, probes, a USR2 hand-over under load, a
# second one, an upgrade of the package under load (a third), then
# `systemctl stop`: the tracker saves every torrent and exits 0
# (Result=success), and the start restores them all; a hand-over then
# `systemctl restart`, and a hand-over then `apt-get remove`, save every
# torrent too (issue 42: after a hand-over, systemd 252 used to SIGKILL the
# tracker at the stop, saving nothing since the hand-over).
#
# The root file system (as a cpio archive) and the kernel are kept in
# target/deploy (DEPLOY_CACHE), the root a week. About two to three
# minutes, most of it the guest under TCG.
# Needs root, qemu-system-x86, mmdebstrap, busybox-static, openssh-client,
# dpkg-dev, openssl, and the release tracker and load-test.
set -euo pipefail
# shellcheck source=tests/deploy/lib.sh
source "$(dirname "$0")/lib.sh"

for tool in qemu-system-x86_64 mmdebstrap apt-get dpkg-deb ssh ssh-keygen ip openssl; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (tests/run.sh installs it)"
done
if ! { [ -x /bin/busybox ] && /bin/busybox --list | grep -x cpio >/dev/null; }; then
    die "busybox-static is not installed (tests/run.sh installs it)"
fi
[ -c /dev/net/tun ] || die "no /dev/net/tun: the guest's network is a tap device"
cache=${DEPLOY_CACHE:-$repo/target/deploy}
mkdir -p "$cache/kernels"

# --- The kernel --------------------------------------------------------------------
# Debian 12's current linux-image-amd64, from deb.debian.org through apt
# with a sources list of the test's own (the host's apt is left alone), as
# tests/deploy/kernel.sh fetches it; its vmlinuz and its e1000 driver (a
# module in Debian's kernels), the guest's network card.
apt_dir=$cache/apt-bookworm
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main\n' >"$apt_dir/sources.list"
printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main\n' >>"$apt_dir/sources.list"
apt=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Architectures::=amd64)
apt-get -q "${apt[@]}" update >"$work/apt.log" 2>&1 || die "apt-get update failed: $(tail -n 5 "$work/apt.log")"
kernel_package=$(apt-cache "${apt[@]}" depends linux-image-amd64 |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
[ -n "$kernel_package" ] || die "no linux-image-amd64 in bookworm"
vmlinuz=$cache/kernels/$kernel_package.vmlinuz
e1000=$cache/kernels/$kernel_package.e1000.ko
if [ ! -e "$vmlinuz" ] || [ ! -e "$e1000" ]; then
    say "downloading $kernel_package"
    (cd "$work" && apt-get -q "${apt[@]}" download "$kernel_package" >>"$work/apt.log" 2>&1) ||
        die "apt-get download $kernel_package failed: $(tail -n 5 "$work/apt.log")"
    mkdir "$work/kernel"
    dpkg-deb --fsys-tarfile "$work/$kernel_package"_*.deb |
        tar -x -C "$work/kernel" --wildcards './boot/vmlinuz-*' '*/e1000/e1000.ko'
    find "$work/kernel" -name e1000.ko -exec mv {} "$e1000.new" \;
    mv "$work"/kernel/boot/vmlinuz-* "$vmlinuz.new"
    mv "$e1000.new" "$e1000"
    mv "$vmlinuz.new" "$vmlinuz"
    rm -rf "$work/kernel" "$work/$kernel_package"_*.deb
fi

# --- The root file system ------------------------------------------------------------
# Made again after a week. No udev: the guest loads its one driver itself
# (tracker-test-net.service), and nothing waits for a device unit (the
# serial getty would, 90 s).
root_cpio=$cache/debian12-systemd-vm.cpio
if [ -z "$(find "$root_cpio" -mtime -7 2>/dev/null)" ]; then
    say "mmdebstrap: Debian 12 for the VM (minbase, systemd, dbus, procps, openssh-server, kmod, iproute2)"
    root=$work/root
    mmdebstrap --quiet --variant=minbase --include=systemd,systemd-sysv,dbus,procps,openssh-server,kmod,iproute2 \
        bookworm "$root" >"$work/mmdebstrap.log" 2>&1 || die "mmdebstrap failed: $(tail -n 20 "$work/mmdebstrap.log")"
    rm -rf "${root:?}"/usr/share/{doc,man,locale,info}/* "$root"/var/cache/apt/*.bin
    rm -f "$root"/etc/systemd/system/timers.target.wants/* "$root"/etc/systemd/system/getty.target.wants/*
    ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"
    echo tracker-vm >"$root/etc/hostname"
    printf 'UseDNS no\nPasswordAuthentication no\n' >"$root/etc/ssh/sshd_config.d/tracker-test.conf"
    # The guest's end of the tap: 10.9.0.2 for ssh; 127.77.0.1, the
    # tracker's address for load-test, with load-test's 127.1.0.0/16
    # routed back over the tap rather than taken as local.
    cat >"$root/etc/systemd/system/tracker-test-net.service" <<'EOF'
[Unit]
Description=The test's network: e1000 on the host's tap
DefaultDependencies=no
Before=network.target ssh.service
Wants=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/sbin/insmod /e1000.ko
ExecStart=/sbin/sysctl -q -w net.ipv4.conf.all.route_localnet=1 net.ipv4.conf.default.route_localnet=1
ExecStart=/sbin/ip link set lo up
ExecStart=/sbin/ip link set eth0 up
ExecStart=/sbin/ip addr add 10.9.0.2/24 dev eth0
ExecStart=/sbin/ip addr add 127.77.0.1/32 dev eth0
ExecStart=/sbin/ip route del local 127.0.0.0/8 dev lo table local
ExecStart=/sbin/ip route replace local 127.0.0.1/32 dev lo table local
ExecStart=/sbin/ip route add 127.1.0.0/16 via 10.9.0.1 dev eth0

[Install]
WantedBy=multi-user.target
EOF
    ln -s /etc/systemd/system/tracker-test-net.service "$root/etc/systemd/system/multi-user.target.wants/"
    (cd "$root" && find . | /bin/busybox cpio -o -H newc 2>/dev/null) >"$root_cpio.new"
    mv "$root_cpio.new" "$root_cpio"
    rm -rf "$root"
fi

# --- This run's files, and the guest booted ------------------------------------------
say "packages: deploy/package/build, twice (the second an upgrade)"
version=$("$tracker_bin" --version | awk '{ print $NF }')
deb=$("$repo/deploy/package/build" --binary "$tracker_bin" --out "$work/deb")
upgrade=$("$repo/deploy/package/build" --binary "$tracker_bin" --version "$version+test1" --out "$work/deb")
# A second cpio archive after the root's (the kernel unpacks both): the
# driver, this run's ssh key and the packages.
extra=$work/extra
install -d -m 0700 "$extra/root" "$extra/root/.ssh"
ssh-keygen -q -t ed25519 -N '' -C tracker-test -f "$work/ssh-key"
install -m 0600 "$work/ssh-key.pub" "$extra/root/.ssh/authorized_keys"
install -m 0644 "$e1000" "$extra/e1000.ko"
install -m 0644 "$deb" "$extra/root/tracker.deb"
install -m 0644 "$upgrade" "$extra/root/tracker-upgrade.deb"
(cd "$extra" && find . | /bin/busybox cpio -o -H newc 2>/dev/null) >"$work/extra.cpio"
cat "$root_cpio" "$work/extra.cpio" >"$work/initrd"

# The host's end of the tap, in the test's namespace: 10.9.0.1, and
# 127.77.0.0/24 routed to the guest; load-test's 127.1.0.0/16 stays local.
make_netns
ip -n "$netns" tuntap add dev tap0 mode tap
ip -n "$netns" link set tap0 up
ip -n "$netns" addr add 10.9.0.1/24 dev tap0
in_netns sh -c 'echo 1 >/proc/sys/net/ipv4/conf/all/route_localnet && echo 1 >/proc/sys/net/ipv4/conf/tap0/route_localnet'
ip -n "$netns" route del local 127.0.0.0/8 dev lo table local
ip -n "$netns" route replace local 127.0.0.1/32 dev lo table local
ip -n "$netns" route add local 127.1.0.0/16 dev lo table local
ip -n "$netns" route add 127.77.0.0/24 via 10.9.0.2 dev tap0

say "booting $kernel_package with systemd as init (qemu, TCG, 2 CPUs)"
console=$work/console.log
in_netns timeout 1200 qemu-system-x86_64 -machine q35 -accel tcg -cpu max -smp 2 -m 1536 \
    -kernel "$vmlinuz" -initrd "$work/initrd" -display none -monitor none -serial "file:$console" -no-reboot \
    -netdev tap,id=net0,ifname=tap0,script=no,downscript=no -device e1000,netdev=net0 \
    -append "console=ttyS0 rdinit=/sbin/init systemd.unified_cgroup_hierarchy=1 panic=-1 random.trust_cpu=on edd=off loglevel=4" \
    </dev/null >"$work/qemu.log" 2>&1 &
qemu=$!
on_exit "kill $qemu"

ssh_options=(-i "$work/ssh-key" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
    -o LogLevel=ERROR -o ConnectTimeout=10 -o ControlMaster=auto -o "ControlPath=$work/ssh-%C" -o ControlPersist=900)
# A command in the guest, as root, its standard input passed on.
in_box() { in_netns ssh "${ssh_options[@]}" root@10.9.0.2 "$(printf '%q ' "$@")"; }
on_exit "in_netns ssh ${ssh_options[*]} -O exit root@10.9.0.2"
state="" deadline=$((SECONDS + 300))
until [ "$state" = running ]; do
    kill -0 "$qemu" 2>/dev/null || die "qemu exited: $(cat "$work/qemu.log"; tail -n 40 "$console")"
    [ "$SECONDS" -lt "$deadline" ] || die "systemd in the guest is '$state' after 300 s: $(tail -n 40 "$console")"
    [ "$state" = degraded ] && die "systemd in the guest is degraded: $(in_box systemctl --failed --no-pager)"
    sleep 1
    state=$(in_box systemctl is-system-running 2>/dev/null || true)
done
hierarchy=$(in_box stat -fc %T /sys/fs/cgroup)
[ "$hierarchy" = cgroup2fs ] || die "the guest's /sys/fs/cgroup is $hierarchy, not the unified hierarchy"
say "guest running: $(in_box uname -r), $(in_box systemctl --version | head -n 1), /sys/fs/cgroup is $hierarchy"

# --- The package ----------------------------------------------------------------------
tracker_ip=127.77.0.1
# TCG runs the guest some 20 times slower than the host.
load_rate=1000
box_exe() { in_box readlink "/proc/$1/exe"; }
# shellcheck source=tests/deploy/package-lib.sh
source "$repo/tests/deploy/package-lib.sh"
# Waits until a BEP 15 connect to the guest's tracker is answered, for at
# most SECONDS, from one of load-test's addresses (an answer to 127.0.0.1
# would stay in the guest).
wait_udp_guest() { # seconds
    in_netns python3 - "$tracker_ip" "$1" <<'EOF' || die "nothing answers UDP on $tracker_ip:6969 after $1 s"
import socket, struct, sys, time
host, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.1.255.254", 0))
s.settimeout(0.5)
while time.monotonic() < deadline:
    s.sendto(struct.pack(">qii", 0x41727101980, 0, 7), (host, 6969))
    try:
        if len(s.recv(64)) == 16:
            sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
EOF
}

say "the package: installed, enabled, probed"
in_box apt-get install -y -q /root/tracker.deb >"$work/dpkg.log" 2>&1 || die "apt-get install failed: $(cat "$work/dpkg.log")"
[ "$(in_box systemctl is-active tracker.service || true)" = inactive ] || die "installing the package started the unit"
in_box sed -i -e "s|^connection_secret = \"\"|connection_secret = \"$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')\"|" \
    -e 's|^listen = \[\]$|listen = ["127.0.0.1:6971"]|' /etc/tracker/config.toml
in_box systemctl enable --now tracker.service >/dev/null 2>&1
wait_udp_guest 60
PROBE_SECONDS=3 probe udp="$tracker_ip:6969" https="https://$tracker_ip:6970/announce"

say "USR2 twice, then the package upgraded under load, then systemctl stop: every torrent saved, and back at the start"
hand_over
announce_new 2
hand_over
announce_new 3
upgrade_package /root/tracker-upgrade.deb "$version+test1"
announce_new 4
stop_saves_every_torrent systemctl stop tracker.service
start_restores_every_torrent
wait_udp_guest 30

say "USR2, then systemctl restart: every torrent saved, and back"
hand_over
announce_new 5
stop_saves_every_torrent systemctl restart tracker.service
restores_every_torrent
wait_udp_guest 30

say "USR2, then apt-get remove stops and saves every torrent; apt-get purge removes the state"
hand_over
announce_new 6
stop_saves_every_torrent apt-get remove -y -q bittorrent-tracker
in_box test -s /var/lib/tracker/tracker.state || die "no state file after the removal"
in_box apt-get purge -y -q bittorrent-tracker >/dev/null 2>&1
in_box test ! -e /var/lib/tracker || die "/var/lib/tracker is left after the purge"
