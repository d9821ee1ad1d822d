#!/usr/bin/env bash
# bench.sh — measure sandboxd against plain Docker, in one run.
#
#   scripts/bench.sh [--quick] [--only noisy|http|network|pool|restart|cells|snapshot|pause|microvm|node|k8s] [--json PATH]
#
# Runs scripts/setup.sh (unless SANDBOXD_SKIP_SETUP=1), builds the daemon and
# sandboxd-bench into $SANDBOXD_BUILD_DIR (default build/), then runs
# sandboxd-bench, which starts a real daemon on a private data dir and
# sockets and measures it, interleaved sample by sample, against
# `docker run -d` / `docker exec` with the same image and hardening flags.
# Prints a table and writes JSON (default bench/results.json).
#
#   --quick      under 2 minutes: fewer samples; 20 sessions x 10 execs for
#                concurrency instead of 50 x 20; RSS at 20 and 30 sessions
#                instead of 50 and 200; restart with 30 sessions, not 100
#   --only noisy only the noisy_neighbour phase (about 1-2 minutes); each part's
#                ratio is to the quiet exec without noise in the same run, and
#                noisy_output's note adds the MB/s absorbed and the daemon's CPU
#                per MB of it (docs/benchmarks.md, issue 34)
#   --only network  cold_session, then daemon RSS with S2 sessions (30 quick,
#                200 full) and their port listeners against the docker-proxy
#                PSS of one published baseline container times S2
#   --only http  only the http_exec_roundtrip row (POST /v1/exec over HTTPS
#                against the API socket; well under a minute)
#   --only node  only the node link rows: the exec round trip through a
#                separate `sandboxd node` over TLS on loopback beside the
#                in-process link (bench/node_bench.c; JSON in <json>-node.json)
#   --only cells only the run_cell rows (bench/cells.c), with pool.size 2 and
#                pool.wait 0: 1+1 on a warm context
#                against docker exec python3 -c 1+1 and, in rounds between the
#                cells' own, a jupyter_client round trip in the same container
#                (cell_roundtrip_vs_jupyter: the goal is its p50 + 1.5 ms), first cell of a new session
#                with the pool warm (kernel started ahead) and drained,
#                the idle kernel's RSS
#   --only pool  only the warm pool rows: first_command_new_session with the
#                pool full (against docker run -d + docker exec) and drained,
#                and the refill rate; the daemon gets pool.size 4 and
#                pool.wait 0, so a drained pool sends a new session down the
#                cold path at once (about a minute)
#   --only snapshot  snapshot_session and fork_session of a 100 MB and a 1 GB
#                workspace (random bytes), against cp -a of the same directory
#                (+ docker run -d on the copy for a fork), and the first
#                command of the fork against docker exec (issue 28)
#   --only pause pause_session, resume_session and the first command after a
#                resume (p50), each against the Engine API's pause/unpause of
#                a plain container (and docker exec), with E2B's documented
#                resume time (about 1 s) printed beside them (well under a minute)
#   --only microvm  the microVM runtime (issue 38, docs/microvm.md): a new
#                microvm session's first command (QEMU boot under TCG, or KVM)
#                against docker run -d + docker exec, and pause/resume
#                (QMP stop/cont) against the Engine API's pause/unpause, a GET
#                through the port block from a service in the guest against
#                docker run -p (microvm_forward_get), and memory that lasts;
#                needs QEMU and scripts/build-vm.sh's guest (skipped otherwise)
#   --only restart  R sessions (100 full, 30 quick), then only the restart
#                rows: SIGKILL and start again, with the HTTPS front on
#   --only k8s   the Kubernetes engine (issue 27) beside the Docker engine,
#                two daemons of this build in one run (bench/k8s_bench.py):
#                a new session's first command cold and with the pool warm,
#                the exec round trip (median/p95), sessions per node until
#                kube-scheduler leaves a Pod Pending, and the daemon's RSS
#                per thousand sessions; on the cluster $SANDBOXD_K8S_KUBECONFIG
#                names (skipped with the reason when it is unset); JSON in
#                <json>-k8s.json. About 10 minutes (--quick: 5). It fills the
#                cluster's nodes for a moment: not on a cluster others use.
#   --only e2b   the official E2B SDK against a daemon of this build over
#                HTTPS (tests/js/e2b_bench.mjs, issue 36): Sandbox.create() to
#                its first command with the pool warm (against the Engine API's
#                create, start and exec of a plain container), commands.run
#                ('true') (against /v1/exec of the same argv in the same
#                session, /v1/exec of `true` alone: what the login shell
#                costs, and the Engine API's exec), runCode('1+1') on a warm
#                context; samples interleaved; JSON in <json>-e2b.json (a few
#                minutes; --quick: fewer samples). Needs `npm ci --prefix
#                tests`. BENCH_IMAGE=IMAGE runs the daemon's sessions on
#                another image (an image change before it is tagged).
#   --json PATH  where to write the results
#
# Every container made here is removed on exit, success or failure: the
# daemon's (label sandboxd.instance=bench-<id>) and the baselines' (label
# sandboxd.bench=<id>). The daemon's log stays in $SANDBOXD_BENCH_KEEP_LOG
# if that is set, otherwise it goes with the temporary directory.
#
# The daemon gets these settings (environment overrides, see etc/):
#   image sandboxd/python:latest, limits.sessions 300, port_range 14000-15499
#   (300 blocks of 5), limits.exec_global 64, limits.exec_per_session 8,
#   idle_timeout 1h, pause_after 0; baselines publish from 34500 up;
#   http.listen 127.0.0.1:0 with a CA and server certificate made here.
# Any other SANDBOXD_* variable already set wins over these; the data dir,
# both sockets and the instance are always the run's own.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

