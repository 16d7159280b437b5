#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The 500k reconnect storm of one hbd --nats node, two sides side by side: scripts/fleet-storm.sh
# ROUNDS times for each side, alternated (before, after, after, before, ...). A side is a
# build and hbd options. One JSON line a run, from that run's result.json: the setup (hbload's
# and the bucket's), the storm (hbload's devices back, the bucket all online, its writes and
# failures), the catch-up's write rate and the presence queue's overflows.
#
#   scripts/fleet-storm-ab.sh [--before-args "ARGS"] [--after-args "ARGS"]
#                             BEFORE_BUILD [AFTER_BUILD [ROUNDS]] [-- FLEET_STORM_OPTIONS]
#                                   (defaults: build, 2) writes JSON lines to stdout
#
# A build is a directory with hbd, hbload and hbctl (and bpf/), e.g. one made by
# `git worktree add /tmp/old REV && make -C /tmp/old`; ARGS are more hbd options for that
# side (fleet-storm.sh --hbd-args). FLEET_STORM_OPTIONS go to every run (e.g. --devices N).
# Each run's outputs stay in build/fleet-storm-ab/rN-SIDE/; fleet-storm.sh removes what it
# made (namespaces, pins, processes), also on failure. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
DRIVER=fleet-storm-ab
. scripts/driver-lib.sh
USAGE='usage: scripts/fleet-storm-ab.sh [--before-args "ARGS"] [--after-args "ARGS"] BEFORE_BUILD [AFTER_BUILD [ROUNDS]] [-- FLEET_STORM_OPTIONS]'
BEFORE_ARGS='' AFTER_ARGS=''
POS=() EXTRA=()
while [ $# -gt 0 ]; do
	case $1 in
	--before-args) BEFORE_ARGS=$2; shift 2 ;;
	--after-args) AFTER_ARGS=$2; shift 2 ;;
	-h | --help) echo "$USAGE"; exit 0 ;;
	--) shift; EXTRA=("$@"); break ;;
	--*) echo "$USAGE" >&2; exit 2 ;;
	*) POS+=("$1"); shift ;;
	esac
done
if [ ${#POS[@]} -lt 1 ] || [ ${#POS[@]} -gt 3 ]; then
	echo "$USAGE" >&2
	exit 2
fi
BEFORE=${POS[0]} AFTER=${POS[1]:-build} ROUNDS=${POS[2]:-2}
driver_need_count ROUNDS "$ROUNDS" 1
driver_need_root "fleet-storm.sh: namespaces, BPF, sysctls"
for b in "$BEFORE" "$AFTER"; do
	[ -x "$b/hbd" ] || { echo "$DRIVER: $b/hbd missing" >&2; exit 1; }
done
OUT=build/fleet-storm-ab
rm -rf "$OUT"
for r in $(seq "$ROUNDS"); do
	for side in $(driver_ab_order "$r"); do
		driver_ab_side "$side"
		b=$SIDE_BUILD args=$SIDE_ARGS
		dir=$OUT/r$r-$side
		mkdir -p "$dir"
		driver_log "round $r, $side ($b${args:+ hbd $args}; load $(driver_loadavg))"
		if ! BUILD=$b FLEET_STORM_OUT=$dir scripts/fleet-storm.sh \
			${args:+--hbd-args "$args"} ${EXTRA[@]+"${EXTRA[@]}"} > "$dir/storm.log" 2>&1; then
			tail -n 20 "$dir/storm.log" >&2
			driver_log "fleet-storm.sh failed in round $r, $side; the lines above are the runs before it"
			exit 1
		fi
		jq -c --argjson r "$r" --arg side "$side" --arg build "$b" --arg args "$args" '
			. as $x
			| {round: $r, side: $side, build: $build, hbd_args: $args, devices: $x.devices,
			   hbload_setup_s: $x.setup.hbload_setup_s, bucket_setup_s: $x.setup.target_s,
			   storm_hbload_back_s: $x.storm.hbload.seconds,
			   storm_failures: $x.storm.hbload.failures,
			   storm_all_online_s: $x.storm.all_online_s, storm_writes: $x.storm.writes,
			   online_after_storm: $x.storm.presence.by_state.online,
			   catch_up_mean_per_s: $x.catch_up.mean_per_s,
			   queue_overflows: $x.presence_queue_overflows}' \
			"$dir/result.json"
	done
done
