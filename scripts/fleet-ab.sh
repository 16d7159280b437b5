#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The heartbeat path with fleet mode off and on, side by side (issue 16): the same bench phases
# (tcp-offload: hbctl load --tcp kernel + hbd; udp-offload: hbctl load + hbd, XDP answering)
# run by scripts/bench.sh without and with --nats, alternated for R rounds (off/on, then on/off,
# so that a drift of the machine's speed does not favour one side), all at one client count.
#
#   scripts/fleet-ab.sh [--clients N] [--rounds R] [--steady S] [--warmup S] [--interval S]
#
# Writes build/fleet-ab/result.json (FLEET_AB_OUT to change the directory): per run and per
# round the bench's server CPU per heartbeat of each phase's steady window
# (cpu_us_per_hb_offload, as in bench.sh's result.json) and its parts, the medians off and on
# and on / off; each run's raw outputs in build/fleet-ab/rN-off|on/. bench.sh removes what it
# made after each run (namespaces, pins, processes, the nats-server), also when interrupted;
# this script only starts bench.sh, one run at a time. Namespaces: HB_BENCH_NS_PREFIX (default
# hbfab here), pins HB_BENCH_PIN (default /sys/fs/bpf/hbfab-bench). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
DRIVER=fleet-ab
. scripts/driver-lib.sh

BUILD=${BUILD:-build}
OUT=${FLEET_AB_OUT:-$BUILD/fleet-ab}
CLIENTS=100000
ROUNDS=3
STEADY=40
WARMUP=10 # bench.sh's default: after the setup, before the window
INTERVAL=30

usage() {
	cat <<EOF
usage: scripts/fleet-ab.sh [options]
  --clients N    clients per phase (default $CLIENTS)
  --rounds R     rounds of (off, on) pairs, at least 1 (default $ROUNDS; the target asks for 3)
  --steady S     steady window of each phase, seconds (default $STEADY)
  --warmup S     from the end of the setup to the window, seconds (default $WARMUP; at 500k
                 clients with --nats the login's presence writes take longer than that)
  --interval S   heartbeat interval (default $INTERVAL)
EOF
}

CMDLINE="scripts/fleet-ab.sh${*:+ $*}"
while [ $# -gt 0 ]; do
	case $1 in
	--clients) CLIENTS=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--steady) STEADY=$2; shift ;;
	--warmup) WARMUP=$2; shift ;;
	--interval) INTERVAL=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "$DRIVER: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
driver_need_count --rounds "$ROUNDS" 1
driver_need_count --warmup "$WARMUP" 0
driver_need_root "bench.sh: namespaces, BPF, sysctls"
export HB_BENCH_NS_PREFIX=${HB_BENCH_NS_PREFIX:-hbfab}
export HB_BENCH_PIN=${HB_BENCH_PIN:-/sys/fs/bpf/hbfab-bench}
export BUILD

# One run's figures from its bench result.json: per phase the server CPU per heartbeat and
# its parts, hbd's threads, the NATS server (bench-lib.sh's "nats" group, on the server CPU
# with the split placement, so inside the server figure), the client's CPU per heartbeat (a
# gauge of the machine's speed in that run), and whether every PING was answered.
run_json() { # DIR ROUND FLEET STARTED LOAD
	jq --argjson round "$2" --argjson fleet "$3" --arg started "$4" --arg load "$5" "$DRIVER_JQ"'
	  def phase($t; $p): $t as $x | $p as $ph
	    | {cpu_us_per_hb: $x.cpu_us_per_hb_offload,
	       hbd_cpu_us_per_hb: $x.hbd_cpu_us_per_hb_offload,
	       nats_cpu_us_per_hb: (if $ph.windows.steady.ns.nats and $x.pings > 0
	           then ($ph.windows.steady.ns.nats / 1000 / $x.pings | r2) else null end),
	       client_cpu_us_per_hb: $x.client_cpu_us_per_hb,
	       machine_cpu_us_per_hb: $x.machine_cpu_us_per_hb_offload,
	       connected: $x.connected, setup_s: $x.setup_s, pings: $x.pings, pongs: $x.pongs,
	       pings_user: $x.pings_user, rtt_p99_us: $x.rtt_us.p99, steady_s: $x.steady_s,
	       noise: $x.noise};
	  {round: $round, fleet: $fleet, started: $started, loadavg: $load,
	   command: .command,
	   tcp: (if .tcp then phase(.tcp; .phases["tcp-offload"]) else null end),
	   udp: (if .udp then phase(.udp; .phases["udp-offload"]) else null end)}' "$1/result.json"
}