quick=()
only_node=0
only_k8s=0
only_e2b=0
only_pool=0
only_cells=0
json=bench/results.json
while (($#)); do
	case $1 in
	--quick) quick+=(--quick) ;;
	--only)
		if [[ ${2:-} == node ]]; then
			only_node=1
			shift 2
			continue
		fi
		if [[ ${2:-} == k8s ]]; then
			only_k8s=1
			shift 2
			continue
		fi
		if [[ ${2:-} == e2b ]]; then
			only_e2b=1
			shift 2
			continue
		fi
		[[ $# -ge 2 && ($2 == noisy || $2 == http || $2 == network || $2 == pool || $2 == restart || $2 == cells || $2 == snapshot || $2 == pause || $2 == microvm) ]] ||
			{ echo "bench: --only takes: noisy, http, network, pool, restart, cells, snapshot, pause, microvm, node, k8s, e2b" >&2; exit 2; }
		quick+=(--only "$2")
		[[ $2 == pool ]] && only_pool=1
		[[ $2 == cells ]] && only_cells=1
		shift
		;;
	--json)
		[[ $# -ge 2 ]] || { echo "bench: --json needs a path" >&2; exit 2; }
		json=$2
		shift
		;;
	--json=*) json=${1#--json=} ;;
	-h | --help) sed -n '2,/^# both sockets/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
	*) echo "usage: scripts/bench.sh [--quick] [--only noisy|http|network|pool|restart|cells|snapshot|pause|microvm|node|k8s|e2b] [--json PATH]" >&2; exit 2 ;;
	esac
	shift
done

BUILD=${SANDBOXD_BUILD_DIR:-build}
SOCK=${SANDBOXD_DOCKER_SOCKET:-/var/run/docker.sock}
ID=$(date +%s)-$RANDOM
TMP=$(mktemp -d /tmp/sandboxd-bench.XXXXXX)
chmod 711 "$TMP"
PIDFILE=$TMP/daemon.pid
LOG=$TMP/daemon.log

log() { printf 'bench: %s\n' "$*" >&2; }

remove_label() {
	local label=$1 ids
	# curl, not the docker CLI: the sweep must not depend on the client.
	ids=$(curl -s --max-time 20 --unix-socket "$SOCK" -G http://d/containers/json \
		--data-urlencode all=1 --data-urlencode "filters={\"label\":[\"$label\"]}" 2>/dev/null |
		jq -r '.[].Id' 2>/dev/null || true)
	[[ -n $ids ]] || return 0
	# a few at a time: removing 200 containers one by one takes a while
	xargs -r -P 8 -I{} curl -s --max-time 60 --unix-socket "$SOCK" -X DELETE \
		"http://d/containers/{}?force=1&v=1" -o /dev/null <<<"$ids" || true
	log "removed $(wc -w <<<"$ids") container(s) labelled $label"
}

BENCH_PID=
cleanup() {
	local rc=$? pid interrupted=0
	trap - EXIT INT TERM
	# The benchmark first, so it starts nothing more (the daemon it started
	# dies with it: PR_SET_PDEATHSIG), then whatever is left.
	if [[ -n $BENCH_PID ]] && kill -0 "$BENCH_PID" 2>/dev/null; then
		interrupted=1
		kill -TERM "$BENCH_PID" 2>/dev/null || true
		wait "$BENCH_PID" 2>/dev/null || true
	fi
	if [[ -s $PIDFILE ]]; then
		pid=$(cat "$PIDFILE")
		if [[ -n $pid && -d /proc/$pid ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == sandboxd ]]; then
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	remove_label "sandboxd.instance=bench-$ID"
	remove_label "sandboxd.bench=$ID"
	remove_label "sandboxd.instance=bench-$ID-node-a"
	remove_label "sandboxd.instance=bench-$ID-node-b"
	remove_label "sandboxd.instance=bench-$ID-docker"
	remove_label "sandboxd.instance=bench-$ID-e2b"
	remove_label "sandboxd.bench=bench-$ID-e2b"
	if ((interrupted)); then
		# a docker run the benchmark had in flight may still land
		sleep 3
		remove_label "sandboxd.instance=bench-$ID"
		remove_label "sandboxd.bench=$ID"
	fi
	if [[ -n ${SANDBOXD_BENCH_KEEP_LOG:-} && -f $LOG ]]; then
		cp "$LOG" "$SANDBOXD_BENCH_KEEP_LOG" && log "daemon log kept in $SANDBOXD_BENCH_KEEP_LOG"
	fi
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ ${SANDBOXD_SKIP_SETUP:-0} != 1 ]]; then
	bash scripts/setup.sh
