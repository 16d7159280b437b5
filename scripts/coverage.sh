#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Line and branch coverage of user/ and loader/ by the test suite (`make coverage`): builds
# everything with gcc --coverage into $COV_BUILD (default build/cov), runs the cmocka suite there
# (no sanitizer pass, no fuzzing, no static checks), then prints the figures per directory, the
# total and the COVERAGE_LEAST (15) least covered files. gcovr writes
# $COV_BUILD/coverage/index.html (line by line) and summary.json there. Its own variable, not
# BUILD, so that a BUILD in the environment never gets coverage objects mixed into it.
# The exit status is the suite's.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${COV_BUILD:-build/cov}
LEAST=${COVERAGE_LEAST:-15}

scripts/deps.sh coverage || exit 2
# -O0 so that lines and branches map to the source one to one; atomic counters because hbd and
# hbload count from several threads at once
export CFLAGS="-O0 -g --coverage -fprofile-update=atomic" LDFLAGS="--coverage"
echo "=== coverage: building into $BUILD"
make --no-print-directory BUILD="$BUILD" -j"$(nproc)" tests >/dev/null || exit 2
find "$BUILD" -name '*.gcda' -delete

t0=$(date +%s)
SKIP_SAN=1 SKIP_FUZZ=1 SKIP_ANALYZE=1 SKIP_LAYERS=1 SKIP_FORMAT=1 BUILD=$BUILD scripts/run-tests.sh
suite=$?
echo "=== coverage: suite took $(($(date +%s) - t0)) s (status $suite)"

out=$BUILD/coverage
rm -rf "$out"
mkdir -p "$out"
# branches the compiler adds on lines with no code of ours are not counted
if ! gcovr --root . --object-directory "$BUILD/obj" --filter 'user/' --filter 'loader/' \
	--exclude-unreachable-branches -j "$(nproc)" \
	--json-summary-pretty --json-summary "$out/summary.json" \
	--html-details "$out/index.html" >/dev/null; then
	echo "coverage: gcovr failed" >&2
	exit 2
fi

python3 - "$out/summary.json" "$LEAST" <<'EOF'
import json, sys
from collections import defaultdict

files = json.load(open(sys.argv[1]))["files"]
least = int(sys.argv[2])


def pct(cov, tot):
    return "%5.1f%%" % (100.0 * cov / tot) if tot else "    -"


dirs = defaultdict(lambda: [0, 0, 0, 0])
for f in files:
    d = dirs[f["filename"].rsplit("/", 1)[0]]
    d[0] += f["line_covered"]
    d[1] += f["line_total"]
    d[2] += f["branch_covered"]
    d[3] += f["branch_total"]
total = [sum(d[i] for d in dirs.values()) for i in range(4)]
print("%-14s %14s %16s" % ("", "lines", "branches"))
for name in sorted(dirs) + ["total"]:
    lc, lt, bc, bt = total if name == "total" else dirs[name]
    print("%-14s %s %5d/%-6d %s %5d/%-6d" % (name, pct(lc, lt), lc, lt, pct(bc, bt), bc, bt))
print("\nleast covered files (lines):")
ranked = sorted((f for f in files if f["line_total"]),
                key=lambda f: (f["line_covered"] / f["line_total"], -f["line_total"]))
for f in ranked[:least]:
    print("  %s %5d/%-5d %s" % (pct(f["line_covered"], f["line_total"]), f["line_covered"],
                                f["line_total"], f["filename"]))
EOF
echo "coverage: line by line in $out/index.html"
exit "$suite"
