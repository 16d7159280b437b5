#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Checks C files against .clang-format (clang-format 14) and shows what it would change; with
# --fix rewrites them in place (`make format`).
# usage: scripts/check-format.sh [--fix] [FILE...]
#
# Without FILEs it takes the C files (user/ loader/ fuzz/ examples/ tests/ bpf/) that differ
# from the base named in scripts/format-base: changed, added or renamed since that commit,
# committed or not, and new untracked ones. A tree diff against a commit works the same in a
# fresh clone with full history and in a work tree, whatever was merged since. Once the whole
# tree is formatted, "all" in that file checks every file. FORMAT_BASE=REV|all overrides it.
set -uo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format-14}
specs=('user/*.[ch]' 'loader/*.[ch]' 'fuzz/*.[ch]' 'examples/*.[ch]' 'tests/*.[ch]' 'bpf/*.[ch]' 'tools/*.[ch]')

fix=0
if [ "${1:-}" = --fix ]; then
	fix=1
	shift
fi
if ! command -v "$CLANG_FORMAT" >/dev/null; then
	echo "format: $CLANG_FORMAT not found; install it with scripts/deps.sh" \
	     "(Debian: clang-format-14)" >&2
	exit 2
fi

if [ $# -gt 0 ]; then
	files=("$@")
	what="the files given"
else
	base=${FORMAT_BASE:-$(sed -n '/^[^#[:space:]]/{p;q}' scripts/format-base)}
	if [ "$base" = all ]; then
		mapfile -t files < <(git ls-files -- "${specs[@]}")
		what="every C file"
	else
		if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
			echo "format: the base commit $base (scripts/format-base) is not in this" \
			     "clone; a shallow clone lacks it: git fetch --unshallow, or" \
			     "FORMAT_BASE=all, or name the files" >&2
			exit 2
		fi
		mapfile -t files < <({
			git diff --name-only --diff-filter=d "$base" -- "${specs[@]}"
			git ls-files --others --exclude-standard -- "${specs[@]}"
		} | sort -u)
		what="the C files changed since $(git rev-parse --short "$base")"
	fi
fi

t0=$(date +%s)
bad=0 lines=0
for f in "${files[@]}"; do
	if [ ! -f "$f" ]; then
		echo "format: $f: no such file" >&2
		bad=$((bad + 1))
		continue
	fi
	if [ "$fix" = 1 ]; then
		"$CLANG_FORMAT" -i --style=file "$f" || bad=$((bad + 1))
		continue
	fi
	if ! d=$("$CLANG_FORMAT" --style=file "$f" |
		 diff -u --label "$f" --label "$f (formatted)" "$f" -); then
		n=$(printf '%s\n' "$d" | grep -c '^+[^+]')
		echo "format: $f: $n lines would change:"
		printf '%s\n' "$d" | sed -n '3,22p'
		if [ "$(printf '%s\n' "$d" | wc -l)" -gt 22 ]; then
			echo "  ... ($CLANG_FORMAT $f | diff $f - for the rest)"
		fi
		bad=$((bad + 1))
		lines=$((lines + n))
	fi
done
secs=$(($(date +%s) - t0))

if [ "$fix" = 1 ]; then
	echo "format: rewrote ${#files[@]} files ($what)"
	[ "$bad" -eq 0 ]
	exit
fi
if [ "$bad" -ne 0 ]; then
	echo "format: $bad of ${#files[@]} files ($what) are not formatted as .clang-format says" \
	     "($lines lines would change, ${secs} s); make format rewrites them"
	exit 1
fi
echo "format: ${#files[@]} files formatted as .clang-format says ($what, ${secs} s)"
