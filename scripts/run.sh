#!/usr/bin/env bash
# run.sh — set up this machine, build sandboxd and run the daemon in the
# foreground with its embedded defaults (sqlite file, local dockerd, the
# locally built sandboxd/python image). Arguments go to build/sandboxd as is,
# e.g. `scripts/run.sh --print-config` or `scripts/run.sh --gc --dry-run`.
#
# Set-up and build output goes to stderr, so stdout belongs to sandboxd alone
# (`--gc --json` prints its report there).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

bash scripts/setup.sh
{
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build -j2
} >&2
[[ -x build/sandboxd ]] || { echo "run: build/sandboxd was not built" >&2; exit 1; }
exec build/sandboxd "$@"
