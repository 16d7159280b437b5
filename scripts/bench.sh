#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The scale benchmark: N heartbeating TCP and UDP clients against one hbd, kernel
# fast paths and userspace side by side, in two network namespaces on this machine.
#
#   scripts/bench.sh [--clients N] [options]      (make bench runs it with the defaults)
#
# Phases, each with a fresh hbd (and BPF loaded only for the offload ones):
#   tcp-offload  setup, steady window, reconnect storm, rate ramp       (hbctl load + hbd)
#   tcp-user     setup, steady window, rate ramp                        (hbd --no-offload)
#   udp-offload  setup, steady window                                   (hbctl load + hbd)
#   udp-user     setup, steady window                                   (hbd --no-offload)
# Writes build/bench/result.json (keys: docs/BENCHMARKS.md), build/bench/<phase>/ (raw
# outputs), docs/BENCHMARKS.md and docs/bench-rtt.png (scripts/bench-report.sh).
# Everything it creates (namespaces, pins, processes, sysctls) is removed on exit, also when
# interrupted. Needs root; on a shared machine run it under the machine lock.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh

BUILD=${BUILD:-build}
OUT=${BENCH_OUT:-build/bench}
CLIENTS=500000
WARMUP=10 # seconds after setup before a steady window starts
STEADY=180 # steady window of the TCP offload phase
STEADY_UDP=120 # steady window of the UDP offload phase
STEADY_USER=60 # steady window of the userspace phases
RAMP=20000,25000,30000,35000,40000,50000,60000
STEP=10
STORM=1
STORM_MARGIN=40 # after the 30 s storm window, time for the last clients to come back
PLACEMENT=split
PHASES=tcp-offload,tcp-user,udp-offload,udp-user
INTERVAL=30
NAME=hbsb
PORT=7650
PIN=/sys/fs/bpf/hbeat-scale-bench
SRV_CPU=1 CLI_CPU=0
FLOOR_S=10 # cyclictest before the phases

usage() {
	cat <<EOF
usage: scripts/bench.sh [options]
  --clients N          clients per phase (default $CLIENTS)
  --steady S           steady window of the TCP offload phase, seconds (default $STEADY)
  --steady-udp S       steady window of the UDP offload phase (default $STEADY_UDP)
  --steady-user S      steady window of the userspace phases (default $STEADY_USER)
  --warmup S           after setup, before the steady window (default $WARMUP)
  --ramp R1,R2,...     TCP rate ramp, heartbeats/s (default $RAMP); '' for none
  --step S             length of a ramp step (default $STEP)
  --no-storm           skip the reconnect storm
  --placement P        split: from the end of setup on, the server on CPU $SRV_CPU (hbd
                       pinned, its veth's receive path by RPS), the client on CPU $CLI_CPU;
                       none: nothing pinned (default $PLACEMENT)
  --phases LIST        subset of $PHASES
EOF
}

CMDLINE="scripts/bench.sh${*:+ $*}"
while [ $# -gt 0 ]; do
	case $1 in
	--clients) CLIENTS=$2; shift ;;
	--steady) STEADY=$2; shift ;;
	--steady-user) STEADY_USER=$2; shift ;;
	--steady-udp) STEADY_UDP=$2; shift ;;
	--warmup) WARMUP=$2; shift ;;
	--ramp) RAMP=$2; shift ;;
	--step) STEP=$2; shift ;;
	--no-storm) STORM=0 ;;
	--placement) PLACEMENT=$2; shift ;;
	--phases) PHASES=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
case $PLACEMENT in
split | none) ;;
*) echo "bench: --placement split|none" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
	echo "bench: needs root (namespaces, BPF, sysctls)" >&2
	exit 1
fi
for b in hbd hbload hbctl bpf/xdp_pass.bpf.o; do
	[ -e "$BUILD/$b" ] || { echo "bench: $BUILD/$b missing: run make (or make bench)" >&2; exit 1; }
done
if [ -e "$PIN" ]; then
	echo "bench: $PIN exists: another benchmark is running or one was killed (hbctl unload --pin-path $PIN)" >&2
	exit 1
fi

