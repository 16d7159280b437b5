#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Measures what faults and upgrades cost devices, at scale, with the BPF side loaded on a veth
# between two namespaces (scripts/netns.sh), hbd in one and hbload in the other:
#   upgrade  hbd gets SIGUSR2 while TCP and UDP devices heartbeat: connections dropped,
#            reconnects, heartbeats missed, devices expired, how long the handover took
#   restart  hbd is killed with SIGKILL and started again at once: UDP heartbeats missed (the
#            kernel answers them through the grace period), UDP devices expired, TCP devices
#            that reconnect and how long until all are back
#
#   scripts/faults.sh [--tcp N] [--udp N] [--interval S] [--only upgrade|restart|baseline]
#
# baseline runs the upgrade's load without the upgrade: what the same load loses on its own
# (a veth's ring drops bursts; an overloaded kernel path answers late), to tell it apart.
#
# Defaults: 100000 TCP and 20000 UDP devices, a 10 s heartbeat interval, which is also the one
# hbd tells devices (expiry after 1.5 intervals without a heartbeat, as by default): a device
# whose heartbeat a handover forgets is expired before its next one. HBD_EXTRA adds hbd options
# (e.g. --log-level debug, to see which devices expire). Writes $BUILD/faults/result.json and
# prints it; exits 1 if a run expired a device that had lost no heartbeat (expired > lost).
# Cleans up everything it made, also when interrupted.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ARGS="$*"
TCP=100000 UDP=20000 INTERVAL=10 ONLY=
while [ $# -gt 0 ]; do
	case $1 in
	--tcp) TCP=$2; shift 2 ;;
	--udp) UDP=$2; shift 2 ;;
	--interval) INTERVAL=$2; shift 2 ;;
	--only) ONLY=$2; shift 2 ;;
	*) echo "faults.sh: unknown option $1 (try: --tcp N --udp N --interval S --only upgrade|restart)" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" -eq 0 ] || { echo "faults.sh: needs root (netns, BPF)" >&2; exit 2; }

NAME=hbhb$$
NAME=${NAME:0:13}
PORT=7661
PIN=/sys/fs/bpf/hbeat-harden-bench-$$
OUT=$BUILD/faults
WORK=$(mktemp -d /tmp/hbh-faults.XXXXXX)
eval "$(scripts/netns.sh env "$NAME")"
pids=()
hbd_pid=

in_srv() { nsenter --net=/run/netns/"$SRV_NS" "$@"; }
in_cli() { nsenter --net=/run/netns/"$CLI_NS" "$@"; }
log() { printf '%s faults: %s\n' "$(date +%T)" "$*" >&2; }

cleanup() {
	set +e
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	# every hbd this script started, by the pid its ready line gave (a successor is not our
	# child); SIGTERM first, so it drains
	hbds=$(grep -o 'pid=[0-9]*' "$WORK"/hbd.log 2>/dev/null | cut -d= -f2)
	for p in $hbds; do
		[ -d /proc/"$p" ] && grep -q hbd /proc/"$p"/comm 2>/dev/null && kill -TERM "$p"
	done
	for _ in $(seq 100); do
		alive=
		for p in $hbds; do [ -d /proc/"$p" ] && ! grep -q ') Z' /proc/"$p"/stat && alive=1; done
		[ -z "$alive" ] && break
		sleep 0.1
	done
	for p in $hbds; do [ -d /proc/"$p" ] && grep -q hbd /proc/"$p"/comm 2>/dev/null && kill -KILL "$p"; done
	wait 2>/dev/null
	in_srv "$BUILD/hbctl" unload --dev "$SRV_IF" --pin-path "$PIN" >/dev/null 2>&1
	scripts/netns.sh down "$NAME" >/dev/null 2>&1
	rm -rf "$PIN" "$WORK"
}
trap cleanup EXIT INT TERM

stat_of() { in_srv "$BUILD/hbctl" stats --json --pin-path "$PIN" | jq -r ".$1"; }
current_hbd() { grep -o 'ready: .*pid=[0-9]*' "$WORK/hbd.log" | tail -1 | grep -o 'pid=[0-9]*' | cut -d= -f2; }

start_hbd() {
	in_srv "$BUILD/hbd" --port $PORT --keys "$WORK/keys" --sink "$WORK/sink.jsonl" \
		--pin-path "$PIN" --interval "$INTERVAL" --grace 5 --max-clients $((TCP + UDP + TCP / 10)) \
		--max-per-source 0 --accept-rate 0 ${HBD_EXTRA:-} >>"$WORK/hbd.out" 2>>"$WORK/hbd.log" &
	hbd_pid=$!
	for _ in $(seq 300); do
		[ "$(grep -c 'ready:' "$WORK/hbd.log")" -ge "$1" ] && return 0
		sleep 0.1
	done
	echo "faults.sh: hbd did not become ready; its log:" >&2
	tail -20 "$WORK/hbd.log" >&2
	return 1
}

