#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Presence writes a second of one hbd --nats node: one nats-server (JetStream, R1) and hbd on
# 127.0.0.1, N TCP hbload devices connecting at once; the hbeat_presence bucket's revision is
# sampled every 0.25 s (docs/FLEET.md quotes what it printed).
#
#   scripts/fleet-rate.sh [N]      N devices (default 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
N=${1:-10000}
PORT=${PORT:-7691}
D=$(mktemp -d /tmp/hbfl-rate.XXXXXX)
NP= HP= SP=
cleanup() {
	set +e
	for p in $SP $HP $NP; do kill -TERM "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
umask 077
printf '1-%d derive %s\n' $((N + 1)) "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" > "$D/keys"
umask 022
NATS_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL=nats://127.0.0.1:$NATS_PORT
nats-server -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$D" > "$D/nats.log" 2>&1 &
NP=$!
sleep 1
"$BUILD/hbd" --no-offload --keys "$D/keys" --sink /dev/null --bind 127.0.0.1 --port "$PORT" \
	--pin-path "$D" --nats "$URL" --nats-node rate --max-clients $((2 * N)) --max-per-source 0 \
	--accept-rate 0 --interval 10 --workers 2 > "$D/hbd.out" 2> "$D/hbd.log" &
HP=$!
for _ in $(seq 100); do grep -q "fleet: .* ready" "$D/hbd.log" && break; sleep 0.1; done
(
	while :; do
		echo "$(date +%s%3N) $("$BUILD/hbctl" fleet --nats "$URL" status --json | jq .presence_rev)"
		sleep 0.25
	done
) > "$D/rate.txt" &
SP=$!
"$BUILD/hbload" --server 127.0.0.1 --port "$PORT" --clients "$N" --proto tcp --interval 10 \
	--duration 5 --keys "$D/keys" --setup-timeout 60 --json --no-progress > "$D/load.json" 2> "$D/load.log"
kill "$SP"; SP=
awk 'NR > 1 && $1 > t { r = ($2 - v) * 1000 / ($1 - t); if (r > max) max = r } { t = $1; v = $2 }
	END { printf "presence writes: peak %d a second (0.25 s samples), %d in all\n", max, v }' "$D/rate.txt"
jq -r '"hbload: \(.authed // .connected // "?") authenticated, \(.connect_failed) connects failed"' "$D/load.json"
