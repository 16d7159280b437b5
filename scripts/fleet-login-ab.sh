#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Fleet mode after a mass login, two builds side by side: scripts/bench.sh's tcp-offload phase
# with --nats (CLIENTS devices log in at once, then a 40 s steady window), ROUNDS times for
# each build, alternated (before, after, after, before, ...). One JSON line a run: the setup,
# the presence writes the bucket holds at the phase's end (presence_rev: one a device would be
# enough), and the steady window's server CPU per heartbeat with hbd's and nats-server's parts
# and p99 RTT, which show whether the login's presence writes still run into the window.
#
#   scripts/fleet-login-ab.sh BEFORE_BUILD [AFTER_BUILD [ROUNDS [CLIENTS]]]
#                                   (defaults: build, 2, 500000) writes JSON lines to stdout
#
# A build is a directory with hbd, hbload and hbctl (and bpf/), e.g. one made by
# `git worktree add /tmp/old REV && make -C /tmp/old`. Each run's outputs stay in
# build/fleet-login-ab/rN-SIDE/. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
DRIVER=fleet-login-ab
. scripts/driver-lib.sh
[ $# -ge 1 ] || { echo "usage: scripts/fleet-login-ab.sh BEFORE_BUILD [AFTER_BUILD [ROUNDS [CLIENTS]]]" >&2; exit 2; }
BEFORE=$1 AFTER=${2:-build} ROUNDS=${3:-2} CLIENTS=${4:-500000}
driver_need_count ROUNDS "$ROUNDS" 1
driver_need_count CLIENTS "$CLIENTS" 1
driver_need_root "bench.sh: namespaces, BPF, sysctls"
for b in "$BEFORE" "$AFTER"; do
	[ -x "$b/hbd" ] || { echo "$DRIVER: $b/hbd missing" >&2; exit 1; }
done
OUT=build/fleet-login-ab
rm -rf "$OUT"
for r in $(seq "$ROUNDS"); do
	order=(before after)
	[ $((r % 2)) = 0 ] && order=(after before)
	for side in "${order[@]}"; do
		b=$BEFORE
		[ "$side" = after ] && b=$AFTER
		dir=$OUT/r$r-$side
		driver_log "round $r, $side ($b; load $(driver_loadavg))"
		BUILD=$b driver_bench "$dir" "round $r, $side" --clients "$CLIENTS" \
			--phases tcp-offload --nats --no-storm --ramp '' --steady 40
		jq -c --argjson r "$r" --arg side "$side" --arg build "$b" \
			--slurpfile fs "$dir/tcp-offload/fleet-status.json" "$DRIVER_JQ"'
			.tcp as $x | .phases["tcp-offload"].windows.steady.ns.nats as $nats
			| {round: $r, side: $side, build: $build, setup_s: $x.setup_s,
			   presence_rev: $fs[0].presence_rev, cpu_us_per_hb: $x.cpu_us_per_hb_offload,
			   hbd_cpu_us_per_hb: $x.hbd_cpu_us_per_hb_offload,
			   nats_cpu_us_per_hb: (if $nats and $x.pings > 0
			     then ($nats / 1000 / $x.pings | r2) else null end),
			   rtt_p99_us: $x.rtt_us.p99, pings: $x.pings, pongs: $x.pongs}' "$dir/result.json"
	done
done
