#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Presence write capacity of one hbd --nats node holding N TCP devices (issue 16: presence
# updates >= 20k/s into the bucket, a 500k reconnect storm recorded in <= 30 s). Bench-style:
# two namespaces (scripts/netns.sh), hbctl load --tcp kernel (or --tcp user: hbd --no-offload)
# and hbd in the server one with a nats-server (JetStream, R1) on its 127.0.0.1, hbload in
# the client one from 16 source addresses. The bucket's revision (every presence write is one)
# is sampled every 0.25 s from the server's monitoring endpoint. Three write bursts:
#   setup     N devices connect: N online writes, paced by hbload's connect rate;
#   storm     every device drops at once (N offline writes, paced by how fast hbd sees the
#             closes) and reconnects within --storm-window (N online writes, paced by the
#             reconnects): time from the drop until the bucket holds every device online;
#   catch-up  NATS is stopped, hbload ends (N offline writes fail or wait in libnats), NATS is
#             started again on its store: hbd's catch-up writes what failed, with no device
#             pacing it: the write path alone.
# After the storm and after the catch-up the bucket is read whole (hbctl fleet presence) and
# its states counted; after the storm, hbctl conns --json is timed over every connection.
# Writes build/fleet-storm/result.json (FLEET_STORM_OUT to change), the raw samples and logs
# beside it. Everything it makes (namespaces, pins, processes, the NATS store,
# host sysctls) is removed at the end, also on failure or interrupt; processes are ended by PID.
#
#   scripts/fleet-storm.sh [--devices N] [--storm-window S] [--tcp kernel|user]
#
# Namespaces HB_BENCH_NS_PREFIX (default hbfab), pins HB_BENCH_PIN (default
# /sys/fs/bpf/hbfab-storm). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
OUT=${FLEET_STORM_OUT:-$BUILD/fleet-storm}
N=500000
WINDOW=30 # reconnects spread over this many seconds (bench.sh's storm: 30)
TCP=kernel
SETTLE=30 # after setup, before the storm: the setup's writes finish
NAME=${HB_BENCH_NS_PREFIX:-hbfab}
PIN=${HB_BENCH_PIN:-/sys/fs/bpf/hbfab-storm}
PORT=7650 NATS_PORT=7660 NATS_MON=8660
SAMPLE_S=0.25
REPORT_ONLY=0 PERF=0 PERF_S=${PERF_S:-5}
HBD_EXTRA=() # --hbd-args
NATS_NICE=0 # --nats-nice
QUIET_S=3 # a burst is over when the revision has not moved for this long

usage() {
	cat <<EOF
usage: scripts/fleet-storm.sh [options]
  --devices N        TCP devices (default $N)
  --storm-window S   the storm's reconnects spread over S seconds (default $WINDOW)
  --settle S         after setup, before the storm (default $SETTLE)
  --tcp kernel|user  kernel: hbctl load --tcp kernel + hbd; user: no BPF, hbd --no-offload
                     (default $TCP)
  --hbd-args "ARGS"  more hbd options (split at spaces), e.g. "--nats-priority 10"
  --nats-nice N      nats-server runs at nice N (default 0; below 0 stands for NATS on
                     machines of its own, which this box does not have)
  --perf             perf record -a -g of the first PERF_S (default 5) seconds of the storm
                     and of the catch-up: OUT/perf-storm.data, OUT/perf-catchup.data
  --report           only write result.json again from the outputs of the last run
EOF
}
CMDLINE="scripts/fleet-storm.sh${*:+ $*}"
while [ $# -gt 0 ]; do
	case $1 in
	--devices) N=$2; shift ;;
	--storm-window) WINDOW=$2; shift ;;
	--settle) SETTLE=$2; shift ;;
	--tcp) TCP=$2; shift ;;
	--hbd-args) read -r -a HBD_EXTRA <<< "$2"; shift ;;
	--nats-nice) NATS_NICE=$2; shift ;;
	--report) REPORT_ONLY=1 ;;
	--perf) PERF=1 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "fleet-storm: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