# hbload for one transport in the background; its JSON goes to $WORK/$1.json
start_load() { # proto clients first-device duration
	local src=10.77.1.1-10.77.1.16
	[ "$1" = udp ] && src=10.77.1.17-10.77.1.20
	in_cli "$BUILD/hbload" --server "$SRV_ADDR" --port $PORT --proto "$1" --clients "$2" \
		--first-device "$3" --interval "$INTERVAL" --duration "$4" --keys "$WORK/keys" \
		--source "$src" --inflight 2000 --setup-timeout 120 --json --no-progress \
		>"$WORK/$1.json" 2>"$WORK/$1.log" &
	pids+=($!)
}

wait_devices() { # wait until every device is in
	for _ in $(seq 1200); do
		[ "$(stat_of user.tcp_authed)" -ge "$TCP" ] && [ "$(stat_of user.udp_active)" -ge "$UDP" ] && return 0
		sleep 0.25
	done
	echo "faults.sh: not every device authenticated" >&2
	return 1
}

wait_loads() {
	for p in "${pids[@]}"; do wait "$p" || true; done
	pids=()
}

mkdir -p "$OUT"
log "namespaces, BPF side, $TCP TCP + $UDP UDP devices at a ${INTERVAL}s interval"
scripts/netns.sh up "$NAME" 20 >/dev/null
ip netns exec "$SRV_NS" sysctl -qw net.ipv4.tcp_max_tw_buckets=262144
in_srv "$BUILD/hbctl" load --dev "$SRV_IF" --port $PORT --pin-path "$PIN" --tcp kernel >/dev/null
printf '1-%d derive %s\n' $((TCP + UDP + 10)) "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" >"$WORK/keys"
chmod 600 "$WORK/keys"
result='{}'
readies=0

if [ "$ONLY" != restart ]; then
	readies=$((readies + 1))
	start_hbd $readies
	start_load tcp "$TCP" 1 60
	start_load udp "$UDP" $((TCP + 1)) 60
	wait_devices
	sleep 5
	user0=$(stat_of user.pings_user)
	exp_tcp0=$(stat_of user.expired_tcp) exp_udp0=$(stat_of user.expired_udp)
	old=$(current_hbd)
	gone_ms=0
	if [ "$ONLY" != baseline ]; then
		log "upgrade: SIGUSR2 to hbd $old"
		t0=$(date +%s%N)
		kill -USR2 "$old"
		while [ -d /proc/"$old" ] && ! grep -q Z /proc/"$old"/stat 2>/dev/null; do sleep 0.01; done
		gone_ms=$((($(date +%s%N) - t0) / 1000000))
		readies=$((readies + 1))
		hbd_pid=$(current_hbd)
		log "upgrade: hbd $old gone after ${gone_ms} ms, hbd $hbd_pid serves"
	fi
	wait_loads
	# the counters go on across the upgrade; the devices said BYE at the end, none expired then
	exp_tcp=$(($(stat_of user.expired_tcp) - exp_tcp0)) exp_udp=$(($(stat_of user.expired_udp) - exp_udp0))
	cp "$WORK/tcp.json" "$OUT/${ONLY:-upgrade}-tcp.json"
	cp "$WORK/udp.json" "$OUT/${ONLY:-upgrade}-udp.json"
	key=upgrade
	[ "$ONLY" = baseline ] && key=baseline
	result=$(jq -n --arg key "$key" --argjson r "$result" --slurpfile t "$WORK/tcp.json" --slurpfile u "$WORK/udp.json" \
		--arg ms "$(grep -o 'handed over .* in [0-9]* ms' "$WORK/hbd.log" | tail -1 | grep -o '[0-9]* ms' | cut -d' ' -f1)" \
		--arg gone "$gone_ms" --argjson user "$(($(stat_of user.pings_user) - user0))" \
		--argjson etcp "$exp_tcp" --argjson eudp "$exp_udp" \
		'$r + {($key): {tcp_devices: $t[0].clients, tcp_connected_end: $t[0].connected_end,
		  tcp_reconnects: $t[0].reconnects, tcp_server_closed: $t[0].server_closed,
		  tcp_pings: $t[0].pings, tcp_lost: $t[0].lost, tcp_expired: $t[0].expired,
		  hbd_expired_tcp: $etcp, udp_devices: $u[0].clients,
		  udp_connected_end: $u[0].connected_end, udp_pings: $u[0].pings, udp_lost: $u[0].lost,
		  udp_expired: $u[0].expired, udp_reconnects: $u[0].reconnects, hbd_expired_udp: $eudp,
		  handover_ms: ($ms | tonumber? // null), old_gone_ms: ($gone | tonumber),
		  pings_user_during_run: $user,
		  tcp_rtt_p99_us: $t[0].rtt_us.p99, udp_rtt_p99_us: $u[0].rtt_us.p99}}')
