#!/usr/bin/env bash
# format.sh — lay out the C sources with .clang-format (clang-format 14).
#
#   scripts/format.sh           rewrite every C file of src/ include/ runner/
#                               tests/ bench/ in place
#   scripts/format.sh --check   change nothing; list each file that would
#                               change and exit 1 if any would
#   scripts/format.sh [--check] FILE...   only these files
#
# Only files git tracks are touched (nothing in build directories). The
# layout differs between clang-format versions, so a version other than 14
# is refused unless SANDBOXD_CLANG_FORMAT names the binary to use anyway.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

check=0
case ${1:-} in
--check) check=1; shift ;;
-h | --help) sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
-*) echo "usage: scripts/format.sh [--check] [FILE...]" >&2; exit 2 ;;
esac

if [[ -n ${SANDBOXD_CLANG_FORMAT:-} ]]; then
	cf=$SANDBOXD_CLANG_FORMAT
else
	cf=$(command -v clang-format-14 || command -v clang-format || true)
	[[ -n $cf ]] || { echo "format: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
	version=$("$cf" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
	if [[ $version != 14 ]]; then
		echo "format: $cf is version ${version:-?}, .clang-format is tuned for 14 (set SANDBOXD_CLANG_FORMAT to use it anyway)" >&2
		exit 2
	fi
fi

if (($#)); then
	files=("$@")
else
	mapfile -t files < <(git ls-files -- 'src/*.[ch]' 'include/*.h' 'runner/*.[ch]' 'tests/*.[ch]' 'bench/*.[ch]')
fi
((${#files[@]})) || exit 0

if ((check)); then
	bad=0
	for f in "${files[@]}"; do
		if ! "$cf" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
			echo "format: $f is not laid out as .clang-format says" >&2
			bad=1
		fi
	done
	((bad == 0)) || echo "format: run scripts/format.sh to fix" >&2
	exit "$bad"
fi
"$cf" --style=file -i "${files[@]}"
