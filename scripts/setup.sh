#!/usr/bin/env bash
# setup.sh — make a Debian 12 machine ready to build, run and test sandboxd.
#
# Run as root. Idempotent: installs the apt packages that are missing, starts
# dockerd if nothing answers on the Docker socket, then builds the offline
# sandbox images (scripts/build-images.sh). When everything is already in
# place it only checks, which takes a second or two.
#
# Environment:
#   SANDBOXD_DOCKER_SOCKET  Docker socket to use (default /var/run/docker.sock)
#   SANDBOXD_SKIP_IMAGES=1  do not build the images
#
# Progress goes to stderr, so `scripts/run.sh mcp` keeps stdout clean.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SOCK=${SANDBOXD_DOCKER_SOCKET:-/var/run/docker.sock}
DOCKERD_LOG=/var/log/sandboxd-dockerd.log
DOCKERD_WAIT=${SANDBOXD_DOCKERD_WAIT:-60}

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "run as root (it installs packages and starts dockerd)"

# --- apt packages -----------------------------------------------------------

PACKAGES=(
	build-essential cmake pkg-config git clang-format
	libcurl4-openssl-dev libcjson-dev libsqlite3-dev sqlite3 libcriterion-dev
	docker.io iptables mmdebstrap mount busybox-static musl-tools e2fsprogs
	libmicrohttpd-dev libgnutls28-dev openssl
	libevent-dev libhttp-parser-dev libssl-dev libyaml-dev zlib1g-dev
	curl jq iproute2 procps ca-certificates python3
	systemd socat runsc tini libarchive-dev
	# the microVM runtime (docs/microvm.md): QEMU, and what scripts/build-vm.sh needs
	qemu-system-x86 lz4
	# the browser console's tests (tests/js/console.test.mjs, puppeteer-core)
	chromium
	# The Kubernetes testbed (scripts/k8s-testbed.sh): Go and the tools to
	# build Debian's kubernetes source package, etcd, the nodes' containerd
	# and runc, the loopback CNI plugin.
	golang-1.19-go golang-github-modern-go-reflect2-dev rsync dpkg-dev
	etcd-server containerd runc containernetworking-plugins
)
# Node may come from elsewhere (e.g. nodesource, whose nodejs bundles npm);
# installing Debian's on top would conflict, so only add what is not on PATH.
command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