# The summary of the runs so far: medians off and on of each phase's server CPU per heartbeat,
# on / off of the medians and of each round.
summary() {
	jq -s --arg cmd "$CMDLINE" --argjson clients "$CLIENTS" --argjson rounds "$ROUNDS" \
		--argjson steady "$STEADY" --argjson warmup "$WARMUP" --argjson interval "$INTERVAL" \
		--arg started "$STARTED" --arg ended "$(date -u +%FT%TZ)" \
		--arg machine "$(uname -sr), $(nproc) vCPU" "$DRIVER_JQ"'
	  . as $runs
	  | def side($ph; $f): [$runs[] | select(.fleet == $f) | .[$ph].cpu_us_per_hb];
	    def part($ph; $f; $k): [$runs[] | select(.fleet == $f) | .[$ph][$k]] | median | r2;
	    def cmp($ph): (side($ph; false) | median | r2) as $off | (side($ph; true) | median | r2) as $on
	      | {cpu_us_per_hb_off: $off, cpu_us_per_hb_on: $on, on_over_off: (ratio($on; $off) | r3),
	         per_round: [$runs | group_by(.round)[]
	           | (map(select(.fleet == false))[0][$ph].cpu_us_per_hb) as $a
	           | (map(select(.fleet == true))[0][$ph].cpu_us_per_hb) as $b
	           | {round: .[0].round, off: $a, on: $b, on_over_off: (ratio($b; $a) | r3)}],
	         hbd_cpu_us_per_hb_off: part($ph; false; "hbd_cpu_us_per_hb"),
	         hbd_cpu_us_per_hb_on: part($ph; true; "hbd_cpu_us_per_hb"),
	         nats_cpu_us_per_hb_on: part($ph; true; "nats_cpu_us_per_hb"),
	         client_cpu_us_per_hb_off: part($ph; false; "client_cpu_us_per_hb"),
	         client_cpu_us_per_hb_on: part($ph; true; "client_cpu_us_per_hb"),
	         all_answered: ([$runs[] | .[$ph] | select(. != null) | .pings == .pongs and .connected == $clients] | all)};
	  {command: $cmd, machine: $machine, started: $started, ended: $ended, clients: $clients,
	   rounds: $rounds, steady_s: $steady, warmup_s: $warmup, interval_s: $interval,
	   runs_done: ($runs | length),
	   tcp: cmp("tcp"), udp: cmp("udp"), runs: $runs}' "$OUT"/runs/*.json > "$OUT/result.json"
}

rm -rf "$OUT"
mkdir -p "$OUT/runs"
STARTED=$(date -u +%FT%TZ)
driver_log "$ROUNDS rounds, $CLIENTS clients, ${STEADY} s steady windows; load $(driver_loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
	order="off on"
	[ $((r % 2)) -eq 0 ] && order="on off"
	for side in $order; do
		dir=$OUT/r$r-$side
		args=(--clients "$CLIENTS" --phases tcp-offload,udp-offload --no-storm --ramp ''
			--steady "$STEADY" --steady-udp "$STEADY" --warmup "$WARMUP" --interval "$INTERVAL")
		[ "$side" = on ] && args+=(--nats)
		load=$(driver_loadavg)
		t=$(date -u +%FT%TZ)
		driver_log "round $r, fleet $side: scripts/bench.sh ${args[*]} (load $load)"
		driver_bench "$dir" "round $r, fleet $side ($OUT/result.json)" "${args[@]}"
		run_json "$dir" "$r" "$([ "$side" = on ] && echo true || echo false)" "$t" "$load" \
			> "$OUT/runs/r$r-$side.json"
		summary
		driver_log "round $r, fleet $side: $(jq -c '{tcp: .tcp.cpu_us_per_hb, udp: .udp.cpu_us_per_hb}' "$OUT/runs/r$r-$side.json")"
	done
done
driver_log "done: $OUT/result.json"
jq -c '{tcp: (.tcp | {cpu_us_per_hb_off, cpu_us_per_hb_on, on_over_off}),
	udp: (.udp | {cpu_us_per_hb_off, cpu_us_per_hb_on, on_over_off})}' "$OUT/result.json"
