#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Runs the libFuzzer targets (fuzz/targets.h) for a bounded time each.
#
#   scripts/fuzz.sh [-k|--keep] [SECONDS] [TARGET...]
#
# SECONDS per target (default 20: `make test` runs the three for about a minute in all; give
# 3600 or more for a real campaign). TARGETs default to all. FUZZ_JOBS=N runs N processes per
# target (libFuzzer -fork). New inputs go to $BUILD/fuzz/corpus/<target> (the committed seeds in
# fuzz/corpus are read, never written); a crash leaves its input in $BUILD/fuzz/artifacts and
# the script fails, saying how to keep it as a regression test (--keep copies it to
# fuzz/regress/<target>/, which tests/test_fuzz_corpus replays in every `make test`).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
keep=0
if [ "${1:-}" = -k ] || [ "${1:-}" = --keep ]; then
	keep=1
	shift
fi
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(frame reasm hello mqtt)

make --no-print-directory BUILD="$BUILD" fuzz >/dev/null || {
	echo "fuzz: building the fuzzers failed (needs clang and libclang-rt-14-dev: scripts/deps.sh)" >&2
	exit 2
}
failed=()
for t in "${targets[@]}"; do
	bin=$BUILD/fuzz/fuzz_$t
	work=$BUILD/fuzz/corpus/$t
	art=$BUILD/fuzz/artifacts/$t
	mkdir -p "$work" "$art"
	log=$BUILD/fuzz/$t.log
	extra=()
	[ -n "${FUZZ_JOBS:-}" ] && extra+=(-fork="$FUZZ_JOBS" -ignore_crashes=0)
	dirs=("$work" "fuzz/corpus/$t")
	[ -d "fuzz/regress/$t" ] && dirs+=("fuzz/regress/$t")
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$art/" "${extra[@]}" "${dirs[@]}" >"$log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
	if [ $rc -ne 0 ]; then
		failed+=("$t")
		echo "fuzz $t: FAILED after ${runs:-?} runs; the end of $log:"
		tail -n 30 "$log"
		for c in "$art"/crash-* "$art"/leak-* "$art"/timeout-* "$art"/oom-*; do
			[ -e "$c" ] || continue
			if [ $keep = 1 ]; then
				mkdir -p "fuzz/regress/$t"
				cp "$c" "fuzz/regress/$t/"
				echo "  kept as fuzz/regress/$t/$(basename "$c"): fix the bug, then commit it"
			else
				echo "  reproduce: $bin $c"
				echo "  keep as a regression test: cp $c fuzz/regress/$t/"
			fi
		done
	else
		echo "fuzz $t: ${runs:-?} runs in ${secs}s, ${cov:-cov: ?} edges, no failure"
	fi
done
[ ${#failed[@]} -eq 0 ]
