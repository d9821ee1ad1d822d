#!/usr/bin/env bash
# install.sh — integration test of README "Install as a service" and "Connect an agent".
#
# Installs the build into a temporary prefix with `cmake --install`, checks what landed where,
# runs `systemd-analyze verify` on every unit, starts the *installed* daemon directly (this test
# never assumes systemd is PID 1) with a NOTIFY_SOCKET of its own and waits for READY=1, then
# runs the README's connect-an-agent blocks literally: the token command, the MCP client
# configuration (its command, args and env) and the first exec.
#
# Usage: install.sh SOURCE_DIR BUILD_DIR. Everything it makes is under one temp dir and the
# daemon's containers carry sandboxd.instance=<run id>; the EXIT trap removes both.
set -euo pipefail

SRC=$1
BUILD=$2
RUN=${SANDBOXD_TEST_RUN:-inst$$-$RANDOM}
DOCKER_SOCK=${SANDBOXD_DOCKER_SOCKET:-/var/run/docker.sock}
T=$(mktemp -d /tmp/sbx-install-XXXXXX)
PREFIX=$T/prefix
DAEMON_PID=
SOCAT_PID=

fail() { printf 'install.sh: FAIL: %s\n' "$*" >&2; exit 1; }
note() { printf 'install.sh: %s\n' "$*" >&2; }

cleanup() {
	set +e
	[[ -n $DAEMON_PID ]] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
	[[ -n $SOCAT_PID ]] && kill "$SOCAT_PID" 2>/dev/null && wait "$SOCAT_PID" 2>/dev/null
	ids=$(curl -s --unix-socket "$DOCKER_SOCK" -G "http://d/containers/json" --data-urlencode all=1 \
		--data-urlencode "filters={\"label\":[\"sandboxd.instance=$RUN\"]}" | jq -r '.[].Id')
	for id in $ids; do
		curl -s -o /dev/null --unix-socket "$DOCKER_SOCK" -X DELETE "http://d/containers/$id?force=1&v=1"
	done
	rm -rf "$T"
}
trap cleanup EXIT

# wait_for SECONDS COMMAND...: poll a predicate until it holds or the deadline passes.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# ---- install --------------------------------------------------------------------------------
cmake --install "$BUILD" --prefix "$PREFIX" >"$T/install.log" || { cat "$T/install.log" >&2; fail "cmake --install"; }
for f in bin/sandboxd bin/sandboxctl bin/sandboxd-mcp; do
	[[ -x $PREFIX/$f ]] || fail "$f not installed"
done
CONF=$PREFIX/etc/sandboxd/sandboxd.conf
UNITS=$PREFIX/lib/systemd/system
cmp -s "$CONF" "$SRC/etc/sandboxd.conf" || fail "config not installed as shipped at $CONF"
for u in sandboxd.service sandboxd-gc.service sandboxd-gc.timer; do
	[[ -f $UNITS/$u ]] || fail "unit $u not installed"
done
grep -qx "ExecStart=$PREFIX/bin/sandboxd --config $CONF" "$UNITS/sandboxd.service" ||
	fail "sandboxd.service does not start the installed binary with the installed config"
grep -qx "Type=notify" "$UNITS/sandboxd.service" || fail "sandboxd.service is not Type=notify"
grep -qx "ExecStart=$PREFIX/bin/sandboxd --config $CONF --gc" "$UNITS/sandboxd-gc.service" ||
	fail "sandboxd-gc.service does not run --gc"

# An operator's edited config survives a second install.
echo "# edited by the operator" >>"$CONF"
cmake --install "$BUILD" --prefix "$PREFIX" >"$T/install2.log"
grep -q "edited by the operator" "$CONF" || fail "a re-install overwrote the operator's config"

# ---- every unit verifies ---------------------------------------------------------------------
command -v systemd-analyze >/dev/null || fail "systemd-analyze missing (scripts/setup.sh installs systemd)"
# verify checks that ExecStart's binary exists: the installed one, so this also proves the paths.
out=$(systemd-analyze verify "$UNITS"/sandboxd.service "$UNITS"/sandboxd-gc.service "$UNITS"/sandboxd-gc.timer 2>&1) ||
	fail "systemd-analyze verify: $out"
# Only warnings about units outside ours (e.g. docker.service's own) may appear.
if grep -E "sandboxd(-gc)?\.(service|timer)" <<<"$out" >&2; then
	fail "systemd-analyze verify complained about our units"
fi
# ...and it does catch a broken unit, so the check above means something.
sed "s|^ExecStart=$PREFIX/bin/sandboxd |ExecStart=$PREFIX/bin/nonexistent |" "$UNITS/sandboxd.service" \
	>"$T/broken.service"
if systemd-analyze verify "$T/broken.service" >/dev/null 2>&1; then
	fail "systemd-analyze verify accepted a unit whose binary does not exist"
fi

# ---- run the installed daemon, readiness through NOTIFY_SOCKET -----------------------------
command -v socat >/dev/null || fail "socat missing (scripts/setup.sh installs it)"
"$PREFIX/bin/sandboxd" --config "$CONF" --check-config >/dev/null || fail "installed config does not check"

