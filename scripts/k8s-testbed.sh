#!/usr/bin/env bash
# k8s-testbed.sh — a two-node Kubernetes cluster on loopback, for the tests.
#
#   k8s-testbed.sh build    download Debian's `kubernetes` source package and
#                           build kube-apiserver, kube-scheduler,
#                           kube-controller-manager and kubelet offline with
#                           golang-1.19-go; the binaries are cached under
#                           $K8S_TESTBED_CACHE/<package version>/bin, so a
#                           second build is a no-op.
#   k8s-testbed.sh start    build (if needed), then start etcd, the API server
#                           (HTTPS, 127.0.0.1 only), the scheduler, the
#                           controller manager and two kubelets, `localhost`
#                           and `127.0.0.2`, each with a private containerd
#                           (CRI on). Waits, with deadlines, until both nodes
#                           are Ready. Prints the kubeconfig path.
#   k8s-testbed.sh stop     stop everything, unmount what is left, restore the
#                           host settings the kubelets changed (sysctls),
#                           remove the state, then compare the host with what
#                           start saw, and fail if it differs.
#   k8s-testbed.sh status   what runs, and the nodes (exit 0: all of it runs).
#   k8s-testbed.sh env      print `export KUBECONFIG=...` for eval.
#   k8s-testbed.sh import-docker-image IMAGE...
#                           copy images from dockerd into both nodes.
#   k8s-testbed.sh kubelet-stop NODE, kubelet-start NODE
#                           stop one node's kubelet (its containers run on: a
#                           lost node), start it again and wait until Ready.
#
# Everything lives outside the repository: state in $K8S_TESTBED_STATE
# (default /run/sandboxd-k8s), binaries in $K8S_TESTBED_CACHE (default
# /var/cache/sandboxd-k8s). The containerd that serves dockerd is never
# touched: each node has its own containerd with its own root, state and
# socket, and runs with its kubelet in a mount namespace of its own. Pods get
# only `lo`: the CNI plugin (tests/k8s/cni-placeholder.c) reports a
# placeholder address and sets nothing up.
#
# Host quirks handled here (see docs/testing.md, "The Kubernetes testbed"):
#   - root lacks CAP_SYS_RESOURCE in this VM, so runc cannot write the pause
#     container's oom_score_adj: containerd runs with
#     restrict_oom_score_adj = true;
#   - containerd refuses a loopback-only CNI config: the placeholder plugin;
#   - kubelet sets vm.overcommit_memory, kernel.panic and
#     kernel.panic_on_oops (and checks three more): start saves them, stop
#     writes them back.
#
# Environment:
#   K8S_TESTBED_STATE   state directory (default /run/sandboxd-k8s)
#   K8S_TESTBED_CACHE   binary cache (default /var/cache/sandboxd-k8s)
#   K8S_TESTBED_WAIT    seconds to wait for each readiness step (default 120)
#   K8S_TESTBED_GO      Go toolchain bin directory (default /usr/lib/go-1.19/bin)
#   K8S_TESTBED_REFRESH=1  build: look for a newer source package even when a
#                       build is cached (otherwise build touches no network)
#   K8S_TESTBED_PORT_OFFSET  added to every port (default 0: the API server on
#                       6443, etcd 23790 and 23800, the scheduler 10259, the
#                       controller manager 10257, the kubelets 10250 and
#                       10248): with another K8S_TESTBED_STATE and an offset
#                       that is a multiple of 100, a second testbed can run
#                       beside the first
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${K8S_TESTBED_STATE:-/run/sandboxd-k8s}
CACHE=${K8S_TESTBED_CACHE:-/var/cache/sandboxd-k8s}
WAIT=${K8S_TESTBED_WAIT:-120}
GOBIN_DIR=${K8S_TESTBED_GO:-/usr/lib/go-1.19/bin}
# The build recipe's revision: a cached build of another revision is rebuilt.
RECIPE=2
# The reflect2 Kubernetes 1.20 vendors (1.0.1) crashes the binaries built by
# Go 1.18 and later ("fatal error: fault" in mapiterinit); Debian's 1.0.2
# replaces it.
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
COMPONENTS=(kube-apiserver kube-scheduler kube-controller-manager kubelet)

log() { printf 'k8s-testbed: %s\n' "$*" >&2; }
die() { printf 'k8s-testbed: error: %s\n' "$*" >&2; exit 1; }

need_root() { [[ $(id -u) -eq 0 ]] || die "run as root"; }

# --- build ------------------------------------------------------------------

