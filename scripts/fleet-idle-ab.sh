#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Fleet mode's idle background, two builds side by side: scripts/fleet-idle.sh run ROUNDS times
# for each, alternated (before, after, before, ...), one JSON line a run with the round, the
# build and fleet_ms_per_s, what fleet mode costs both processes together: hbd with --nats +
# nats-server with it − hbd alone (docs/FLEET.md, "Fleet mode's fixed background"), from the
# clock ticks, and fleet_us_per_s, the same from the scheduler's ns (cpu_us_per_s).
#
#   scripts/fleet-idle-ab.sh BEFORE_BUILD [AFTER_BUILD [ROUNDS [SECONDS [DEVICES]]]]
#                                       (defaults: build, 3, 45, 0) writes JSON lines to stdout
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/fleet-idle-ab.sh BEFORE_BUILD [AFTER_BUILD [ROUNDS [SECONDS [DEVICES]]]]" >&2; exit 2; }
BEFORE=$1 AFTER=${2:-build} ROUNDS=${3:-3} SECS=${4:-45} DEVICES=${5:-0}
[[ $ROUNDS =~ ^[0-9]+$ && $SECS =~ ^[0-9]+$ ]] || { echo "fleet-idle-ab: ROUNDS and SECONDS are counts" >&2; exit 2; }
for b in "$BEFORE" "$AFTER"; do
	[ -x "$b/hbd" ] || { echo "fleet-idle-ab: $b/hbd missing" >&2; exit 1; }
done
for r in $(seq "$ROUNDS"); do
	for b in "$BEFORE" "$AFTER"; do
		BUILD=$b scripts/fleet-idle.sh "$SECS" "$DEVICES" | jq -c --argjson r "$r" --arg b "$b" \
			'{round: $r, build: $b} + . + {fleet_ms_per_s: ((.hbd_nats_ms_per_s + .nats_server_ms_per_s - .hbd_ms_per_s) * 100 | round / 100), fleet_us_per_s: ((.cpu_us_per_s.hbd_nats + .cpu_us_per_s.nats_server - .cpu_us_per_s.hbd) * 10 | round / 10)}'
	done
done
