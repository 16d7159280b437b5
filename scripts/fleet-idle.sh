#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Fleet mode's fixed background (docs/FLEET.md, the on/off A/B): the CPU an idle hbd takes
# with no device at all, without and with --nats, and the idle nats-server's own, each over
# the same window. In a namespace of its own (hbfi) on 127.0.0.1: a nats-server (JetStream, a
# store in a temp directory) and hbd --no-offload, one after the other. Everything it starts
# is ended by PID and removed at the end, also on failure or interrupt.
#
#   scripts/fleet-idle.sh [SECONDS]      (default 20) prints one JSON line
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SECS=${1:-20}
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
echo "1-100 derive $(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$TMP/keys"
chmod 600 "$TMP/keys"
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # utime + stime, in clock ticks
ms_per_s() { # PID: its CPU over SECS seconds, ms a second
	local a b
	a=$(ticks "$1")
	sleep "$SECS"
	b=$(ticks "$1")
	awk -v d=$((b - a)) -v hz="$(getconf CLK_TCK)" -v s="$SECS" 'BEGIN { printf "%.2f", d * 1000 / hz / s }'
}
hbd() { # extra hbd options...: starts it, sets HBD_PID
	ip netns exec $NS "$BUILD/hbd" --keys "$TMP/keys" --no-offload --bind 127.0.0.1 --port 7998 \
		--sink "$TMP/data.jsonl" "$@" > "$TMP/hbd.out" 2>> "$TMP/hbd.log" &
	HBD_PID=$!
	PIDS+=("$HBD_PID")
	sleep 3 # ready, and in fleet mode the buckets made
}

hbd
alone=$(ms_per_s "$HBD_PID")
kill "$HBD_PID" && wait "$HBD_PID" 2> /dev/null || true

ip netns exec $NS nats-server -js -sd "$TMP/js" -a 127.0.0.1 -p 4339 > "$TMP/nats.log" 2>&1 &
NATS_PID=$!
PIDS+=("$NATS_PID")
sleep 1
hbd --nats nats://127.0.0.1:4339 --nats-node idle
a_hbd=$(ticks "$HBD_PID") a_nats=$(ticks "$NATS_PID")
sleep "$SECS"
b_hbd=$(ticks "$HBD_PID") b_nats=$(ticks "$NATS_PID")
hz=$(getconf CLK_TCK)
fleet=$(awk -v d=$((b_hbd - a_hbd)) -v hz="$hz" -v s="$SECS" 'BEGIN { printf "%.2f", d * 1000 / hz / s }')
nats=$(awk -v d=$((b_nats - a_nats)) -v hz="$hz" -v s="$SECS" 'BEGIN { printf "%.2f", d * 1000 / hz / s }')
grep -q "fleet: .* ready" "$TMP/hbd.log" || { echo "fleet-idle: hbd --nats never got ready:" >&2; tail -5 "$TMP/hbd.log" >&2; exit 1; }
printf '{"seconds":%s,"hbd_ms_per_s":%s,"hbd_nats_ms_per_s":%s,"nats_server_ms_per_s":%s,"clock_ticks_per_s":%s,"loadavg":"%s"}\n' \
	"$SECS" "$alone" "$fleet" "$nats" "$hz" "$(cut -d' ' -f1-3 /proc/loadavg)"