# cached_bin_dir: the newest complete build in the cache, or nothing.
cached_bin_dir() {
	local d best=
	shopt -s nullglob
	for d in "$CACHE"/*/; do
		[[ -f $d/complete && $(cat "$d/complete") == "$RECIPE" ]] && best=${d%/}/bin
	done
	shopt -u nullglob
	[[ -n $best ]] && printf '%s\n' "$best"
}

# apt_private WORK TOOL ARGS...: apt-get or apt-cache with a private source list and lists
# directory under WORK, so the host's apt state is not changed.
apt_private() {
	local work=$1 tool=$2
	shift 2
	"$tool" -q \
		-o Dir::Etc::SourceList=/dev/null \
		-o Dir::Etc::SourceParts="$work/sources.list.d" \
		-o Dir::State::Lists="$work/lists" \
		-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= \
		-o APT::Sandbox::User=root \
		"$@"
}

# In a subshell: its EXIT trap removes the download directory.
cmd_build() (
	need_root
	mkdir -p "$CACHE"
	# One build at a time (a second waits, then finds the first's result).
	exec 9>"$CACHE/.lock"
	flock 9
	local cached
	cached=$(cached_bin_dir || true)
	if [[ -n $cached && ${K8S_TESTBED_REFRESH:-0} != 1 ]]; then
		log "using the cached build $cached (K8S_TESTBED_REFRESH=1 looks for a newer package)"
		return 0
	fi
	for tool in "$GOBIN_DIR/go" rsync make dpkg-source apt-get; do
		command -v "$tool" >/dev/null || die "$tool missing (scripts/setup.sh installs golang-1.19-go, rsync, dpkg-dev)"
	done
	local work
	work=$(mktemp -d "$CACHE/.fetch.XXXXXX")
	# The generated source list names the host's mirror: it stays in this
	# temporary directory and is removed with it.
	trap 'rm -rf "$work"' EXIT
	mkdir -p "$work/sources.list.d" "$work/lists/partial" "$work/host"
	local f
	while read -r f; do
		case $f in
		*.sources) sed 's/^Types: deb$/Types: deb-src/' "$f" >"$work/sources.list.d/host-src.sources" ;;
		*.list) sed 's/^deb\([[:space:]]\)/deb-src\1/' "$f" >"$work/sources.list.d/host-src.list" ;;
		esac
	done < <(bash "$ROOT/scripts/host-apt-sources.sh" "$work/host")
	rm -rf "$work/host"

	local version=
	if apt_private "$work" apt-get update >"$work/update.log" 2>&1; then
		version=$(apt_private "$work" apt-cache showsrc kubernetes 2>/dev/null |
			awk '/^Version:/ { print $2 }' | sort -V | tail -n1 || true)
	fi
	if [[ -z $version ]]; then
		[[ -n $cached ]] || { cat "$work/update.log" >&2; die "cannot find the kubernetes source package and nothing is cached"; }
		log "apt sources unreachable; using the cached build $cached"
		return 0
	fi
	local dir=$CACHE/$version
	if [[ -f $dir/complete && $(cat "$dir/complete") == "$RECIPE" ]]; then
		log "kubernetes $version already built: $dir/bin"
		return 0
	fi
	log "building kubernetes $version into $dir (about 8 minutes on 2 idle cores, 1.4 GB peak, 2.3 GB of disk meanwhile)"
	rm -rf "$dir"
	mkdir -p "$dir/download" "$dir/bin"
	(cd "$dir/download" && apt_private "$work" apt-get source --download-only "kubernetes=$version") >&2
	local dsc
	dsc=$(ls "$dir"/download/kubernetes_*.dsc)
	dpkg-source --no-check -x "$dsc" "$dir/src" >&2
	# (dpkg-source leaves a copy of the orig tarball beside the tree.)
	rm -f "$dir"/kubernetes_*
	[[ -f $REFLECT2/go_above_118.go ]] || die "$REFLECT2 is not reflect2 1.0.2 (scripts/setup.sh installs golang-github-modern-go-reflect2-dev)"
	rm -rf "$dir/src/vendor/github.com/modern-go/reflect2"
	cp -r "$REFLECT2" "$dir/src/vendor/github.com/modern-go/reflect2"
	rm -f "$dir/src/vendor/github.com/modern-go/reflect2/go.mod"
	(
		cd "$dir/src"
		export PATH=$GOBIN_DIR:$PATH GOFLAGS=-mod=vendor GOPROXY=off CGO_ENABLED=0 \
			GOCACHE=$dir/gocache HOME=$dir
		# No .git in a source package: give hack/lib/version.sh the version.
		upstream=${version#*really}
		upstream=${upstream%%-*}
		export KUBE_GIT_VERSION=v$upstream KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=debian
		nice -n 10 make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager cmd/kubelet"
	) >"$dir/build.log" 2>&1 || {
		tail -n 40 "$dir/build.log" >&2
		rm -rf "$dir/src" "$dir/gocache"
		die "build failed; the log is $dir/build.log"
	}
	local c
	for c in "${COMPONENTS[@]}"; do
		install -m 0755 "$dir/src/_output/bin/$c" "$dir/bin/$c"
	done
	rm -rf "$dir/src" "$dir/gocache"
	echo "$RECIPE" >"$dir/complete"
	log "built: $dir/bin"
)


# --- state layout -----------------------------------------------------------
#
# $STATE/pki          CA, serving and client certificates (openssl)
# $STATE/kubeconfig/  admin.conf (the one tests use) and one per component
# $STATE/etcd         etcd's data
# $STATE/node-<name>/ containerd (root, state, socket, config), kubelet root,
#                     CNI config, and host/: the node's private /var/log/pods,
#                     /var/log/containers and /var/lib/kubelet; for the nodes
#                     `localhost` and `127.0.0.2`
# $STATE/bin          the CNI plugins and the pause binary
# $STATE/images       the OCI archives imported into each containerd
# $STATE/pids, logs   one pid file and one log per process
# $STATE/host         what start saw on the host, for stop to restore

OFFSET=${K8S_TESTBED_PORT_OFFSET:-0}
[[ $OFFSET =~ ^[0-9]{1,4}$ ]] || die "K8S_TESTBED_PORT_OFFSET must be a number below 10000"
OFFSET=$((10#$OFFSET))
APISERVER_PORT=$((6443 + OFFSET))
ETCD_PORT=$((23790 + OFFSET))
ETCD_PEER_PORT=$((23800 + OFFSET))
SCHEDULER_PORT=$((10259 + OFFSET))
CONTROLLER_MANAGER_PORT=$((10257 + OFFSET))
KUBELET_PORT=$((10250 + OFFSET))
KUBELET_HEALTHZ_PORT=$((10248 + OFFSET))
NODES=(localhost 127.0.0.2)
PAUSE_IMAGE=sandboxd.local/pause:testbed
BUSYBOX_IMAGE=sandboxd.local/busybox:testbed
# Run from cgroup roots of their own, so the two kubelets never share one.
CGROUP_PREFIX=${STATE##*/}

