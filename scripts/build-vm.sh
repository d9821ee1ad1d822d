#!/usr/bin/env bash
# build-vm.sh — the guest kernel and initramfs of the microVM runtime
# (issue 38), built offline from Debian packages; then, with --probe, one
# boot under QEMU's microvm machine to show they work on this host.
#
# Nothing is compiled: Debian's cloud kernel (linux-image-cloud-amd64) is
# fetched with `apt-get download` from the host's own apt sources and
# unpacked with dpkg-deb. QEMU boots an uncompressed vmlinux through PVH
# (the ELF note Xen 0x12), so the bzImage's payload is cut out by its setup
# header's payload_offset/payload_length and decompressed (Debian 6.1's is
# LZ4; xz, zstd and gzip are tried too). The cloud kernel builds the
# virtio drivers as modules, so the initramfs carries them (virtio_ring,
# virtio, virtio_mmio, virtio_blk, virtio_console, in that order) beside
# the host's static busybox and an init that loads them.
#
# What it writes, under OUT (default /var/cache/sandboxd-vm/<kernel version>):
#   vmlinux       the uncompressed guest kernel
#   initrd.gz     busybox, the five modules, /init
#   VERSION       the kernel package's version and this script's hash
# and, with the default OUT, the link /var/cache/sandboxd-vm/current to it
# (where the daemon looks for it).
# Each is rebuilt only when the kernel package's version changes (--force:
# always).
#
# --probe boots it once (TCG, or KVM when /dev/kvm opens), with a
# virtio-serial port wired to a unix socket as the runner channel will be,
# and prints the guest's uptime when /init ran and the wall time of the
# whole boot and power-off. Measured 2026-11-28 on this machine kind (2
# cores, no /dev/kvm, TCG): /init at 1.89-2.55 s of guest uptime, 3.7-4.7 s
# wall from exec to power-off, /dev/vport0p1 present.
#
# /init, given sbx.uid= and sbx.gid= on the kernel command line (the qemu
# engine, src/qemu/), mounts /dev/vda (the session's ext4 workspace image)
# on /workspace, a tmpfs on /tmp, and execs /sandboxd-runner as PID 1 on the
# virtio-serial port named sandboxd.runner. The runner is not in initrd.gz:
# the engine appends it as a second cpio archive when it creates a VM, so
# the guest always runs the daemon's own runner (the kernel unpacks
# concatenated archives). Without sbx.uid (the probe) /init powers off.
#
# The session's image is not built here: the daemon makes its root file
# system (an ext4 image per image id, src/qemu/qemu_rootfs.c) and attaches
# it read-only as a second disk; the runner, PID 1 here, mounts it and
# chroots into it before it drops to the uid (docs/microvm.md). Without it
# (the probe, or an image that could not be made) the guest is busybox's.
# Not done yet (issue 38): more ports for egress and forwards.
#
# Usage: build-vm.sh [--out DIR] [--force] [--probe]
set -euo pipefail

out=""
force=0
probe=0
while (($#)); do
	case $1 in
	--out) out=$2; shift 2 ;;
	--force) force=1; shift ;;
	--probe) probe=1; shift ;;
	*) echo "build-vm.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

