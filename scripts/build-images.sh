#!/usr/bin/env bash
# build-images.sh — build sandboxd's sandbox images, offline.
#
# No container registry is reachable, so nothing is pulled:
#   sandboxd/test:latest    FROM scratch + the host's static busybox.
#   sandboxd/python:latest  a Debian rootfs made by mmdebstrap from the host's
#                           own apt sources (scripts/host-apt-sources.sh),
#                           loaded with `docker import` as
#                           sandboxd/base-python:<hash>, then
#                           images/python/Dockerfile on top.
#   sandboxd/daemon:latest  the control daemon and node agent for
#                           deploy/kubernetes/: a minimal Debian root
#                           (mmdebstrap, variant essential) with only the
#                           packages holding the libraries `ldd` finds for
#                           sandboxd and sandboxctl, and tini; imported as
#                           sandboxd/base-daemon:<hash>, then
#                           images/daemon/Dockerfile adds this build's
#                           sandboxd, sandboxctl and sandboxd-runner.
# Every image carries the label sandboxd.recipe=<sha256 of its recipe>: the
# Dockerfile, the package list and mmdebstrap parameters, the apt sources,
# the build function's own text (declare -f) and, for test, the busybox
# binary, for daemon the three binaries. When an image with that label exists the build is skipped and
# :latest is only re-tagged onto it.
#
# Usage: build-images.sh [--only test|python|daemon] [--force] [--check]
#   --force  rebuild even when the recipe is unchanged
#   --check  afterwards, run each image under the hardened settings sandboxd
#            uses and check that the tools it needs work
# Without --only, daemon is built only when the binaries are there (a build
# in SANDBOXD_BUILD_DIR); --only daemon fails without them.
#
# Environment: SANDBOXD_BUILD_DIR (default build/: the binaries for daemon),
#              SANDBOXD_DOCKER_SOCKET (default /var/run/docker.sock),
#              SANDBOXD_DOCKER_CLI (default /usr/bin/docker from docker.io).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SOCK=${SANDBOXD_DOCKER_SOCKET:-/var/run/docker.sock}
export DOCKER_HOST=unix://$SOCK
# The classic builder: it needs no buildx plugin and honours --network none.
export DOCKER_BUILDKIT=0
if [[ -n ${SANDBOXD_DOCKER_CLI:-} ]]; then
	DOCKER=$SANDBOXD_DOCKER_CLI
elif [[ -x /usr/bin/docker ]]; then
	# docker.io's own client, matching the daemon; another docker earlier on
	# PATH may be a newer CLI that wants buildx for `docker build`.
	DOCKER=/usr/bin/docker
else
	DOCKER=docker
fi

TEST_REF=sandboxd/test:latest
PYTHON_REF=sandboxd/python:latest
PYTHON_BASE_REPO=sandboxd/base-python
DAEMON_REF=sandboxd/daemon:latest
DAEMON_BASE_REPO=sandboxd/base-daemon
BUILD_DIR=${SANDBOXD_BUILD_DIR:-$ROOT/build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
# The daemon's root: dpkg, coreutils and the shell come with essential (the
# init container's `install`); the libraries are found at build time
# (daemon_lib_packages), tini brings tini-static.
DAEMON_VARIANT=essential
DAEMON_EXTRA_PACKAGES=(tini)
DAEMON_UID=10001

# The python rootfs. passwd is for useradd in the Dockerfile. python3-munkres
# satisfies python3-fonttools' "python3-scipy | python3-munkres" (fonttools
# comes with matplotlib): scipy would bring pythran, g++ and boost, ~600 MB.
# ipykernel and jupyter-client run run_cell's contexts (issue 25, kernel
# bridge in src/cells/); matplotlib-inline returns open figures as PNG.
PYTHON_PACKAGES=(
	python3 python3-pip python3-numpy python3-pandas python3-matplotlib
	python3-munkres
	python3-ipykernel python3-jupyter-client python3-matplotlib-inline
	nodejs bash coreutils procps iproute2 lsof ca-certificates passwd curl
)
PYTHON_VARIANT=minbase
# apt installs Recommends by default inside mmdebstrap too; here they would
# pull a compiler and boost (python3-pip -> build-essential, scipy -> pythran).
PYTHON_APTOPTS=('Apt::Install-Recommends "false"')
PYTHON_DPKGOPTS=(
	'path-exclude=/usr/share/man/*'
	'path-exclude=/usr/share/info/*'
	'path-exclude=/usr/share/doc/*'
	'path-include=/usr/share/doc/*/copyright'
	'path-exclude=/usr/share/locale/*'
	'path-include=/usr/share/locale/locale.alias'
)

log() { printf 'images: %s\n' "$*" >&2; }
die() { printf 'images: error: %s\n' "$*" >&2; exit 1; }

usage() {
	sed -n 's/^# \{0,1\}//; /^Usage:/,/^$/p' "${BASH_SOURCE[0]}" | sed '$d' >&2
	exit "${1:-2}"
}

only=
force=0
check=0
while (($#)); do
	case $1 in
	--only)
		[[ ${2:-} == test || ${2:-} == python || ${2:-} == daemon ]] || usage
		only=$2
		shift 2
		;;
	--only=test | --only=python | --only=daemon) only=${1#--only=}; shift ;;
	--force) force=1; shift ;;
	--check) check=1; shift ;;
	-h | --help) usage 0 ;;
	*) usage ;;
	esac
