#!/usr/bin/env bash
# test.sh — set up, build and run every sandboxd test.
#
#   scripts/test.sh          setup.sh, build into build/, ctest -L unit, then
#                            ctest -L integration (real dockerd), then the JS
#                            tests in tests/js/ if that directory exists, then
#                            the Python and TypeScript clients' tests and the
#                            examples (eval harness, CodeAct loop; clients/, examples/).
#   scripts/test.sh --asan   build into build-asan with ASan+UBSan and run the
#                            unit tests and the stress programs (no Docker).
#   scripts/test.sh --tsan   build into build-tsan with ThreadSanitizer and run
#                            the concurrency stress programs (tests/stress/,
#                            ctest -L stress), and the unit tests as well if
#                            Criterion's runner can start under TSan (today it
#                            cannot: Criterion issue #274).
#   scripts/test.sh --node   build into build/ and run the Criterion integration
#                            suites that cross the node link with
#                            SANDBOXD_TEST_NODE=1: every daemon a test opens
#                            runs its node part in a separate `sandboxd node`
#                            over TLS on loopback (tests/helpers/nodeenv.h).
#                            Those suites are the ones whose traffic the node
#                            agent carries (runner connections: exec, cells,
#                            files, services, pause's thaw, the runner check;
#                            gateway streams: egress, published ports, the
#                            ratchet's sockets; epochs and re-adoption:
#                            durable, pool claims, restarts), and in those the
#                            tests whose subject is the link (the list in the
#                            --node branch below); the other suites and tests
#                            (fronts, store, quotas, caps, labels, snapshots
#                            of the host's workspace ...) run the same code
#                            either way. SANDBOXD_NODE_SUITES=all runs every
#                            test of every suite. No JS or client tests.
#   scripts/test.sh --k8s    setup.sh, build into build/, start the Kubernetes
#                            testbed (scripts/k8s-testbed.sh) unless it already
#                            runs, run tests/k8s/smoke.sh and the ctest suites
#                            named *kubernetes* or *k8s* against it, with
#                            sandboxd/test and sandboxd/daemon (built from this
#                            build by build-images.sh --only daemon) imported
#                            into both nodes (KUBECONFIG and
#                            SANDBOXD_K8S_KUBECONFIG point at its admin
#                            kubeconfig), then stop it if this run started it.
#                            If the testbed cannot start this is a skip with
#                            the reason, or a failure when SANDBOXD_CI=1.
#   scripts/test.sh --repeat N
#                            the flake hunt: as with no option, but the
#                            integration and JS tests run N times (build, unit
#                            tests and format check once), each repetition
#                            with a run id of its own ($SANDBOXD_TEST_RUN-rK).
#                            Logs go to $BUILD/repeat/rK/; at the end it prints
#                            every test that failed, "failed k of N", and exits
#                            non-zero if any did.
#
# Every container a test creates is labelled sandboxd.test.run=$SANDBOXD_TEST_RUN
# (a fresh id per run, exported here); an EXIT trap removes them all, whether
# the tests pass, fail or crash. The script goes on after a failed test step so
# one run reports everything, and exits non-zero if any step failed. Two copies
# may run side by side if each has its own SANDBOXD_BUILD_DIR and run id.
#
# Environment: SANDBOXD_BUILD_DIR (default build, build-asan or build-tsan),
#              SANDBOXD_TEST_RUN (default: a fresh id), SANDBOXD_DOCKER_SOCKET,
#              SANDBOXD_STRESS_SCALE (--tsan: iterations in percent, default 100),
#              SANDBOXD_FORMAT_CHECK (default 1: scripts/format.sh --check runs with the
#              unit tests; 0 skips it), SANDBOXD_NODE_SUITES=all (--node: every suite),
#              SANDBOXD_SKIP_SETUP=1 (do not run scripts/setup.sh: .ci/run runs it once,
#              then test.sh and the sanitizer runs side by side),
#              SANDBOXD_CI=1 (set by .ci/run: --k8s fails
#              when the testbed cannot start), K8S_TESTBED_* (scripts/k8s-testbed.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

