#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The MQTT phase of the scale benchmark, standalone (scripts/bench.sh can call it as a phase):
# N `hbload --proto mqtt` devices against hbd --mqtt-port with the kernel answering PINGREQs
# (hbctl load --mqtt-port, --tcp kernel), in two network namespaces on this machine.
#
#   scripts/bench-mqtt-phase.sh [--clients N] [--keepalive S] [--steady S] [--out DIR]
#
# Defaults: 500,000 devices, keepalive 30 s, a 120 s steady window after a 10 s warmup.
# Writes DIR/result.json (default build/bench/mqtt-offload):
#   clients, keepalive_s, setup_s, steady_s, pings, pongs, lost (the steady window's),
#   rtt_us {p50, p99, p999, max}, mqtt_pings_kernel and mqtt_pings_user (the hbctl stats
#   deltas over the whole run), server_cpu_us_per_keepalive (machine CPU over the steady
#   window minus hbload's own, per PINGREQ), hbd_cpu_us_per_keepalive (hbd's process alone)
# and the raw outputs beside it. Everything it creates (namespaces, pins, processes) is
# removed on exit, also when interrupted. Needs root; on a shared machine run it under the
# machine lock: it loads both CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CLIENTS=500000
KEEPALIVE=30
WARMUP=10
STEADY=120
OUT=build/bench/mqtt-offload
NAME=hbmqb
PORT=7660
MQTT_PORT=7661
PIN=/sys/fs/bpf/hbmq-bench
while [ $# -gt 0 ]; do
	case $1 in
	--clients) CLIENTS=$2 ; shift 2 ;;
	--keepalive) KEEPALIVE=$2 ; shift 2 ;;
	--steady) STEADY=$2 ; shift 2 ;;
	--warmup) WARMUP=$2 ; shift 2 ;;
	--out) OUT=$2 ; shift 2 ;;
	*) echo "usage: $0 [--clients N] [--keepalive S] [--steady S] [--warmup S] [--out DIR]" >&2
	   exit 2 ;;
	esac
done
eval "$(scripts/netns.sh env $NAME)"
mkdir -p "$OUT"
hbd_pid= load_pid= loaded=
cleanup() {
	[ -n "$load_pid" ] && kill "$load_pid" 2>/dev/null || true
	if [ -n "$hbd_pid" ]; then
		kill "$hbd_pid" 2>/dev/null || true
		wait "$hbd_pid" 2>/dev/null || true
	fi
	[ -n "$loaded" ] && nsenter --net=/run/netns/"$SRV_NS" "$BUILD/hbctl" unload --dev "$SRV_IF" \
		--pin-path "$PIN" >/dev/null 2>&1 || true
	scripts/netns.sh down $NAME >/dev/null 2>&1 || true
	rm -rf "$PIN"
}
trap cleanup EXIT INT TERM

cpu_of() { # PID: utime + stime in clock ticks
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}
busy() { # whole machine: non-idle clock ticks
	awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat
}
stat_of() { # FIELD of hbctl stats --json
	nsenter --net=/run/netns/"$SRV_NS" "$BUILD/hbctl" stats --json --pin-path "$PIN" | jq -r ".$1"
}

scripts/netns.sh up $NAME 16 >&2
nsenter --net=/run/netns/"$SRV_NS" "$BUILD/hbctl" load --dev "$SRV_IF" --mode native --port $PORT \
	--mqtt-port $MQTT_PORT --tcp kernel --max-conns $((CLIENTS + CLIENTS / 10 + 1024)) \
	--pin-path "$PIN" >&2
loaded=1
printf '1-%d derive %s\n' "$((CLIENTS + 1))" "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" \
	> "$OUT/keys"
nsenter --net=/run/netns/"$SRV_NS" "$BUILD/hbd" --port $PORT --mqtt-port $MQTT_PORT --mqtt-realm bench \
	--keys "$OUT/keys" --sink /dev/null --interval "$KEEPALIVE" --pin-path "$PIN" \
	--max-clients $((CLIENTS + 1024)) --max-per-source 0 --accept-rate 0 2> "$OUT/hbd.log" &
hbd_pid=$!
for _ in $(seq 100); do
	nsenter --net=/run/netns/"$SRV_NS" ss -Hltn "sport = :$MQTT_PORT" | grep -q . && break
	sleep 0.1
done
k0=$(stat_of mqtt_pings_kernel) u0=$(stat_of mqtt_pings_user)
: > "$OUT/events"
nsenter --net=/run/netns/"$CLI_NS" "$BUILD/hbload" --proto mqtt --server "$SRV_ADDR" --port $MQTT_PORT \
	--mqtt-realm bench --keys "$OUT/keys" --clients "$CLIENTS" --interval "$KEEPALIVE" \
	--duration $((WARMUP + STEADY)) --warmup "$WARMUP" --steady "$STEADY" \
	--source 10.77.1.1-10.77.1.16 --connect-rate 20000 --setup-timeout 120 \
	--events "$OUT/events" --json --no-progress > "$OUT/hbload.json" 2> "$OUT/hbload.err" &
load_pid=$!
wait_event() { # WORD: hbload wrote it to the events file (or ended)
	while ! grep -q " $1" "$OUT/events" && kill -0 "$load_pid" 2>/dev/null; do
		sleep 0.2
	done
}
wait_event "window_start steady"
b0=$(busy) h0=$(cpu_of "$hbd_pid") l0=$(cpu_of "$load_pid")
wait_event "window_end steady"
b1=$(busy) h1=$(cpu_of "$hbd_pid") l1=$(cpu_of "$load_pid")
wait "$load_pid" || { echo "hbload failed: $OUT/hbload.err" >&2; exit 1; }
load_pid=
k1=$(stat_of mqtt_pings_kernel) u1=$(stat_of mqtt_pings_user)
hz=$(getconf CLK_TCK)
jq --argjson clients "$CLIENTS" --argjson ka "$KEEPALIVE" --argjson kd $((k1 - k0)) \
	--argjson ud $((u1 - u0)) --argjson srv $((b1 - b0 - (l1 - l0))) \
	--argjson hbd $((h1 - h0)) --argjson hz "$hz" '{
	clients: $clients, keepalive_s: $ka, setup_s: .setup_s, steady_s: .steady.seconds,
	pings: .steady.pings, pongs: .steady.pongs, lost: .steady.lost, rtt_us: .steady.rtt_us,
	mqtt_pings_kernel: $kd, mqtt_pings_user: $ud,
	server_cpu_us_per_keepalive: (if .steady.pings > 0
		then ($srv / $hz * 1e6 / .steady.pings * 10 | round / 10) else null end),
	hbd_cpu_us_per_keepalive: (if .steady.pings > 0
		then ($hbd / $hz * 1e6 / .steady.pings * 10 | round / 10) else null end)
}' "$OUT/hbload.json" | tee "$OUT/result.json"
