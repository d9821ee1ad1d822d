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
#   VERSION       the kernel package's version
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
# Not done yet (issue 38): the runner inside (it speaks over a unix socket;
# the guest has /dev/vportNpM), the session's ext4 image on virtio-blk as
# /workspace, the image's root file system, the QEMU jail (uid, -sandbox
# on, cgroup, mount namespace), the engine behind the seam.
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
out=${out:-/var/cache/sandboxd-vm/$ver}
pkgver=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
if ((!force)) && [[ -f $out/VERSION && $(cat "$out/VERSION") == "$pkgver" && -s $out/vmlinux && -s $out/initrd.gz ]]; then
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
		echo "sandboxd-vm: init at $(cut -d' ' -f1 /proc/uptime) s; ports: $(ls /dev/vport* 2>/dev/null | tr '\n' ' ')"
		poweroff -f
	EOF
	chmod 755 "$ir/init"
	(cd "$ir" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 >"$work/initrd.gz")
	install -m 0644 "$work/vmlinux" "$out/vmlinux"
	install -m 0644 "$work/initrd.gz" "$out/initrd.gz"
	echo "$pkgver" >"$out/VERSION"
	log "built $out ($pkg $pkgver)"
fi

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
		-device virtserialport,chardev=c0,name=runner 2>&1) || true
	t1=$(date +%s%N)
	line=$(grep -a 'sandboxd-vm: init' <<<"$outp" || true)
	[[ -n $line ]] || { printf '%s\n' "$outp" | tail -20 >&2; log "probe: the guest never ran /init ($accel)"; exit 1; }
	grep -q vport <<<"$line" || { log "probe: no virtio-serial port in the guest: $line"; exit 1; }
	log "probe ($accel): ${line#*sandboxd-vm: }; boot to power-off $(((t1 - t0) / 1000000)) ms wall"
fi