asan=0
tsan=0
k8s=0
repeat=0
node=0
case ${1:-} in
'') ;;
--node) node=1 ;;
--asan) asan=1 ;;
--k8s) k8s=1 ;;
--tsan) tsan=1 ;;
--repeat)
	repeat=${2:-}
	if ! [[ $repeat =~ ^[1-9][0-9]*$ ]]; then
		echo "usage: scripts/test.sh --repeat N (N >= 1)" >&2
		exit 2
	fi
	;;
-h | --help) sed -n '2,67s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
*) echo "usage: scripts/test.sh [--asan | --tsan | --node | --k8s | --repeat N]" >&2; exit 2 ;;
esac

log() { printf '\ntest: %s\n' "$*" >&2; }

if ((asan)); then
	BUILD=${SANDBOXD_BUILD_DIR:-build-asan}
elif ((tsan)); then
	BUILD=${SANDBOXD_BUILD_DIR:-build-tsan}
else
	BUILD=${SANDBOXD_BUILD_DIR:-build}
fi

SOCK=${SANDBOXD_DOCKER_SOCKET:-/var/run/docker.sock}
export SANDBOXD_TEST_RUN=${SANDBOXD_TEST_RUN:-t$(date +%s)-$RANDOM}

# sweep_run ID: remove what run ID left behind.
sweep_run() {
	local run=$1 label ids
	# curl, not the docker CLI: the sweep must work with whatever client is
	# (or is not) on PATH, and must not fail the trap.
	for label in "sandboxd.test.run=$run" "sandboxd.instance=$run"; do
		ids=$(curl -s --max-time 10 --unix-socket "$SOCK" -G http://d/containers/json \
			--data-urlencode all=1 \
			--data-urlencode "filters={\"label\":[\"$label\"]}" 2>/dev/null |
			jq -r '.[].Id' 2>/dev/null || true)
		for id in $ids; do
			curl -s --max-time 30 --unix-socket "$SOCK" -X DELETE \
				"http://d/containers/$id?force=1&v=1" >/dev/null 2>&1 || true
		done
		[[ -z $ids ]] || echo "test: removed $(wc -w <<<"$ids") container(s) labelled $label" >&2
	done
	# Workspace images (workspace.quota_mode loop) that a crashed test left
	# mounted: every one lives under a temp dir named after the run id. The
	# loop devices have autoclear and go with the mount; any still attached
	# to a file of this run is detached.
	local mp dev n=0
	while read -r mp; do
		umount -l "$mp" 2>/dev/null && n=$((n + 1))
	done < <(awk -v id="$run" 'index($5, "/sandboxd-test-" id "-") { print $5 }' /proc/self/mountinfo | sort -r)
	while read -r dev; do
		losetup -d "$dev" 2>/dev/null && n=$((n + 1))
	done < <(losetup -l -n -O NAME,BACK-FILE 2>/dev/null | awk -v id="$run" 'index($2, "/sandboxd-test-" id "-") { print $1 }')
	((n == 0)) || echo "test: released $n workspace mount(s)/loop device(s) of run $run" >&2
	# The client tests' daemon dirs (clients/python/tests/daemon.py) of a run that was killed.
	rm -rf "${TMPDIR:-/tmp}"/sbx-clients-"$run"-* 2>/dev/null || true
}
# Every run id this script used (--repeat gives each repetition its own).
runs=("$SANDBOXD_TEST_RUN")
# --k8s: 1 once this run started the testbed (the sweep stops it).
k8s_own=0
# what the failing suites said (ctest_run below)
details=$(mktemp)
sweep() {
	local rc=$? run
	rm -f "$details"
	for run in "${runs[@]}"; do
		sweep_run "$run"
	done
	if ((k8s_own)); then
		bash scripts/k8s-testbed.sh stop || rc=1
	fi
	exit "$rc"
}
trap sweep EXIT

if [[ ${SANDBOXD_SKIP_SETUP:-0} == 1 ]]; then
	log "run $SANDBOXD_TEST_RUN: setup skipped (SANDBOXD_SKIP_SETUP=1: the caller ran scripts/setup.sh)"
elif ((asan || tsan)); then
	log "run $SANDBOXD_TEST_RUN: setup"
	# The unit tests and the stress programs need neither Docker images nor a daemon.
	SANDBOXD_SKIP_IMAGES=1 bash scripts/setup.sh