case $TCP in kernel | user) ;; *) echo "fleet-storm: --tcp kernel|user" >&2; exit 2 ;; esac
[[ $NATS_NICE =~ ^-?[0-9]+$ ]] || { echo "fleet-storm: --nats-nice N (an integer, -20 to 19)" >&2; exit 2; }
if [ "$(id -u)" -ne 0 ]; then
	echo "fleet-storm: needs root (namespaces, BPF, sysctls)" >&2
	exit 1
fi
for b in hbd hbload hbctl bpf/xdp_pass.bpf.o; do
	[ -e "$BUILD/$b" ] || { echo "fleet-storm: $BUILD/$b missing: run make" >&2; exit 1; }
done
command -v nats-server > /dev/null || { echo "fleet-storm: nats-server missing (scripts/deps.sh)" >&2; exit 1; }
if [ -e "$PIN" ]; then
	echo "fleet-storm: $PIN exists: another run is going on or one was killed" >&2
	exit 1
fi

# Per burst, from the samples between two marks: writes, peak a second (over >= 1 s of samples,
# and over one sample interval, ~0.3 s), mean from the sample before the first write (or the
# start of the burst, if later) to the first showing the last one (a lower bound: the writes
# took at most that long), and the time from the start of the burst until the revision
# reached START + TARGET writes.
report() {
	jq -n --rawfile rev "$OUT/rev.txt" --rawfile ev "$OUT/events.txt" \
		--slurpfile a "$OUT/presence-after-storm.json" --slurpfile b "$OUT/presence-after-catchup.json" \
		--slurpfile h "$OUT/hbload.json" --slurpfile meta "$OUT/meta.json" \
		--argjson conns "$(cat "$OUT/conns-timing.json" 2> /dev/null || echo null)" \
		--argjson overflows "$(grep -c 'presence events lost' "$OUT/hbd.log" || true)" \
		--arg hbdline "$(grep -o 'fleet: presence writes.*' "$OUT/hbd.log" | tail -n 1)" \
		--arg warn "$(grep 'warn: fleet' "$OUT/hbd.log" | head -n 20)" '
	  def r1: (. * 10 | round) / 10;
	  ($rev | split("\n") | map(select(length > 0) | split(" ") | select(length == 2 and .[1] != "")
	      | {t: (.[0] | tonumber), v: (.[1] | tonumber)})) as $s
	  | ($ev | split("\n") | map(select(length > 0) | split(" ") | {key: .[1], value: (.[0] | tonumber)})
	      | reduce .[] as $e ({}; if has($e.key) then . else . + {($e.key): $e.value} end)) as $m
	  | def burst($from; $to; $target):
	      # from the last sample before the start of the burst: its writes from the first moment on
	      ([[$s[] | select(.t < $from)] | last // empty] + [$s[] | select(.t >= $from and .t <= $to)]) as $w
	      | ($w[0].v) as $v0
	      | ([range(1; $w | length) | ($w[.] .v - $w[. - 1].v) * 1000 / ($w[.].t - $w[. - 1].t)] | max // 0) as $peak_sample
	      # over the shortest run of samples that spans 1 s or more, from each sample on
	      | ([range(0; $w | length) as $i | ([$w[$i:][] | select(.t >= $w[$i].t + 1000)] | first) as $j
	          | select($j != null) | ($j.v - $w[$i].v) * 1000 / ($j.t - $w[$i].t)] | max // 0) as $peak_1s
	      | ([range(0; $w | length) | select($w[.].v > $v0)] | first) as $k
	      | (if $k then $w[$k] else null end) as $first
	      | (if $k and $k > 0 then $w[$k - 1] else $first end) as $b0
      # no write of the burst before its start (the sample before may be from long before)
      | (if $b0 and $b0.t < $from then {t: $from, v: $b0.v} else $b0 end) as $before
      | ($w | last) as $last
	      | ([$w[] | select(.v == $last.v)] | first) as $fin
	      | {writes: ($last.v - $v0),
	         peak_per_s_1s: ($peak_1s | round), peak_per_s_sample: ($peak_sample | round),
	         mean_per_s: (if $first and $fin.t > $before.t then (($fin.v - $before.v) * 1000 / ($fin.t - $before.t) | round) else null end),
	         first_write_s: (if $first then (($first.t - $from) / 1000 | r1) else null end),
	         last_write_s: ((($fin.t - $from) / 1000) | r1),
	         target: $target,
	         target_s: ([$w[] | select(.v >= $v0 + $target)] | first | if . then ((.t - $from) / 1000 | r1) else null end)};
	  ($meta[0].devices) as $n
	  | $meta[0] + {
	   setup: (burst($m.start; $m.storm; $n) + {hbload_setup_s: $h[0].setup_s, connected: $h[0].connected}),
	   storm: (burst($m.storm; $m.storm_quiet; 2 * $n)
	      | . + {all_online_s: (if ($a[0].by_state.online // 0) == $n then .last_write_s else null end),
	         while_reconnecting: (if $m.storm_done then
	             ([$s[] | select(.t <= $m.storm)] | last | .v) as $r0
	             | ([$s[] | select(.t <= $m.storm_done)] | last | .v) as $r1
	             | (($m.storm_done - $m.storm) / 1000) as $secs
	             | {writes: ($r1 - $r0), seconds: ($secs | r1),
	                per_s: (if $secs > 0 then (($r1 - $r0) / $secs | round) else null end)}
	           else null end),
	         note: "from the drop; target = every device offline and online again (2N writes; an offline the reconnect overtook is not written); all_online_s: the last write of the storm, when the read after it found every device online; while_reconnecting: the writes from the drop until hbload had every device back (the last samples at or before each)",
	         hbload: $h[0].storm, presence: $a[0]}),
	   catch_up: (burst($m.nats_start; $m.catchup_quiet; $n)
	      + {note: "from the start of nats-server (its JetStream recovery and hbd'"'"'s reconnection are inside); target = N offline writes",
	         rev_at_stop: ([$s[] | select(.t <= $m.nats_stopped)] | last | .v),
	         presence: $b[0]}),
	   conns: $conns,
	   presence_queue_overflows: $overflows,
	   hbd_fleet_counters: $hbdline,
	   hbd_fleet_warnings: ($warn | split("\n") | map(select(length > 0))),
	   marks_ms: $m}' > "$OUT/result.json"
}
if [ "$REPORT_ONLY" = 1 ]; then
	report
	jq -c . "$OUT/result.json"
	exit 0
fi

eval "$(scripts/netns.sh env "$NAME")"
HBD_PID= HBL_PID= NATS_PID= SAMPLER_PID= EVREADER_PID= PERF_PID= TUNED=0 NETNS=0 LOADED=0
log() { printf '%s fleet-storm: %s\n' "$(date +%T)" "$*" >&2; }
in_srv() { nsenter --net="/run/netns/$SRV_NS" "$@"; }
stop_pid() { # PID SECONDS: TERM, then KILL after SECONDS
	local p=$1 i
	[ -n "$p" ] || return 0
	kill -TERM "$p" 2> /dev/null || true
	for ((i = 0; i < $2 * 10; i++)); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
	kill -KILL "$p" 2> /dev/null || true
	wait "$p" 2> /dev/null || true
}
cleanup() {
	set +e
	local p
	[ "$PERF_PID" != done ] || PERF_PID=
	for p in $HBL_PID $SAMPLER_PID $EVREADER_PID $PERF_PID; do kill -KILL "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
	stop_pid "$HBD_PID" 30
	stop_pid "$NATS_PID" 10
	HBD_PID= NATS_PID=
	[ "$LOADED" = 1 ] && in_srv "$BUILD/hbctl" unload --dev "$SRV_IF" --pin-path "$PIN" > /dev/null 2>&1
	[ -d "$PIN" ] && rm -rf "$PIN"
	[ "$NETNS" = 1 ] && scripts/netns.sh down "$NAME"
	[ "$TUNED" = 1 ] && scripts/tune.sh revert
	rm -rf "$OUT/nats-store" "$OUT/events.fifo"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# nats-server on 127.0.0.1 of the server namespace, on the store of the run (kept across the
# stop and start of the catch-up)
start_nats() { # LOG
	nsenter --net="/run/netns/$SRV_NS" nice -n "$NATS_NICE" nats-server -a 127.0.0.1 -p $NATS_PORT -m $NATS_MON \
		-js -sd "$OUT/nats-store" >> "$1" 2>&1 &
	NATS_PID=$!
	for _ in $(seq 300); do
		in_srv curl -sf "http://127.0.0.1:$NATS_MON/healthz?js-enabled-only=true" > /dev/null 2>&1 && return 0
		kill -0 "$NATS_PID" 2> /dev/null || break
		sleep 0.1
	done
	echo "fleet-storm: nats-server did not start" >&2
	return 1
}
# the presence bucket's last revision (its stream's last sequence); empty while NATS is away
# (awk on the pretty-printed JSON, one key a line: a jq a sample cost ~10 % of a CPU)
presence_rev() {
	in_srv curl -sf -m 1 "http://127.0.0.1:$NATS_MON/jsz?accounts=true&streams=true" 2> /dev/null |
		awk '/"name":/ { n = $2 } /"last_seq":/ && n ~ /"KV_hbeat_presence"/ { gsub(/[^0-9]/, "", $2); print $2; exit }'
}
# every entry of the bucket, counted by state, into FILE (JSON)
count_presence() { # FILE
	local t0=$EPOCHREALTIME
	timeout 180 nsenter --net="/run/netns/$SRV_NS" "$BUILD/hbctl" fleet \
		--nats "nats://127.0.0.1:$NATS_PORT" presence 2> "$1.log" |
		jq -s --argjson t0 "$t0" --argjson t1 "$EPOCHREALTIME" \
			'{entries: length, by_state: (group_by(.state) | map({key: .[0].state, value: length}) | from_entries),
			  node_storm: (map(select(.node == "storm")) | length)}' > "$1" || echo '{}' > "$1"
}
# waits until the revision has not moved for QUIET_S seconds (at most S); prints the last one
wait_quiet() { # S
	local deadline=$((SECONDS + $1)) last= cur same=0
	while [ $SECONDS -lt $deadline ]; do
		cur=$(tail -n 1 "$OUT/rev.txt" | cut -s -d' ' -f2)
		if [ -n "$cur" ] && [ "$cur" = "$last" ]; then
			same=$((same + 1))
			[ "$same" -ge $((QUIET_S * 4)) ] && break
		else
			same=0
		fi
		last=$cur
		sleep 0.25
	done
	echo "${last:-0}"
}
mark() { echo "$(date +%s%3N) $*" >> "$OUT/events.txt"; }
# --perf: the whole machine's profile for PERF_S seconds from now, in the background
perf_burst() { # NAME
	[ "$PERF" = 1 ] || return 0
	perf record -a -g -F 499 -o "$OUT/perf-$1.data" -- sleep "$PERF_S" > "$OUT/perf-$1.log" 2>&1 &
	PERF_PID=$!
}

rm -rf "$OUT"
mkdir -p "$OUT"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
jq -n --arg cmd "$CMDLINE" --arg started "$(date -u +%FT%TZ)" --arg load0 "$LOAD0" \
	--argjson n "$N" --arg tcp "$TCP" --argjson window "$WINDOW" \
	--arg hbd_args "${HBD_EXTRA[*]}" --argjson nats_nice "$NATS_NICE" \
	'{command: $cmd, started: $started, loadavg_start: $load0, devices: $n, tcp: $tcp,
	  storm_window_s: $window, hbd_args: $hbd_args, nats_nice: $nats_nice}' > "$OUT/meta.json"
log "$N TCP devices, one hbd --nats node (--tcp $TCP), storm window $WINDOW s; load $LOAD0"
scripts/tune.sh apply
TUNED=1
NETNS=1
BUILD=$BUILD scripts/netns.sh up "$NAME" 16 > /dev/null
scripts/tune.sh netns "$SRV_NS" "$CLI_NS"
umask 077
printf '1-%d derive %s\n' $((N + 1)) "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" > "$OUT/keys"
umask 022
start_nats "$OUT/nats.log"
hbd_args=("${HBD_EXTRA[@]}")
if [ "$TCP" = kernel ]; then
	in_srv "$BUILD/hbctl" load --dev "$SRV_IF" --port $PORT --pin-path "$PIN" --tcp kernel > "$OUT/hbctl-load.txt" 2>&1
	LOADED=1
else
	hbd_args+=(--no-offload)
fi
nsenter --net="/run/netns/$SRV_NS" "$BUILD/hbd" --port $PORT --keys "$OUT/keys" --sink /dev/null \
	--pin-path "$PIN" --interval 30 --max-clients $((N + N / 10 + 100)) --max-per-source 0 \
	--accept-rate 0 --nats "nats://127.0.0.1:$NATS_PORT" --nats-node storm "${hbd_args[@]}" \
	> "$OUT/hbd-stats.json" 2> "$OUT/hbd.log" &
HBD_PID=$!
for _ in $(seq 300); do
	grep -q 'ready:' "$OUT/hbd.log" && grep -q 'fleet: .* ready' "$OUT/hbd.log" && break
	kill -0 "$HBD_PID" 2> /dev/null || { cat "$OUT/hbd.log" >&2; exit 1; }
	sleep 0.1
done
grep -q 'fleet: .* ready' "$OUT/hbd.log" || { cat "$OUT/hbd.log" >&2; echo "fleet-storm: hbd's fleet not ready" >&2; exit 1; }

# the revision, every SAMPLE_S seconds, with the time in ms: "MS REV" (REV empty: NATS away)
(
	while :; do
		echo "$(date +%s%3N) $(presence_rev)"
		sleep $SAMPLE_S
	done
) > "$OUT/rev.txt" &
SAMPLER_PID=$!
# hbload's events with the wall-clock time: "MS EVENT"
mkfifo "$OUT/events.fifo"
(while read -r _ ev; do mark "$ev"; done < "$OUT/events.fifo") &
EVREADER_PID=$!
# hbload's run: setup, SETTLE s, the storm, then until this script ends it with SIGTERM (after
# NATS's stop, below: every device closes); DUR only bounds it
DUR=$((SETTLE + WINDOW + 300 + N / 1000))
mark start
nsenter --net="/run/netns/$CLI_NS" "$BUILD/hbload" --server "$SRV_ADDR" --port $PORT \
	--clients "$N" --proto tcp --interval 30 --duration $DUR --storm-at "$SETTLE" \
	--storm-window "$WINDOW" --keys "$OUT/keys" --source "10.77.1.1-10.77.1.16" \
	--setup-timeout $((60 + N / 10000)) --events "$OUT/events.fifo" --json --no-progress \
	> "$OUT/hbload.json" 2> "$OUT/hbload.log" &
HBL_PID=$!

# the storm is over once hbload says every device is back and the bucket is quiet
deadline=$((SECONDS + DUR + 120))
until grep -q ' storm_done' "$OUT/events.txt" 2> /dev/null; do
	if [ -z "$PERF_PID" ] && grep -qw storm "$OUT/events.txt" 2> /dev/null; then
		perf_burst storm
		PERF_PID=${PERF_PID:-done}
	fi
	kill -0 "$HBL_PID" 2> /dev/null || { tail "$OUT/hbload.log" >&2; echo "fleet-storm: hbload ended before the storm was over" >&2; exit 1; }
	[ $SECONDS -lt $deadline ] || { echo "fleet-storm: no storm_done" >&2; exit 1; }
	sleep 0.5
done
wait_quiet 60 > /dev/null
mark storm_quiet
[ "${PERF_PID:-done}" = done ] || wait "$PERF_PID" 2> /dev/null || true
PERF_PID=
log "storm over; reading the bucket"
count_presence "$OUT/presence-after-storm.json"
mark storm_counted
log "after the storm: $(jq -c . "$OUT/presence-after-storm.json")"

# hbctl conns over every connection while all N are back: its batched reads of the maps and
# the kernel's TCP figures of each (sock_diag), timed; the listing itself is not kept
log "timing hbctl conns --json"
t0=$EPOCHREALTIME
rc=0
timeout 300 nsenter --net="/run/netns/$SRV_NS" "$BUILD/hbctl" conns --json --pin-path "$PIN" \
	> "$OUT/conns.json" 2> "$OUT/conns.log" || rc=$?
t1=$EPOCHREALTIME
jq -c --argjson rc "$rc" --arg t0 "$t0" --arg t1 "$t1" --argjson bytes "$(stat -c %s "$OUT/conns.json")" '
	{exit: $rc, seconds: ((($t1 | tonumber) - ($t0 | tonumber)) * 100 | round / 100),
	 bytes: $bytes, count: .count, authed: ([.conns[] | select(.state == "authed")] | length),
	 with_rtt: ([.conns[] | select(.rtt_us != null)] | length)}' "$OUT/conns.json" \
	> "$OUT/conns-timing.json" 2> /dev/null || echo "{\"exit\": $rc}" > "$OUT/conns-timing.json"
rm -f "$OUT/conns.json"
log "hbctl conns: $(cat "$OUT/conns-timing.json")"

# the catch-up: NATS away while every device leaves
if ! kill -0 "$HBL_PID" 2> /dev/null; then
	echo "fleet-storm: hbload ended before the NATS stop (its --duration bound was too short)" >&2
	exit 1
fi
log "stopping NATS, then hbload (every device leaves)"
stop_pid "$NATS_PID" 10
NATS_PID=
mark nats_stopped
sleep 2 # hbd has noticed (its NATS pings: 1 s)
rc=0
# hbload ends its run (BYE, close), prints its summary; killed if not gone in 120 s
kill -TERM "$HBL_PID"
for _ in $(seq 1200); do kill -0 "$HBL_PID" 2> /dev/null || break; sleep 0.1; done
kill -KILL "$HBL_PID" 2> /dev/null || true
wait "$HBL_PID" || rc=$?
HBL_PID=
mark hbload_ended
[ "$rc" -eq 0 ] || log "hbload exited with $rc (its summary: $OUT/hbload.json); going on with the catch-up"
jq -e . "$OUT/hbload.json" > /dev/null 2>&1 || echo '{}' > "$OUT/hbload.json"
# hbd has seen every close once the server namespace holds no established connection
for _ in $(seq 600); do
	n=$(in_srv ss -Htn state established "( sport = :$PORT )" | wc -l)
	[ "$n" -eq 0 ] && break
	sleep 0.1
done
sleep 5 # the fleet thread's last attempts while NATS is away
mark nats_start
log "starting NATS again on its store ($n connections left)"
perf_burst catchup
start_nats "$OUT/nats.log"
mark nats_started
wait_quiet 120 > /dev/null
mark catchup_quiet
[ -z "$PERF_PID" ] || wait "$PERF_PID" 2> /dev/null || true
PERF_PID=
log "catch-up over; reading the bucket"
count_presence "$OUT/presence-after-catchup.json"
log "after the catch-up: $(jq -c . "$OUT/presence-after-catchup.json")"
kill "$SAMPLER_PID" 2> /dev/null; wait "$SAMPLER_PID" 2> /dev/null || true
SAMPLER_PID=
stop_pid "$HBD_PID" 30
HBD_PID=
wait "$EVREADER_PID" 2> /dev/null || true
EVREADER_PID=

jq --arg ended "$(date -u +%FT%TZ)" --arg load1 "$(cut -d' ' -f1-3 /proc/loadavg)" \
	'. + {ended: $ended, loadavg_end: $load1}' "$OUT/meta.json" > "$OUT/meta.json.new"
mv "$OUT/meta.json.new" "$OUT/meta.json"
report
cleanup
trap - EXIT
log "$(jq -c '{setup: .setup | {writes, peak_per_s_1s, mean_per_s}, storm: .storm | {writes, peak_per_s_1s, mean_per_s, all_online_s, while_reconnecting}, catch_up: .catch_up | {writes, peak_per_s_1s, mean_per_s, target_s}}' "$OUT/result.json")"
log "done: $OUT/result.json"