fi

if [ "$ONLY" != upgrade ] && [ "$ONLY" != baseline ]; then
	if [ -z "$hbd_pid" ] || [ ! -d /proc/"$hbd_pid" ]; then
		readies=$((readies + 1))
		start_hbd $readies
	fi
	start_load tcp "$TCP" 1 60
	start_load udp "$UDP" $((TCP + 1)) 60
	wait_devices
	sleep 5
	victim=$(current_hbd)
	log "restart: SIGKILL to hbd $victim, a new one at once"
	kill -KILL "$victim"
	while [ -d /proc/"$victim" ] && ! grep -q Z /proc/"$victim"/stat 2>/dev/null; do sleep 0.01; done
	t0=$(date +%s%N)
	readies=$((readies + 1))
	start_hbd $readies
	ready_ms=$((($(date +%s%N) - t0) / 1000000))
	back_ms=
	for _ in $(seq 1200); do
		if [ "$(stat_of user.tcp_authed)" -ge "$TCP" ]; then
			back_ms=$((($(date +%s%N) - t0) / 1000000))
			break
		fi
		sleep 0.1
	done
	log "restart: new hbd ready after ${ready_ms} ms, all TCP devices back after ${back_ms:-?} ms"
	wait_loads
	exp_udp=$(stat_of user.expired_udp) # the new hbd counts from zero
	cp "$WORK/tcp.json" "$OUT/restart-tcp.json"
	cp "$WORK/udp.json" "$OUT/restart-udp.json"
	result=$(jq -n --argjson r "$result" --slurpfile t "$WORK/tcp.json" --slurpfile u "$WORK/udp.json" \
		--arg ready "$ready_ms" --arg back "${back_ms:-}" \
		--arg adopted "$(grep -o 'took over [0-9]* UDP sessions from the pinned map' "$WORK/hbd.log" | tail -1 | grep -o '[0-9]*')" \
		--argjson eudp "$exp_udp" \
		'$r + {restart: {udp_devices: $u[0].clients, udp_adopted: ($adopted | tonumber? // 0),
		  udp_pings: $u[0].pings, udp_lost: $u[0].lost, udp_connected_end: $u[0].connected_end,
		  udp_expired: $u[0].expired, hbd_expired_udp: $eudp,
		  tcp_devices: $t[0].clients, tcp_reconnects: $t[0].reconnects,
		  tcp_lost_closed: $t[0].lost_closed, tcp_connected_end: $t[0].connected_end,
		  hbd_ready_ms: ($ready | tonumber), tcp_all_back_ms: ($back | tonumber? // null)}}')
fi

grep -E 'upgrade|took over|warn|error|expired' "$WORK/hbd.log" >"$OUT/hbd-excerpt.log" || true
echo "$result" | jq --arg date "$(date -u +%FT%TZ)" --arg cmd "scripts/faults.sh $ARGS" \
	'. + {date: $date, command: $cmd, machine: "'"$(nproc)"' vCPU, '"$(uname -r)"'"}' | tee "$OUT/result.json"
# A device may be expired only after a heartbeat of its went unanswered: with none lost, none.
bad=$(echo "$result" | jq -r 'to_entries[] | .key as $k | .value |
	(select((.tcp_expired // 0) > (.tcp_lost // 0) or (.hbd_expired_tcp // 0) > (.tcp_lost // 0)) |
	 "\($k): \(.hbd_expired_tcp // .tcp_expired) TCP devices expired, \(.tcp_lost) heartbeats lost"),
	(select((.udp_expired // 0) > (.udp_lost // 0) or (.hbd_expired_udp // 0) > (.udp_lost // 0)) |
	 "\($k): \(.hbd_expired_udp // .udp_expired) UDP devices expired, \(.udp_lost) heartbeats lost")')
if [ -n "$bad" ]; then
	echo "faults.sh: devices expired that had lost no heartbeat:" >&2
	echo "$bad" >&2
	exit 1
fi
log "expired: $(echo "$result" | jq -c 'with_entries(.value |= {tcp: (.hbd_expired_tcp // .tcp_expired), udp: (.hbd_expired_udp // .udp_expired)})')"
