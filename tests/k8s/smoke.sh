#!/usr/bin/env bash
# smoke.sh — the Kubernetes testbed runs a hardened Pod on each of its nodes.
#
# Starts the testbed (scripts/k8s-testbed.sh) unless it already runs, then on
# each node (`localhost`, `127.0.0.2`) runs a Pod with the hardening fields a
# sandboxd session Pod carries (issue 27): runAsUser 65534 with runAsNonRoot,
# capabilities drop ALL, allowPrivilegeEscalation false, seccompProfile
# RuntimeDefault, a read-only root, a memory-backed /tmp emptyDir, no
# service-account token, no service links, CPU and memory limits. The Pod
# reports what it sees and the test checks it: uid 65534, no capabilities,
# NoNewPrivs, seccomp filtering, only `lo`, a read-only root, a writable tmpfs
# /tmp, the memory limit in its cgroup, no token mounted, no variables of the
# namespace's Service. Then it deletes everything and stops the testbed if it started it.
#
# Every object is in a namespace of this run, labelled
# sandboxd.test.run=$SANDBOXD_TEST_RUN; an EXIT trap deletes it whether the
# test passes or fails.
#
# Exit status: 0 passed, 1 failed, 77 skipped (the testbed cannot start here,
# with the reason). With SANDBOXD_CI=1 (.ci/run) a testbed that cannot start
# is a failure, not a skip.
#
# Environment: SANDBOXD_TEST_RUN, SANDBOXD_CI, K8S_TESTBED_* (see the script).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TB=$ROOT/scripts/k8s-testbed.sh
RUN=${SANDBOXD_TEST_RUN:-k8s-$(date +%s)-$RANDOM}
STATE=${K8S_TESTBED_STATE:-/run/sandboxd-k8s}
WAIT=${K8S_TESTBED_WAIT:-120}
# A namespace name is a DNS label: lower case, digits and '-', 63 at most.
NS=$(printf 'sbx-smoke-%s' "$RUN" | tr 'A-Z_.' 'a-z--' | tr -cd 'a-z0-9-' | cut -c1-63 | sed 's/-*$//')

say() { printf 'k8s-smoke: %s\n' "$*" >&2; }
fails=0
check() { # check WHAT EXPECTED ACTUAL
	if [[ $2 == "$3" ]]; then
		say "ok   $1: $3"
	else
		say "FAIL $1: expected '$2', got '$3'"
		fails=$((fails + 1))
	fi
}

cannot_start() {
	if [[ ${SANDBOXD_CI:-0} == 1 ]]; then
		say "FAIL: the testbed cannot start: $*"
		exit 1
	fi
	say "SKIP: the testbed cannot start here: $*"
	exit 77
}

