#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# hbd's rings on a few threads (--ring-threads N, for each N of a list) against one thread per
# ring, at scale and in the loader's default TCP mode: scripts/bench.sh's tcp-default phase
# (setup, steady window, reconnect storm; no ramp), ROUNDS times each way, the order reversed
# each round.
#
#   scripts/ring-threads-ab.sh [--clients N] [--rounds R] [--threads N[,N...]] [--steady S]
#                              [--storm-window S]
#
# Writes build/ring-threads-ab/result.json: per run the threads (0: one a ring), the server,
# machine and client CPU per heartbeat of the steady window, p99 RTT, setup and storm times and
# the window's steal, and per thread count the medians and their ratio to one thread a ring;
# docs are left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
DRIVER=ring-threads-ab
. scripts/driver-lib.sh
CLIENTS=500000 ROUNDS=3 THREADS=2 STEADY=30 STORM_WINDOW=10

usage() {
	cat <<EOF
usage: scripts/ring-threads-ab.sh [options]
  --clients N          clients (default $CLIENTS)
  --rounds R           rounds, at least 1 (default $ROUNDS)
  --threads N[,N...]   hbd --ring-threads N for each N (default $THREADS), and a thread a ring
  --steady S           the steady window, seconds (default $STEADY)
  --storm-window S     the storm's reconnects start within S seconds (default $STORM_WINDOW)
EOF
}

CMDLINE="scripts/ring-threads-ab.sh${*:+ $*}"
while [ $# -gt 0 ]; do
	case $1 in
	--clients) CLIENTS=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--threads) THREADS=$2; shift ;;
	--steady) STEADY=$2; shift ;;
	--storm-window) STORM_WINDOW=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "$DRIVER: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
driver_need_count --rounds "$ROUNDS" 1
IFS=, read -r -a counts <<< "$THREADS"
for n in "${counts[@]}"; do driver_need_count --threads "$n" 1; done
driver_need_root "bench.sh: namespaces, BPF, sysctls"
OUT=build/ring-threads-ab
rm -rf "$OUT"
mkdir -p "$OUT"
runs=()
summary() {
	printf '%s\n' "${runs[@]}" | jq -s --arg date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
		--arg cmd "$CMDLINE" --arg machine "$(uname -sr), $(nproc) vCPU" "$DRIVER_JQ"'
		def meds: {cpu_us_per_hb: (map(.cpu_us_per_hb) | median | r2),
		           machine_cpu_us_per_hb: (map(.machine_cpu_us_per_hb) | median | r2),
		           client_cpu_us_per_hb: (map(.client_cpu_us_per_hb) | median | r2),
		           rtt_p99_us: (map(.rtt_p99_us) | median), setup_s: (map(.setup_s) | median | r2),
		           storm_s: (map(.storm_s) | median | r2)};
		(map(select(.ring_threads == 0)) | meds) as $base
		| {date: $date, command: $cmd, machine: $machine, runs: .,
		   median: (group_by(.ring_threads) | map({key: (.[0].ring_threads | tostring),
		            value: (meds | .over_one_a_ring = (ratio(.cpu_us_per_hb; $base.cpu_us_per_hb) | r3))})
		            | from_entries)}' > "$OUT/result.json"
}
sides=(0 "${counts[@]}")
for r in $(seq "$ROUNDS"); do
	order=("${sides[@]}")
	if [ $((r % 2)) = 1 ]; then
		order=()
		for ((i = ${#sides[@]} - 1; i >= 0; i--)); do order+=("${sides[i]}"); done
	fi
	for n in "${order[@]}"; do
		args=()
		[ "$n" != 0 ] && args=(--hbd-args "--ring-threads $n")
		dir=$OUT/r$r-t$n
		driver_log "round $r: ${args[*]:-one thread a ring} (load $(driver_loadavg))"
		driver_bench "$dir" "round $r, --ring-threads $n" --clients "$CLIENTS" --phases tcp-default \
			--ramp '' --steady-user "$STEADY" --storm-window "$STORM_WINDOW" ${args[@]+"${args[@]}"}
		runs+=("$(jq -c --argjson r "$r" --argjson threads "$n" '.tcp_default |
			{round: $r, ring_threads: $threads, cpu_us_per_hb, machine_cpu_us_per_hb,
			 client_cpu_us_per_hb, rtt_p50_us: .rtt_us.p50, rtt_p99_us: .rtt_us.p99, connected, setup_s, pings, pongs,
			 storm_s: .storm.seconds, storm_failures: .storm.failures,
			 steal_pct: .noise.steal_pct}' "$dir/result.json")")
		echo "${runs[-1]}"
		summary
	done
done
driver_log "done: $OUT/result.json"
jq -c .median "$OUT/result.json"
