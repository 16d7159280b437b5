#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Where a 500k setup's CPU goes, for hbd variants side by side: scripts/bench.sh's tcp-default
# phase up to its short steady window (no ramp, no storm), ROUNDS times each variant, the order
# reversed each round. Per run: the setup time; the CPU hbd and hbload used from hbd's start to
# the last WELCOME (bench.sh's per-task samples); and, from perf stat over PERF_S seconds that
# begin 2 s after the first connection, the IPIs, task wakeups, context switches and
# migrations per connection made meanwhile.
#
#   scripts/setup-cost.sh [--clients N] [--rounds R] --variant NAME=HBD_ARGS [--variant ...]
#
# A variant's HBD_ARGS go to bench.sh --hbd-args ('' for none). Writes
# build/setup-cost/result.json; docs are left alone. Needs root and perf (Debian: linux-perf).
set -euo pipefail
cd "$(dirname "$0")/.."
DRIVER=setup-cost
. scripts/driver-lib.sh
CLIENTS=500000 ROUNDS=2 PERF_S=10
names=() hargs=()

usage() {
	cat <<EOF
usage: scripts/setup-cost.sh [options] --variant NAME=HBD_ARGS [--variant ...]
  --clients N              clients (default $CLIENTS)
  --rounds R               rounds, at least 1 (default $ROUNDS)
  --variant NAME=HBD_ARGS  hbd options of one side, e.g. "rt2=--ring-threads 2" or "base="
EOF
}

CMDLINE="scripts/setup-cost.sh${*:+ $*}"
while [ $# -gt 0 ]; do
	case $1 in
	--clients) CLIENTS=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--variant) names+=("${2%%=*}"); hargs+=("${2#*=}"); shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "$DRIVER: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
driver_need_count --rounds "$ROUNDS" 1
[ ${#names[@]} -gt 0 ] || { echo "$DRIVER: give at least one --variant" >&2; usage >&2; exit 2; }
driver_need_root "bench.sh: namespaces, BPF, sysctls; perf"
command -v perf > /dev/null || { echo "$DRIVER: perf missing (apt-get install linux-perf)" >&2; exit 1; }
OUT=build/setup-cost
rm -rf "$OUT"
mkdir -p "$OUT"
BENCH=
trap '[ -z "$BENCH" ] || { kill "$BENCH" 2>/dev/null; wait "$BENCH" 2>/dev/null; }' EXIT

connected() { # HBLOAD_LOG: the last progress line's count, 0 before the first
	grep -oE 'connected [0-9]+' "$1" 2>/dev/null | tail -n 1 | awk '{ print $2 } END { if (!NR) print 0 }'
}

runs=()
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then
		mapfile -t order < <(seq 0 $((${#names[@]} - 1)))
	else
		mapfile -t order < <(seq $((${#names[@]} - 1)) -1 0)
	fi
	for i in "${order[@]}"; do
		dir=$OUT/r$r-${names[i]}
		log=$dir/tcp-default/hbload.log
		mkdir -p "$dir"
		driver_log "round $r, ${names[i]}: hbd ${hargs[i]:-(no options)} (load $(driver_loadavg))"
		BENCH_OUT=$dir BENCH_DOC=$dir/BENCHMARKS.md BENCH_PNG=$dir/bench-rtt.png \
			scripts/bench.sh --clients "$CLIENTS" --phases tcp-default --steady-user 5 \
			--warmup 1 --ramp '' --no-storm ${hargs[i]:+--hbd-args "${hargs[i]}"} \
			> "$dir/bench.log" 2>&1 &
		BENCH=$!
		# bounded: setup of 500k takes under a minute here
		for _ in $(seq 1200); do
			[ "$(connected "$log")" -gt 0 ] && break
			kill -0 "$BENCH" 2>/dev/null || break
			sleep 0.1
		done
		sleep 2
		c0=$(connected "$log")
		perf stat -a -x, -o "$dir/perf-stat.csv" -e ipi:ipi_send_cpu,ipi:ipi_send_cpumask,sched:sched_wakeup,sched:sched_switch,sched:sched_migrate_task \
			-- sleep "$PERF_S" > /dev/null 2>&1
		c1=$(connected "$log")
		if ! wait "$BENCH"; then
			BENCH=
			tail -n 20 "$dir/bench.log" >&2
			driver_log "bench.sh failed in round $r, ${names[i]}"
			exit 1
		fi
		BENCH=
		# perf stat's CSV: count,unit,event,...
		stat=$(awk -F, -v n=$((c1 - c0)) '$3 ~ /:/ { sub(/^[a-z]+:/, "", $3); printf "%s\"%s\":%.3f", s, $3, n ? $1 / n : 0; s = "," }' \
			"$dir/perf-stat.csv")
		runs+=("$(jq -s -c --argjson r "$r" --arg name "${names[i]}" --arg args "${hargs[i]}" \
			--argjson conns $((c1 - c0)) --argjson per "{$stat}" '
			(map(select(.ev == "hbd_ready"))[0]) as $a
			| (map(select(.ev | startswith("setup_done")))[0]) as $b
			| {round: $r, variant: $name, hbd_args: $args,
			   setup_s: ($b.ev | split(" ")[1] | tonumber),
			   hbd_cpu_s: ((($b.ns.hbd - $a.ns.hbd) / 1e7 | round) / 100),
			   hbload_cpu_s: ((($b.ns.hbload // 0) / 1e7 | round) / 100),
			   perf_stat: {connections: $conns, per_connection: $per}}' \
			"$dir/tcp-default/samples.jsonl")")
		echo "${runs[-1]}"
		printf '%s\n' "${runs[@]}" | jq -s --arg cmd "$CMDLINE" --arg date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
			--arg machine "$(uname -sr), $(nproc) vCPU" \
			'{date: $date, command: $cmd, machine: $machine, perf_s: '"$PERF_S"', runs: .}' > "$OUT/result.json"
	done
done
driver_log "done: $OUT/result.json"