log() { printf 'build-vm: %s\n' "$*" >&2; }
need() { command -v "$1" >/dev/null || { log "needs $1 (scripts/setup.sh installs it)"; exit 1; }; }
need apt-get
need dpkg-deb
need busybox
need lz4
need python3

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
[[ -n $pkg ]] || { log "no linux-image-cloud-amd64 in the apt sources"; exit 1; }
ver=${pkg#linux-image-}
pkgver=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
default_out=$((${#out} == 0))
out=${out:-/var/cache/sandboxd-vm/$ver}
# the kernel package's version and this script (its /init) less its comment lines: either
# changed, the guest is rebuilt (a comment alone rebuilds nothing)
stamp="$pkgver $(grep -v '^[[:space:]]*#' "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
if ((!force)) && [[ -f $out/VERSION && $(cat "$out/VERSION") == "$stamp" && -s $out/vmlinux && -s $out/initrd.gz ]]; then
	log "up to date: $out ($pkg $pkgver)"
else
	log "fetching $pkg $pkgver"
	(cd "$work" && apt-get download "$pkg" >/dev/null 2>&1) || { log "apt-get download $pkg failed"; exit 1; }
	dpkg-deb -x "$work"/"$pkg"_*.deb "$work/root"
	mkdir -p "$out"
	# the bzImage's payload, by its setup header (Documentation/x86/boot.rst)
	python3 - "$work/root/boot/vmlinuz-$ver" "$work/payload" <<-'EOF'
		import struct, sys
		d = open(sys.argv[1], 'rb').read()
		setup_sects = d[0x1f1] or 4
		off, length = struct.unpack('<II', d[0x248:0x250])
		base = (setup_sects + 1) * 512
		open(sys.argv[2], 'wb').write(d[base + off:base + off + length])
	EOF
	for dec in "lz4 -dc" "xz -dc" "zstd -dc" "gzip -dc"; do
		# the payload ends with its decompressed size, which lz4 reads as a bad frame: the ELF magic decides
		$dec <"$work/payload" >"$work/vmlinux" 2>/dev/null || true
		if [[ $(head -c4 "$work/vmlinux" | od -An -tx1 | tr -d ' ') == 7f454c46 ]]; then
			break
		fi
		: >"$work/vmlinux"
	done
	[[ -s $work/vmlinux ]] || { log "cannot decompress the kernel's payload"; exit 1; }
	mods=$work/root/lib/modules/$ver/kernel
	ir=$work/initrd
	mkdir -p "$ir/bin" "$ir/mod" "$ir/proc" "$ir/sys" "$ir/dev"
	cp "$(command -v busybox)" "$ir/bin/busybox"
	for m in virtio/virtio_ring virtio/virtio virtio/virtio_mmio block/virtio_blk char/virtio_console; do
		cp "$mods/drivers/$m.ko" "$ir/mod/"
	done
	cat >"$ir/init" <<-'EOF'
		#!/bin/busybox sh
		/bin/busybox --install -s /bin
		mount -t proc proc /proc
		mount -t sysfs sys /sys
		mount -t devtmpfs dev /dev
		for m in virtio_ring virtio virtio_mmio virtio_blk virtio_console; do insmod /mod/$m.ko || exit 1; done
		uid= gid=
		for a in $(cat /proc/cmdline); do
			case $a in sbx.uid=*) uid=${a#sbx.uid=} ;; sbx.gid=*) gid=${a#sbx.gid=} ;; esac
		done
		# a port's name comes from the host after the driver binds: wait for it (up to 10 s)
		port= n=0
		while [ -z "$port" ] && [ $n -lt 100 ]; do
			for p in /sys/class/virtio-ports/*; do
				[ "$(cat "$p/name" 2>/dev/null)" = sandboxd.runner ] && port=/dev/${p##*/}
			done
			[ -n "$port" ] || [ -z "$uid" ] || { n=$((n + 1)); sleep 0.1; }
			[ -n "$uid" ] || break
		done
		echo "sandboxd-vm: init at $(cut -d' ' -f1 /proc/uptime) s; ports: $(ls /dev/vport* 2>/dev/null | tr '\n' ' ')"
		# the probe (no session's uid): nothing to run
		[ -n "$uid" ] && [ -n "$gid" ] && [ -n "$port" ] && [ -x /sandboxd-runner ] || poweroff -f
		mkdir -p /workspace /tmp /etc
		mount -t tmpfs -o nosuid,nodev,noexec,mode=1777 tmp /tmp
		if [ -b /dev/vda ]; then mount -t ext4 -o nosuid,nodev /dev/vda /workspace || poweroff -f; fi
		echo "sandbox:x:$uid:$gid::/workspace:/bin/sh" >/etc/passwd
		echo "sandbox:x:$gid:" >/etc/group
		ip link set lo up
		# QEMU can be killed at any time (stop, remove): dirty pages reach the disk within about 2 s
		echo 100 >/proc/sys/vm/dirty_expire_centisecs
		echo 100 >/proc/sys/vm/dirty_writeback_centisecs
		hostname sandbox
		cd /workspace
		export HOME=/workspace PATH=/bin
		# the runner is PID 1 from here: its death panics the guest and QEMU exits (-no-reboot)
		exec /sandboxd-runner --uid "$uid:$gid" "$port"
	EOF
	chmod 755 "$ir/init"
	(cd "$ir" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 >"$work/initrd.gz")
	install -m 0644 "$work/vmlinux" "$out/vmlinux"
	install -m 0644 "$work/initrd.gz" "$out/initrd.gz"
	echo "$stamp" >"$out/VERSION"
	log "built $out ($pkg $pkgver)"
fi
# where the daemon looks for the guest (engine_qemu.h ENGINE_QEMU_GUEST_DIR)
((default_out)) && ln -sfn "$ver" /var/cache/sandboxd-vm/current

if ((probe)); then
	need qemu-system-x86_64
	accel=tcg
	if [[ -r /dev/kvm && -w /dev/kvm ]]; then accel=kvm; fi
	sock=$work/chan.sock
	t0=$(date +%s%N)
	outp=$(timeout 120 qemu-system-x86_64 -M microvm,x-option-roms=off,rtc=off -accel "$accel" -cpu max \
		-m 256 -smp 1 -nodefaults -no-user-config -nographic -serial stdio -no-reboot \
		-kernel "$out/vmlinux" -initrd "$out/initrd.gz" \
		-append "console=ttyS0 quiet lpj=4000000 tsc_early_khz=2000000 panic=-1 reboot=t" \
		-device virtio-serial-device -chardev "socket,id=c0,path=$sock,server=on,wait=off" \
		-device virtserialport,chardev=c0,name=sandboxd.runner 2>&1) || true
	t1=$(date +%s%N)
	line=$(grep -a 'sandboxd-vm: init' <<<"$outp" || true)
	[[ -n $line ]] || { printf '%s\n' "$outp" | tail -20 >&2; log "probe: the guest never ran /init ($accel)"; exit 1; }
	grep -q vport <<<"$line" || { log "probe: no virtio-serial port in the guest: $line"; exit 1; }
	log "probe ($accel): ${line#*sandboxd-vm: }; boot to power-off $(((t1 - t0) / 1000000)) ms wall"
fi