done

[[ $(curl -s --max-time 3 --unix-socket "$SOCK" http://d/_ping 2>/dev/null) == OK ]] ||
	die "no dockerd on $SOCK (scripts/setup.sh starts one)"

WORK=$(mktemp -d /var/tmp/sandboxd-images.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

sha256() { sha256sum | cut -d' ' -f1; }
now() { printf '%s' "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }

# The image carrying sandboxd.recipe=HASH (full id), or nothing.
image_by_recipe() {
	local ids
	ids=$("$DOCKER" images -q --no-trunc --filter "label=sandboxd.recipe=$1")
	printf '%s' "${ids%%$'\n'*}"
}

# Point REF at image ID unless it already does.
retag() {
	local id=$1 ref=$2 cur
	cur=$("$DOCKER" image inspect -f '{{.Id}}' "$ref" 2>/dev/null || true)
	if [[ $cur != "$id" ]]; then
		"$DOCKER" tag "$id" "$ref"
		log "$ref -> ${id#sha256:}"
		drop_superseded "$cur"
	fi
}

# Skip when the recipe's image exists; say so and retag. Returns 0 to skip.
reuse() {
	local name=$1 hash=$2 ref=$3 id
	((force)) && return 1
	id=$(image_by_recipe "$hash")
	[[ -n $id ]] || return 1
	retag "$id" "$ref"
	log "$name: up to date (recipe ${hash:0:12})"
	return 0
}

# After a rebuild: remove the image REF pointed at before, if nothing else
# names or uses it (docker refuses while a container uses it; that is fine).
drop_superseded() {
	local old=$1 tags
	[[ -n $old ]] || return 0
	tags=$("$DOCKER" image inspect -f '{{len .RepoTags}}' "$old" 2>/dev/null || echo 1)
	[[ $tags == 0 ]] && "$DOCKER" rmi "$old" >/dev/null 2>&1 || true
}

# Remove base images of older recipes (python, daemon); the current one stays.
drop_old_bases() {
	local keep=$1 repo=${2:-$PYTHON_BASE_REPO} ref
	while IFS= read -r ref; do
		[[ $ref == "$keep" ]] || "$DOCKER" rmi "$ref" >/dev/null 2>&1 || true
	done < <("$DOCKER" images --format '{{.Repository}}:{{.Tag}}' "$repo")
}

busybox_path() {
	local p
	p=$(dpkg -L busybox-static 2>/dev/null | awk '/\/bin\/busybox$/ { print; exit }')
	[[ -n $p && -x $p ]] || die "busybox-static is not installed (scripts/setup.sh installs it)"
	printf '%s' "$p"
}

build_test() {
	local dir=$WORK/test hash t0 old
	mkdir -p "$dir"
	cp "$ROOT/images/test/Dockerfile" "$dir/Dockerfile"
	cp "$(busybox_path)" "$dir/busybox"
	chmod 0755 "$dir/busybox"
	hash=$({
		echo "sandboxd/test"
		cat "$dir/Dockerfile"
		sha256sum <"$dir/busybox"
		declare -f build_test
	} | sha256)
	reuse test "$hash" "$TEST_REF" && return 0

	log "test: building (recipe ${hash:0:12})"
	t0=$(now)
	old=$("$DOCKER" image inspect -f '{{.Id}}' "$TEST_REF" 2>/dev/null || true)
	"$DOCKER" build --network none --force-rm --quiet \
		--label "sandboxd.recipe=$hash" -t "$TEST_REF" "$dir" >/dev/null
	drop_superseded "$old"
	log "test: built in $(since "$t0")"
}

# The apt options of the host that decide whether its mirror is usable at all
# (an archive snapshot's Release files may be past Valid-Until; a proxy).
# They do not change what gets installed, so they stay out of the recipe.
host_aptopts() {
	local key val
	for key in Acquire::Check-Valid-Until Acquire::Check-Date \
		Acquire::http::Proxy Acquire::https::Proxy; do
		val=
		eval "$(apt-config shell val "$key")"
		[[ -n $val ]] && printf '%s "%s";\n' "$key" "$val"
	done
	return 0
}

# Print the base image ref for the python image, building it if needed.
build_python_base() {
	local hash ref codename t0 tar sources=() aptopts=() dpkgopts=() opt
	codename=$(. /etc/os-release && printf '%s' "$VERSION_CODENAME")
	mapfile -t sources < <(bash "$ROOT/scripts/host-apt-sources.sh" "$WORK/apt")
	((${#sources[@]})) || die "no usable apt sources on this host"
	hash=$({
		echo "sandboxd/base-python $codename $PYTHON_VARIANT"
		printf '%s\n' "${PYTHON_PACKAGES[@]}" "${PYTHON_APTOPTS[@]}" "${PYTHON_DPKGOPTS[@]}"
		cat "${sources[@]}"
		declare -f build_python_base
	} | sha256)
	ref=$PYTHON_BASE_REPO:$hash
	if ((!force)) && "$DOCKER" image inspect "$ref" >/dev/null 2>&1; then
		log "python: base $PYTHON_BASE_REPO:${hash:0:12} present"
		printf '%s' "$ref"
		return 0
	fi

	for opt in "${PYTHON_DPKGOPTS[@]}"; do dpkgopts+=("--dpkgopt=$opt"); done
	for opt in "${PYTHON_APTOPTS[@]}"; do aptopts+=("--aptopt=$opt"); done
	while IFS= read -r opt; do aptopts+=("--aptopt=$opt"); done < <(host_aptopts)
	log "python: mmdebstrap $codename ($PYTHON_VARIANT) from $(printf '%s ' "${sources[@]##*/}")"
	t0=$(now)
	tar=$WORK/python-rootfs.tar
	# Lists and caches are dead weight in a read-only sandbox.
	mmdebstrap --mode=root --variant="$PYTHON_VARIANT" --format=tar \
		--include="$(IFS=,; printf '%s' "${PYTHON_PACKAGES[*]}")" \
		"${dpkgopts[@]}" "${aptopts[@]}" \
		--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/log/apt "$1"/var/log/*.log' \
		"$codename" "$tar" "${sources[@]}" >&2
	log "python: rootfs $(du -h "$tar" | cut -f1) in $(since "$t0"), importing"
	# Import from a finished file, never a pipe: a failed mmdebstrap must not
	# leave a truncated rootfs behind a tag that the next run would trust.
	"$DOCKER" import --change "LABEL sandboxd.base-recipe=$hash" \
		--message "sandboxd python base, mmdebstrap $codename" "$tar" "$ref" >/dev/null
	rm -f "$tar"
	log "python: base $PYTHON_BASE_REPO:${hash:0:12} ready after $(since "$t0")"
	printf '%s' "$ref"
}

build_python() {
	local base hash t0 old dir
	t0=$(now)
	base=$(build_python_base)
	hash=$({
		echo "sandboxd/python"
		cat "$ROOT/images/python/Dockerfile" "$ROOT/images/python/sbx-statx.c"
		echo "$base"
		declare -f build_python
	} | sha256)
	reuse python "$hash" "$PYTHON_REF" && return 0

	log "python: building (recipe ${hash:0:12})"
	dir=$WORK/python
	mkdir -p "$dir"
	cp "$ROOT/images/python/Dockerfile" "$dir/Dockerfile"
	# the host's glibc is the image's (both Debian 12): built here, the image has no compiler
	gcc -O2 -Wall -Werror -shared -fPIC -o "$dir/sbx-statx.so" "$ROOT/images/python/sbx-statx.c"
	old=$("$DOCKER" image inspect -f '{{.Id}}' "$PYTHON_REF" 2>/dev/null || true)
	"$DOCKER" build --network none --force-rm --quiet \
		--build-arg "BASE=$base" \
		--label "sandboxd.recipe=$hash" -t "$PYTHON_REF" "$dir" >/dev/null
	drop_superseded "$old"
	drop_old_bases "$base"
	log "python: built in $(since "$t0")"
}

daemon_binaries() {
	local b
	for b in sandboxd sandboxctl sandboxd-runner; do
		[[ -x $BUILD_DIR/$b ]] || return 1
	done
}

# The Debian packages (one a line, sorted) that hold every shared library
# the loader maps for sandboxd and sandboxctl on this host: derived from
# ldd, never listed by hand, so a new dependency comes with the next build.
# sandboxd-runner is static (the sandbox images run it) and needs none.
daemon_lib_packages() {
	local lib pkg
	ldd "$BUILD_DIR/sandboxd" "$BUILD_DIR/sandboxctl" |
		awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(0x/ { print $1 }' | sort -u |
		while IFS= read -r lib; do
			pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null) ||
				die "no Debian package holds $lib (sandboxd links against it)"
			printf '%s\n' "${pkg%%:*}"
		done | sort -u
}

# Print the base image ref for the daemon image, building it if needed.
build_daemon_base() {
	local hash ref codename t0 tar sources=() aptopts=() dpkgopts=() packages=() opt libs
	codename=$(. /etc/os-release && printf '%s' "$VERSION_CODENAME")
	libs=$(daemon_lib_packages) || die "cannot tell the packages of sandboxd's libraries"
	[[ -n $libs ]] || die "ldd found no library for sandboxd"
	mapfile -t packages <<<"$libs"
	packages+=("${DAEMON_EXTRA_PACKAGES[@]}")
	mapfile -t sources < <(bash "$ROOT/scripts/host-apt-sources.sh" "$WORK/apt")
	((${#sources[@]})) || die "no usable apt sources on this host"
	hash=$({
		echo "sandboxd/base-daemon $codename $DAEMON_VARIANT $DAEMON_UID"
		printf '%s\n' "${packages[@]}" "${PYTHON_APTOPTS[@]}" "${PYTHON_DPKGOPTS[@]}"
		cat "${sources[@]}"
		declare -f build_daemon_base daemon_lib_packages
	} | sha256)
	ref=$DAEMON_BASE_REPO:$hash
	if ((!force)) && "$DOCKER" image inspect "$ref" >/dev/null 2>&1; then
		log "daemon: base $DAEMON_BASE_REPO:${hash:0:12} present"
		printf '%s' "$ref"
		return 0
	fi

	for opt in "${PYTHON_DPKGOPTS[@]}"; do dpkgopts+=("--dpkgopt=$opt"); done
	for opt in "${PYTHON_APTOPTS[@]}"; do aptopts+=("--aptopt=$opt"); done
	while IFS= read -r opt; do aptopts+=("--aptopt=$opt"); done < <(host_aptopts)
	log "daemon: mmdebstrap $codename ($DAEMON_VARIANT) + ${packages[*]}"
	t0=$(now)
	tar=$WORK/daemon-rootfs.tar
	# The user the control daemon runs as, without the passwd package; no
	# apt lists, caches or logs in a read-only root.
	mmdebstrap --mode=root --variant="$DAEMON_VARIANT" --format=tar \
		--include="$(IFS=,; printf '%s' "${packages[*]}")" \
		"${dpkgopts[@]}" "${aptopts[@]}" \
		--customize-hook="echo 'sandboxd:x:$DAEMON_UID:$DAEMON_UID:sandboxd:/var/lib/sandboxd:/usr/sbin/nologin' >>\"\$1/etc/passwd\"" \
		--customize-hook="echo 'sandboxd:x:$DAEMON_UID:' >>\"\$1/etc/group\"" \
		--customize-hook="mkdir -p \"\$1/var/lib/sandboxd\" && chown $DAEMON_UID:$DAEMON_UID \"\$1/var/lib/sandboxd\" && chmod 0700 \"\$1/var/lib/sandboxd\"" \
		--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/log/apt "$1"/var/log/*.log' \
		"$codename" "$tar" "${sources[@]}" >&2
	log "daemon: rootfs $(du -h "$tar" | cut -f1) in $(since "$t0"), importing"
	"$DOCKER" import --change "LABEL sandboxd.base-recipe=$hash" \
		--message "sandboxd daemon base, mmdebstrap $codename" "$tar" "$ref" >/dev/null
	rm -f "$tar"
	log "daemon: base $DAEMON_BASE_REPO:${hash:0:12} ready after $(since "$t0")"
	printf '%s' "$ref"
}

build_daemon() {
	local base hash t0 old dir=$WORK/daemon b
	if ! daemon_binaries; then
		[[ $only == daemon ]] && die "no sandboxd, sandboxctl and sandboxd-runner in $BUILD_DIR (build first, or set SANDBOXD_BUILD_DIR)"
		log "daemon: skipped, no build in $BUILD_DIR (build-images.sh --only daemon after building)"
		return 0
	fi
	t0=$(now)
	base=$(build_daemon_base)
	mkdir -p "$dir"
	cp "$ROOT/images/daemon/Dockerfile" "$dir/Dockerfile"
	for b in sandboxd sandboxctl sandboxd-runner; do
		install -m 0755 "$BUILD_DIR/$b" "$dir/$b"
	done
	hash=$({
		echo "sandboxd/daemon"
		cat "$dir/Dockerfile"
		echo "$base"
		(cd "$dir" && sha256sum sandboxd sandboxctl sandboxd-runner)
		declare -f build_daemon
	} | sha256)
	reuse daemon "$hash" "$DAEMON_REF" && return 0

	log "daemon: building (recipe ${hash:0:12})"
	old=$("$DOCKER" image inspect -f '{{.Id}}' "$DAEMON_REF" 2>/dev/null || true)
	"$DOCKER" build --network none --force-rm --quiet \
		--build-arg "BASE=$base" \
		--label "sandboxd.recipe=$hash" -t "$DAEMON_REF" "$dir" >/dev/null
	drop_superseded "$old"
	drop_old_bases "$base" "$DAEMON_BASE_REPO"
	log "daemon: built in $(since "$t0")"
}

# Run as a session's container runs: read-only root, no capabilities, no
# privilege gain, uid 1000, an init, no network.
check_image() {
	local ref=$1
	shift
	"$DOCKER" run --rm --network none --read-only --tmpfs /tmp:rw,noexec,nosuid,size=64m \
		--cap-drop ALL --security-opt no-new-privileges:true --user 1000:1000 --init \
		"$ref" "$@"
}

check_images() {
	if [[ -z $only || $only == daemon ]] && "$DOCKER" image inspect "$DAEMON_REF" >/dev/null 2>&1; then
		# every library loads (the version banner needs them all mapped), as uid 10001,
		# and the binaries the node agent hands to the sandbox Pods are there
		log "check: $DAEMON_REF"
		"$DOCKER" run --rm --network none --read-only --cap-drop ALL \
			--security-opt no-new-privileges:true "$DAEMON_REF" --version | grep -q '^sandboxd ' ||
			die "$DAEMON_REF failed its check (sandboxd --version)"
		"$DOCKER" run --rm --network none --read-only --cap-drop ALL --entrypoint /bin/sh "$DAEMON_REF" -c '
			set -e
			[ "$(id -u)" = 10001 ]
			sandboxctl --help >/dev/null
			test -x /usr/bin/sandboxd-runner && test -x /usr/bin/tini-static' >&2 ||
			die "$DAEMON_REF failed its check"
	fi
	if [[ $only == daemon ]]; then
		log "check: ok"
		return 0
	fi
	if [[ $only != python ]]; then
		log "check: $TEST_REF"
		[[ $(check_image "$TEST_REF" sh -c 'id -u; echo ok') == $'1000\nok' ]] || die "$TEST_REF failed its check"
	fi
	if [[ $only != test ]]; then
		log "check: $PYTHON_REF"
		check_image "$PYTHON_REF" bash -c '
			set -e
			[ "$(id -u)" = 1000 ] && [ "$HOME" = /workspace ] && [ "$PWD" = /workspace ]
			python3 -c "import numpy, pandas, matplotlib, ipykernel, jupyter_client, matplotlib_inline; print(\"python\", numpy.__version__, pandas.__version__, matplotlib.__version__)"
			node -e "console.log(\"node\", process.version)"
			lsof -v 2>&1 | grep -q revision
			ss -V
			ps -o pid,comm >/dev/null' >&2 || die "$PYTHON_REF failed its check"
	fi
	log "check: ok"
}

[[ -n $only && $only != test ]] || build_test
[[ -n $only && $only != python ]] || build_python
[[ -n $only && $only != daemon ]] || build_daemon
((!check)) || check_images