else
	log "run $SANDBOXD_TEST_RUN: setup"
	bash scripts/setup.sh
fi

# --repeat: the failed tests of one repetition, one name a line, from
# ctest's console log (a Criterion suite's "[FAIL] suite::test" lines name the
# tests inside it; a crash or a timeout without them names the suite) and
# node's TAP report (the failing tests themselves, not the suites that fail
# because a test in them did, nor the tests cancelled with their suite).
ctest_failures() {
	awk '
	/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / {
		cur = $4
		if ($0 !~ / Passed /) { bad[cur] = 1; order[++n] = cur }
		next
	}
	/^ *Start +[0-9]+: / { cur = ""; next }
	/tests passed, [0-9]+ tests failed out of/ { summary = 1 }
	cur != "" && (cur in bad) && match($0, /\[FAIL\] [A-Za-z0-9_]+::[A-Za-z0-9_]+/) {
		key = cur " " substr($0, RSTART + 7, RLENGTH - 7)
		if (!(key in seen)) { seen[key] = 1; subs[cur] = subs[cur] key "\n" }
	}
	END {
		for (i = 1; i <= n; i++) printf "%s", (subs[order[i]] != "" ? subs[order[i]] : order[i] "\n")
		if (!summary) print "ctest (no summary: it did not finish)"
	}' "$1"
}
js_failures() {
	[[ -s $1 ]] || { echo "node --test (no report)"; return; }
	awk '
	{ match($0, /^ */); lvl = int(RLENGTH / 4); line = substr($0, RLENGTH + 1) }
	line ~ /^# Subtest: / { name[lvl] = substr(line, 12); next }
	line ~ /^not ok [0-9]+ / {
		full = name[0]
		for (l = 1; l <= lvl; l++) full = full " > " name[l]
		gsub(/\\#/, "#", full)
		pending = 1; kind = ""; file = ""; next
	}
	pending && line ~ /^location: / { file = line; sub(/^location: .*\//, "", file); sub(/:[0-9]+:[0-9]+.$/, "", file); next }
	pending && line ~ /^failureType: / { kind = line; next }
	pending && line == "..." {
		if (kind !~ /subtestsFailed|cancelledByParent/) print (file != "" ? file ": " : "") full
		pending = 0
	}
	/^# (pass|fail) [0-9]+$/ { summary = 1 }
	END { if (!summary) print "node --test (no summary: it did not finish)" }' "$1"
}

# The integration and JS tests, $repeat times, each with a run id of its
# own; then every test that failed, with how often.
repeat_suites() {
	local base=$SANDBOXD_TEST_RUN k dir t0 secs n_fail
	local out="$ROOT/$BUILD/repeat"
	rm -rf "$out" && mkdir -p "$out"
	for ((k = 1; k <= repeat; k++)); do
		dir="$out/r$k"
		mkdir -p "$dir"
		export SANDBOXD_TEST_RUN="$base-r$k"
		runs+=("$SANDBOXD_TEST_RUN")
		log "repetition $k of $repeat (run $SANDBOXD_TEST_RUN; load $(cut -d' ' -f1-3 /proc/loadavg))"
		t0=$SECONDS
		ctest --test-dir "$BUILD" --output-on-failure -L integration 2>&1 | tee "$dir/ctest.log" >&2 || true
		ctest_failures "$dir/ctest.log" >"$dir/failures"
		if ((js)); then
			node --test --test-reporter=spec --test-reporter-destination=stderr \
				--test-reporter=tap --test-reporter-destination="$dir/js.tap" \
				tests/js/*.test.mjs 2>&1 | tee "$dir/js.log" >&2 || true
			js_failures "$dir/js.tap" >>"$dir/failures"
		fi
		sweep_run "$SANDBOXD_TEST_RUN"
		secs=$((SECONDS - t0))
		n_fail=$(wc -l <"$dir/failures")
		echo "$k $secs $(cut -d' ' -f1-3 /proc/loadavg) $n_fail" >>"$out/times"
		log "repetition $k of $repeat: ${secs}s, $n_fail failed, load $(cut -d' ' -f1-3 /proc/loadavg)"
	done
	export SANDBOXD_TEST_RUN=$base
	log "$repeat repetitions (logs in $out/rK/)"
	awk '{ printf "  repetition %d: %ds, load at the end %s %s %s, %d failed\n", $1, $2, $3, $4, $5, $6 }' "$out/times" >&2
	cat "$out"/r*/failures | sort | uniq -c | sort -rn >"$out/summary"
	if [[ -s $out/summary ]]; then
		awk -v n="$repeat" '{ k = $1; sub(/^ *[0-9]+ /, ""); printf "  %s: failed %d of %d\n", $0, k, n }' "$out/summary" >&2
		failed+=("flaky or failing tests: $(wc -l <"$out/summary")")
	else
		echo "  no test failed in $repeat repetitions" >&2
	fi
}

failed=()
# ctest over $BUILD with its console log kept; when it fails, the Criterion
# assertions that failed ("[----] file:line: ..." and their messages) and the
# "[FAIL]" lines are kept too and printed again at the very end, so that the
# last lines of a CI log name what failed, not only the suite.
ctest_run() {
	local log
	log=$(mktemp)
	if ctest --test-dir "$BUILD" --output-on-failure "$@" 2>&1 | tee "$log" >&2; then
		rm -f "$log"
		return 0
	fi
	grep -aE '^\[(----|FAIL)\] |^ *[0-9]+ - [A-Za-z0-9_]+ \(' "$log" | head -n 80 >>"$details" || true
	rm -f "$log"
	return 1
}
step() {
	local name=$1
	shift
	log "$name"
	if "$@"; then
		return 0
	fi
	failed+=("$name")
	return 1
}

# The Kubernetes testbed's suites.
k8s_suites() {
	local state=${K8S_TESTBED_STATE:-/run/sandboxd-k8s} t0=$SECONDS rc=0 n
	if [[ -f $state/started ]] && bash scripts/k8s-testbed.sh status >/dev/null 2>&1; then
		log "Kubernetes testbed: using the one running in $state"
	elif bash scripts/k8s-testbed.sh start >/dev/null; then
		k8s_own=1
		log "Kubernetes testbed: started in $((SECONDS - t0))s"
	elif [[ ${SANDBOXD_CI:-0} == 1 ]]; then
		failed+=("Kubernetes testbed: cannot start")
		return 1
	else
		log "Kubernetes suites: SKIPPED, the testbed cannot start here (scripts/k8s-testbed.sh start says why above)"
		return 0
	fi
	export KUBECONFIG=$state/kubeconfig/admin.conf SANDBOXD_K8S_KUBECONFIG=$state/kubeconfig/admin.conf
	step "Kubernetes testbed smoke test" bash tests/k8s/smoke.sh || rc=1
	# The suites labelled k8s, and those named after the engine (an
	# integration suite such as integration_test_kubernetes skips when
	# SANDBOXD_K8S_KUBECONFIG is unset, so it runs for real only here).
	local sel=(-R 'kubernetes|k8s')
	n=$(ctest --test-dir "$BUILD" -N "${sel[@]}" 2>/dev/null | sed -n 's/^Total Tests: //p')
	if [[ ${n:-0} -gt 0 ]]; then
		# the nodes pull nothing (imagePullPolicy Never): they get the
		# suites' images from dockerd (scripts/build-images.sh built them); the
		# flows suite (test_k8s_flows.c) runs sandboxd/python (about 70 s)
		step "Kubernetes testbed: the test images on both nodes" \
			bash scripts/k8s-testbed.sh import-docker-image sandboxd/test:latest sandboxd/python:latest || rc=1
		# the node agent DaemonSet's image, of this build (test_k8s_node_agent.c)
		step "Kubernetes testbed: sandboxd/daemon of this build on both nodes" \
			bash -c 'SANDBOXD_BUILD_DIR="$1" bash scripts/build-images.sh --only daemon &&
				bash scripts/k8s-testbed.sh import-docker-image sandboxd/daemon:latest' _ "$BUILD" || rc=1
		step "Kubernetes suites" ctest_run "${sel[@]}" || rc=1
	fi
	if ((k8s_own)); then
		t0=$SECONDS
		step "Kubernetes testbed: stop (and the host restored)" bash scripts/k8s-testbed.sh stop || rc=1
		k8s_own=0
		log "Kubernetes testbed: stopped in $((SECONDS - t0))s"
	fi
	return "$rc"
}

if ((k8s)); then
	log "build into $BUILD"
	cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build "$BUILD" -j2
	export SANDBOXD_BUILD_DIR="$BUILD"
	k8s_suites || true
elif ((asan)); then
	export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
	export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
	log "build (ASan+UBSan) into $BUILD"
	cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANDBOXD_ASAN=ON
	# what the unit tests and the stress programs need, no integration binary
	cmake --build "$BUILD" -j2 --target unit_tests stress
	step "unit tests (ASan+UBSan)" ctest_run -L unit || true
	# a use after free that a race makes (stress_http_mcp) aborts here with its stack
	step "stress programs (ASan+UBSan)" ctest_run -L stress || true
elif ((tsan)); then
	# Reports go to files (stress_log points stderr at /dev/null while it
	# hammers the log); any report fails the program (exit 66) and is shown.
	reports="$ROOT/$BUILD/tsan-reports"
	rm -rf "$reports" && mkdir -p "$reports"
	export TSAN_OPTIONS=${TSAN_OPTIONS:-second_deadlock_stack=1 log_path=$reports/report}
	log "build (TSan) into $BUILD: the stress programs"
	cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANDBOXD_TSAN=ON
	cmake --build "$BUILD" -j2 --target stress
	step "stress programs (TSan)" ctest_run -L stress || true
	# Criterion's runner maps its arena where TSan keeps its shadow memory
	# and stops at once ("Could not initialize inheritable arena", or a SEGV
	# inside libcriterion): run the unit tests only if a small suite passes.
	cmake --build "$BUILD" -j2 --target unit_test_text
	if TSAN_OPTIONS= "$BUILD/unit_test_text" --jobs=1 >/dev/null 2>&1; then
		cmake --build "$BUILD" -j2
		step "unit tests (TSan)" ctest_run -L unit || true
	else
		log "unit tests (TSan): skipped, Criterion's runner cannot start under TSan (Criterion issue #274)"
	fi
	if compgen -G "$reports/report*" >/dev/null; then
		cat "$reports"/report* >&2
		failed+=("TSan reports")
	fi
elif ((node)); then
	log "build into $BUILD"
	cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build "$BUILD" -j2
	export SANDBOXD_BUILD_DIR="$BUILD" SANDBOXD_TEST_NODE=1
	# the suites that cross the link (the usage text above says why these)
	node_suites='integration_test_(exec|cells|files|services|pause|impostor|runner|egress|network|ratchet|durable|pool|node)$'
	# and in them the tests whose subject is the link: what a runner
	# connection or a gateway stream carries (output, input, bulk bytes, an
	# interrupt, a published port, egress) and what survives a restart or a
	# claim (epochs, re-adoption). Not again: caps, bad input, memory and
	# leak counts, listing, the docker exec fallback, the OOM path; the same
	# code judges them either way (about 300 s of the pass).
	node_tests=(
		'egress_ct/*' 'impostor/*' 'network/*' 'ratchet/*' 'durable/*' 'node/*'
		cells/state_rich_outputs_and_tracebacks cells/large_outputs_come_back_by_reference
		cells/cancel_execution_interrupts_a_cell cells/a_cell_outlives_a_sigkilled_daemon_with_its_outputs
		cells/an_output_flood_leaves_the_kernel_alive cells/a_daemon_restart_keeps_the_context
		cells/node_context_keeps_state cells/pip_install_from_a_loopback_index_through_the_egress_proxy
		cells/a_warm_slot_starts_the_default_context_ahead
		services/http_server_runs_with_its_port_detected_and_reachable
		services/runner_reports_the_port_and_the_exact_pid services/exit_while_the_daemon_is_away
		services/stop_leaves_no_process_behind services/crashing_service_fails_with_exit_code_and_logs
		'exec/!(thousand_sequential_execs_leak_nothing|concurrency_caps_refuse_with_busy|bad_input_is_refused|list_filters_on_the_state_it_shows|oom_kill_of_an_execution_says_oom)'
		pause/a_client_on_a_published_port_resumes_a_paused_session
		pause/a_paused_session_survives_a_sigkilled_daemon_and_resumes
		pause/any_request_resumes_a_paused_session pause/an_idle_session_is_paused_keeps_x_and_uses_no_cpu
		pool/first_command_runs_in_a_pool_container_with_its_own_workspace_and_the_pool_refills
		pool/sigkill_at_each_step_of_a_claim_leaves_the_container_with_the_session_once
		pool/a_claim_cut_short_before_the_sessions_workspace_got_files_is_given_up_at_restart
		'runner/!(without_the_binary_the_session_still_serves)'
		'files/!(docker_exec_fallback|normalize_paths|refusals)'
	)
	# A name that no longer exists (renamed, removed) must not shrink the pass unseen.
	for t in "${node_tests[@]}"; do
		[[ $t == */*[*!]* ]] && continue
		"$BUILD/integration_test_${t%%/*}" --list 2>/dev/null | grep -qx "[├└]── ${t#*/}" ||
			failed+=("--node: no test $t (scripts/test.sh names it)")
	done
	# (Criterion's CRITERION_TEST_PATTERN, suite/test globs: every suite
	# binary runs only the tests it matches)
	export CRITERION_TEST_PATTERN
	CRITERION_TEST_PATTERN="@($(IFS='|'; echo "${node_tests[*]}"))"
	if [[ ${SANDBOXD_NODE_SUITES:-} == all ]]; then
		node_suites='^integration_test_'
		CRITERION_TEST_PATTERN='*'
	fi
	step "integration tests over a separate node agent" \
		ctest_run -L integration -R "$node_suites" -E integration_install || true
else
	log "build into $BUILD"
	cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build "$BUILD" -j2
	step "unit tests" ctest_run -L unit || true
	if [[ ${SANDBOXD_FORMAT_CHECK:-1} == 1 ]]; then
		step "format (.clang-format)" bash scripts/format.sh --check || true
	fi
	js=0
	if [[ -d tests/js ]]; then
		js=1
		if [[ -f tests/package.json ]]; then
			if [[ -f tests/package-lock.json ]]; then
				step "npm ci" npm ci --prefix tests --no-audit --no-fund || true
			else
				step "npm install" npm install --prefix tests --no-audit --no-fund || true
			fi
		fi
	fi
	export SANDBOXD_BUILD_DIR="$BUILD"
	if ((repeat == 0)); then
		step "integration tests" ctest_run -L integration || true
		if ((js)); then
			step "JS tests" node --test tests/js/*.test.mjs || true
		fi
	else
		repeat_suites
	fi
	# The client libraries and the example, each against daemons of its own
	# (instance = this run: the sweep below removes what a crash left).
	step "Python client tests" /usr/bin/python3 -m unittest discover -s clients/python/tests -t clients/python/tests || true
	if step "TypeScript client: npm ci" npm ci --prefix clients/typescript --no-audit --no-fund; then
		step "TypeScript client tests" npm test --prefix clients/typescript || true
		step "example: eval harness (TypeScript client)" /usr/bin/python3 clients/python/tests/daemon.py -- \
			node examples/eval_harness/eval_harness.mjs || true
		step "example: CodeAct loop (TypeScript client)" /usr/bin/python3 clients/python/tests/daemon.py -- \
			node examples/codeact/codeact.mjs || true
	fi
	step "example: eval harness (Python client)" /usr/bin/python3 clients/python/tests/daemon.py -- \
		/usr/bin/python3 examples/eval_harness/eval_harness.py || true
	step "example: CodeAct loop (Python client)" /usr/bin/python3 clients/python/tests/daemon.py -- \
		/usr/bin/python3 examples/codeact/codeact.py || true
fi

if ((${#failed[@]})); then
	if [[ -s $details ]]; then
		log "what failed, as the suites said it:"
		cat "$details" >&2
	fi
	log "FAILED: $(printf '%s; ' "${failed[@]}")"
	exit 1
fi
log "all passed (run $SANDBOXD_TEST_RUN)"
