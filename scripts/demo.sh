#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The end-to-end demo behind `make demo`: two namespaces on a veth pair, hbctl load on the
# server's veth, hbd, then hbload with TCP (PING and BEAT), UDP and MQTT devices. Ends by
# printing, each on its own line: the TCP run's JSON summary, the UDP run's, the MQTT run's and
# `hbctl stats --json`.
# Everything it creates is removed on exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CLIENTS=${CLIENTS:-1000}
DURATION=${DURATION:-10}
INTERVAL=${INTERVAL:-1}
PORT=${PORT:-7600}
MQTT_PORT=${MQTT_PORT:-1883}
NAME=hbdemo
PIN=/sys/fs/bpf/hbeat
OUT=$BUILD/demo

eval "$(scripts/netns.sh env $NAME)"
hbd_pid=
cleanup() {
	set +e
	if [ -n "$hbd_pid" ] && kill -0 "$hbd_pid" 2>/dev/null; then
		kill -TERM "$hbd_pid"
		for _ in $(seq 50); do kill -0 "$hbd_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$hbd_pid" 2>/dev/null
	fi
	[ -d "$PIN" ] && nsenter --net=/run/netns/$SRV_NS "$BUILD/hbctl" unload --dev "$SRV_IF" >/dev/null
	scripts/netns.sh down $NAME
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_srv() { nsenter --net=/run/netns/$SRV_NS "$@"; }
in_cli() { nsenter --net=/run/netns/$CLI_NS "$@"; }
step() { printf '\n== %s\n' "$*" >&2; }

if [ -e "$PIN" ]; then
	echo "demo: $PIN already exists: hbeat is loaded on this machine (hbctl status); unload it first" >&2
	exit 1
fi
mkdir -p "$OUT"
rm -f "$OUT"/sink.jsonl

step "network: namespaces $SRV_NS ($SRV_ADDR) and $CLI_NS ($CLI_ADDR) on a veth pair"
scripts/netns.sh up $NAME 4

# One derived-key range provisions every simulated device (docs/PROTOCOL.md).
umask 077
printf '1-%d derive %s\n' 1000000 "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" > "$OUT/keys"
umask 022

# --tcp kernel, not the default (--tcp user: hbd answers TCP): the demo shows both kernel fast
# paths, XDP and the sockmap verdict, and MQTT PINGREQs answered in the kernel (README, "Measured")
step "hbctl load --dev $SRV_IF --tcp kernel --mqtt-port $MQTT_PORT (XDP native on the veth, sockmap, sock_ops)"
in_srv "$BUILD/hbctl" load --dev "$SRV_IF" --mode native --port "$PORT" --tcp kernel \
	--mqtt-port "$MQTT_PORT" >&2
in_srv "$BUILD/hbctl" status >&2

step "hbd on port $PORT (MQTT on $MQTT_PORT), heartbeat interval ${INTERVAL}s"
# started directly (not through a shell function) so that $! is hbd itself; no per-source
# limit: hbload puts hundreds of simulated devices behind each of its few source addresses
nsenter --net=/run/netns/$SRV_NS "$BUILD/hbd" --port "$PORT" --mqtt-port "$MQTT_PORT" --keys "$OUT/keys" \
	--sink "$OUT/sink.jsonl" --interval "$INTERVAL" --max-clients $((4 * CLIENTS)) --max-per-source 0 \
	> "$OUT/hbd-exit.json" 2> "$OUT/hbd.log" &
hbd_pid=$!
for _ in $(seq 100); do
	in_srv ss -Hltn "sport = :$PORT" | grep -q . && break
	kill -0 "$hbd_pid" 2>/dev/null || { cat "$OUT/hbd.log" >&2; exit 1; }
	sleep 0.1
done

run_load() { # proto port [options]
	in_cli "$BUILD/hbload" --server "$SRV_ADDR" --port "$2" --clients "$CLIENTS" --proto "$1" \
		--interval "$INTERVAL" --duration "$DURATION" --keys "$OUT/keys" --source "10.77.1.1-10.77.1.4" \
		--data-every 5 "${@:3}" --json
}

step "hbload: $CLIENTS TCP devices for ${DURATION}s, and beside them $((CLIENTS / 2)) that send BEATs (TCP's ACK answers)"
run_load tcp "$PORT" --echo-every 7 > "$OUT/tcp.json" &
load_pid=$!
# BEAT devices: the verdict records each BEAT and sends nothing back (docs/PROTOCOL.md)
CLIENTS=$((CLIENTS / 2)) run_load tcp "$PORT" --beat --first-device $((2 * CLIENTS + 1)) > "$OUT/beat.json" &
beat_pid=$!
sleep $((DURATION / 2))
step "hbctl conns (first 12 lines) while they heartbeat"
in_srv "$BUILD/hbctl" conns > "$OUT/conns.txt"
head -n 12 "$OUT/conns.txt" >&2
tail -n 1 "$OUT/conns.txt" >&2
wait $load_pid
wait $beat_pid
step "BEAT devices: $(jq -r '"\(.connected) connected, \(.beats) BEATs sent, \(.expired) expired"' "$OUT/beat.json"); the kernel took $(in_srv "$BUILD/hbctl" stats --json | jq .kernel.sk_beat) (sk_beat)"

step "hbload: $CLIENTS UDP devices for ${DURATION}s"
run_load udp "$PORT" --echo-every 7 > "$OUT/udp.json"

# MQTT 3.1.1 devices (user name = device id, password derived from its secret): PINGREQs are
# answered by the sk_skb verdict, PUBLISHes to devices/<id>/up go to the sink (docs/MQTT.md)
step "hbload: $CLIENTS MQTT devices for ${DURATION}s (PINGREQ answered in the kernel)"
run_load mqtt "$MQTT_PORT" --first-device $((CLIENTS + 1)) > "$OUT/mqtt.json"

step "hbctl stats"
in_srv "$BUILD/hbctl" stats >&2
in_srv "$BUILD/hbctl" stats --json > "$OUT/stats.json"
step "DATA frames in the sink: $(wc -l < "$OUT/sink.jsonl") lines ($OUT/sink.jsonl)"

cleanup
trap - EXIT
printf '\n'
cat "$OUT/tcp.json" "$OUT/udp.json" "$OUT/mqtt.json" "$OUT/stats.json"
