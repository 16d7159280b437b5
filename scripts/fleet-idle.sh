#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Fleet mode's fixed background (docs/FLEET.md, the on/off A/B): the CPU an idle hbd takes
# with no device at all, without and with --nats, and nats-server's, with no client and with
# that hbd's, each over the same window. In a namespace of its own (hbfi) on 127.0.0.1: a
# nats-server (JetStream, a store in a temp directory), then hbd --no-offload twice, one after
# the other. Everything it starts is ended by PID and removed at the end, also on failure or
# interrupt.
#
# With DEVICES, each hbd first holds that many UDP devices (hbload in the namespace, one PING a
# device every 600 s, so about DEVICES / 600 heartbeats a second in both runs): what of fleet
# mode's background grows with the devices a node holds. PERF=PREFIX records hbd's threads in
# both windows with DWARF call graphs (libnats has no frame pointers) into PREFIX-alone.data
# and PREFIX-nats.data, for perf report -i (the CPU figures then include perf's own cost).
#
#   scripts/fleet-idle.sh [SECONDS [DEVICES]]   (default 20, 0) prints one JSON line
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SECS=${1:-20}
DEVICES=${2:-0}
DEV_INTERVAL=600
PERF=${PERF:-}
[[ $SECS =~ ^[0-9]+$ && $DEVICES =~ ^[0-9]+$ ]] || { echo "usage: scripts/fleet-idle.sh [SECONDS [DEVICES]]" >&2; exit 2; }
NS=hbfi
TMP=$(mktemp -d /tmp/hbfi.XXXXXX)
PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2> /dev/null || true; done
	ip netns del $NS 2> /dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
[ "$(id -u)" -eq 0 ] || { echo "fleet-idle: needs root (a network namespace)" >&2; exit 1; }
[ -x "$BUILD/hbd" ] || { echo "fleet-idle: $BUILD/hbd missing: run make" >&2; exit 1; }
command -v nats-server > /dev/null || { echo "fleet-idle: nats-server missing (scripts/deps.sh)" >&2; exit 1; }

ip netns add $NS
ip -n $NS link set lo up
echo "1-$((DEVICES + 100)) derive $(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$TMP/keys"
chmod 600 "$TMP/keys"
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # utime + stime, in clock ticks (PID or PID/task/TID)
# the scheduler's ns on CPU, summed over the process's threads (the ticks' 10 ms cannot resolve
# what an idle process takes); a thread that ends within the window takes its part with it
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2> /dev/null | awk '{ s += $1 } END { printf "%d", s }'; }
us_per_s() { awk -v d=$(($2 - $1)) -v s="$SECS" 'BEGIN { printf "%.1f", d / 1000 / s }'; } # NS_BEFORE NS_AFTER
window() { # PID NAME: SECS seconds, recorded by perf with PERF
	if [ -n "$PERF" ]; then
		perf record -q --call-graph dwarf,16384 -F 999 -o "$PERF-$2.data" -p "$1" -- sleep "$SECS" 2> /dev/null
	else
		sleep "$SECS"
	fi
}
# THREADS=1: each thread's CPU (ticks, and the scheduler's ns from schedstat, which the
# ticks' 10 ms cannot resolve) and sleeps (voluntary context switches) over the window, with
# its name, to stderr
thread_ticks() { # PID
	[ "${THREADS:-0}" = 1 ] || return 0
	for t in /proc/"$1"/task/*; do
		echo "${t##*/} $(ticks "$1/task/${t##*/}") $(awk '/^voluntary_ctxt_switches/ { print $2 }' "$t/status") $(cut -d' ' -f1 "$t/schedstat") $(cat "$t/comm")"
	done | sort
}
thread_report() { # NAME BEFORE AFTER: thread_ticks before and after the window, to stderr
	[ -z "$2" ] || join <(echo "$2") <(echo "$3") |
		awk -v n="$1" -v s="$SECS" '{ printf "%s thread %s %s ticks %d sleeps %d cpu_us_per_s %.1f\n", n, $1, $5, $6 - $2, $7 - $3, ($8 - $4) / 1000 / s }' >&2
}
ms_per_s() { # PID NAME: its CPU over SECS seconds, ms a second
	local a b ta tb
	a=$(ticks "$1") ta=$(thread_ticks "$1")
	window "$1" "$2"
	b=$(ticks "$1") tb=$(thread_ticks "$1")
	thread_report "$2" "$ta" "$tb"
	awk -v d=$((b - a)) -v hz="$(getconf CLK_TCK)" -v s="$SECS" 'BEGIN { printf "%.2f", d * 1000 / hz / s }'
}
hbd() { # extra hbd options...: starts it, sets HBD_PID, and with DEVICES logs them in
	ip netns exec $NS "$BUILD/hbd" --keys "$TMP/keys" --no-offload --bind 127.0.0.1 --port 7998 \
		--sink "$TMP/data.jsonl" --interval $DEV_INTERVAL --max-clients $((DEVICES + 1000)) \
		"$@" > "$TMP/hbd.out" 2>> "$TMP/hbd.log" &
	HBD_PID=$!
	PIDS+=("$HBD_PID")
	sleep 3 # ready, and in fleet mode the buckets made
	[ "$DEVICES" -gt 0 ] || return 0
	rm -f "$TMP/events"
	ip netns exec $NS "$BUILD/hbload" --server 127.0.0.1 --port 7998 --proto udp \
		--clients "$DEVICES" --interval $DEV_INTERVAL --duration $((SECS + 120)) \
		--keys "$TMP/keys" --events "$TMP/events" --no-progress > /dev/null 2> "$TMP/hbload.log" &
	HBL_PID=$!
	PIDS+=("$HBL_PID")
	for _ in $(seq 900); do
		grep -q setup_done "$TMP/events" 2> /dev/null && { sleep 2; return 0; }
		kill -0 "$HBL_PID" 2> /dev/null || break
		sleep 0.1
	done
	echo "fleet-idle: $DEVICES devices did not log in:" >&2
	tail -5 "$TMP/hbload.log" >&2
	exit 1
}
stop_run() {
	[ "$DEVICES" -eq 0 ] || { kill "$HBL_PID" 2> /dev/null; wait "$HBL_PID" 2> /dev/null || true; }
	kill "$HBD_PID" && wait "$HBD_PID" 2> /dev/null || true
}

