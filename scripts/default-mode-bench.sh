#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The default TCP mode at scale (hbctl load, i.e. --tcp user) against hbd with no BPF at all:
# scripts/bench.sh's tcp-default and tcp-user phases in one run, R runs one after another with
# the phases' order alternated (so that a drift of the machine's speed favours neither). Each
# phase has its steady window and rate ramp; tcp-default also has the reconnect storm.
#
#   scripts/default-mode-bench.sh [--clients N] [--rounds R] [--storm-window S] [--ramp LIST]
#
# Writes build/default-mode/result.json (DEFAULT_BENCH_OUT to change the directory): per run
# bench.sh's tcp_default figures, and the medians over the runs. Each run's raw outputs are
# in build/default-mode/rN/; bench.sh removes what it made after each run (namespaces, pins,
# processes), also when interrupted; this script only starts bench.sh, one run at a time.
# Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
DRIVER=default-mode-bench
. scripts/driver-lib.sh

BUILD=${BUILD:-build}
OUT=${DEFAULT_BENCH_OUT:-$BUILD/default-mode}
CLIENTS=500000
ROUNDS=3
STORM_WINDOW=10
RAMP=20000,30000,40000,50000,60000,80000,100000

usage() {
	cat <<EOF
usage: scripts/default-mode-bench.sh [options]
  --clients N        clients per phase (default $CLIENTS)
  --rounds R         runs, at least 1 (default $ROUNDS)
  --storm-window S   the storm's reconnects start within S seconds of the drop (default
                     $STORM_WINDOW)
  --ramp LIST        the rate ramp's steps, heartbeats/s (default $RAMP)
EOF
}

CMDLINE="scripts/default-mode-bench.sh${*:+ $*}"
while [ $# -gt 0 ]; do
	case $1 in
	--clients) CLIENTS=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--storm-window) STORM_WINDOW=$2; shift ;;
	--ramp) RAMP=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "$DRIVER: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
driver_need_count --rounds "$ROUNDS" 1
driver_need_root "bench.sh: namespaces, BPF, sysctls"
export BUILD

summary() {
	jq -s --arg cmd "$CMDLINE" --argjson clients "$CLIENTS" --argjson rounds "$ROUNDS" \
		--arg started "$STARTED" --arg ended "$(date -u +%FT%TZ)" \
		--arg machine "$(uname -sr), $(nproc) vCPU" "$DRIVER_JQ"'
	  def med(f): [.[] | f] | median | r2;
	  {command: $cmd, machine: $machine, started: $started, ended: $ended, clients: $clients,
	   rounds: $rounds, runs_done: length,
	   median: {cpu_us_per_hb: med(.tcp_default.cpu_us_per_hb),
	            user_cpu_us_per_hb: med(.tcp_default.user_cpu_us_per_hb),
	            default_over_user: med(.tcp_default.default_over_user),
	            client_cpu_us_per_hb: med(.tcp_default.client_cpu_us_per_hb),
	            setup_s: med(.tcp_default.setup_s), user_setup_s: med(.tcp_default.user.setup_s),
	            storm_s: med(.tcp_default.storm.seconds),
	            ceiling_hb_per_s: med(.tcp_default.ceiling_hb_per_s),
	            user_ceiling_hb_per_s: med(.tcp_default.user.ceiling_hb_per_s),
	            rtt_p99_us: med(.tcp_default.rtt_us.p99)},
	   runs: [.[] | {order, started, loadavg, tcp_default: (.tcp_default | del(.steps)),
	                 default_steps: .tcp_default.steps, user_steps: .ceiling.user_steps}]}' \
		"$OUT"/runs/*.json > "$OUT/result.json"
}

rm -rf "$OUT"
mkdir -p "$OUT/runs"
STARTED=$(date -u +%FT%TZ)
driver_log "$ROUNDS runs, $CLIENTS clients; load $(driver_loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
	order=tcp-default,tcp-user
	[ $((r % 2)) -eq 0 ] && order=tcp-user,tcp-default
	dir=$OUT/r$r
	args=(--clients "$CLIENTS" --phases "$order" --storm-window "$STORM_WINDOW" --ramp "$RAMP")
	load=$(driver_loadavg)
	t=$(date -u +%FT%TZ)
	driver_log "run $r: scripts/bench.sh ${args[*]} (load $load)"
	driver_bench "$dir" "run $r ($OUT/result.json)" "${args[@]}"
	jq --arg order "$order" --arg started "$t" --arg load "$load" \
		'. + {order: $order, started: $started, loadavg: $load}' "$dir/result.json" \
		> "$OUT/runs/r$r.json"
	summary
	driver_log "run $r: $(jq -c '.tcp_default | {cpu_us_per_hb, user_cpu_us_per_hb, default_over_user, setup_s, storm: .storm.seconds, failures: .storm.failures, ceiling_hb_per_s}' "$OUT/runs/r$r.json")"
done
driver_log "done: $OUT/result.json"
jq -c .median "$OUT/result.json"
