#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# A 500k setup on an older revision and on this tree, side by side: each tree's own
# scripts/bench.sh runs one phase up to a short steady window (no ramp, no storm), ROUNDS times
# each, the order reversed each round. So code and harness are compared as they were, which is
# what a figure in docs/ measured then. Per run: the setup time and the CPU hbd and hbload used
# from hbd's start to the last WELCOME (bench.sh's per-task samples).
#
#   scripts/rev-setup-ab.sh REV [--rounds R] [--clients N] [--phase PHASE]
#
# REV is built in a git worktree (build/rev-setup-ab/tree), removed at the end, also on failure.
# Writes build/rev-setup-ab/result.json; docs are left alone. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
DRIVER=rev-setup-ab
. scripts/driver-lib.sh
CLIENTS=500000 ROUNDS=3 PHASE=tcp-user REV=

usage() {
	cat <<EOF
usage: scripts/rev-setup-ab.sh REV [options]
  --rounds R     rounds, at least 1 (default $ROUNDS)
  --clients N    clients (default $CLIENTS)
  --phase PHASE  the bench.sh phase both trees have (default $PHASE)
EOF
}

CMDLINE="scripts/rev-setup-ab.sh${*:+ $*}"
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift ;;
	--clients) CLIENTS=$2; shift ;;
	--phase) PHASE=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	-*) echo "$DRIVER: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	*) REV=$1 ;;
	esac
	shift
done
[ -n "$REV" ] || { usage >&2; exit 2; }
driver_need_count --rounds "$ROUNDS" 1
driver_need_count --clients "$CLIENTS" 1
driver_need_root "bench.sh: namespaces, BPF, sysctls"
OLD_SHA=$(git rev-parse --verify "$REV^{commit}") || { echo "$DRIVER: no revision '$REV'" >&2; exit 2; }
NEW_SHA=$(git rev-parse HEAD)
OUT=$PWD/build/rev-setup-ab
TREE=$OUT/tree
cleanup() {
	git worktree remove --force "$TREE" 2>/dev/null || rm -rf "$TREE"
	git worktree prune
}
trap cleanup EXIT
rm -rf "$OUT"
mkdir -p "$OUT"
git worktree add --detach "$TREE" "$OLD_SHA" > /dev/null
driver_log "building $REV (${OLD_SHA:0:12})"
make -C "$TREE" -j"$(nproc)" > "$OUT/build-old.log" 2>&1 || { tail -n 20 "$OUT/build-old.log" >&2; exit 1; }
make -j"$(nproc)" > "$OUT/build-new.log" 2>&1 || { tail -n 20 "$OUT/build-new.log" >&2; exit 1; }

one() { # TREE_DIR RUN_DIR: that tree's own bench.sh (driver_bench runs scripts/bench.sh)
	(cd "$1" && driver_bench "$2" "$2" --clients "$CLIENTS" --phases "$PHASE" --steady-user 5 \
		--steady 5 --warmup 1 --ramp '' --no-storm)
}

runs=()
for r in $(seq "$ROUNDS"); do
	order=(old new)
	[ $((r % 2)) = 0 ] && order=(new old)
	for side in "${order[@]}"; do
		dir=$OUT/r$r-$side
		driver_log "round $r, $side (load $(driver_loadavg))"
		if [ "$side" = old ]; then one "$TREE" "$dir"; else one "$PWD" "$dir"; fi
		runs+=("$(jq -s -c --argjson r "$r" --arg side "$side" '
			(map(select(.ev == "hbd_ready"))[0]) as $a
			| (map(select(.ev | startswith("setup_done")))[0]) as $b
			| {round: $r, side: $side, setup_s: ($b.ev | split(" ")[1] | tonumber),
			   hbd_cpu_s: ((($b.ns.hbd - $a.ns.hbd) / 1e7 | round) / 100),
			   hbload_cpu_s: ((($b.ns.hbload // 0) / 1e7 | round) / 100)}' \
			"$dir/$PHASE/samples.jsonl")")
		echo "${runs[-1]}"
		printf '%s\n' "${runs[@]}" | jq -s --arg cmd "$CMDLINE" --arg old "$OLD_SHA" \
			--arg new "$NEW_SHA" --arg date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
			--arg machine "$(uname -sr), $(nproc) vCPU" "$DRIVER_JQ"'
			{date: $date, command: $cmd, machine: $machine, old: $old, new: $new, runs: .,
			 median: (group_by(.side) | map({key: .[0].side, value: {
			   setup_s: (map(.setup_s) | median | r3),
			   hbd_cpu_s: (map(.hbd_cpu_s) | median | r2),
			   hbload_cpu_s: (map(.hbload_cpu_s) | median | r2)}}) | from_entries)}' \
			> "$OUT/result.json"
	done
done
driver_log "done: $OUT/result.json"
jq -c .median "$OUT/result.json"