# nats-server runs through both windows: in the first, no client (hbd without --nats), so its
# CPU there is its own background, and the difference to the second is what hbd makes it do
ip netns exec $NS nats-server -js -sd "$TMP/js" -a 127.0.0.1 -p 4339 -m 8339 > "$TMP/nats.log" 2>&1 &
NATS_PID=$!
PIDS+=("$NATS_PID")
sleep 1
hbd
a_nats=$(ticks "$NATS_PID") na_nats=$(cpu_ns "$NATS_PID") na_hbd=$(cpu_ns "$HBD_PID")
alone=$(ms_per_s "$HBD_PID" alone)
b_nats=$(ticks "$NATS_PID") nb_nats=$(cpu_ns "$NATS_PID") nb_hbd=$(cpu_ns "$HBD_PID")
alone_us=$(us_per_s "$na_hbd" "$nb_hbd") nats_alone_us=$(us_per_s "$na_nats" "$nb_nats")
hz=$(getconf CLK_TCK)
nats_alone=$(awk -v d=$((b_nats - a_nats)) -v hz="$hz" -v s="$SECS" 'BEGIN { printf "%.2f", d * 1000 / hz / s }')
stop_run

# shellcheck disable=SC2086 # HBD_NATS_ARGS: extra options of the fleet-mode run, split on spaces
hbd --nats nats://127.0.0.1:4339 --nats-node idle ${HBD_NATS_ARGS:-}
# messages between hbd and nats-server (its monitoring port: every client connection is hbd's)
msgs() { ip netns exec $NS curl -s http://127.0.0.1:8339/connz | jq -r '[.connections[].in_msgs] as $i | [.connections[].out_msgs] as $o | "\($i | add // 0) \($o | add // 0)"'; }
read -r a_in a_out <<< "$(msgs)"
a_hbd=$(ticks "$HBD_PID") a_nats=$(ticks "$NATS_PID") ta=$(thread_ticks "$HBD_PID")
na_hbd=$(cpu_ns "$HBD_PID") na_nats=$(cpu_ns "$NATS_PID")
window "$HBD_PID" nats
b_hbd=$(ticks "$HBD_PID") b_nats=$(ticks "$NATS_PID") tb=$(thread_ticks "$HBD_PID")
nb_hbd=$(cpu_ns "$HBD_PID") nb_nats=$(cpu_ns "$NATS_PID")
thread_report nats "$ta" "$tb"
read -r b_in b_out <<< "$(msgs)"
fleet=$(awk -v d=$((b_hbd - a_hbd)) -v hz="$hz" -v s="$SECS" 'BEGIN { printf "%.2f", d * 1000 / hz / s }')
nats=$(awk -v d=$((b_nats - a_nats)) -v hz="$hz" -v s="$SECS" 'BEGIN { printf "%.2f", d * 1000 / hz / s }')
grep -q "fleet: .* ready" "$TMP/hbd.log" || { echo "fleet-idle: hbd --nats never got ready:" >&2; tail -5 "$TMP/hbd.log" >&2; exit 1; }
printf '{"seconds":%s,"devices":%s,"perf":%s,"hbd_ms_per_s":%s,"hbd_nats_ms_per_s":%s,"nats_server_ms_per_s":%s,"nats_server_alone_ms_per_s":%s,"cpu_us_per_s":{"hbd":%s,"hbd_nats":%s,"nats_server":%s,"nats_server_alone":%s},"hbd_to_nats_msgs_per_s":%s,"nats_to_hbd_msgs_per_s":%s,"clock_ticks_per_s":%s,"loadavg":"%s"}\n' \
	"$SECS" "$DEVICES" "$([ -n "$PERF" ] && echo true || echo false)" "$alone" "$fleet" "$nats" "$nats_alone" \
	"$alone_us" "$(us_per_s "$na_hbd" "$nb_hbd")" "$(us_per_s "$na_nats" "$nb_nats")" "$nats_alone_us" \
	"$(awk -v d=$((b_in - a_in)) -v s="$SECS" 'BEGIN { printf "%.1f", d / s }')" \
	"$(awk -v d=$((b_out - a_out)) -v s="$SECS" 'BEGIN { printf "%.1f", d / s }')" \
	"$hz" "$(cut -d' ' -f1-3 /proc/loadavg)"
