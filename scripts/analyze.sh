#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Static analysis of the userspace C (user/, loader/, fuzz/, examples/) with clang-tidy 14 and
# the checks in .clang-tidy; fails on any finding. `make analyze` writes the compilation
# database it reads ($BUILD/compile_commands.json, the flags each file builds with) first.
# A finding is fixed, or silenced on its line with a reason:  // NOLINT(check-name): why
# usage: scripts/analyze.sh [FILE.c...]      (default: every file in the compilation database)
#
# Why clang-tidy, measured on this tree with Debian 12's tools (67 files):
#  - clang-tidy 14, clang-analyzer-* (path-sensitive) and bugprone-*, the noisy checks left out
#    (.clang-tidy says which and why): 17 findings, 6 worth a change in the code (an ignored
#    submit error, qsort on NULL, branches that repeat each other, a dead store), the rest the
#    analyzer not knowing an invariant (a table that is never empty, a count that is never 0),
#    which a NOLINT on the line with its reason settles. Findings in headers bpftool generates
#    are dropped. About 45 s on 2 CPUs.
#  - gcc 12 -fanalyzer: 16 findings, 13 of them "leaks" of memory kept in a struct and freed
#    later, which GCC 12's analyzer loses track of; no per-line suppression, only #pragma
#    blocks. Its one real find (a FILE not closed after a short write, fuzz/seeds.c) is fixed.
#  - cppcheck 2.10: 5 findings, 2 of them "unknown macro" (without the system headers it
#    cannot expand libbpf's LIBBPF_OPTS and skips those files), 2 false positives, 1 minor
#    (%u for an int); 57 s on 2 CPUs.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
db=$BUILD/compile_commands.json
TIDY=${CLANG_TIDY:-clang-tidy-14}

if ! command -v "$TIDY" >/dev/null; then
	echo "analyze: $TIDY not found; install it with scripts/deps.sh (Debian: clang-tidy-14)" >&2
	exit 2
fi
if [ ! -s "$db" ]; then
	echo "analyze: $db is missing; run make analyze (it writes it)" >&2
	exit 2
fi
if [ $# -gt 0 ]; then
	files=("$@")
else
	mapfile -t files < <(sed -n 's/.*"file": "\([^"]*\)".*/\1/p' "$db")
fi

t0=$(date +%s)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# One file per clang-tidy run, as many at once as there are CPUs; its own messages
# ("N warnings generated") go to stderr and are dropped unless it fails to run at all.
printf '%s\n' "${files[@]}" |
	xargs -P "$(nproc)" -I{} sh -c '"$0" -p "$1" --quiet "$2" 2>/dev/null || [ $? -eq 1 ]' \
		"$TIDY" "$BUILD" {} >"$out"
status=$?

# Keep the findings in our own code: the analyzer also follows calls into bpftool's generated
# skeletons ($BUILD/skel), whose error paths it cannot model, and reports them there.
root=$(pwd -P)
build_rel=${BUILD#"$root"/}
report=$(awk -v root="$root/" -v build="${build_rel%/}/" '
	index($0, root) == 1 { $0 = substr($0, length(root) + 1) }
	/^[^ ].*:[0-9]+:[0-9]+: (warning|error): / { keep = index($0, build) != 1 }
	keep' "$out")
heads=$(printf '%s\n' "$report" | grep -E '^[^ ].*:[0-9]+:[0-9]+: (warning|error): ')
count=$(printf '%s' "$heads" | grep -c .)
secs=$(($(date +%s) - t0))

if [ "$count" -gt 0 ]; then
	printf '%s\n\nanalyze: the findings:\n%s\n' "$report" "$heads"
fi
if [ "$status" -ne 0 ]; then
	echo "analyze: $TIDY failed to run on some file (status $status); run it by hand:" \
	     "$TIDY -p $BUILD FILE.c" >&2
	exit 2
fi
if [ "$count" -gt 0 ]; then
	echo "analyze: $count findings in ${#files[@]} files (${secs} s); fix each, or silence" \
	     "it on its line with // NOLINT(check): reason"
	exit 1
fi
echo "analyze: ${#files[@]} files, no findings (${secs} s)"