node_ip() { [[ $1 == localhost ]] && echo 127.0.0.1 || echo "$1"; }
node_dir() { echo "$STATE/node-$1"; }
node_sock() { echo "$(node_dir "$1")/containerd/containerd.sock"; }
node_cgroup() { echo "$CGROUP_PREFIX-${1//./-}"; }

# deadline SECONDS WHAT CMD...: run CMD every 0.2 s until it succeeds. Fails
# at once, with the end of its log, if a process the testbed started exits.
deadline() {
	local secs=$1 what=$2 end f name
	shift 2
	end=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		for f in "$STATE"/pids/*.pid; do
			[[ -e $f ]] || continue
			name=${f##*/}
			name=${name%.pid}
			if ! pid_alive "$name"; then
				log "$name exited while waiting for $what; the end of $STATE/logs/$name.log:"
				tail -n 15 "$STATE/logs/$name.log" >&2
				return 1
			fi
		done
		((SECONDS < end)) || { log "timed out after ${secs}s waiting for $what"; return 1; }
		sleep 0.2
	done
}

# api [curl args] PATH: the API server as the admin.
api() {
	local path=${*: -1}
	curl -sS --fail --max-time 20 --cacert "$STATE/pki/ca.crt" \
		--cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" \
		"${@:1:$#-1}" "https://127.0.0.1:$APISERVER_PORT$path"
}

# proc_start PID: the process's start time (field 22 of /proc/PID/stat, after
# the command name, which may hold blanks and parentheses).
proc_start() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	set -- $stat
	echo "${20}"
}

# spawn NAME CMD...: start CMD in its own session, log under $STATE/logs, and
# "pid start-time" in $STATE/pids/NAME.pid: the start time tells our process
# from a later one that got the same pid.
spawn() {
	local name=$1 pid
	shift
	setsid "$@" </dev/null >>"$STATE/logs/$name.log" 2>&1 &
	pid=$!
	echo "$pid $(proc_start "$pid" || echo gone)" >"$STATE/pids/$name.pid"
}

# our_pid NAME: the pid of NAME if that process still runs, else nothing.
our_pid() {
	local pid start
	[[ -f $STATE/pids/$1.pid ]] || return 1
	read -r pid start <"$STATE/pids/$1.pid"
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	if [[ -z $start ]]; then
		# A pid file of an older version of this script: the pid alone.
		kill -0 "$pid" 2>/dev/null || return 1
	else
		[[ $(proc_start "$pid" 2>/dev/null) == "$start" ]] || return 1
	fi
	echo "$pid"
}

pid_alive() { our_pid "$1" >/dev/null; }

# --- host snapshot ----------------------------------------------------------
#
# What start and stop compare: only what the testbed could change, so the
# other users of the machine (dockerd's containers, their iptables rules and
# mounts) do not show up as differences.
host_snapshot() {
	local s
	for s in "${SYSCTLS_SAVED[@]}"; do
		printf 'sysctl %s=%s\n' "$s" "$(sysctl -n "$s")"
	done
	# Mounts: a node's stay in its mount namespace; none may be left here.
	awk -v st="$STATE/" 'index($5, st) == 1 { print "mount " $5 }' /proc/self/mountinfo
	# Paths the components would make by default; only whether they exist
	# (their contents may belong to others: another testbed, ip netns).
	local p
	for p in "${NODE_DIRS[@]}" /etc/kubernetes /etc/cni /opt/cni /opt/containerd /run/netns \
		/run/containerd/runc /run/containerd/fifo /run/containerd/io.containerd.runtime.v2.task \
		/usr/libexec/kubernetes; do
		[[ -e $p ]] && echo "path $p"
	done
	local n names=(-name kubepods -o -name kubepods.slice)
	for n in "${NODES[@]}"; do
		names+=(-o -name "$(node_cgroup "$n")")
	done
	find /sys/fs/cgroup -maxdepth 2 \( "${names[@]}" \) -printf 'cgroup %p\n' 2>/dev/null
	if command -v iptables-save >/dev/null; then
		iptables-save 2>/dev/null | grep -E 'KUBE-' | sed 's/^/iptables /' || true
	fi
}

# The sysctls kubelet writes (pkg/kubelet/cm/container_manager_linux.go,
# setupKernelTunables, as protectKernelDefaults is false).
SYSCTLS_SAVED=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

# --- certificates -----------------------------------------------------------