fi
{
	cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo
	# the runner too: without it every exec would take the docker exec fallback
	targets=(sandboxd sandboxd-mcp sandboxd-bench sandboxd-egress-bench sandboxd-node-bench)
	command -v musl-gcc >/dev/null && targets+=(runner)
	cmake --build "$BUILD" -j2 --target "${targets[@]}"
} >&2

# The exec round trip through a separate `sandboxd node` over TLS on loopback
# against the in-process node link (issue 26): two daemons of this run side
# by side, samples interleaved (bench/node_bench.c). One JSON object beside the
# main results.
node_bench() {
	local pki=$TMP/node-pki n=200
	[[ ${quick[0]:-} == --quick ]] && n=50
	mkdir -m 700 "$pki"
	(
		cd "$pki"
		key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
		openssl req -x509 "${key[@]}" -keyout ca.key -out ca.pem -days 2 -subj /CN=sandboxd-bench-node-ca \
			-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
		for name in sandboxd-control node1; do
			openssl req "${key[@]}" -keyout $name.key -out $name.csr -subj /CN=$name
			printf 'subjectAltName=DNS:%s\n' $name >$name.ext
			openssl x509 -req -in $name.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
				-extfile $name.ext -out $name.pem
		done
	) >/dev/null 2>&1 || { log "openssl could not make the node link's certificates"; return 1; }
	(
		# the daemons and the node agent read no SANDBOXD_* of the main run (the image aside)
		for v in $(compgen -e | grep '^SANDBOXD_'); do
			[[ $v == SANDBOXD_IMAGE ]] || unset "$v"
		done
		"$BUILD/sandboxd-node-bench" --pki "$pki" --daemon "$BUILD/sandboxd" --samples $n \
			--port $((21000 + RANDOM % 999)) --id "$ID"
	) | tee "${json%.json}-node.json"
}
if ((only_node)); then
	mkdir -p "$(dirname "$json")"
	node_bench
	exit
fi
if ((only_k8s)); then
	if [[ -z ${SANDBOXD_K8S_KUBECONFIG:-} ]]; then
		log "k8s: SKIPPED, no cluster: SANDBOXD_K8S_KUBECONFIG is unset (scripts/k8s-testbed.sh start prints one)"
		exit 0
	fi
	[[ -r $SANDBOXD_K8S_KUBECONFIG ]] || { log "k8s: cannot read $SANDBOXD_K8S_KUBECONFIG"; exit 1; }
	mkdir -p "$(dirname "$json")"
	# in the background and waited for, as sandboxd-bench: a signal runs the cleanup at once
	python3 bench/k8s_bench.py --build "$BUILD" --kubeconfig "$SANDBOXD_K8S_KUBECONFIG" --id "$ID" \
		${quick[0]:+--quick} >"${json%.json}-k8s.json" &
	BENCH_PID=$!
	wait "$BENCH_PID"
	exit
fi

if ((only_e2b)); then
	mkdir -p "$(dirname "$json")"
	n=(50 10)
	[[ ${quick[0]:-} == --quick ]] && n=(20 5)
	# in the background and waited for, as sandboxd-bench: a signal runs the cleanup at once
	SANDBOXD_TEST_RUN=bench-$ID-e2b SANDBOXD_BUILD_DIR=$BUILD BENCH_N=${n[0]} BENCH_N_CREATE=${n[1]} \
		node tests/js/e2b_bench.mjs "${json%.json}-e2b.json" &
	BENCH_PID=$!
	wait "$BENCH_PID"
	exit