eval "$(scripts/netns.sh env $NAME)"
HBD_PID= HBL_PID= SAMPLER_PID= TUNED=0 NETNS=0
cleanup() {
	set +e
	local p
	for p in $HBL_PID $SAMPLER_PID; do
		kill -KILL "$p" 2>/dev/null
	done
	stop_hbd
	[ -d "$PIN" ] && in_srv "$BUILD/hbctl" unload --dev "$SRV_IF" --pin-path "$PIN" >/dev/null 2>&1
	[ -d "$PIN" ] && rm -rf "$PIN"
	[ "$NETNS" = 1 ] && scripts/netns.sh down $NAME
	[ "$TUNED" = 1 ] && scripts/tune.sh revert
	rm -f "$OUT"/*/events.fifo
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_srv() { nsenter --net="/run/netns/$SRV_NS" "$@"; }
# Placement. Setup and the reconnect storm run on both CPUs (they are CPU-bound: 1M sockets'
# handshakes, two HMACs a client); in between, with --placement split, each side gets its own
# CPU so that /proc/stat can tell their CPU time apart (scripts/bench-lib.sh). The sampler
# calls placement_hook with every event.
placement_hook() { # EVENT ARGS...
	case $1 in
	setup_done | storm_done) place_split ;;
	storm) place_none ;;
	esac
}
place_split() {
	taskset -a -pc $SRV_CPU "$HBD_PID" > /dev/null
	taskset -a -pc $CLI_CPU "$HBL_PID" > /dev/null
	bench_rps "$SRV_NS" "$SRV_IF" $((1 << SRV_CPU))
	bench_rps "$CLI_NS" "$CLI_IF" $((1 << CLI_CPU))
}
place_none() {
	[ -z "$HBD_PID" ] || taskset -a -pc 0-1 "$HBD_PID" > /dev/null
	[ -z "$HBL_PID" ] || taskset -a -pc 0-1 "$HBL_PID" > /dev/null
	bench_rps "$SRV_NS" "$SRV_IF" 0
	bench_rps "$CLI_NS" "$CLI_IF" 0
}
log() { printf '%s bench: %s\n' "$(date +%T)" "$*" >&2; }

stop_hbd() {
	[ -n "$HBD_PID" ] || return 0
	if kill -0 "$HBD_PID" 2>/dev/null; then
		kill -TERM "$HBD_PID"
		for _ in $(seq 300); do kill -0 "$HBD_PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$HBD_PID" 2>/dev/null || true
	fi
	wait "$HBD_PID" 2>/dev/null || true
	HBD_PID=
}

# hbd as deployed, but for the per-source connection limit and the accept rate: 16 client
# addresses stand for 500k devices (each has its own address in the field), and hbload
# connects as fast as it can
start_hbd() { # DIR MODE
	local dir=$1 mode=$2 args=()
	[ "$mode" = user ] && args+=(--no-offload)
	nsenter --net="/run/netns/$SRV_NS" "$BUILD/hbd" --port $PORT \
		--keys "$OUT/keys" --sink "$dir/sink.jsonl" --pin-path "$PIN" --interval $INTERVAL \
		--max-clients $((CLIENTS + CLIENTS / 10 + 100)) --max-per-source 0 --accept-rate 0 \
		"${args[@]}" \
		> "$dir/hbd-stats.json" 2> "$dir/hbd.log" &
	HBD_PID=$!
	for _ in $(seq 300); do
		grep -q 'ready:' "$dir/hbd.log" && return 0
		kill -0 "$HBD_PID" 2>/dev/null || break
		sleep 0.1
	done
	cat "$dir/hbd.log" >&2
	echo "bench: hbd did not start" >&2
	return 1
}

# One phase: a fresh hbd (with or without BPF), one hbload run, every sample it needs.
run_phase() { # NAME PROTO MODE HBLOAD-ARGS...
	local name=$1 proto=$2 mode=$3 dir=$OUT/$1 steady=${STEADY_OFFLOAD:-$STEADY} rc=0
	shift 3
	[ "$mode" = user ] && steady=$STEADY_USER
	rm -rf "$dir"
	mkdir -p "$dir"
	SAMPLES=$dir/samples.jsonl
	log "$name: $CLIENTS $proto clients, ${mode} ($( [ "$mode" = offload ] && echo "hbctl load + hbd" || echo "no BPF, hbd --no-offload"))"
	XDP_ID=
	if [ "$mode" = offload ]; then
		in_srv "$BUILD/hbctl" load --dev "$SRV_IF" --port $PORT --pin-path "$PIN" --tcp kernel > "$dir/hbctl-load.txt"
		XDP_ID=$(bench_xdp_id "$SRV_NS" "$SRV_IF")
	fi
	start_hbd "$dir" "$mode"
	sleep 2
	bench_snapshot hbd_ready
	bench_slabinfo "$dir/slab-before.txt"
	mkfifo "$dir/events.fifo"
	# hbload waits in its open of the FIFO until the sampler (started after it, so that it
	# knows HBL_PID) opens the other end
	nsenter --net="/run/netns/$CLI_NS" "$BUILD/hbload" --server "$SRV_ADDR" \
		--port $PORT --clients "$CLIENTS" --proto "$proto" --interval $INTERVAL \
		--duration $((WARMUP + steady)) --warmup $WARMUP --steady "$steady" \
		--keys "$OUT/keys" --source "10.77.1.1-10.77.1.16" --setup-timeout $((60 + CLIENTS / 10000)) \
		--events "$dir/events.fifo" --hist "$dir/hist.txt" --json "$@" \
		> "$dir/hbload.json" 2> "$dir/hbload.log" &
	HBL_PID=$!
	place_none
	bench_sampler "$dir/events.fifo" "$([ "$PLACEMENT" = split ] && echo placement_hook)" &
	SAMPLER_PID=$!
	# slab while every client is connected: the steady window's first event
	while kill -0 "$HBL_PID" 2>/dev/null; do
		if grep -q 'window_start steady' "$SAMPLES" 2>/dev/null; then
			bench_slabinfo "$dir/slab-steady.txt"
			break
		fi
		sleep 0.5
	done
	wait "$HBL_PID" || rc=$?
	HBL_PID=
	wait "$SAMPLER_PID" || true
	SAMPLER_PID=
	rm -f "$dir/events.fifo"
	if [ "$rc" -ne 0 ]; then
		tail -n 20 "$dir/hbload.log" >&2
		echo "bench: hbload failed ($rc) in $name" >&2
		return 1
	fi
	[ "$mode" = offload ] && in_srv "$BUILD/hbctl" stats --json --pin-path "$PIN" > "$dir/hbctl-stats.json"
	stop_hbd
	if [ "$mode" = offload ]; then
		in_srv "$BUILD/hbctl" unload --dev "$SRV_IF" --pin-path "$PIN" > /dev/null
	fi
	XDP_ID=
	bench_wait_sockets "$SRV_NS" 100 60 || true
	bench_wait_slab 20000 90 || true
	log "$name: $(jq -c '{connected, setup_s, steady: {pings: .steady.pings, pongs: .steady.pongs, p99: .steady.rtt_us.p99}}' "$dir/hbload.json")"
}

mkdir -p "$OUT"
rm -f "$OUT/result.json"
START=$(date +%s)
log "tuning the host (scripts/tune.sh apply) and creating $SRV_NS/$CLI_NS"
scripts/tune.sh apply
TUNED=1
NETNS=1
BUILD=$BUILD scripts/netns.sh up $NAME 16 > /dev/null
scripts/tune.sh netns "$SRV_NS" "$CLI_NS"
umask 077
printf '1-%d derive %s\n' $((CLIENTS + 1)) "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" > "$OUT/keys"
umask 022

# The floor under every RTT here: how late a plain SCHED_OTHER thread wakes from a 1 ms sleep
# on this machine with nothing else running (a vCPU the hypervisor deschedules, a
# non-preemptible kernel section). Every heartbeat RTT contains at least two such wakeups
# (hbload's send and its receive).
log "machine floor: cyclictest, 2 threads, 1 ms interval, ${FLOOR_S} s"
cyclictest -q -t 2 -a -i 1000 -D "$FLOOR_S" -h 100000 --histfile="$OUT/cyclictest.txt" > /dev/null

ramp_args=()
nsteps=0
if [ -n "$RAMP" ]; then
	ramp_args=(--steps "$RAMP" --step-s "$STEP" --step-settle 3)
	nsteps=$(tr ',' '\n' <<< "$RAMP" | grep -c .)
fi
IFS=, read -r -a phases <<< "$PHASES"
for ph in "${phases[@]}"; do
	case $ph in
	tcp-offload)
		# steady window, then the rate ramp, then (back at 30 s) the storm: the storm last,
		# because it tears down and rebuilds every connection
		args=("${ramp_args[@]}")
		at=$((WARMUP + STEADY))
		[ -n "$RAMP" ] && args+=(--steps-at $at) && at=$((at + nsteps * STEP + 15))
		if [ "$STORM" = 1 ]; then
			args+=(--storm-at $at --storm-window 30 --duration $((at + 30 + STORM_MARGIN)))
		fi
		run_phase tcp-offload tcp offload "${args[@]}"
		;;
	tcp-user)
		args=("${ramp_args[@]}")
		[ -n "$RAMP" ] && args+=(--steps-at $((WARMUP + STEADY_USER)))
		run_phase tcp-user tcp user "${args[@]}"
		;;
	udp-offload) STEADY_OFFLOAD=$STEADY_UDP run_phase udp-offload udp offload ;;
	udp-user) run_phase udp-user udp user ;;
	*) echo "bench: unknown phase '$ph'" >&2; exit 2 ;;
	esac
done
cleanup
trap - EXIT
NETNS=0 TUNED=0
END=$(date +%s)
log "all phases done in $((END - START)) s; writing the report"
BENCH_CMD=$CMDLINE BENCH_SECONDS=$((END - START)) \
	PLACEMENT=$PLACEMENT OUT=$OUT scripts/bench-report.sh