# cert NAME CN O SAN USAGE: an EC P-256 key and a certificate signed by the CA.
cert() {
	local name=$1 cn=$2 o=$3 san=$4 usage=$5 subj="/CN=$2"
	[[ -n $o ]] && subj="/O=$o/CN=$cn"
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$STATE/pki/$name.key" 2>/dev/null
	openssl req -new -key "$STATE/pki/$name.key" -subj "$subj" -out "$STATE/pki/$name.csr"
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$usage"
		[[ -n $san ]] && echo "subjectAltName=$san"
	} >"$STATE/pki/$name.ext"
	openssl x509 -req -in "$STATE/pki/$name.csr" -CA "$STATE/pki/ca.crt" -CAkey "$STATE/pki/ca.key" \
		-CAcreateserial -days 30 -extfile "$STATE/pki/$name.ext" -out "$STATE/pki/$name.crt" 2>/dev/null
	rm -f "$STATE/pki/$name.csr" "$STATE/pki/$name.ext"
}

# kubeconfig NAME CERT: a kubeconfig with the CA and the client pair embedded.
kubeconfig() {
	local name=$1 pair=$2 b64='base64 -w0'
	cat >"$STATE/kubeconfig/$name.conf" <<EOF2
apiVersion: v1
kind: Config
clusters:
- name: sandboxd-testbed
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $($b64 <"$STATE/pki/ca.crt")
users:
- name: $pair
  user:
    client-certificate-data: $($b64 <"$STATE/pki/$pair.crt")
    client-key-data: $($b64 <"$STATE/pki/$pair.key")
contexts:
- name: sandboxd-testbed
  context:
    cluster: sandboxd-testbed
    user: $pair
current-context: sandboxd-testbed
EOF2
	chmod 0600 "$STATE/kubeconfig/$name.conf"
}

make_pki() {
	mkdir -p "$STATE/pki" "$STATE/kubeconfig"
	chmod 0700 "$STATE/pki"
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$STATE/pki/ca.key" 2>/dev/null
	openssl req -x509 -new -key "$STATE/pki/ca.key" -subj "/CN=sandboxd-testbed-ca" -days 30 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		-out "$STATE/pki/ca.crt"
	cert apiserver kube-apiserver "" \
		"IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1" \
		serverAuth
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "" clientAuth
	cert admin sandboxd-testbed-admin system:masters "" clientAuth
	cert scheduler system:kube-scheduler "" "" clientAuth
	cert controller-manager system:kube-controller-manager "" "" clientAuth
	local n
	for n in "${NODES[@]}"; do
		cert "kubelet-$n" "system:node:$n" system:nodes "" clientAuth
		if [[ $n == localhost ]]; then
			cert "kubelet-serving-$n" "$n" "" "DNS:localhost,IP:127.0.0.1" serverAuth
		else
			cert "kubelet-serving-$n" "$n" "" "IP:$n" serverAuth
		fi
		kubeconfig "kubelet-$n" "kubelet-$n"
	done
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$STATE/pki/sa.key" 2>/dev/null
	openssl pkey -in "$STATE/pki/sa.key" -pubout -out "$STATE/pki/sa.pub" 2>/dev/null
	kubeconfig admin admin
	kubeconfig scheduler scheduler
	kubeconfig controller-manager controller-manager
}

# --- images -----------------------------------------------------------------

# oci_image NAME ROOTFS OUT CONFIG_JSON: an OCI image layout archive of
# ROOTFS, its config "config" section CONFIG_JSON, named NAME.
oci_image() {
	local name=$1 rootfs=$2 out=$3 cfg=$4 lay
	lay=$(mktemp -d "$STATE/images/.layout.XXXXXX")
	mkdir -p "$lay/blobs/sha256"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$rootfs" -cf "$lay/layer.tar" .
	local layer_sha layer_size config_sha config_size manifest_sha manifest_size
	layer_sha=$(sha256sum <"$lay/layer.tar" | cut -d' ' -f1)
	layer_size=$(stat -c %s "$lay/layer.tar")
	mv "$lay/layer.tar" "$lay/blobs/sha256/$layer_sha"
	printf '{"architecture":"amd64","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$cfg" "$layer_sha" >"$lay/config.json"
	config_sha=$(sha256sum <"$lay/config.json" | cut -d' ' -f1)
	config_size=$(stat -c %s "$lay/config.json")
	mv "$lay/config.json" "$lay/blobs/sha256/$config_sha"
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
		"$config_sha" "$config_size" "$layer_sha" "$layer_size" >"$lay/manifest.json"
	manifest_sha=$(sha256sum <"$lay/manifest.json" | cut -d' ' -f1)
	manifest_size=$(stat -c %s "$lay/manifest.json")
	mv "$lay/manifest.json" "$lay/blobs/sha256/$manifest_sha"
	printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
		"$manifest_sha" "$manifest_size" "$name" "${name##*:}" >"$lay/index.json"
	echo '{"imageLayoutVersion":"1.0.0"}' >"$lay/oci-layout"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$lay" -cf "$out" oci-layout index.json blobs
	rm -rf "$lay"
}