api() { # api [curl args] PATH
	local path=${*: -1}
	curl -sS --fail-with-body --max-time 30 --cacert "$STATE/pki/ca.crt" \
		--cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" \
		"${@:1:$#-1}" "$SERVER$path"
}

[[ $(id -u) -eq 0 ]] || cannot_start "not root"

started=0
SERVER=
cleanup() {
	local rc=$?
	set +e
	if [[ -n $SERVER ]]; then
		api -X DELETE "/api/v1/namespaces/$NS" >/dev/null 2>&1
		local end=$((SECONDS + WAIT))
		while api "/api/v1/namespaces/$NS" >/dev/null 2>&1 && ((SECONDS < end)); do sleep 0.5; done
		if api "/api/v1/namespaces/$NS" >/dev/null 2>&1; then
			say "FAIL: namespace $NS still there after ${WAIT}s"
			rc=1
		fi
	fi
	if ((started)); then
		local t0=$SECONDS
		bash "$TB" stop || rc=1
		say "testbed stopped in $((SECONDS - t0))s"
	fi
	exit "$rc"
}
trap cleanup EXIT

if [[ -f $STATE/started ]] && bash "$TB" status >/dev/null 2>&1; then
	say "using the running testbed ($STATE)"
else
	t0=$SECONDS
	started=1
	if ! bash "$TB" start >/dev/null; then
		started=0
		cannot_start "scripts/k8s-testbed.sh start failed (its output is above)"
	fi
	say "testbed started in $((SECONDS - t0))s"
fi

# The API server's address, from the admin kubeconfig (the port moves with
# K8S_TESTBED_PORT_OFFSET).
SERVER=$(sed -n 's/^ *server: *//p' "$STATE/kubeconfig/admin.conf" | head -n1)
[[ $SERVER == https://127.0.0.1:* ]] || { say "FAIL: no loopback API server in $STATE/kubeconfig/admin.conf"; exit 1; }

ns_json=$(jq -n --arg ns "$NS" --arg run "$RUN" \
	'{apiVersion: "v1", kind: "Namespace", metadata: {name: $ns, labels: {"sandboxd.test.run": $run}}}')
api -X POST -H 'Content-Type: application/json' -d "$ns_json" /api/v1/namespaces >/dev/null
# A Service in the namespace: with enableServiceLinks false its variables
# must not reach the Pods (the API server's own, KUBERNETES_SERVICE_*, always
# do: Kubernetes injects them whatever the field says).
svc_json=$(jq -n --arg run "$RUN" '{apiVersion: "v1", kind: "Service",
	metadata: {name: "smoke-svc", labels: {"sandboxd.test.run": $run}},
	spec: {ports: [{port: 80, protocol: "TCP"}]}}')
api -X POST -H 'Content-Type: application/json' -d "$svc_json" "/api/v1/namespaces/$NS/services" >/dev/null

# What the Pod prints: one "key=value" a line, then "done".
probe='
echo "uid=$(id -u)"
echo "gid=$(id -g)"
grep -E "^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):" /proc/self/status | tr -d "\t" | tr ":" "="
echo "ifaces=$(awk -F: "NR > 2 { gsub(/ /, \"\", \$1); print \$1 }" /proc/net/dev | sort | tr "\n" " ")"
echo "rootfs=$(awk "\$2 == \"/\" { split(\$4, o, \",\"); print o[1] }" /proc/mounts | tail -n1)"
if echo x >/tmp/probe; then echo tmp=rw; else echo tmp=ro; fi
echo "tmpfs=$(awk "\$2 == \"/tmp\" { print \$3 }" /proc/mounts)"
echo "memlimit=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max)"
if [ -e /var/run/secrets/kubernetes.io ]; then echo token=mounted; else echo token=none; fi
echo "servicevars=$(env | grep _SERVICE_HOST= | grep -vc ^KUBERNETES_)"
echo done
exec sleep 3600
'

nodes=(localhost 127.0.0.2)
i=0
for node in "${nodes[@]}"; do
	i=$((i + 1))
	pod=$(jq -n --arg run "$RUN" --arg node "$node" --arg name "smoke-$i" --arg probe "$probe" '{
	apiVersion: "v1", kind: "Pod",
	metadata: {name: $name, labels: {"sandboxd.test.run": $run}},
	spec: {
		nodeSelector: {"kubernetes.io/hostname": $node},
		restartPolicy: "Never",
		automountServiceAccountToken: false,
		enableServiceLinks: false,
		terminationGracePeriodSeconds: 1,
		securityContext: {runAsUser: 65534, runAsGroup: 65534, runAsNonRoot: true,
			seccompProfile: {type: "RuntimeDefault"}},
		containers: [{
			name: "main", image: "sandboxd.local/busybox:testbed", imagePullPolicy: "Never",
			command: ["/bin/sh", "-c", $probe],
			securityContext: {runAsUser: 65534, runAsNonRoot: true, allowPrivilegeEscalation: false,
				capabilities: {drop: ["ALL"]}, readOnlyRootFilesystem: true,
				seccompProfile: {type: "RuntimeDefault"}},
			resources: {limits: {cpu: "250m", memory: "64Mi"}, requests: {cpu: "50m", memory: "32Mi"}},
			volumeMounts: [{name: "tmp", mountPath: "/tmp"}]
		}],
		volumes: [{name: "tmp", emptyDir: {medium: "Memory", sizeLimit: "16Mi"}}]
	}}')
	api -X POST -H 'Content-Type: application/json' -d "$pod" "/api/v1/namespaces/$NS/pods" >/dev/null
done

i=0
for node in "${nodes[@]}"; do
	i=$((i + 1))
	name=smoke-$i
	# Wait (with a deadline) until the Pod has printed everything.
	log=
	end=$((SECONDS + WAIT))
	while ((SECONDS < end)); do
		phase=$(api "/api/v1/namespaces/$NS/pods/$name" | jq -r .status.phase)
		[[ $phase == Failed || $phase == Succeeded ]] && break
		if [[ $phase == Running ]]; then
			log=$(api "/api/v1/namespaces/$NS/pods/$name/log" 2>/dev/null || true)
			grep -qx "done" <<<"$log" && break
		fi
		sleep 0.5
	done
	obj=$(api "/api/v1/namespaces/$NS/pods/$name")
	check "$name phase" Running "$(jq -r .status.phase <<<"$obj")"
	check "$name node" "$node" "$(jq -r .spec.nodeName <<<"$obj")"
	if ! grep -qx "done" <<<"$log"; then
		say "FAIL $name: no complete report within ${WAIT}s; status:"
		jq -c .status <<<"$obj" >&2
		fails=$((fails + 1))
		continue
	fi
	get() { sed -n "s/^$1=//p" <<<"$log"; }
	check "$name uid" 65534 "$(get uid)"
	check "$name gid" 65534 "$(get gid)"
	for c in CapInh CapPrm CapEff CapBnd CapAmb; do
		check "$name $c" 0000000000000000 "$(get "$c")"
	done
	check "$name NoNewPrivs" 1 "$(get NoNewPrivs)"
	check "$name Seccomp (2 = filter)" 2 "$(get Seccomp)"
	check "$name interfaces" "lo " "$(get ifaces)"
	check "$name root mounted" ro "$(get rootfs)"
	check "$name /tmp writable" rw "$(get tmp)"
	check "$name /tmp type" tmpfs "$(get tmpfs)"
	check "$name memory limit" 67108864 "$(get memlimit)"
	check "$name service account token" none "$(get token)"
	check "$name variables of the namespace's Service" 0 "$(get servicevars)"
done

# Delete the Pods gracefully (not forced): they leave the API only once their
# kubelet has stopped them, so a kubelet that cannot fails the test.
api -X DELETE "/api/v1/namespaces/$NS/pods?gracePeriodSeconds=1" >/dev/null
end=$((SECONDS + WAIT))
left=1
while ((SECONDS < end)); do
	left=$(api "/api/v1/namespaces/$NS/pods" | jq '.items | length')
	((left == 0)) && break
	sleep 0.5
done
check "Pods left after delete" 0 "$left"

if ((fails)); then
	say "$fails check(s) failed"
	exit 1
fi
say "passed"
