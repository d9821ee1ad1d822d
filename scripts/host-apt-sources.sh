#!/usr/bin/env bash
# host-apt-sources.sh OUTDIR — the host's own Debian apt sources, for mmdebstrap.
#
# Reads /etc/apt/sources.list and /etc/apt/sources.list.d/*.{list,sources}
# and keeps the binary ("deb") entries whose suite is the host's codename,
# <codename>-updates or <codename>-security. Everything else — third-party
# repositories such as nodesource (suite "nodistro"), backports, deb-src,
# disabled stanzas, files apt itself ignores — is dropped. Signed-By and the
# other options are kept as written, so apt still checks the same keyring.
#
# Writes OUTDIR/host.sources (deb822 stanzas) and/or OUTDIR/host.list
# (one-line entries), only those that have entries, and prints their paths,
# one a line: exactly the MIRROR arguments mmdebstrap takes. Fails when no
# entry is left.
#
# Environment: APT_SOURCES_ROOT (default /) to read another tree, for tests.
set -euo pipefail

outdir=${1:?usage: host-apt-sources.sh OUTDIR}
root=${APT_SOURCES_ROOT:-/}
root=${root%/}

codename=$(. "$root/etc/os-release" && printf '%s' "${VERSION_CODENAME:-}")
[[ -n $codename ]] || { echo "host-apt-sources: no VERSION_CODENAME in $root/etc/os-release" >&2; exit 1; }

mkdir -p "$outdir"
deb822_out=$outdir/host.sources
oneline_out=$outdir/host.list
: >"$deb822_out"
: >"$oneline_out"

shopt -s nullglob
oneline_files=()
[[ -f $root/etc/apt/sources.list ]] && oneline_files+=("$root/etc/apt/sources.list")
oneline_files+=("$root"/etc/apt/sources.list.d/*.list)
deb822_files=("$root"/etc/apt/sources.list.d/*.sources)

# One-line entries: "deb [opt=val ...] URI SUITE COMPONENT...". The entry is
# copied as written, minus any trailing comment.
if ((${#oneline_files[@]})); then
	awk -v codename="$codename" '
	function wanted(suite) {
		return suite == codename || suite == codename "-updates" || suite == codename "-security"
	}
	{
		line = $0
		sub(/#.*/, "", line)
		if (line !~ /^[ \t]*deb[ \t]/) next
		# Take the [options] block out before splitting on blanks.
		rest = line
		sub(/^[ \t]*deb[ \t]+/, "", rest)
		if (rest ~ /^\[/) {
			if (index(rest, "]") == 0) next
			rest = substr(rest, index(rest, "]") + 1)
		}
		n = split(rest, f, /[ \t]+/)
		k = 0
		for (i = 1; i <= n; i++) if (f[i] != "") g[++k] = f[i]
		# g[1] = URI, g[2] = suite, g[3..] = components
		if (k < 3 || !wanted(g[2])) next
		sub(/[ \t]+$/, "", line)
		sub(/^[ \t]+/, "", line)
		print line
	}' "${oneline_files[@]}" >>"$oneline_out"
fi

# deb822 stanzas: fields, continuation lines (leading blank) and "#" comment
# lines; a blank line ends a stanza. Field names are case-insensitive. The
# stanza is written back with Types narrowed to "deb" and Suites narrowed to
# the wanted ones; every other field keeps its raw text, so a multi-line
# Signed-By (an inline key) survives intact.
for file in "${deb822_files[@]}"; do
	awk -v codename="$codename" '
	function wanted(suite) {
		return suite == codename || suite == codename "-updates" || suite == codename "-security"
	}
	function reset() {
		nf = 0; types = ""; suites = ""; enabled = "yes"; cur = 0
	}
	function flush(   i, n, s, keep, has_deb, t) {
		if (nf == 0) { reset(); return }
		has_deb = 0
		n = split(types, t, /[ \t]+/)
		for (i = 1; i <= n; i++) if (t[i] == "deb") has_deb = 1
		keep = ""
		n = split(suites, s, /[ \t]+/)
		for (i = 1; i <= n; i++) if (s[i] != "" && wanted(s[i])) keep = keep (keep == "" ? "" : " ") s[i]
		if (has_deb && keep != "" && tolower(enabled) != "no") {
			if (printed) print ""
			print "Types: deb"
			print "Suites: " keep
			for (i = 1; i <= nf; i++) {
				if (name[i] == "types" || name[i] == "suites" || name[i] == "enabled") continue
				print raw[i]
			}
			printed = 1
		}
		reset()
	}
	BEGIN { reset(); printed = 0 }
	/^#/ { next }
	/^[ \t]*$/ { flush(); next }
	/^[ \t]/ {
		# Continuation of the previous field.
		if (cur) {
			raw[cur] = raw[cur] "\n" $0
			v = $0; sub(/^[ \t]+/, "", v)
			if (name[cur] == "types") types = types " " v
			if (name[cur] == "suites") suites = suites " " v
		}
		next
	}
	/^[A-Za-z0-9-]+:/ {
		nf++
		cur = nf
		raw[nf] = $0
		key = tolower(substr($0, 1, index($0, ":") - 1))
		name[nf] = key
		v = substr($0, index($0, ":") + 1)
		gsub(/^[ \t]+|[ \t]+$/, "", v)
		if (key == "types") types = v
		if (key == "suites") suites = v
		if (key == "enabled") enabled = v
		next
	}
	END { flush() }
	' "$file" >"$outdir/.stanzas"
	if [[ -s $outdir/.stanzas ]]; then
		[[ -s $deb822_out ]] && echo >>"$deb822_out"
		cat "$outdir/.stanzas" >>"$deb822_out"
	fi
	rm -f "$outdir/.stanzas"
done

found=0
for out in "$deb822_out" "$oneline_out"; do
	if [[ -s $out ]]; then
		printf '%s\n' "$out"
		found=1
	else
		rm -f "$out"
	fi
done
if ((!found)); then
	echo "host-apt-sources: no apt source for $codename, $codename-updates or $codename-security under $root/etc/apt" >&2
	exit 1
fi