# make_tools: the CNI plugins, the pause image and a busybox image (for the
# smoke test), all from this machine's packages and the repo's sources.
make_tools() {
	mkdir -p "$STATE/bin" "$STATE/images"
	local cc
	cc=$(command -v musl-gcc || true)
	[[ -n $cc ]] || die "musl-gcc missing (scripts/setup.sh installs musl-tools)"
	"$cc" -static -Os -Wall -Wextra -Werror -o "$STATE/bin/sandboxd-placeholder" "$ROOT/tests/k8s/cni-placeholder.c"
	"$cc" -static -Os -Wall -Wextra -Werror -o "$STATE/bin/pause" "$ROOT/tests/k8s/pause.c"
	[[ -x /usr/lib/cni/loopback ]] || die "/usr/lib/cni/loopback missing (scripts/setup.sh installs containernetworking-plugins)"
	ln -sf /usr/lib/cni/loopback "$STATE/bin/loopback"

	local root
	root=$(mktemp -d "$STATE/images/.root.XXXXXX")
	install -m 0755 "$STATE/bin/pause" "$root/pause"
	oci_image "$PAUSE_IMAGE" "$root" "$STATE/images/pause.tar" '{"Entrypoint":["/pause"],"User":"65535:65535"}'
	rm -rf "$root"

	[[ -x /bin/busybox ]] || die "/bin/busybox missing (scripts/setup.sh installs busybox-static)"
	root=$(mktemp -d "$STATE/images/.root.XXXXXX")
	mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/workspace"
	chmod 1777 "$root/tmp"
	install -m 0755 /bin/busybox "$root/bin/busybox"
	local applet
	for applet in $(/bin/busybox --list); do
		[[ $applet == busybox ]] || ln -s busybox "$root/bin/$applet"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$root/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
	oci_image "$BUSYBOX_IMAGE" "$root" "$STATE/images/busybox.tar" '{"Cmd":["/bin/sh"],"Env":["PATH=/bin"]}'
	rm -rf "$root"
}

# --- processes --------------------------------------------------------------

start_etcd() {
	mkdir -p "$STATE/etcd"
	chmod 0700 "$STATE/etcd"
	spawn etcd etcd --name testbed --data-dir "$STATE/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "testbed=http://127.0.0.1:$ETCD_PEER_PORT" \
		--listen-metrics-urls "" --unsafe-no-fsync --log-level warn
}

start_apiserver() {
	spawn kube-apiserver "$BIN/kube-apiserver" \
		--etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
		--insecure-port 0 --endpoint-reconciler-type none \
		--tls-cert-file "$STATE/pki/apiserver.crt" --tls-private-key-file "$STATE/pki/apiserver.key" \
		--client-ca-file "$STATE/pki/ca.crt" --anonymous-auth=false \
		--kubelet-client-certificate "$STATE/pki/apiserver-kubelet-client.crt" \
		--kubelet-client-key "$STATE/pki/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority "$STATE/pki/ca.crt" \
		--kubelet-preferred-address-types Hostname,InternalIP \
		--service-account-key-file "$STATE/pki/sa.pub" \
		--service-account-signing-key-file "$STATE/pki/sa.key" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--allow-privileged=false \
		--service-cluster-ip-range 10.96.0.0/16 --profiling=false
}

start_scheduler() {
	spawn kube-scheduler "$BIN/kube-scheduler" \
		--kubeconfig "$STATE/kubeconfig/scheduler.conf" \
		--authentication-kubeconfig "$STATE/kubeconfig/scheduler.conf" \
		--authorization-kubeconfig "$STATE/kubeconfig/scheduler.conf" \
		--bind-address 127.0.0.1 --port 0 --secure-port "$SCHEDULER_PORT" --leader-elect=false --profiling=false
}

start_controller_manager() {
	spawn kube-controller-manager "$BIN/kube-controller-manager" \
		--kubeconfig "$STATE/kubeconfig/controller-manager.conf" \
		--authentication-kubeconfig "$STATE/kubeconfig/controller-manager.conf" \
		--authorization-kubeconfig "$STATE/kubeconfig/controller-manager.conf" \
		--bind-address 127.0.0.1 --port 0 --secure-port "$CONTROLLER_MANAGER_PORT" --leader-elect=false --profiling=false \
		--use-service-account-credentials --flex-volume-plugin-dir "$STATE/flexvolume" \
		--service-account-private-key-file "$STATE/pki/sa.key" --root-ca-file "$STATE/pki/ca.crt" \
		--controllers '*,-bootstrapsigner,-tokencleaner,-csrsigning,-nodeipam,-route,-service,-cloud-node-lifecycle'
}

# make_cgroup NODE: the cgroup root the node's kubelet puts its Pods under, in
# every v1 hierarchy (cgroup v2: the one tree).
make_cgroup() {
	local cg d
	cg=$(node_cgroup "$1")
	if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
		mkdir -p "/sys/fs/cgroup/$cg"
		return
	fi
	for d in /sys/fs/cgroup/*/; do
		d=${d%/}
		[[ -L $d ]] && continue
		case ${d##*/} in unified) continue ;; esac
		mkdir -p "$d/$cg"
		if [[ -f $d/cpuset.cpus ]]; then
			cat "$d/cpuset.cpus" >"$d/$cg/cpuset.cpus"
			cat "$d/cpuset.mems" >"$d/$cg/cpuset.mems"
		fi
	done
}

