#!/usr/bin/env bash
# The tracker on older kernels: Debian's own kernel packages booted with
# qemu (TCG: KVM here cannot run a guest kernel) on a root file system this
# test makes (an initramfs: busybox, the release tracker and load-test and
# their libraries, tests/deploy/guest-init). In each guest, two workers on
# two CPUs: the UDP, HTTP, HTTPS, ws:// and wss:// probes, a USR2 hand-over
# (before Linux 6.5 the control socket has no SO_PEERPIDFD: pidfd_open), and
# a tracker that drops root to its user under RLIMIT_MEMLOCK at what
# deploy/check-host plans for that kernel (so io_uring charges it); and
# UDP over AF_XDP on a veth pair to a client namespace (the XDP program
# through that kernel's verifier, its BPF link, the AF_XDP sockets).
#
# KERNELS (default "bookworm bullseye") names Debian suites; each gives its
# linux-image-amd64: Debian 12's 6.1, Debian 11's 5.10 (the floor the
# tracker claims). The packages and their indexes come from
# deb.debian.org through apt with a sources list of the test's own (the
# host's apt is left alone), kept in target/deploy (DEPLOY_CACHE).
# Needs root, qemu-system-x86, busybox-static, dpkg.
set -euo pipefail
# shellcheck source=tests/deploy/lib.sh
source "$(dirname "$0")/lib.sh"

for tool in qemu-system-x86_64 apt-get dpkg-deb; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (tests/run.sh installs it)"
done
if ! { [ -x /bin/busybox ] && /bin/busybox --list | grep -x cpio >/dev/null; }; then
    die "busybox-static is not installed (tests/run.sh installs it)"
fi
cache=${DEPLOY_CACHE:-$repo/target/deploy}

# The vmlinuz of the suite's linux-image-amd64, in the cache.
kernel_of() { # suite
    local suite=$1 dir=$cache/apt-$1 apt image deb
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$cache/kernels"
    printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian %s main\n' \
        "$suite" >"$dir/sources.list"
    printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security %s-security main\n' \
        "$suite" >>"$dir/sources.list"
    apt=(-o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o APT::Architectures::=amd64)
    apt-get -q "${apt[@]}" update >"$work/apt-$suite.log" 2>&1 ||
        die "apt-get update for $suite failed: $(tail -n 5 "$work/apt-$suite.log")"
    image=$(apt-cache "${apt[@]}" depends linux-image-amd64 | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
    [ -n "$image" ] || die "no linux-image-amd64 in $suite"
    if [ ! -e "$cache/kernels/$image.vmlinuz" ] || [ ! -e "$cache/kernels/$image.veth.ko" ]; then
        (cd "$work" && apt-get -q "${apt[@]}" download "$image" >>"$work/apt-$suite.log" 2>&1) ||
            die "apt-get download $image failed: $(tail -n 5 "$work/apt-$suite.log")"
        deb=$(echo "$work/${image}"_*.deb)
        # veth is a module in Debian's kernels: the guest loads it for the
        # AF_XDP step.
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" --wildcards './boot/vmlinuz-*' '*/drivers/net/veth.ko'
        mv "$work"/boot/vmlinuz-* "$cache/kernels/$image.vmlinuz"
        find "$work" -name veth.ko -path '*/drivers/net/*' -exec mv {} "$cache/kernels/$image.veth.ko" \;
        [ -e "$cache/kernels/$image.veth.ko" ] || die "no veth.ko in $image"
        rm -rf "$deb" "${work:?}/lib" "${work:?}/usr"
    fi
    echo "$cache/kernels/$image.vmlinuz"
}

# The guest's root file system: an initramfs of the binaries, the libraries
# they load (ldd) and the init script.
make_initramfs() { # vmlinuz...
    local root=$work/initramfs binary library vmlinuz release
    mkdir -p "$root"/{bin,usr/bin,etc,proc,sys,dev,tmp,var/lib/tracker,lib/veth}
    # Each kernel's veth module, by its release (linux-image-RELEASE).
    for vmlinuz in "$@"; do
        release=$(basename "$vmlinuz" .vmlinuz)
        cp "${vmlinuz%.vmlinuz}.veth.ko" "$root/lib/veth/${release#linux-image-}.ko"
    done
    cp /bin/busybox "$root/bin/busybox"
    install -m 0755 "$repo/tests/deploy/guest-init" "$root/init"
    for binary in "$tracker_bin" "$load_test"; do
        install -m 0755 "$binary" "$root/usr/bin/$(basename "$binary")"
        strip --strip-debug "$root/usr/bin/$(basename "$binary")"
        for library in $(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
            mkdir -p "$root$(dirname "$library")"
            cp -L "$library" "$root$library"
        done
    done
    printf 'root:x:0:0:root:/:/bin/sh\ntracker:x:6969:6969:tracker:/var/lib/tracker:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\ntracker:x:6969:\n' >"$root/etc/group"
    chown 6969:6969 "$root/var/lib/tracker"
    (cd "$root" && find . | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initramfs.gz"
}

# Boots `kernel` on the initramfs with two CPUs; the guest's console, to a
# file. TCG runs about 20 times slower than the host: the probes take
# their time, and 6.1 reaches userspace in seconds.
boot() { # vmlinuz console-file
    timeout 600 qemu-system-x86_64 -machine q35 -accel tcg -cpu max -smp 2 -m 1024 \
        -kernel "$1" -initrd "$work/initramfs.gz" -nic none -nographic -monitor none -no-reboot \
        -append "console=ttyS0 panic=-1 random.trust_cpu=on edd=off loglevel=4" >"$2" 2>&1 </dev/null ||
        die "qemu failed or timed out ($(basename "$1")): $(tail -n 40 "$2")"
}

kernels=()
for suite in ${KERNELS:-bookworm bullseye}; do
    kernels+=("$(kernel_of "$suite")")
done
make_initramfs "${kernels[@]}"
for suite in ${KERNELS:-bookworm bullseye}; do
    vmlinuz=$(kernel_of "$suite")
    name=$(basename "$vmlinuz" .vmlinuz)
    say "$name ($suite), booted with qemu"
    console=$work/console-$suite.log
    boot "$vmlinuz" "$console"
    tr -d '\r' <"$console" >"$console.txt"
    grep -q '^GUEST DONE' "$console.txt" ||
        die "$name: the guest did not finish: $(grep -v '^PROBE ' "$console.txt" | tail -n 60)"
    say "$(grep -m 1 -o 'GUEST KERNEL .*' "$console.txt")"
    failures=$(grep '^GUEST FAIL ' "$console.txt" || true)
    [ -z "$failures" ] || die "$name: $failures
$(grep '^GUEST LOG ' "$console.txt" | tail -n 40)"
    results=()
    while read -r _ probe json; do
        printf '%s\n' "$json" >"$work/$suite-$probe.json"
        results+=("$probe=$work/$suite-$probe.json")
    done < <(grep '^PROBE ' "$console.txt")
    [ "${#results[@]}" -eq 9 ] || die "$name: ${#results[@]} probes of 9 reported: $(tail -n 40 "$console.txt")"
    "$repo/tests/deploy/probe-ok" "${results[@]}" || die "$name: a probe failed (above)"
    grep -o 'GUEST MEMLOCK .*' "$console.txt" | while read -r line; do say "$line"; done
    grep -o 'GUEST XDP .*' "$console.txt" | while read -r line; do say "$line"; done
done
