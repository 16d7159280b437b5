#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The scale benchmark: N heartbeating TCP and UDP clients against one hbd, kernel
# fast paths and userspace side by side, in two network namespaces on this machine.
#
#   scripts/bench.sh [--clients N] [options]      (make bench runs it with the defaults)
#
# Phases, each with a fresh hbd (and BPF loaded only for the offload ones):
#   tcp-offload  setup, steady window, reconnect storm, rate ramp       (hbctl load --tcp
#                kernel + hbd: the sockmap answers)
#   tcp-user     setup, steady window, rate ramp                        (hbd --no-offload)
#   tcp-default  setup, steady window, rate ramp, reconnect storm      (hbctl load + hbd:
#                the loader's default TCP mode, --tcp user: hbd answers, XDP for UDP)
#   tcp-keepalive  setup, steady window with no PINGs (the kernels' keepalive probes are
#                the liveness check), then a drop of every packet of one client source
#                address until hbd expired those devices    (hbctl load --tcp keepalive + hbd)
#   udp-offload  setup, steady window                                   (hbctl load + hbd)
#   udp-user     setup, steady window                                   (hbd --no-offload)
# Writes build/bench/result.json (keys: docs/BENCHMARKS.md), build/bench/<phase>/ (raw
# outputs), docs/BENCHMARKS.md and docs/bench-rtt.png (scripts/bench-report.sh).
# Everything it creates (namespaces, pins, processes, sysctls, nftables rules) is removed on
# exit, also when interrupted. Needs root; on a shared machine run it under the machine lock.
# HB_BENCH_NS_PREFIX (default hbsb) names the namespaces (PREFIX-srv, PREFIX-cli) and
# HB_BENCH_PIN (default /sys/fs/bpf/hbeat-scale-bench) the pins, for a run beside another.
# --nats: fleet mode on (docs/FLEET.md): each phase also gets a fresh nats-server with
# JetStream on 127.0.0.1 of the server namespace, pinned with the server, and hbd runs with
# --nats; nothing changes without it (scripts/fleet-ab.sh runs the phases both ways).
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
STORM_WINDOW=30
STORM_MARGIN=40 # after the storm window, time for the last clients to come back
PLACEMENT=split
PHASES=tcp-offload,tcp-user,tcp-default,tcp-beat,tcp-keepalive,udp-offload,udp-user
INTERVAL=30
KA_STEADY=60 # steady window of the keepalive phase (no PINGs: the probes are the checks)
KA_PROBES=2 # hbd --keepalive-probes: dead (probes + 1) intervals after the last packet
KA_DROP_WAIT= # after the drop, wait at most this long for the expiries (default below)
KA_SRC_INDEX=16 # the client source address whose packets the drop takes: 10.77.1.N of 16
NAME=${HB_BENCH_NS_PREFIX:-hbsb}
PORT=7650
PIN=${HB_BENCH_PIN:-/sys/fs/bpf/hbeat-scale-bench}
SRV_CPU=1 CLI_CPU=0
FLOOR_S=10 # cyclictest before the phases
FLEET=0 # --nats: a nats-server per phase and hbd --nats
NATS_PORT=7660 NATS_MON=8660 # on 127.0.0.1 of the server namespace
HBD_EXTRA=() # --hbd-args: given to hbd in every phase, after the phase's own
HBLOAD_EXTRA=() # --hbload-args: given to hbload in every phase, after the phase's own

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
  --storm-window S     the storm's reconnects spread over S seconds (default $STORM_WINDOW):
                       the devices' own reconnect jitter; the last one starts S s after the drop
  --interval S         heartbeat interval, and the keepalive probe interval (default $INTERVAL)
  --ka-steady S        steady window of the keepalive phase (default $KA_STEADY)
  --ka-probes N        hbd --keepalive-probes in the keepalive phase (default $KA_PROBES)
  --ka-drop-wait S     after the drop, wait at most S for the dropped devices' expiry
                       (default interval x (probes + 2) + 10)
  --placement P        split: from the end of setup on, the server on CPU $SRV_CPU (hbd
                       pinned, its veth's receive path by RPS), the client on CPU $CLI_CPU;
                       none: nothing pinned (default $PLACEMENT)
  --phases LIST        subset of $PHASES
  --nats               fleet mode: a nats-server (JetStream) per phase in the server
                       namespace, pinned with the server; hbd --nats (default off)
  --hbd-args "ARGS"    more hbd options for every phase, e.g. "--batch-wait 0" (split at
                       spaces; default none)
  --hbload-args "ARGS" more hbload options for every phase, e.g. "--inflight 4096"
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
	--storm-window) STORM_WINDOW=$2; shift ;;
	--interval) INTERVAL=$2; shift ;;
	--ka-steady) KA_STEADY=$2; shift ;;
	--ka-probes) KA_PROBES=$2; shift ;;
	--ka-drop-wait) KA_DROP_WAIT=$2; shift ;;
	--placement) PLACEMENT=$2; shift ;;
	--phases) PHASES=$2; shift ;;
	--nats) FLEET=1 ;;
	--hbd-args) read -r -a HBD_EXTRA <<< "$2"; shift ;;
	--hbload-args) read -r -a HBLOAD_EXTRA <<< "$2"; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