# remove_cgroup NODE: remove the node's cgroup tree, leaves first.
remove_cgroup() {
	local cg d
	cg=$(node_cgroup "$1")
	for d in /sys/fs/cgroup/*/"$cg" /sys/fs/cgroup/"$cg"; do
		[[ -d $d ]] || continue
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
}

start_containerd() {
	local n=$1 dir ip
	dir=$(node_dir "$n")
	ip=$(node_ip "$n")
	mkdir -p "$dir/containerd" "$dir/cni/net.d" "$dir/opt"
	cat >"$dir/cni/net.d/10-sandboxd-placeholder.conf" <<EOF2
{"cniVersion": "0.4.0", "name": "sandboxd-placeholder", "type": "sandboxd-placeholder"}
EOF2
	cat >"$dir/containerd/config.toml" <<EOF2
# Private containerd of testbed node $n (scripts/k8s-testbed.sh).
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
oom_score = 0

[grpc]
  address = "$dir/containerd/containerd.sock"

[debug]
  level = "warn"

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "$ip"
  stream_server_port = "0"
  enable_selinux = false
  # root lacks CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj below
  # containerd's own, so let containerd clamp it.
  restrict_oom_score_adj = true
  disable_apparmor = true
  # The Pods' network namespaces under the state directory, not /run/netns.
  netns_mounts_under_state_dir = true

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "$STATE/bin"
  conf_dir = "$dir/cni/net.d"
  max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "$dir/runc"
EOF2
	# The node's own mount namespace (see node_init).
	spawn "containerd-$n" unshare --mount --propagation slave -- \
		bash "$ROOT/scripts/k8s-testbed.sh" node-init "$n"
}

# NODE_DIRS: host paths kubelet 1.20 uses whatever its flags say, each
# bind-mounted from the node's directory in the node's mount namespace: the
# Pod logs (each kubelet's log GC deletes the directories of Pods it does
# not know, so two kubelets sharing /var/log/pods delete each other's logs
# within a minute) and the device plugin socket.
NODE_DIRS=(/var/log/pods /var/log/containers /var/lib/kubelet)

# node_init NODE (run by unshare, in the node's new mount namespace): bind the
# node's private copies over NODE_DIRS, then become the node's containerd.
# The kubelet joins this namespace (nsenter), so the two see the same mounts,
# and nothing either mounts (emptyDirs, rootfs overlays, network namespaces)
# appears in the host's mount table; the namespace goes with its last process.
node_init() {
	local n=$1 dir p
	dir=$(node_dir "$n")
	for p in "${NODE_DIRS[@]}"; do
		mkdir -p "$dir/host$p"
		mount --bind "$dir/host$p" "$p"
	done
	exec containerd --config "$dir/containerd/config.toml"
}

import_images() {
	local n=$1 sock img
	sock=$(node_sock "$n")
	for img in pause busybox; do
		ctr --address "$sock" --namespace k8s.io images import --no-unpack=false "$STATE/images/$img.tar" >/dev/null
	done
}

start_kubelet() {
	local n=$1 dir ip
	dir=$(node_dir "$n")
	ip=$(node_ip "$n")
	mkdir -p "$dir/kubelet" "$dir/volume-plugins"
	: >"$dir/resolv.conf"
	cat >"$dir/kubelet.yaml" <<EOF2
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: $ip
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $STATE/pki/kubelet-serving-$n.crt
tlsPrivateKeyFile: $STATE/pki/kubelet-serving-$n.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $STATE/pki/ca.crt
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: /$(node_cgroup "$n")
cgroupsPerQOS: true
failSwapOn: false
makeIPTablesUtilChains: false
resolvConf: $dir/resolv.conf
clusterDomain: cluster.local
serializeImagePulls: false
enableDebuggingHandlers: true
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "2%"
  imagefs.available: "2%"
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
maxPods: 110
EOF2
	spawn "kubelet-$n" nsenter --mount="/proc/$(our_pid "containerd-$n")/ns/mnt" -- \
		"$BIN/kubelet" --config "$dir/kubelet.yaml" \
		--kubeconfig "$STATE/kubeconfig/kubelet-$n.conf" \
		--hostname-override "$n" --root-dir "$dir/kubelet" --cert-dir "$dir/kubelet/pki" \
		--volume-plugin-dir "$dir/volume-plugins" \
		--container-runtime remote --container-runtime-endpoint "unix://$(node_sock "$n")" \
		--image-service-endpoint "unix://$(node_sock "$n")" --runtime-request-timeout 2m
}

node_ready() {
	api "/api/v1/nodes/$1" | jq -e '.status.conditions[] | select(.type == "Ready") | .status == "True"' >/dev/null
}

# --- start / stop -----------------------------------------------------------

cmd_start() {
	need_root
	if [[ -f $STATE/started ]]; then
		cmd_status >/dev/null 2>&1 || die "$STATE is from a testbed that no longer runs whole (see status): run stop first"
		log "already running ($STATE); kubeconfig: $STATE/kubeconfig/admin.conf"
		echo "$STATE/kubeconfig/admin.conf"
		return 0
	fi
	[[ ! -e $STATE ]] || die "$STATE exists from a run that did not finish: run stop first"
	local t0=$SECONDS
	cmd_build
	BIN=$(cached_bin_dir) || die "no build in $CACHE"
	for tool in etcd containerd ctr runc openssl curl jq setsid unshare nsenter; do
		command -v "$tool" >/dev/null || die "$tool missing (scripts/setup.sh installs it)"
	done
	mkdir -p "$STATE/pids" "$STATE/logs" "$STATE/host"
	chmod 0700 "$STATE"
	echo "$BIN" >"$STATE/bin-dir"
	# What the kubelets may change, to restore it and to compare at stop.
	local s
	for s in "${SYSCTLS_SAVED[@]}"; do
		printf '%s=%s\n' "$s" "$(sysctl -n "$s")"
	done >"$STATE/host/sysctl"
	host_snapshot >"$STATE/host/before"
	# From here on, a failure (or an interrupt) stops what was started.
	trap 'if [[ ! -f $STATE/started ]]; then log "start failed; stopping"; cmd_stop || true; fi' EXIT

	make_pki
	make_tools
	start_etcd
	deadline "$WAIT" etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
	local n
	# The mount points of NODE_DIRS (empty; stop removes those it made).
	mkdir -p "${NODE_DIRS[@]}"
	for n in "${NODES[@]}"; do
		make_cgroup "$n"
		start_containerd "$n"
	done
	start_apiserver
	for n in "${NODES[@]}"; do
		deadline "$WAIT" "containerd of $n" ctr --address "$(node_sock "$n")" version
		import_images "$n"
	done
	deadline "$WAIT" "kube-apiserver /readyz" api /readyz
	log "kube-apiserver ready after $((SECONDS - t0))s"
	start_scheduler
	start_controller_manager
	for n in "${NODES[@]}"; do
		start_kubelet "$n"
	done
	for n in "${NODES[@]}"; do
		deadline "$WAIT" "node $n Ready" node_ready "$n"
	done
	deadline "$WAIT" "the default service account" api /api/v1/namespaces/default/serviceaccounts/default
	touch "$STATE/started"
	trap - EXIT
	log "ready after $((SECONDS - t0))s; kubeconfig: $STATE/kubeconfig/admin.conf"
	echo "$STATE/kubeconfig/admin.conf"
}

# stop_pid NAME...: TERM them all, KILL those left after 20 s, wait until
# they are gone (30 s more at most).
stop_pid() {
	local name pids=() pid end
	for name in "$@"; do
		pid=$(our_pid "$name") && pids+=("$pid")
	done
	if ((${#pids[@]})); then
		kill -TERM "${pids[@]}" 2>/dev/null || true
		end=$((SECONDS + 20))
		for name in "$@"; do
			while pid_alive "$name" && ((SECONDS < end)); do sleep 0.1; done
		done
		for name in "$@"; do
			pid=$(our_pid "$name") && kill -KILL "$pid" 2>/dev/null
		done
		end=$((SECONDS + 30))
		for name in "$@"; do
			while pid_alive "$name" && ((SECONDS < end)); do sleep 0.1; done
			pid_alive "$name" && log "$name (pid $(our_pid "$name")) does not go away"
		done
	fi
	for name in "$@"; do
		rm -f "$STATE/pids/$name.pid"
	done
}

# clear_node NODE: kill every container of the node's containerd and delete
# its task, so its shim exits. (The containers' metadata, snapshots and
# mounts go with the containerd's state and the node's mount namespace.)
clear_node() {
	local n=$1 sock id
	sock=$(node_sock "$n")
	if pid_alive "containerd-$n" && [[ -S $sock ]]; then
		local c=(ctr --address "$sock" --namespace k8s.io)
		for id in $("${c[@]}" tasks ls -q 2>/dev/null); do
			"${c[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		# The CRI plugin deletes a task that exits by itself: delete what is
		# still listed until nothing is (or 20 s passed).
		local end=$((SECONDS + 20)) left
		while left=$("${c[@]}" tasks ls -q 2>/dev/null) && [[ -n $left ]] && ((SECONDS < end)); do
			for id in $left; do
				"${c[@]}" tasks delete "$id" >/dev/null 2>&1 || true
			done
			sleep 0.2
		done
	fi
}

# kill_shims NODE: a shim outlives its containerd. Ours are those whose
# command line is containerd-shim-runc-v2 ... -address <this node's socket>.
kill_shims() {
	local sock f pid args
	sock=$(node_sock "$1")
	for f in /proc/[0-9]*/cmdline; do
		args=$(tr '\0' '\n' 2>/dev/null <"$f") || continue
		[[ ${args%%$'\n'*} == */containerd-shim-runc-v2 || ${args%%$'\n'*} == containerd-shim-runc-v2 ]] || continue
		grep -qxF -- "$sock" <<<"$(grep -A1 -xF -- -address <<<"$args" | tail -n1)" || continue
		pid=${f#/proc/}
		pid=${pid%/cmdline}
		log "killing a shim left behind (pid $pid)"
		kill -KILL "$pid" 2>/dev/null || true
	done
}

unmount_state() {
	local m
	# Deepest first; lazily if a mount is still busy.
	while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
	done < <(awk -v st="$STATE" '$5 ~ "^" st { print $5 }' /proc/self/mountinfo | sed 's/\\040/ /g' | sort -r)
}

cmd_stop() {
	need_root
	[[ -d $STATE ]] || { log "not running ($STATE does not exist)"; return 0; }
	local t0=$SECONDS n t_kubelets t_nodes t_control
	stop_pid "${NODES[@]/#/kubelet-}"
	t_kubelets=$((SECONDS - t0))
	stop_pid kube-controller-manager kube-scheduler
	for n in "${NODES[@]}"; do
		clear_node "$n"
	done
	stop_pid "${NODES[@]/#/containerd-}"
	for n in "${NODES[@]}"; do
		kill_shims "$n"
	done
	t_nodes=$((SECONDS - t0 - t_kubelets))
	stop_pid kube-apiserver
	stop_pid etcd
	t_control=$((SECONDS - t0 - t_kubelets - t_nodes))
	unmount_state
	for n in "${NODES[@]}"; do
		remove_cgroup "$n"
	done
	# The sysctls kubelet changed, back to what start saw.
	local line
	if [[ -f $STATE/host/sysctl ]]; then
		while IFS= read -r line; do
			[[ $(sysctl -n "${line%%=*}") == "${line#*=}" ]] || sysctl -q -w "$line"
		done <"$STATE/host/sysctl"
	fi
	# The mount points of NODE_DIRS that start made, and the flexvolume
	# directory in case a component made it after all.
	local p
	for p in /var/log/pods /var/log/containers /var/lib/kubelet /usr/libexec/kubernetes; do
		if [[ -f $STATE/host/before ]] && ! grep -qx "path $p" "$STATE/host/before"; then
			rm -rf "$p"
		elif [[ -d $p ]]; then
			find "$p" -mindepth 1 -maxdepth 1 -printf 'path %p\n' | while read -r _ entry; do
				grep -qx "path $entry" "$STATE/host/before" || rm -rf "$entry"
			done
		fi
	done
	# Network namespaces a containerd without netns_mounts_under_state_dir
	# (a testbed started by an older version of this script) left behind.
	if [[ -d /run/netns ]]; then
		for p in /run/netns/cni-*; do
			[[ -e $p ]] || continue
			grep -qx "path $p" "$STATE/host/before" 2>/dev/null && continue
			umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true
			rm -f "$p"
		done
		if ! grep -qx "path /run/netns" "$STATE/host/before" 2>/dev/null; then
			rmdir /run/netns 2>/dev/null || true
		fi
	fi
	local rc=0
	if [[ -f $STATE/host/before ]]; then
		if ! diff <(sort "$STATE/host/before") <(host_snapshot | sort) >"$STATE/host/diff"; then
			log "the host differs from before start:"
			cat "$STATE/host/diff" >&2
			rc=1
		fi
	fi
	if ((rc == 0)); then
		rm -rf "$STATE"
	else
		log "state kept in $STATE for inspection"
	fi
	log "stopped in $((SECONDS - t0))s (kubelets ${t_kubelets}s, containers and containerds ${t_nodes}s, control plane ${t_control}s)"
	return "$rc"
}

cmd_status() {
	[[ -d $STATE ]] || { echo "not running"; return 3; }
	local name rc=0
	for name in etcd kube-apiserver kube-scheduler kube-controller-manager \
		"${NODES[@]/#/containerd-}" "${NODES[@]/#/kubelet-}"; do
		if pid_alive "$name"; then
			echo "$name: running (pid $(our_pid "$name"))"
		elif [[ -f $STATE/pids/$name.pid ]]; then
			echo "$name: DEAD (its log: $STATE/logs/$name.log)"
			rc=1
		else
			echo "$name: stopped"
			rc=1
		fi
	done
	if api /readyz >/dev/null 2>&1; then
		api /api/v1/nodes | jq -r '.items[] | "node \(.metadata.name): Ready=\(.status.conditions[] | select(.type == "Ready") | .status)"'
	else
		echo "kube-apiserver: not answering"
		rc=1
	fi
	echo "kubeconfig: $STATE/kubeconfig/admin.conf"
	return "$rc"
}

# import-docker-image IMAGE...: copy images from dockerd into both nodes.
cmd_import() {
	need_root
	[[ -f $STATE/started ]] || die "not running"
	local img n
	for img in "$@"; do
		for n in "${NODES[@]}"; do
			docker save "$img" | ctr --address "$(node_sock "$n")" --namespace k8s.io images import - >/dev/null
		done
		log "imported $img into ${NODES[*]}"
	done
}

# kubelet-stop NODE / kubelet-start NODE: a node lost and back, for the
# failure tests. Only the kubelet stops: the node's containerd and its
# containers keep running, as on a machine whose kubelet died.
cmd_kubelet() {
	local verb=$1 n=${2:-} known=0 m
	need_root
	[[ -f $STATE/started ]] || die "not running"
	for m in "${NODES[@]}"; do
		[[ $m == "$n" ]] && known=1
	done
	((known)) || die "no node '$n' (the nodes: ${NODES[*]})"
	if [[ $verb == stop ]]; then
		stop_pid "kubelet-$n"
		log "kubelet of $n stopped; its containers run on"
		return 0
	fi
	if pid_alive "kubelet-$n"; then
		log "kubelet of $n already runs"
		return 0
	fi
	BIN=$(cat "$STATE/bin-dir")
	start_kubelet "$n"
	deadline "$WAIT" "node $n Ready" node_ready "$n"
	log "kubelet of $n started, node Ready"
}

case ${1:-} in
build) cmd_build ;;
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) echo "export KUBECONFIG=$STATE/kubeconfig/admin.conf" ;;
import-docker-image) shift; cmd_import "$@" ;;
kubelet-stop) cmd_kubelet stop "${2:-}" ;;
kubelet-start) cmd_kubelet start "${2:-}" ;;
node-init) node_init "$2" ;;
-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" ;;
*) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