missing=()
for pkg in "${PACKAGES[@]}"; do
	status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
	[[ $status == ii* ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	own_policy=0
	if [[ ! -d /run/systemd/system && ! -e /usr/sbin/policy-rc.d ]]; then
		# Without systemd, docker.io's postinst runs /etc/init.d/docker, which
		# fails in many VMs and containers and then fails the whole install.
		# Keep services from starting during the install; dockerd is started
		# below, the same way everywhere.
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 0755 /usr/sbin/policy-rc.d
		own_policy=1
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	apt-get update -q >&2
	apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
	if ((own_policy)); then
		rm -f /usr/sbin/policy-rc.d
		trap - EXIT
	fi
else
	log "apt packages present"
fi

# --- dockerd ----------------------------------------------------------------

docker_ping() {
	[[ $(curl -s --max-time 3 --unix-socket "$SOCK" http://d/_ping 2>/dev/null) == OK ]]
}

dockerd_running() {
	local pid
	[[ -r /var/run/docker.pid ]] || return 1
	pid=$(cat /var/run/docker.pid 2>/dev/null) || return 1
	[[ -n $pid && -d /proc/$pid ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]]
}

if docker_ping; then
	log "dockerd answers on $SOCK"
else
	if ! grep -q '^[^ ]* /sys/fs/cgroup' /proc/mounts; then
		# No init mounted any cgroup hierarchy; dockerd needs one.
		log "mounting cgroup2 on /sys/fs/cgroup"
		mount -t cgroup2 cgroup2 /sys/fs/cgroup
	fi
	if dockerd_running; then
		# Started (by us or an init script) but not answering yet: wait, do not
		# start a second daemon that would fight over /var/lib/docker.
		log "dockerd is starting (pid $(cat /var/run/docker.pid)), waiting"
	elif [[ -d /run/systemd/system && $SOCK == /var/run/docker.sock ]] &&
		systemctl start docker.service >&2; then
		log "started docker.service"
	else
		log "starting dockerd (log: $DOCKERD_LOG)"
		# No containerd is started here: docker.io's dockerd runs its own
		# when none listens on /run/containerd/containerd.sock.
		# setsid + nohup: the daemon must outlive this script and its shell.
		setsid nohup dockerd -H "unix://$SOCK" >>"$DOCKERD_LOG" 2>&1 </dev/null &
	fi
	for ((i = 0; i < DOCKERD_WAIT * 2; i++)); do
		docker_ping && break
		sleep 0.5
	done
	docker_ping || die "dockerd did not answer on $SOCK within ${DOCKERD_WAIT}s; see $DOCKERD_LOG"
	log "dockerd is up"
fi

# --- gVisor (runsc) as a Docker runtime -------------------------------------
# Sessions of users whose policy says `runtime = runsc` run under gVisor. The
# runtime is registered in /etc/docker/daemon.json (other keys kept) and dockerd
# reloads it on SIGHUP: runtimes are among the options it reloads, so running
# containers are untouched and dockerd is never restarted. --host-uds=open lets
# a sandbox connect() to a unix socket the daemon listens on in a bind mount (the
# session directory); gVisor refuses host sockets by default. --network=none:
# gVisor's own loopback only. With sandbox networking, Debian 12's runsc under
# docker.io 20.10 fails every start here ("cannot run with network enabled in
# root network namespace"), and sandboxd seals runsc sessions anyway.

DAEMON_JSON=/etc/docker/daemon.json
RUNSC_ENTRY='{"path":"/usr/bin/runsc","runtimeArgs":["--host-uds=open","--network=none"]}'

register_runsc() {
	local cur new pid changed=0
	if [[ -s $DAEMON_JSON ]]; then
		cur=$(jq -c . "$DAEMON_JSON") || {
			log "warning: $DAEMON_JSON is not valid JSON; runsc not registered"
			return 0
		}
	else
		cur='{}'
	fi
	new=$(jq -c --argjson e "$RUNSC_ENTRY" '.runtimes.runsc = $e' <<<"$cur")
	if [[ $new != "$cur" ]]; then
		mkdir -p "$(dirname "$DAEMON_JSON")"
		jq . <<<"$new" >"$DAEMON_JSON.tmp" && mv "$DAEMON_JSON.tmp" "$DAEMON_JSON"
		log "registered runsc in $DAEMON_JSON"
		changed=1
	fi
	if ((changed)) || ! curl -s --max-time 5 --unix-socket "$SOCK" http://d/info | jq -e '.Runtimes.runsc' >/dev/null; then
		pid=$(cat /var/run/docker.pid 2>/dev/null || true)
		if [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]]; then
			log "reloading dockerd's runtimes (SIGHUP to $pid)"
			kill -HUP "$pid"
			for ((i = 0; i < 40; i++)); do
				curl -s --max-time 5 --unix-socket "$SOCK" http://d/info |
					jq -e --argjson e "$RUNSC_ENTRY" '.Runtimes.runsc == $e' >/dev/null && break
				sleep 0.25
			done
		fi
		curl -s --max-time 5 --unix-socket "$SOCK" http://d/info | jq -e '.Runtimes.runsc' >/dev/null ||
			log "warning: dockerd does not list the runsc runtime; sessions with runtime = runsc will be refused"
	fi
}
if [[ $SOCK == /var/run/docker.sock ]]; then
	register_runsc
fi

# --- sandbox_uid_range ------------------------------------------------------
# Every session runs as a host uid (and gid) of its own from sandbox_uid_range
# (docs/security.md, "A host uid per session"). No host account, group or subordinate-id
# range may hold one of them: the daemon refuses to start otherwise, and
# `sandboxd --check-config` says the same. The range is the config's (the
# environment's SANDBOXD_SANDBOX_UID_RANGE, else an installed sandboxd.conf),
# or the default.

uid_range() {
	local r=${SANDBOXD_SANDBOX_UID_RANGE:-} f
	if [[ -z $r ]]; then
		for f in /etc/sandboxd/sandboxd.conf /usr/local/etc/sandboxd/sandboxd.conf; do
			[[ -r $f ]] || continue
			r=$(sed -n 's/^[[:space:]]*sandbox_uid_range[[:space:]]*=[[:space:]]*"\{0,1\}\([0-9]*-[0-9]*\).*/\1/p' "$f" | tail -n 1)
			[[ -n $r ]] && break
		done
	fi
	echo "${r:-200000-299999}"
}

check_uid_range() {
	local range lo hi clash='' f
	range=$(uid_range)
	lo=${range%-*}
	hi=${range#*-}
	[[ $lo =~ ^[0-9]+$ && $hi =~ ^[0-9]+$ ]] || die "sandbox_uid_range '$range' is not LOW-HIGH"
	clash=$(getent passwd | awk -F: -v lo="$lo" -v hi="$hi" \
		'$3 + 0 >= lo + 0 && $3 + 0 <= hi + 0 { print "uid " $3 " of the account " $1 " (passwd)"; exit }')
	[[ -n $clash ]] || clash=$(getent group | awk -F: -v lo="$lo" -v hi="$hi" \
		'$3 + 0 >= lo + 0 && $3 + 0 <= hi + 0 { print "gid " $3 " of the group " $1 " (group)"; exit }')
	for f in /etc/subuid /etc/subgid; do
		[[ -z $clash && -r $f ]] || continue
		clash=$(awk -F: -v lo="$lo" -v hi="$hi" '$2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ && $3 > 0 &&
			$2 + 0 <= hi + 0 && $2 + $3 - 1 >= lo + 0 {
				print "subordinate ids " $2 "-" ($2 + $3 - 1) " of " $1 " (" FILENAME ")"; exit }' "$f")
	done
	[[ -z $clash ]] || die "sandbox_uid_range $range holds the $clash: set sandbox_uid_range to a range no host account, group or subordinate-id range uses"
	log "sandbox_uid_range $range: held by no host account, group or subordinate-id range"
}
check_uid_range

# --- images -----------------------------------------------------------------

if [[ ${SANDBOXD_SKIP_IMAGES:-0} != 1 ]]; then
	bash "$ROOT/scripts/build-images.sh"
	# the microVM guest: kernel and initramfs, cached (seconds when up to date)
	bash "$ROOT/scripts/build-vm.sh" || log "warning: no microVM guest (runtime microvm unavailable)"
fi