export SANDBOXD_DATA_DIR=$T/data
export SANDBOXD_API_SOCKET=$T/run/api.sock
export SANDBOXD_ADMIN_SOCKET=$T/run/admin.sock
export SANDBOXD_INSTANCE=$RUN
export SANDBOXD_IMAGE=sandboxd/test:latest
export SANDBOXD_DOCKER_SOCKET=$DOCKER_SOCK
export SANDBOXD_NETWORK_DEFAULT=none
export SANDBOXD_PORTS_PER_SESSION=0
export SANDBOXD_POOL_SIZE=0 # the warm pool is off: the script follows the README's lazy sessions

socat -u "UNIX-RECV:$T/notify.sock" "OPEN:$T/notify.log,creat,append" &
SOCAT_PID=$!
wait_for 10 test -S "$T/notify.sock" || fail "socat did not bind the notify socket"
NOTIFY_SOCKET=$T/notify.sock "$PREFIX/bin/sandboxd" --config "$CONF" >"$T/daemon.log" 2>&1 &
DAEMON_PID=$!
ready() { grep -q "READY=1" "$T/notify.log" 2>/dev/null || ! kill -0 "$DAEMON_PID" 2>/dev/null; }
wait_for 60 ready || fail "no READY=1 within 60 s"
kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$T/daemon.log" >&2; fail "the installed daemon exited"; }
# READY=1 is sent only once both sockets listen.
[[ -S $SANDBOXD_API_SOCKET && -S $SANDBOXD_ADMIN_SOCKET ]] || fail "READY=1 before the sockets exist"
note "installed daemon ready: $(tr '\n' ' ' <"$T/notify.log")"

# ---- README "Connect an agent", literally ---------------------------------------------------
export PATH=$PREFIX/bin:$PATH
# The section's fenced blocks, in order, each to its own file.
awk -v dir="$T" '
	/^## Connect an agent/ { on = 1; next }
	on && /^## / { exit }
	on && /^```/ { if (inblock) { inblock = 0; close(f) } else { inblock = 1; n++; f = dir "/block" n } next }
	inblock { print > f }
' "$SRC/README.md"
[[ -f $T/block1 && -f $T/block2 && -f $T/block3 && ! -f $T/block4 ]] ||
	fail "README's Connect an agent section no longer has its three blocks"

# 1. the token
bash -e "$T/block1" >"$T/token.out" || fail "README block 1 (token create) failed"
token=$(awk '$1 == "token:" { print $2 }' "$T/token.out")
[[ $token == sbx_* ]] || fail "no token in: $(cat "$T/token.out")"
grep -q "sandboxctl token create alice" "$T/block1" || fail "block 1 is not the token command"

# 2. the MCP client configuration: launch what it says, the way a client would.
jq -e . "$T/block2" >/dev/null || fail "README block 2 is not valid JSON"
grep -q "PASTE-THE-TOKEN" "$T/block2" || fail "block 2 has no token placeholder"
sed "s/PASTE-THE-TOKEN/$token/" "$T/block2" >"$T/client.json"
mapfile -t cmd < <(jq -r '.mcpServers.sandboxd | .command, .args[]' "$T/client.json")
mapfile -t envs < <(jq -r '.mcpServers.sandboxd.env | to_entries[] | "\(.key)=\(.value)"' "$T/client.json")
printf '%s\n' \
	'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"install-test","version":"1"}}}' \
	'{"jsonrpc":"2.0","method":"notifications/initialized"}' \
	'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"exec","arguments":{"command":"pwd; echo configured"}}}' |
	env "${envs[@]}" "${cmd[@]}" --drain-ms 60000 >"$T/client.out" 2>"$T/client.err" ||
	fail "the configured MCP server failed: $(cat "$T/client.err")"
jq -e 'select(.id == 2) | (.result.isError // false) == false and (.result.structuredContent.stdout | test("^/workspace\nconfigured"))' \
	"$T/client.out" >/dev/null || fail "exec through the configured client: $(cat "$T/client.out")"

# 3. the first exec, by hand
sed "s/PASTE-THE-TOKEN/$token/" "$T/block3" >"$T/first.sh"
(unset SANDBOXD_TOKEN; bash -e "$T/first.sh") >"$T/first.out" 2>"$T/first.err" ||
	fail "README block 3 (first exec) failed: $(cat "$T/first.err")"
jq -e 'select(.id == 2) | (.result.isError // false) == false and (.result.structuredContent.stdout | test("hello from sandbox"))' \
	"$T/first.out" >/dev/null || fail "first exec did not say hello: $(cat "$T/first.out")"
# The promised listing: alice's session "first" (used by both the config and the first exec).
sandboxctl sessions --user alice >"$T/sessions.out" || fail "sandboxctl sessions"
grep -q "first" "$T/sessions.out" || fail "session first not listed: $(cat "$T/sessions.out")"

# ---- a clean stop: STOPPING=1, exit 0 --------------------------------------------------------
kill -TERM "$DAEMON_PID"
rc=0
wait "$DAEMON_PID" || rc=$?
DAEMON_PID=
((rc == 0)) || fail "the daemon exited $rc on SIGTERM"
wait_for 10 grep -q "STOPPING=1" "$T/notify.log" || fail "no STOPPING=1"
note "ok"
