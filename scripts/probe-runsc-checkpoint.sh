#!/bin/bash
# probe-runsc-checkpoint.sh — can gVisor sessions offer memory snapshots?
# (issue 38, item 4: "try runsc checkpoint/restore for gVisor sessions and
# report, with evidence").
#
# Usage: scripts/probe-runsc-checkpoint.sh [IMAGE]   (default sandboxd/python:latest)
#
# Two probes, each printing what it saw:
#   1. runsc on its own (the OCI bundle made from IMAGE's file system, no
#      network, a private --root): a python3 process keeps a random token in
#      its memory and writes "token counter" to a file 5 times a second. The
#      sandbox is checkpointed (which stops it), then restored twice from the
#      one image, as two sandboxes side by side (a fork). Memory survived when
#      both restored processes write the token of before the checkpoint, with
#      a counter that goes on from where it was instead of starting at 1.
#   2. the same through dockerd, the way sandboxd's sessions run: whether
#      dockerd offers checkpoints (they need its experimental mode) and what
#      `runsc checkpoint --leave-running` does to a container dockerd started.
#
# Everything it makes is under one temporary directory and one container
# named sbx-ckpt-probe-<pid>; the EXIT trap removes both. Needs root,
# runsc and dockerd (scripts/setup.sh installs them). Every runsc call has
# its own deadline and its stdio away from the caller's, since a restored
# sandbox inherits the descriptors of the command that restored it.
set -euo pipefail

image=${1:-sandboxd/python:latest}
tmp=$(mktemp -d /tmp/sbx-ckpt-probe.XXXXXX)
name=sbx-ckpt-probe-$$
root=$tmp/state
ids=()

rs() { timeout 60 runsc --root="$root" --network=none "$@" </dev/null; }
now_ms() { date +%s%3N; }

cleanup() {
	for id in "${ids[@]}"; do
		rs kill "$id" KILL >/dev/null 2>&1 || true
	done
	for id in "${ids[@]}"; do
		rs delete --force "$id" >/dev/null 2>&1 || true
	done
	docker rm -f "$name" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# "token counter", as the process last wrote it (written by rename: never half a line)
state_of() { cat "$1/rootfs/w/x" 2>/dev/null || echo "-"; }

bundle() { # DIR: a bundle of IMAGE's file system running the probe program
	local dir=$1
	mkdir -p "$dir/rootfs"
	tar -C "$dir/rootfs" -xf "$tmp/rootfs.tar"
	mkdir -p "$dir/rootfs/w"
	(cd "$dir" && runsc spec -- /bin/true)
	python3 - "$dir/config.json" <<'EOF'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["process"]["terminal"] = False
c["process"]["args"] = ["python3", "-c",
    "import os, time\n"
    "tok = os.urandom(8).hex()\n"
    "x = 0\n"
    "while True:\n"
    "    x += 1\n"
    "    open('/w/x.tmp', 'w').write(tok + ' ' + str(x))\n"
    "    os.rename('/w/x.tmp', '/w/x')\n"
    "    time.sleep(0.2)\n"]
c["root"]["readonly"] = False
json.dump(c, open(p, "w"))
EOF
}

wait_state() { # DIR: until the process has written its file (10 s)
	for _ in $(seq 100); do
		[[ -s $1/rootfs/w/x ]] && return 0
		sleep 0.1
	done
	return 1
}

echo "runsc: $(runsc --version 2>/dev/null | head -1); kernel $(uname -r); image $image"
docker create --name "$name" "$image" /bin/true >/dev/null
docker export "$name" >"$tmp/rootfs.tar"

echo "== 1. runsc alone: checkpoint, then two restores of the one image"
bundle "$tmp/a"
ids+=(src)
rs run --detach --bundle "$tmp/a" src >"$tmp/run.log" 2>&1
wait_state "$tmp/a" || { echo "the probe process never wrote its state"; exit 1; }
sleep 1
before=$(state_of "$tmp/a")
t0=$(now_ms)
rs checkpoint --image-path="$tmp/img" src >"$tmp/checkpoint.log" 2>&1
t1=$(now_ms)
at=$(state_of "$tmp/a")
rs delete --force src >/dev/null 2>&1 || true
echo "before the checkpoint: $before; when it stopped: $at"
echo "checkpoint: $((t1 - t0)) ms, image $(du -sk "$tmp/img" | cut -f1) KiB"

ok=1
for fork in f1 f2; do
	cp -a "$tmp/a" "$tmp/$fork"
	ids+=("$fork")
	t0=$(now_ms)
	rs restore --detach --image-path="$tmp/img" --bundle "$tmp/$fork" "$fork" >"$tmp/restore-$fork.log" 2>&1
	t1=$(now_ms)
	echo "restore $fork: $((t1 - t0)) ms"
done
sleep 1.5
tok=${at%% *}
for fork in f1 f2; do
	s=$(state_of "$tmp/$fork")
	pid=$(rs state "$fork" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
	rss=$(ps -o rss= -p "$pid" 2>/dev/null | tr -d ' ')
	echo "after restore, $fork: $s (sandbox process RSS ${rss:-?} KiB)"
	if [[ ${s%% *} != "$tok" ]] || ((${s##* } <= ${at##* })); then
		ok=0
	fi
done
if ((ok)); then
	echo "RESULT 1: memory kept: both restores go on with the token and the counter of the checkpoint"
else
	echo "RESULT 1: memory NOT kept"
fi

echo "== 2. the same through dockerd"
echo "dockerd experimental (needed for POST /containers/{id}/checkpoints): $(docker info --format '{{.ExperimentalBuild}}')"
docker rm -f "$name" >/dev/null
docker run -d --name "$name" --runtime runsc --network none "$image" sleep 600 >/dev/null
cid=$(docker inspect -f '{{.Id}}' "$name")
if timeout 60 runsc --root=/var/run/docker/runtime-runc/moby checkpoint --leave-running \
	--image-path="$tmp/img-docker" "$cid" </dev/null >"$tmp/docker-checkpoint.log" 2>&1; then
	echo "runsc checkpoint --leave-running of dockerd's container: succeeded"
else
	echo "runsc checkpoint --leave-running of dockerd's container: failed:"
	sed 's/^/    /' "$tmp/docker-checkpoint.log" | tail -4
fi
echo "the container afterwards: $(docker inspect -f '{{.State.Status}}' "$name")"
