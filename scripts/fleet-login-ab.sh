#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Fleet mode after a mass login, two sides side by side: scripts/bench.sh's tcp-offload phase
# (or --phase tcp-default: hbd answers) with --nats (CLIENTS devices log in at once, then a
# 40 s steady window 10 s after the setup), ROUNDS times for
# each side, alternated (before, after, after, before, ...). A side is a build and hbd options.
# One JSON line a run: the setup, the presence writes the bucket holds at the phase's end
# (presence_rev: one a device would be enough), the steady window's server CPU per heartbeat
# with hbd's and nats-server's parts and p99 RTT, which show whether the login's presence
# writes still run into the window, and the kernel path's stall after the login: of hbload's
# one-second reports once every device is connected, how many had fewer than half as many
# PONGs as PINGs (stall_s) and the longest run of them (stall_longest_s). With --trace S, the
# scheduler of both CPUs is traced for the S seconds after each setup (perf record, DIR/
# sched.data) and the line also has the server CPU's longest wait of a runnable kworker
# (kworker_wait_s; scripts/sched-occupancy.sh tells who had the CPU meanwhile).
#
#   scripts/fleet-login-ab.sh [--before-args "ARGS"] [--after-args "ARGS"] [--trace S]
#                             [--phase tcp-offload|tcp-default] BEFORE_BUILD [AFTER_BUILD [ROUNDS [CLIENTS]]]
#                                   (defaults: build, 2, 500000) writes JSON lines to stdout
#
# A build is a directory with hbd, hbload and hbctl (and bpf/), e.g. one made by
# `git worktree add /tmp/old REV && make -C /tmp/old`; ARGS are more hbd options for that
# side (bench.sh --hbd-args), e.g. one build with --before-args "--nats-priority 10"
# --after-args "--nats-priority 0". Each run's outputs stay in build/fleet-login-ab/rN-SIDE/.
# Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
DRIVER=fleet-login-ab
. scripts/driver-lib.sh
USAGE='usage: scripts/fleet-login-ab.sh [--before-args "ARGS"] [--after-args "ARGS"] [--trace S] [--phase tcp-offload|tcp-default] BEFORE_BUILD [AFTER_BUILD [ROUNDS [CLIENTS]]]'
BEFORE_ARGS='' AFTER_ARGS='' TRACE=0 PHASE=tcp-offload
while [ $# -gt 0 ]; do
	case $1 in
	--before-args) BEFORE_ARGS=$2; shift 2 ;;
	--after-args) AFTER_ARGS=$2; shift 2 ;;
	--trace) TRACE=$2; shift 2 ;;
	--phase) PHASE=$2; shift 2 ;;
	-h | --help) echo "$USAGE"; exit 0 ;;
	--*) echo "$USAGE" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -ge 1 ] || { echo "$USAGE" >&2; exit 2; }
BEFORE=$1 AFTER=${2:-build} ROUNDS=${3:-2} CLIENTS=${4:-500000}
driver_need_count ROUNDS "$ROUNDS" 1
driver_need_count CLIENTS "$CLIENTS" 1
driver_need_count --trace "$TRACE" 0
case $PHASE in tcp-offload | tcp-default) ;; *) echo "$USAGE" >&2; exit 2 ;; esac
if [ "$TRACE" -gt 0 ] && ! command -v perf > /dev/null; then
	echo "$DRIVER: --trace needs perf (linux-perf)" >&2
	exit 1
fi
driver_need_root "bench.sh: namespaces, BPF, sysctls"
for b in "$BEFORE" "$AFTER"; do
	[ -x "$b/hbd" ] || { echo "$DRIVER: $b/hbd missing" >&2; exit 1; }
done