case $PLACEMENT in
split | none) ;;
*) echo "bench: --placement split|none" >&2; exit 2 ;;
esac
KA_DROP_WAIT=${KA_DROP_WAIT:-$(awk -v i="$INTERVAL" -v p="$KA_PROBES" 'BEGIN { print int(i * (p + 2) + 10.999) }')}
if [ "$(id -u)" -ne 0 ]; then
	echo "bench: needs root (namespaces, BPF, sysctls)" >&2
	exit 1
fi
for b in hbd hbload hbctl bpf/xdp_pass.bpf.o; do
	[ -e "$BUILD/$b" ] || { echo "bench: $BUILD/$b missing: run make (or make bench)" >&2; exit 1; }
done
if [ "$FLEET" = 1 ] && ! command -v nats-server > /dev/null; then
	echo "bench: --nats needs nats-server (scripts/deps.sh installs it)" >&2
	exit 1
fi
if [ -e "$PIN" ]; then
	echo "bench: $PIN exists: another benchmark is running or one was killed (hbctl unload --pin-path $PIN)" >&2
	exit 1
fi

eval "$(scripts/netns.sh env $NAME)"
HBD_PID= HBL_PID= SAMPLER_PID= EVENTS_PID= NATS_PID= NATS_DIR= TUNED=0 NETNS=0 DROP_ON=0
cleanup() {
	set +e
	local p
	for p in $HBL_PID $SAMPLER_PID $EVENTS_PID; do
		kill -KILL "$p" 2>/dev/null
	done
	drop_source off
	stop_hbd
	stop_nats
	pin_timers off
	ka_path off
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
	[ -z "$NATS_PID" ] || taskset -a -pc $SRV_CPU "$NATS_PID" > /dev/null
	taskset -a -pc $CLI_CPU "$HBL_PID" > /dev/null
	bench_rps "$SRV_NS" "$SRV_IF" $((1 << SRV_CPU))
	bench_rps "$CLI_NS" "$CLI_IF" $((1 << CLI_CPU))
}
place_none() {
	[ -z "$HBD_PID" ] || taskset -a -pc 0-1 "$HBD_PID" > /dev/null
	[ -z "$HBL_PID" ] || taskset -a -pc 0-1 "$HBL_PID" > /dev/null
	[ -z "$NATS_PID" ] || taskset -a -pc 0-1 "$NATS_PID" > /dev/null
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

# --nats: a fresh nats-server with JetStream for the phase, on 127.0.0.1 of the server
# namespace (its store under DIR, removed by stop_nats); ended by its PID.
start_nats() { # DIR
	NATS_DIR=$1/nats-store
	rm -rf "$NATS_DIR"
	# nsenter itself, not in_srv: a backgrounded function is a subshell, whose PID is not
	# the server's
	nsenter --net="/run/netns/$SRV_NS" nats-server -a 127.0.0.1 -p $NATS_PORT -m $NATS_MON \
		-js -sd "$NATS_DIR" > "$1/nats.log" 2>&1 &
	NATS_PID=$!
	for _ in $(seq 100); do
		in_srv curl -sf "http://127.0.0.1:$NATS_MON/healthz?js-enabled-only=true" > /dev/null 2>&1 && return 0
		kill -0 "$NATS_PID" 2> /dev/null || break
		sleep 0.1
	done
	cat "$1/nats.log" >&2
	echo "bench: nats-server did not start" >&2
	return 1
}
stop_nats() {
	if [ -n "$NATS_PID" ]; then
		kill -TERM "$NATS_PID" 2> /dev/null
		for _ in $(seq 100); do kill -0 "$NATS_PID" 2> /dev/null || break; sleep 0.1; done
		kill -KILL "$NATS_PID" 2> /dev/null || true
		wait "$NATS_PID" 2> /dev/null || true
		NATS_PID=
	fi
	[ -z "$NATS_DIR" ] || rm -rf "$NATS_DIR"
	NATS_DIR=
}
# --nats: what the bucket and the node say at the end of a phase (DIR/fleet-status.json): that
# fleet mode was on and wrote presence (presence_rev, the node's devices)
fleet_status() { # DIR
	in_srv "$BUILD/hbctl" fleet --nats "nats://127.0.0.1:$NATS_PORT" status --json \
		> "$1/fleet-status.json" 2> "$1/fleet-status.log" || true
}

# hbd as deployed, but for the per-source connection limit and the accept rate: 16 client
# addresses stand for 500k devices (each has its own address in the field), and hbload
# connects as fast as it can
start_hbd() { # DIR MODE
	local dir=$1 mode=$2 args=()
	[ "$mode" = user ] && args+=(--no-offload)
	[ "$mode" = keepalive ] && args+=(--keepalive-probes "$KA_PROBES" --control "$dir/hbd.sock")
	[ "$FLEET" = 1 ] && args+=(--nats "nats://127.0.0.1:$NATS_PORT" --nats-node "bench-$(basename "$dir")")
	nsenter --net="/run/netns/$SRV_NS" "$BUILD/hbd" --port $PORT \
		--keys "$OUT/keys" --sink "$dir/sink.jsonl" --pin-path "$PIN" --interval $INTERVAL \
		--max-clients $((CLIENTS + CLIENTS / 10 + 100)) --max-per-source 0 --accept-rate 0 \
		"${args[@]}" ${HBD_EXTRA[@]+"${HBD_EXTRA[@]}"} \
		> "$dir/hbd-stats.json" 2> "$dir/hbd.log" &
	HBD_PID=$!
	for _ in $(seq 300); do
		# --nats: also the stream and buckets, so presence is written from the first client on
		grep -q 'ready:' "$dir/hbd.log" && { [ "$FLEET" = 0 ] || grep -q 'fleet: .* ready' "$dir/hbd.log"; } &&
			return 0
		kill -0 "$HBD_PID" 2>/dev/null || break
		sleep 0.1
	done
	cat "$dir/hbd.log" >&2
	echo "bench: hbd did not start" >&2
	return 1
}

# The drop of the keepalive phase: every packet to and from one client source address
# (KA_SRC_INDEX of the 16, so every 16th device) vanishes in the client namespace, as if
# those devices lost power: no RST, no ACK of a probe.
DROP_ADDR=10.77.1.$KA_SRC_INDEX
drop_source() { # on|off
	if [ "$1" = on ]; then
		ip netns exec "$CLI_NS" nft -f - <<-EOF
		table inet ${NAME}_drop {
			chain input { type filter hook input priority 0; ip daddr $DROP_ADDR drop; }
			chain output { type filter hook output priority 0; ip saddr $DROP_ADDR drop; }
		}
		EOF
		DROP_ON=1
	elif [ "$DROP_ON" = 1 ]; then
		ip netns exec "$CLI_NS" nft delete table inet "${NAME}_drop" 2> /dev/null
		DROP_ON=0
	fi
}

# Keepalive timers fire on the CPU that armed them (sock_ops, in the server's receive path:
# CPU 1 with the split placement), not on whichever CPU is awake when the server's is idle,
# so that the server's probes are counted on the server's CPU. Host-wide, for the keepalive
# phase only; restored after it (and by cleanup).
TIMER_MIGRATION=
pin_timers() { # on|off
	if [ "$1" = on ]; then
		TIMER_MIGRATION=$(cat /proc/sys/kernel/timer_migration)
		echo 0 > /proc/sys/kernel/timer_migration
	elif [ -n "$TIMER_MIGRATION" ]; then
		echo "$TIMER_MIGRATION" > /proc/sys/kernel/timer_migration
		TIMER_MIGRATION=
	fi
}

# The server namespace's TCP counters and both veths' packet counters, into DIR/net-WHEN.txt:
# what a keepalive figure rests on (probes sent, timeouts, packets a full veth ring dropped).
net_counters() { # DIR WHEN
	{
		cat "/proc/$HBD_PID/net/netstat" "/proc/$HBD_PID/net/snmp" 2> /dev/null
		ip -n "$SRV_NS" -s -s link show dev "$SRV_IF"
		ip -n "$CLI_NS" -s -s link show dev "$CLI_IF"
		ip netns exec "$CLI_NS" cat /proc/net/netstat /proc/net/snmp
	} > "$1/net-$2.txt" 2>&1
}

# The keepalive phase's path to the devices. The kernel fires keepalive timers in batches (a
# timer wheel bucket at a time: 256 ms for a 5 s timer, 2 s for 30 s), so the server sends its
# probes in bursts of thousands. The client veth's XDP program (xdp_pass, there for UDP's
# XDP_TX) puts it in NAPI mode with a 256-packet ring, which such a burst overflows: the
# probe fails locally and is retried (counted again in TCPKeepAlive), answers come late, and a
# device that answers every probe it gets is expired. A NIC has a qdisc and deep rings; here,
# for this phase, the client veth takes packets into the backlog instead (no XDP program, and
# net.core.netdev_max_backlog deep enough for a burst), as TCP needs no XDP on that side.
BACKLOG=
ka_path() { # on|off
	if [ "$1" = on ]; then
		BACKLOG=$(sysctl -n net.core.netdev_max_backlog)
		sysctl -qw net.core.netdev_max_backlog=262144
		ip -n "$CLI_NS" link set dev "$CLI_IF" xdpdrv off
	elif [ -n "$BACKLOG" ]; then
		sysctl -qw net.core.netdev_max_backlog="$BACKLOG"
		BACKLOG=
		ip -n "$CLI_NS" link set dev "$CLI_IF" xdpdrv obj "$BUILD/bpf/xdp_pass.bpf.o" sec xdp 2> /dev/null
	fi
}

# Packets a device dropped on transmit (a full veth ring), from ip -s link.
tx_dropped() { # NETNS IFACE
	ip -n "$1" -s link show dev "$2" | awk '/TX:/ { getline; print $4; exit }'
}

# hbd's counter (user.NAME) from hbctl stats; empty if unreadable.
hbd_stat() { # NAME
	in_srv "$BUILD/hbctl" stats --json --pin-path "$PIN" 2> /dev/null | jq -r ".user.$1 // empty"
}

# After the keepalive phase's steady window: the devices of one source address vanish; how
# long until hbd has expired each of them (its presence events, followed from before the
# drop), and whether it expired any other. Writes DIR/drop.json.
keepalive_drop() { # DIR
	local dir=$1 dead ka0 exp0 t0 t1 deadline ka n=0 done_s=-1 txd0 txd1
	in_srv "$BUILD/hbctl" events --json --control "$dir/hbd.sock" > "$dir/events.jsonl" 2> "$dir/events.log" &
	EVENTS_PID=$!
	sleep 1
	# the server's established connections from that address: the devices that will die
	dead=$(in_srv ss -Htn state established "( sport = :$PORT )" dst "$DROP_ADDR" | wc -l)
	ka0=$(hbd_stat keepalive_expired)
	exp0=$(hbd_stat expired_tcp)
	net_counters "$dir" drop
	txd0=$(tx_dropped "$SRV_NS" "$SRV_IF")
	t0=$EPOCHREALTIME
	drop_source on
	bench_snapshot drop
	log "tcp-keepalive: dropping every packet of $DROP_ADDR ($dead connections); waiting up to $KA_DROP_WAIT s for their expiry"
	deadline=$((SECONDS + KA_DROP_WAIT))
	while [ $SECONDS -lt $deadline ]; do
		ka=$(hbd_stat keepalive_expired)
		n=$((${ka:-$ka0} - ka0))
		if [ "$n" -ge "$dead" ]; then
			t1=$EPOCHREALTIME
			done_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
			break
		fi
		sleep 0.5
	done
	bench_snapshot drop_done
	net_counters "$dir" drop_done
	txd1=$(tx_dropped "$SRV_NS" "$SRV_IF")
	sleep 2 # the last events on their way to the subscriber
	kill -TERM "$EVENTS_PID" 2> /dev/null
	wait "$EVENTS_PID" 2> /dev/null || true
	EVENTS_PID=
	drop_source off
	# dead devices: those hbload gave that address (device - 1 = its index, sources taken
	# round-robin); the worst detection time is their last expired event's
	jq -s --argjson t0 "$t0" --argjson dead "$dead" --argjson polled "$done_s" \
		--argjson ka0 "${ka0:-0}" --argjson exp0 "${exp0:-0}" --arg addr "$DROP_ADDR" \
		--argjson txd "$((${txd1:-0} - ${txd0:-0}))" \
		--argjson idx $((KA_SRC_INDEX - 1)) --argjson wait "$KA_DROP_WAIT" \
		--argjson bound "$(awk -v i="$INTERVAL" -v p="$KA_PROBES" 'BEGIN { print i * (p + 1) }')" '
	  [.[] | select(.event == "expired")] as $e
	  | ($e | map(select((.device - 1) % 16 == $idx))) as $d
	  | {addr: $addr, dead: $dead, dead_detected: ($d | map(.device) | unique | length),
	     other_expired: ($e | map(select((.device - 1) % 16 != $idx)) | length),
	     lost_events: ([.[] | select(.event == "lost") | .count] | add // 0),
	     detect_s: (if ($d | length) > 0 and ($d | map(.device) | unique | length) >= $dead
	                then (($d | map(.ts_ms) | max) / 1000 - $t0) * 1000 | round / 1000 else null end),
	     polled_s: (if $polled < 0 then null else $polled end), wait_s: $wait, bound_s: $bound,
	     keepalive_expired_before: $ka0, expired_tcp_before: $exp0,
	     srv_tx_dropped: $txd}' \
		"$dir/events.jsonl" > "$dir/drop.json"
	log "tcp-keepalive: $(jq -c . "$dir/drop.json")"
}

# One phase: a fresh hbd (with or without BPF), one hbload run, every sample it needs.
run_phase() { # NAME PROTO MODE HBLOAD-ARGS...
	local name=$1 proto=$2 mode=$3 dir=$OUT/$1 steady=${STEADY_OFFLOAD:-$STEADY} rc=0 extra=0
	shift 3
	[ "$mode" = user ] && steady=$STEADY_USER
	[ "$mode" = keepalive ] && steady=$KA_STEADY && extra=$((KA_DROP_WAIT + 15))
	rm -rf "$dir"
	mkdir -p "$dir"
	SAMPLES=$dir/samples.jsonl
	# the loader's TCP mode: the sockmap answers (offload), the kernels' keepalive, or none
	# given, hbctl load's default (--tcp user: hbd answers TCP, XDP answers UDP)
	local tcp_arg=()
	case $mode in
	offload) tcp_arg=(--tcp kernel) ;;
	keepalive) tcp_arg=(--tcp keepalive) ;;
	esac
	log "$name: $CLIENTS $proto clients, ${mode} ($(case $mode in user) echo "no BPF, hbd --no-offload" ;; *) echo "hbctl load ${tcp_arg[*]:-(its default)} + hbd" ;; esac))"
	XDP_ID=
	if [ "$mode" != user ]; then
		in_srv "$BUILD/hbctl" load --dev "$SRV_IF" --port $PORT --pin-path "$PIN" \
			${tcp_arg[@]+"${tcp_arg[@]}"} > "$dir/hbctl-load.txt"
		XDP_ID=$(bench_xdp_id "$SRV_NS" "$SRV_IF")
	fi
	[ "$mode" = keepalive ] && pin_timers on && ka_path on
	[ "$FLEET" = 1 ] && start_nats "$dir"
	start_hbd "$dir" "$mode"
	sleep 2
	bench_snapshot hbd_ready
	bench_slabinfo "$dir/slab-before.txt"
	mkfifo "$dir/events.fifo"
	# hbload waits in its open of the FIFO until the sampler (started after it, so that it
	# knows HBL_PID) opens the other end
	nsenter --net="/run/netns/$CLI_NS" "$BUILD/hbload" --server "$SRV_ADDR" \
		--port $PORT --clients "$CLIENTS" --proto "$proto" --interval $INTERVAL \
		--duration $((WARMUP + steady + extra)) --warmup $WARMUP --steady "$steady" \
		--keys "$OUT/keys" --source "10.77.1.1-10.77.1.16" --setup-timeout $((60 + CLIENTS / 10000)) \
		--events "$dir/events.fifo" --hist "$dir/hist.txt" --json "$@" \
		${HBLOAD_EXTRA[@]+"${HBLOAD_EXTRA[@]}"} \
		> "$dir/hbload.json" 2> "$dir/hbload.log" &
	HBL_PID=$!
	place_none
	# keepalive: the server's receive path on its CPU from the first SYN on, so that sock_ops
	# arms every connection's keepalive timer there (pin_timers)
	if [ "$mode" = keepalive ] && [ "$PLACEMENT" = split ]; then
		bench_rps "$SRV_NS" "$SRV_IF" $((1 << SRV_CPU))
	fi
	bench_sampler "$dir/events.fifo" "$([ "$PLACEMENT" = split ] && echo placement_hook)" &
	SAMPLER_PID=$!
	# slab while every client is connected: the steady window's first event
	while kill -0 "$HBL_PID" 2>/dev/null; do
		if grep -q 'window_start steady' "$SAMPLES" 2>/dev/null; then
			bench_slabinfo "$dir/slab-steady.txt"
			[ "$mode" = keepalive ] && net_counters "$dir" steady
			break
		fi
		sleep 0.5
	done
	if [ "$mode" = keepalive ]; then
		while kill -0 "$HBL_PID" 2>/dev/null && ! grep -q 'window_end steady' "$SAMPLES" 2>/dev/null; do
			sleep 0.5
		done
		kill -0 "$HBL_PID" 2>/dev/null && keepalive_drop "$dir"
	fi
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
	[ "$mode" != user ] && in_srv "$BUILD/hbctl" stats --json --pin-path "$PIN" > "$dir/hbctl-stats.json"
	[ "$FLEET" = 1 ] && fleet_status "$dir"
	stop_hbd
	stop_nats
	if [ "$mode" != user ]; then
		in_srv "$BUILD/hbctl" unload --dev "$SRV_IF" --pin-path "$PIN" > /dev/null
	fi
	[ "$mode" = keepalive ] && pin_timers off && ka_path off
	XDP_ID=
	bench_wait_sockets "$SRV_NS" 100 60 || true
	bench_wait_slab 20000 90 || true
	log "$name: $(jq -c '{connected, setup_s, steady: {pings: .steady.pings, pongs: .steady.pongs, beats: .steady.beats, p99: .steady.rtt_us.p99}}' "$dir/hbload.json")"
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
# hbload's schedule for a phase, in args: a steady window of STEADY_S seconds, then the rate
# ramp, then (back at the base rate) the storm, last because it tears down and rebuilds every
# connection.
steady_ramp_storm() { # STEADY_S
	local at=$((WARMUP + $1))
	args=("${ramp_args[@]}")
	if [ -n "$RAMP" ]; then
		args+=(--steps-at $at)
		at=$((at + nsteps * STEP + 15))
	fi
	if [ "$STORM" = 1 ]; then
		args+=(--storm-at $at --storm-window "$STORM_WINDOW"
			--duration $((at + STORM_WINDOW + STORM_MARGIN)))
	fi
}

IFS=, read -r -a phases <<< "$PHASES"
for ph in "${phases[@]}"; do
	case $ph in
	tcp-offload)
		steady_ramp_storm "$STEADY"
		run_phase tcp-offload tcp offload "${args[@]}"
		;;
	tcp-user)
		args=("${ramp_args[@]}")
		[ -n "$RAMP" ] && args+=(--steps-at $((WARMUP + STEADY_USER)))
		run_phase tcp-user tcp user "${args[@]}"
		;;
	tcp-default)
		# tcp-user's steady window: the two are read side by side
		steady_ramp_storm "$STEADY_USER"
		STEADY_OFFLOAD=$STEADY_USER run_phase tcp-default tcp default "${args[@]}"
		;;
	tcp-keepalive) run_phase tcp-keepalive tcp keepalive ;;
	# the default TCP path with devices that send BEATs instead of PINGs (TCP's ACK answers;
	# no ramp, no storm: the steady window of the userspace phase, against which it is read)
	tcp-beat) STEADY_OFFLOAD=$STEADY_USER run_phase tcp-beat tcp offload --beat ;;
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
