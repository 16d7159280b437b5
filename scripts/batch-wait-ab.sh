#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# hbd's userspace TCP PING/PONG at scale with and without --batch-wait, alternated in one
# sitting: scripts/bench.sh's tcp-user phase (no ramp), ROUNDS times each way.
#
#   scripts/batch-wait-ab.sh [--clients N] [--rounds R] [--wait USEC] [--steady S]
#                            [--against BUILD_DIR]
#
# --against: side B is the build in BUILD_DIR (another checkout's build/) with the same wait,
# instead of this build without it: two versions of the wait compared.
# Writes build/batch-ab/result.json: per run the wait, the server and machine CPU per
# heartbeat of the steady window (as bench-report.sh reckons tcp.cpu_us_per_hb_user), p99 RTT,
# setup time and steal; docs are left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
DRIVER=batch-wait-ab
. scripts/driver-lib.sh
CLIENTS=500000 ROUNDS=2 WAIT=1000 STEADY=30 AGAINST=

usage() {
	cat <<EOF
usage: scripts/batch-wait-ab.sh [options]
  --clients N          clients (default $CLIENTS)
  --rounds R           rounds of (with, without) pairs, at least 1 (default $ROUNDS)
  --wait USEC          hbd --batch-wait of side A (default $WAIT)
  --steady S           the steady window, seconds (default $STEADY)
  --against BUILD_DIR  side B: that build with the same wait
EOF
}

while [ $# -gt 0 ]; do
	case $1 in
	--clients) CLIENTS=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--wait) WAIT=$2; shift ;;
	--steady) STEADY=$2; shift ;;
	--against) AGAINST=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "$DRIVER: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
driver_need_count --rounds "$ROUNDS" 1
driver_need_root "bench.sh: namespaces, BPF, sysctls"
OUT=build/batch-ab
rm -rf "$OUT"
mkdir -p "$OUT"
runs=()
for r in $(seq "$ROUNDS"); do
	# the order alternates each round, so a drift of the VM's speed hits both ways alike
	if [ $((r % 2)) = 1 ]; then order="b a"; else order="a b"; fi
	for side in $order; do
		build=build w=$WAIT
		if [ "$side" = b ]; then
			if [ -n "$AGAINST" ]; then build=$AGAINST; else w=0; fi
		fi
		dir=$OUT/r$r-$side-w$w
		driver_log "round $r, side $side: $build, --batch-wait $w (load $(driver_loadavg))"
		BUILD=$build driver_bench "$dir" "round $r, side $side" --clients "$CLIENTS" \
			--phases tcp-user --ramp '' --steady-user "$STEADY" --hbd-args "--batch-wait $w"
		# a tcp-user-only run has no .tcp summary: the figures from the phase's own window
		runs+=("$(jq -c --argjson r "$r" --argjson w "$w" --arg build "$build" '.phases["tcp-user"] as $p |
			($p.windows.steady) as $s | {round: $r, build: $build, batch_wait_us: $w,
			cpu_us_per_hb: ($s.server_ns / 1000 / $p.hbload.steady.pings * 100 | round / 100),
			machine_cpu_us_per_hb: ($s.machine_ns / 1000 / $p.hbload.steady.pings * 100 | round / 100),
			rtt_p99_us: $p.hbload.steady.rtt_us.p99, connected: $p.hbload.connected,
			setup_s: $p.hbload.setup_s, pings: $p.hbload.steady.pings,
			pongs: $p.hbload.steady.pongs, steal_pct: ([$s.cpu[].steal_pct] | max | round)}' \
			"$dir/result.json")")
		echo "${runs[-1]}"
	done
done
printf '%s\n' "${runs[@]}" | jq -s --arg date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
	--arg cmd "scripts/batch-wait-ab.sh --clients $CLIENTS --rounds $ROUNDS --wait $WAIT --steady $STEADY${AGAINST:+ --against $AGAINST}" \
	'{date: $date, command: $cmd, runs: .}' > "$OUT/result.json"
driver_log "done: $OUT/result.json"