# hbload's one-second reports ("... connected C/N ... pings P/s  pongs Q/s ...") from the
# first with every device connected on: {reports, stall_s, stall_longest_s}
stall_of() { # HBLOAD_LOG CLIENTS
	awk -v n="$2" '
	/ connected [0-9]+\/[0-9]+ / && / pings [0-9]+\/s / {
		for (i = 1; i <= NF; i++) {
			if ($i == "connected") c = $(i + 1)
			if ($i == "pings") p = $(i + 1)
			if ($i == "pongs") q = $(i + 1)
		}
		if (c != n "/" n) { if (!all) next } else all = 1
		sub("/s", "", p); sub("/s", "", q)
		p += 0; q += 0 # numbers: awk compares two strings as strings ("530" > "16631")
		reports++
		if (p > 0 && q * 2 < p) { s++; run++; if (run > longest) longest = run } else run = 0
	}
	END { printf "{\"reports\":%d,\"stall_s\":%d,\"stall_longest_s\":%d}\n", reports, s, longest }
	' "$1"
}

# --trace: once the run's setup is done (bench.sh's sampler logs setup_done), the scheduler's
# switches and the workqueue items started, both CPUs, for TRACE seconds; gives up on a run
# whose setup does not end within 5 minutes
trace_after_setup() { # DIR
	local samples=$1/$PHASE/samples.jsonl
	for _ in $(seq 3000); do
		if grep -q '"ev":"setup_done' "$samples" 2> /dev/null; then
			perf record -a -m 128M -o "$1/sched.data" -e sched:sched_switch \
				-e workqueue:workqueue_execute_start -- sleep "$TRACE" > "$1/perf-record.log" 2>&1
			return
		fi
		sleep 0.1
	done
}
kworker_wait() { # DIR: the longest runnable wait of CPU 1's kworkers (bench.sh's server CPU)
	[ -s "$1/sched.data" ] || { echo null; return; }
	scripts/sched-occupancy.sh "$1/sched.data" 1 | jq '.longest_wait.s'
}

OUT=build/fleet-login-ab
rm -rf "$OUT"
tracer=
trap '[ -z "$tracer" ] || kill "$tracer" 2> /dev/null || true' EXIT
for r in $(seq "$ROUNDS"); do
	for side in $(driver_ab_order "$r"); do
		driver_ab_side "$side"
		b=$SIDE_BUILD args=$SIDE_ARGS
		dir=$OUT/r$r-$side
		driver_log "round $r, $side ($b${args:+ hbd $args}; load $(driver_loadavg))"
		mkdir -p "$dir"
		tracer=
		if [ "$TRACE" -gt 0 ]; then
			trace_after_setup "$dir" &
			tracer=$!
		fi
		BUILD=$b driver_bench "$dir" "round $r, $side" --clients "$CLIENTS" \
			--phases "$PHASE" --nats --no-storm --ramp '' --steady 40 --steady-user 40 \
			${args:+--hbd-args "$args"}
		[ -z "$tracer" ] || wait "$tracer"
		jq -c --argjson r "$r" --arg side "$side" --arg build "$b" --arg args "$args" \
			--argjson stall "$(stall_of "$dir/$PHASE/hbload.log" "$CLIENTS")" \
			--argjson wait "$(kworker_wait "$dir")" \
			--arg phase "$PHASE" --slurpfile fs "$dir/$PHASE/fleet-status.json" "$DRIVER_JQ"'
			def part($ns): if $ns and .pings > 0 then ($ns / 1000 / .pings | r2) else null end;
			.phases[$phase] as $ph | $ph.windows.steady.ns as $ns
			| (if $phase == "tcp-offload" then .tcp.cpu_us_per_hb_offload
			   else .tcp_default.cpu_us_per_hb end) as $cpu
			| $ph.hbload.steady
			| {round: $r, side: $side, build: $build, hbd_args: $args, phase: $phase,
			   setup_s: $ph.hbload.setup_s, presence_rev: $fs[0].presence_rev,
			   cpu_us_per_hb: $cpu, hbd_cpu_us_per_hb: part($ns.hbd),
			   nats_cpu_us_per_hb: part($ns.nats), rtt_p99_us: .rtt_us.p99, pings, pongs,
			   kworker_wait_s: $wait} + $stall' \
			"$dir/result.json"
	done
done