fi

export SANDBOXD_DATA_DIR=$TMP/data
export SANDBOXD_API_SOCKET=$TMP/api.sock
export SANDBOXD_ADMIN_SOCKET=$TMP/admin.sock
export SANDBOXD_INSTANCE=bench-$ID
export SANDBOXD_IMAGE=${SANDBOXD_IMAGE:-sandboxd/python:latest}
export SANDBOXD_LIMITS_SESSIONS=${SANDBOXD_LIMITS_SESSIONS:-300}
export SANDBOXD_PORT_RANGE=${SANDBOXD_PORT_RANGE:-14000-15499}
export SANDBOXD_LIMITS_EXEC_GLOBAL=${SANDBOXD_LIMITS_EXEC_GLOBAL:-64}
export SANDBOXD_LIMITS_EXEC_PER_SESSION=${SANDBOXD_LIMITS_EXEC_PER_SESSION:-8}
# one user drives every session of the benchmark
export SANDBOXD_LIMITS_SESSIONS_PER_USER=${SANDBOXD_LIMITS_SESSIONS_PER_USER:-300}
export SANDBOXD_LIMITS_EXEC_PER_USER=${SANDBOXD_LIMITS_EXEC_PER_USER:-64}
export SANDBOXD_IDLE_TIMEOUT=${SANDBOXD_IDLE_TIMEOUT:-1h}
# no idle pause: a full run lasts longer than pause_after, and its bulk sessions must stay running
# (the pause rows pause on request)
export SANDBOXD_PAUSE_AFTER=${SANDBOXD_PAUSE_AFTER:-0}
if ((only_pool)); then
	export SANDBOXD_POOL_SIZE=${SANDBOXD_POOL_SIZE:-4}
	# the cold row is the path with no wait in line for the refill
	export SANDBOXD_POOL_WAIT=${SANDBOXD_POOL_WAIT:-0}
elif ((only_cells)); then
	# the first cell with the pool warm (its kernel started ahead) and drained
	export SANDBOXD_POOL_SIZE=${SANDBOXD_POOL_SIZE:-2}
	export SANDBOXD_POOL_WAIT=${SANDBOXD_POOL_WAIT:-0}
else
	# cold_session and the RSS rows measure the cold path and sessions alone
	export SANDBOXD_POOL_SIZE=${SANDBOXD_POOL_SIZE:-0}
fi
# the HTTPS front on loopback (an ephemeral port: the benchmark reads it from the log)
mkdir -m 700 "$TMP/tls"
(
	cd "$TMP/tls"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=sandboxd-bench-ca
	openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1
	printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >server.ext
	openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
		-extfile server.ext
) >/dev/null 2>&1 || { log "openssl could not make the test certificates"; exit 1; }
export SANDBOXD_HTTP_LISTEN=127.0.0.1:0
export SANDBOXD_HTTP_TLS_CERT=$TMP/tls/server.pem
export SANDBOXD_HTTP_TLS_KEY=$TMP/tls/server.key

mkdir -p "$(dirname "$json")"
log "run $ID: instance $SANDBOXD_INSTANCE, data in $TMP"
# In the background and waited for, so a signal to this script runs the
# cleanup at once instead of after the benchmark has finished.
"$BUILD/sandboxd-bench" "${quick[@]}" --daemon "$BUILD/sandboxd" --bench-id "$ID" \
	--json "$json" --log "$LOG" --pidfile "$PIDFILE" --http-ca "$TMP/tls/ca.pem" &
BENCH_PID=$!
wait "$BENCH_PID"

# The egress proxy against a direct loopback connection to the same upstream
# (host-side, issue 14): added latency per plain HTTP request and MB/s
# through a CONNECT tunnel; and an HTTPS request with a secret's placeholder
# through an intercepted CONNECT against the same through a plain one
# (issue 37: https_*_p50_ms, intercept_added_p50_ms), requests on one
# kept-alive connection the same two ways (https_keepalive_*_p50_ms,
# keepalive_intercept_added_p50_ms) and a 100 MB download the same two ways
# (https_*_mb_s, intercept_throughput_ratio). One JSON line beside the main
# results.
egress_args=(--requests 500 --megabytes 512)
[[ ${quick[0]:-} == --quick ]] && egress_args=(--requests 100 --megabytes 64)
"$BUILD/sandboxd-egress-bench" "${egress_args[@]}" | tee "${json%.json}-egress.json"
node_bench
