#!/bin/bash
# probe-gvisor-checkpoint.sh — can a gVisor sandbox's memory be saved and
# brought back on this host (issue 38, item 4)? Runs the python image's
# root file system under runsc directly (no Docker), with a Python process
# counting in memory; checkpoints it, restores it into a new sandbox and
# says whether the count went on from where it was (memory kept) or began
# again. Prints the times. Everything it makes is under a temporary
# directory, removed on exit. Needs root, runsc and sandboxd/python.
set -euo pipefail

image=${1:-sandboxd/python:latest}
work=$(mktemp -d /var/tmp/sbx-gvisor-probe-XXXXXX)
root=$work/state
cid=""
cleanup() {
        runsc --root="$root" kill probe-b KILL 2>/dev/null || true
        runsc --root="$root" delete -force probe-a probe-b 2>/dev/null || true
        mountpoint -q "$work/bundle/rootfs" && umount "$work/bundle/rootfs"
        [ -n "$cid" ] && docker rm -f "$cid" >/dev/null 2>&1
        rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/bundle/rootfs" "$work/img" "$root"
cid=$(docker create "$image" true)
docker export "$cid" | tar -C "$work/bundle/rootfs" -xf -
docker rm "$cid" >/dev/null
cid=""
mount --bind "$work/bundle/rootfs" "$work/bundle/rootfs"
cd "$work/bundle"
# a token drawn at the process's start and a count, both in its memory (the file only shows
# them): a process started again would draw another token and count from 0
runsc spec -- python3 -c 'import os, time
token, x = os.urandom(8).hex(), 0
while True:
    x += 1
    open("/tmp/x", "w").write("%s %d" % (token, x))
    time.sleep(0.01)'
python3 -c 'import json; c = json.load(open("config.json")); c["process"]["terminal"] = False
c["root"]["readonly"] = False; json.dump(c, open("config.json", "w"))'

count() { # the token and count as an exec in the sandbox reads them; an exec can come back
        # empty for a moment after a start or a restore: 5 s at most
        local v=""
        for _ in $(seq 50); do
                v=$(runsc --root="$root" exec "$1" python3 -c 'import sys; sys.stdout.write(open("/tmp/x").read())' \
                        2>/dev/null) && [ -n "$v" ] && break
                sleep 0.1
        done
        echo "$v"
}
ms() { date +%s%3N; }

runsc --root="$root" --network=none run -detach -bundle . probe-a >/dev/null
sleep 2
before=$(count probe-a)
t0=$(ms)
runsc --root="$root" checkpoint --image-path="$work/img" probe-a
t1=$(ms)
runsc --root="$root" delete probe-a
t2=$(ms)
runsc --root="$root" --network=none restore --image-path="$work/img" -detach -bundle . probe-b
t3=$(ms)
after=$(count probe-b)
echo "gvisor-probe: runsc $(runsc --version | head -1 | awk '{print $3}')"
echo "gvisor-probe: checkpoint $((t1 - t0)) ms, image $(du -k "$work/img" | awk '{print $1}') KiB; restore $((t3 - t2)) ms"
echo "gvisor-probe: token and count before the checkpoint: ${before:-?}; after the restore: ${after:-?}"
if [ -n "$before" ] && [ -n "$after" ] && [ "${before% *}" = "${after% *}" ] && [ "${after#* }" -ge "${before#* }" ]; then
        echo "gvisor-probe: memory kept (the process went on counting from its own memory)"
else
        echo "gvisor-probe: memory NOT kept"
        exit 1
fi
