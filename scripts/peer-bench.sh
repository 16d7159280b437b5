#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The peer benchmark: the same TCP heartbeat load against Mosquitto (MQTT PINGREQ/PINGRESP) and
# against hbeat's TCP modes, side by side in one run, rounds interleaved.
#
#   scripts/peer-bench.sh [options]            (make peer-bench runs it with the defaults)
#
# Servers (--modes): mosquitto (Debian's broker, a config this script writes), user-loaded
# (hbctl load --tcp user, the loader's default, then hbd: hbd answers, with hbeat's XDP program
# on the server's NIC, which passes TCP), kernel (hbctl load --tcp kernel: the sockmap verdict
# answers), keepalive (hbctl load --tcp keepalive: the kernels' TCP keepalive probes are the
# heartbeat; the client sends no PINGs once the WELCOME says so), beat (hbctl load --tcp
# kernel, and the client heartbeats with BEAT frames: the verdict records them and TCP's ACK is
# the only answer); not by default: user (hbd answering with no BPF loaded at all: hbd
# --no-offload, as bench.sh's userspace phase), user-beat (the same BEATs taken by hbd in
# userspace, --no-offload), and mqtt-user / mqtt-kernel (hbd serving MQTT devices,
# --mqtt-port, under the same MQTT client as Mosquitto: hbd answers their PINGREQs, or the
# sockmap verdict does).
# Each run: a fresh server, N clients connect, warmup, a steady window measured, teardown.
# Writes build/peer/result.json (keys: docs/BENCHMARKS.md, "Peer bench") and per run
# build/peer/rROUND-SERVER/ (hbload summary, CPU samples, run.json).
# Everything it creates (namespaces hbpr-srv/hbpr-cli, pins, processes, the config) is removed
# on exit, also when interrupted. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
DRIVER=peer-bench
. scripts/driver-lib.sh
. scripts/bench-lib.sh

BUILD=${BUILD:-build}
OUT=${PEER_OUT:-build/peer}
CONNS=18000
ROUNDS=3
STEADY=40
WARMUP=10
INTERVAL=1
CONNECT_RATE=3000
SLACK=10
MODES=mosquitto,user-loaded,kernel,keepalive,beat
HBD_WORKERS=
MQTT_CLIENT=auto
MQTT_HBLOAD=${PEER_MQTT_HBLOAD:-} # another hbload for MQTT (a branch's build), else $BUILD/hbload
TOOL_BUILD=${PEER_TOOL_BUILD:-$BUILD} # where tools/mqttload is
TUNE=0
PUBLISH=0
REPORT_ONLY=0
declare -A VARIANT_MODE=() VARIANT_ARGS=()
NAME=hbpr
PORT=7680
MQTT_PORT=1883
PIN=${PEER_PIN:-/sys/fs/bpf/peer-bench}
SRV_CPU=1 CLI_CPU=0
PLACEMENT="split"

usage() {
	cat <<EOF
usage: scripts/peer-bench.sh [options]
  --conns N          TCP connections per run (default $CONNS; Mosquitto holds one fd each
                     under RLIMIT_NOFILE $(ulimit -Hn))
  --rounds N         rounds; each runs every server once, in an order rotated by one per round
                     (default $ROUNDS)
  --steady S         measured window per run, seconds (default $STEADY)
  --warmup S         from the end of setup to the window (default $WARMUP)
  --interval S       heartbeat interval, and keepalive probe interval (default $INTERVAL)
  --connect-rate N   the client's new connections per second during setup, the same for
                     every server (default $CONNECT_RATE; Mosquitto 2.0 listens with a backlog
                     of 100, and a burst beyond it is dropped and retried)
  --slack N          intervals of silence before a server drops a device: hbd --expiry-mult N,
                     MQTT keep alive N x interval / 1.5 (Mosquitto drops at 1.5 keep alives;
                     default $SLACK: on a shared machine a stall of a fraction of a second
                     must not end connections; hbload --proto mqtt keeps its own, = interval)
  --modes LIST       servers, in round 1's order (default $MODES)
  --hbd-workers N    hbd --workers (default: hbd's own, one per CPU)
  --placement P      while measuring: split (default; the server and its veth's receive path
                     on CPU 1, the client and its on CPU 0) or spread (nothing pinned by this
                     script, both veths' receive paths spread over both CPUs by flow hash
                     (RPS), as a NIC with one queue per CPU does: what hbd --cpus is for)
  --variant NAME=MODE:ARGS  a further server for --modes: hbeat mode MODE with hbd given ARGS
                     too (e.g. ub=user:--wait-batch 16), measured and reported as NAME
  --mqtt-client C    the MQTT load client: hbload (hbload --proto mqtt) or tool
                     (build/tools/mqttload); default auto: hbload if it speaks MQTT
  --publish          copy result.json to docs/peer-result.json and put its section into
                     docs/BENCHMARKS.md (scripts/peer-bench-doc.sh)
  --report-only      no runs: the figures again from the raw outputs under PEER_OUT (with the
                     options of that run), then result.json (and --publish)
  --tune             apply scripts/tune.sh's host-wide settings for the run (changes the
                     whole machine: not on a machine others are measuring on)
Server CPU per heartbeat = (both CPUs' busy time - the client's own CPU time, its rusage)
over the window / heartbeats of the window; docs/BENCHMARKS.md, "Peer bench", says exactly how.
EOF
}

CMDLINE="scripts/peer-bench.sh${*:+ $*}"
while [ $# -gt 0 ]; do
	case $1 in
	--conns) CONNS=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--steady) STEADY=$2; shift ;;
	--warmup) WARMUP=$2; shift ;;
	--interval) INTERVAL=$2; shift ;;
	--connect-rate) CONNECT_RATE=$2; shift ;;
	--slack) SLACK=$2; shift ;;
	--modes) MODES=$2; shift ;;
	--hbd-workers) HBD_WORKERS=$2; shift ;;
	--placement) PLACEMENT=$2; shift ;;
	--variant)
		[[ $2 =~ ^([a-z0-9_-]+)=(user|kernel|keepalive|beat|user-beat|user-loaded|mqtt-user|mqtt-kernel):(.*)$ ]] ||
			{ echo "peer-bench: --variant NAME=MODE:ARGS (MODE an hbeat mode of --modes)" >&2; exit 2; }
		VARIANT_MODE[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
		VARIANT_ARGS[${BASH_REMATCH[1]}]=${BASH_REMATCH[3]}
		shift
		;;
	--mqtt-client) MQTT_CLIENT=$2; shift ;;
	--tune) TUNE=1 ;;
	--publish) PUBLISH=1 ;;
	--report-only) REPORT_ONLY=1 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "peer-bench: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
driver_need_count --conns "$CONNS" 1
driver_need_count --rounds "$ROUNDS" 1
driver_need_count --steady "$STEADY" 5
driver_need_count --warmup "$WARMUP" 0
[[ $INTERVAL =~ ^[0-9]+$ ]] && [ "$INTERVAL" -ge 1 ] ||
	{ echo "peer-bench: --interval S (whole seconds: TCP keepalive has no finer unit)" >&2; exit 2; }
driver_need_count --slack "$SLACK" 2
case $PLACEMENT in split | spread) ;; *) echo "peer-bench: --placement split|spread" >&2; exit 2 ;; esac
driver_need_count --connect-rate "$CONNECT_RATE" 1
[ -z "$HBD_WORKERS" ] || driver_need_count --hbd-workers "$HBD_WORKERS" 1
IFS=, read -r -a SERVERS <<< "$MODES"
[ ${#SERVERS[@]} -gt 0 ] || { echo "peer-bench: --modes is empty" >&2; exit 2; }
for s in "${SERVERS[@]}"; do
	case $s in
	mosquitto | user | kernel | keepalive | beat | user-beat | user-loaded | mqtt-user | mqtt-kernel) ;;
	*) [ -n "${VARIANT_MODE[$s]:-}" ] && continue
		echo "peer-bench: unknown mode '$s' (mosquitto, user, kernel, keepalive, beat, user-beat, user-loaded, mqtt-user, mqtt-kernel)" >&2; exit 2 ;;
	esac
done
driver_need_root "namespaces, BPF, taskset of other users' processes"
for b in hbd hbload hbctl bpf/xdp_pass.bpf.o; do
	[ -e "$BUILD/$b" ] || { echo "peer-bench: $BUILD/$b missing: run make (or make peer-bench)" >&2; exit 1; }
done
need_mqtt=0
for s in "${SERVERS[@]}"; do
	case ${VARIANT_MODE[$s]:-$s} in
	mosquitto)
		need_mqtt=1
		command -v mosquitto > /dev/null ||
			{ echo "peer-bench: mosquitto not installed (scripts/deps.sh)" >&2; exit 1; }
		;;
	mqtt-*)
		need_mqtt=1
		[[ $("$BUILD/hbd" --help 2>&1 || true) == *mqtt-port* ]] ||
			{ echo "peer-bench: this hbd has no --mqtt-port" >&2; exit 1; }
		;;
	esac
done
if [ "$need_mqtt" = 1 ]; then
	MQTT_HBLOAD=${MQTT_HBLOAD:-$BUILD/hbload}
	# (not a pipe into grep -q: under pipefail the writer's SIGPIPE would fail the test)
	hbload_help=$("$MQTT_HBLOAD" --help 2>&1 || true)
	# the default is the independent client: its keep alive follows --slack (hbload's is the
	# interval, so a stall of half an interval ends a connection)
	[ "$MQTT_CLIENT" = auto ] && MQTT_CLIENT=tool
	case $MQTT_CLIENT in
	hbload) [[ $hbload_help == *mqtt* ]] ||
		{ echo "peer-bench: this hbload has no --proto mqtt" >&2; exit 1; } ;;
	tool) [ -x "$TOOL_BUILD/tools/mqttload" ] ||
		{ echo "peer-bench: $TOOL_BUILD/tools/mqttload missing (make)" >&2; exit 1; } ;;
	*) echo "peer-bench: --mqtt-client hbload|tool" >&2; exit 2 ;;
	esac
fi
if [ "$(ulimit -Hn)" -lt $((CONNS + 64)) ]; then
	echo "peer-bench: RLIMIT_NOFILE $(ulimit -Hn) is below --conns $CONNS + 64 (Mosquitto needs an fd per connection)" >&2
	exit 1
fi
ulimit -n "$(ulimit -Hn)"
if [ "$REPORT_ONLY" = 0 ] && [ -e "$PIN" ]; then
	echo "peer-bench: $PIN exists: another peer bench runs or one was killed (hbctl unload --pin-path $PIN)" >&2
	exit 1
fi
CLK_TCK=$(getconf CLK_TCK)

eval "$(scripts/netns.sh env $NAME)"
RUN_SRV_PID= RUN_CLI_PID=
SRV_PID= HBL_PID= SAMPLER_PID= NETNS=0 TUNED=0 LOADED=0 HBD_PID=
cleanup() {
	set +e
	local p
	for p in $HBL_PID $SAMPLER_PID; do
		kill -KILL "$p" 2> /dev/null
	done
	stop_server
	[ "$NETNS" = 1 ] && scripts/netns.sh down $NAME
	[ "$TUNED" = 1 ] && scripts/tune.sh revert
	rm -f "$OUT"/*/events.fifo
}
trap cleanup EXIT
trap 'exit 130' INT TERM
in_srv() { nsenter --net="/run/netns/$SRV_NS" "$@"; }
in_cli() { nsenter --net="/run/netns/$CLI_NS" "$@"; }

# Ends the server of a run by its PID (SIGTERM, then SIGKILL after 30 s) and unloads hbeat's BPF.
stop_server() {
	if [ -n "$SRV_PID" ]; then
		if kill -0 "$SRV_PID" 2> /dev/null; then
			kill -TERM "$SRV_PID"
			for _ in $(seq 300); do kill -0 "$SRV_PID" 2> /dev/null || break; sleep 0.1; done
			kill -KILL "$SRV_PID" 2> /dev/null || true
		fi
		wait "$SRV_PID" 2> /dev/null || true
		SRV_PID= HBD_PID=
	fi
	if [ "$LOADED" = 1 ]; then
		in_srv "$BUILD/hbctl" unload --dev "$SRV_IF" --pin-path "$PIN" > /dev/null 2>&1 ||
			echo "peer-bench: hbctl unload failed" >&2
		rm -rf "$PIN"
		LOADED=0
	fi
}

# Waits until PORT listens in the server namespace (at most 10 s).
wait_listen() { # PORT
	for _ in $(seq 100); do
		in_srv ss -Hltn "sport = :$1" | grep -q . && return 0
		kill -0 "$SRV_PID" 2> /dev/null || return 1
		sleep 0.1
	done
	return 1
}

start_mosquitto() { # DIR
	local dir=$1
	# plain MQTT as a fleet would run it: no persistence (PINGREQs store nothing anyway), no
	# per-connection log lines, one listener on the server's address
	cat > "$dir/mosquitto.conf" <<EOF
listener $MQTT_PORT $SRV_ADDR
allow_anonymous true
max_connections -1
max_keepalive 65535
persistence false
connection_messages false
log_dest stderr
log_type error
log_type warning
EOF
	# nsenter, not in_srv: $! must be the server itself (nsenter execs it), not a subshell
	nsenter --net="/run/netns/$SRV_NS" mosquitto -c "$dir/mosquitto.conf" > "$dir/server.log" 2>&1 &
	SRV_PID=$!
	HBD_PID=$SRV_PID # bench_snapshot's "hbd" group: the server process
	wait_listen $MQTT_PORT || { cat "$dir/server.log" >&2; echo "peer-bench: mosquitto did not start" >&2; return 1; }
}

# hbd as bench.sh runs it: the per-source limit and the accept rate off (16 client addresses
# stand for the fleet's devices, each with its own address in the field)
start_hbd() { # DIR MODE [HBD-ARGS...]
	local dir=$1 mode=$2 args=()
	shift 2
	args+=("$@")
	local load=()
	case $mode in
	beat) mode=kernel ;; # BEATs: the client's choice, the kernel path's verdict takes them
	user-beat) mode=user ;;
	mqtt-*)
		# hbd as an MQTT endpoint: the same client and protocol as Mosquitto gets
		args+=(--mqtt-port $MQTT_PORT)
		load+=(--mqtt-port $MQTT_PORT)
		mode=${mode#mqtt-}
		;;
	esac
	if [ "$mode" = user ]; then
		args+=(--no-offload)
	else
		in_srv "$BUILD/hbctl" load --dev "$SRV_IF" --port $PORT --pin-path "$PIN" \
			--tcp "${mode%-loaded}" "${load[@]}" > "$dir/hbctl-load.txt"
		LOADED=1
	fi
	[ -z "$HBD_WORKERS" ] || args+=(--workers "$HBD_WORKERS")
	nsenter --net="/run/netns/$SRV_NS" "$BUILD/hbd" --port $PORT --keys "$OUT/keys" --sink "$dir/sink.jsonl" \
		--pin-path "$PIN" --interval "$INTERVAL" --max-clients $((CONNS + CONNS / 10 + 100)) \
		--max-per-source 0 --accept-rate 0 --expiry-mult "$SLACK" "${args[@]}" > "$dir/hbd-stats.json" 2> "$dir/server.log" &
	SRV_PID=$!
	HBD_PID=$SRV_PID
	for _ in $(seq 300); do
		grep -q 'ready:' "$dir/server.log" && return 0
		kill -0 "$SRV_PID" 2> /dev/null || break
		sleep 0.1
	done
	cat "$dir/server.log" >&2
	echo "peer-bench: hbd did not start" >&2
	return 1
}

# Placement while measuring (docs/BENCHMARKS.md "Method"): the server on CPU 1 with its veth's
# receive path steered there by RPS (the sockmap verdict and the kworker sending its PONGs run
# there too), the client on CPU 0 with its receive path there. Setup runs on both CPUs.
place_split() {
	taskset -a -pc $SRV_CPU "$SRV_PID" > /dev/null
	taskset -a -pc $CLI_CPU "$HBL_PID" > /dev/null
	bench_rps "$SRV_NS" "$SRV_IF" $((1 << SRV_CPU))
	bench_rps "$CLI_NS" "$CLI_IF" $((1 << CLI_CPU))
}
# spread: what the server does with two CPUs when flows arrive on both, as a NIC's receive
# queues spread them; nothing is pinned here (hbd --cpus pins its own workers)
place_spread() {
	bench_rps "$SRV_NS" "$SRV_IF" 3
	bench_rps "$CLI_NS" "$CLI_IF" 3
}
place_measure() {
	if [ "$PLACEMENT" = spread ]; then place_spread; else place_split; fi
}
# setup on both CPUs; a fresh hbd's own placement (--cpus) is left as it set it
place_none() {
	[ -z "$SRV_PID" ] || [ "$PLACEMENT" = spread ] || taskset -a -pc 0-1 "$SRV_PID" > /dev/null
	[ -z "$HBL_PID" ] || taskset -a -pc 0-1 "$HBL_PID" > /dev/null
	bench_rps "$SRV_NS" "$SRV_IF" 0
	bench_rps "$CLI_NS" "$CLI_IF" 0
}

# utime + stime of a whole process in clock ticks: what getrusage(RUSAGE_SELF) returns
# (both are the threads' scheduler run time, split by the tick samples)
proc_ticks() { # PID
	local s
	s=$(cat "/proc/$1/stat" 2> /dev/null) || { echo 0; return; }
	s=${s##*) }
	set -- $s
	[ $# -ge 13 ] || { echo 0; return; }
	echo $((${12} + ${13}))
}

# TcpExt TCPKeepAlive (keepalive probes this namespace's kernel sent) of a namespace
ns_keepalive() { # NETNS
	nsenter --net="/run/netns/$1" awk '$1 == "TcpExt:" { if (!n) { for (i = 2; i <= NF; i++)
		if ($i == "TCPKeepAlive") k = i; n = 1 } else { print $k + 0; exit } }' /proc/net/netstat
}

# One JSON line: /proc/stat per CPU, the client's and the server's ticks, the keepalive probes
# of both namespaces. Reads first what the window's CPU figures are made of, then the rest.
peer_snapshot() { # EVENT
	local ev=$1 t=$EPOCHREALTIME cpuj="" line cli srv procs
	while read -r line; do
		set -- $line ""
		case $1 in
		cpu[0-9]*) cpuj+="${cpuj:+,}\"$1\":[$2,$3,$4,$5,$6,$7,$8,$9]" ;;
		processes) procs=$2 ;;
		esac
	done < /proc/stat
	cli=$(proc_ticks "$HBL_PID")
	srv=$(proc_ticks "$SRV_PID")
	printf '{"ev":"%s","t":%s,"cpu":{%s},"client_ticks":%s,"server_ticks":%s,"forks":%s,"ka_srv":%s,"ka_cli":%s,"load1":%s}\n' \
		"$ev" "$t" "$cpuj" "$cli" "$srv" "${procs:-0}" "$(ns_keepalive "$SRV_NS")" \
		"$(ns_keepalive "$CLI_NS")" "$(cut -d' ' -f1 /proc/loadavg)" >> "$PSAMPLES"
}

# Every process's CPU ticks, "PID PPID OWN REAPED" a line: utime + stime, and cutime + cstime
# (the children it reaped: a build's compilers show in their make, with all their CPU time, also
# what they used before the window): the other tasks of a shared machine, from the processes
# alive at both edges of the window. A noise indicator, not subtracted from anything.
proc_list() { # FILE
	{ cat /proc/[0-9]*/stat 2> /dev/null || true; } | awk '{ p = $1; l = $0; sub(/^.*\) /, "", l)
		split(l, f, " "); print p, f[2], f[12] + f[13], f[14] + f[15] }' > "$1"
}

# The client kernel's smoothed RTT of every established connection (ss), in µs, one a line:
# keepalive mode's only RTT, as the client sends no PINGs there, and the beat modes' (their
# BEATs' ACKs refresh it)
ss_rtt() { # FILE
	in_cli ss -Htin state established "dport = :$PORT" |
		sed -n 's/.* rtt:\([0-9.]*\)\/.*/\1/p' | awk '{ printf "%d\n", $1 * 1000 }' > "$1"
}

# Reads hbload's events; snapshots the window's edges, places the processes after setup.
peer_sampler() { # FIFO DIR SERVER
	local s ev
	# a sampler that dies leaves the client writing into a FIFO nobody reads (SIGPIPE): a
	# failed read of one sample must not end it
	set +e
	while read -r s ev; do
		case $ev in
		"window_start steady"* | "window_end steady"*)
			peer_snapshot "${ev%% *}"
			proc_list "$2/procs-${ev%% *}.txt"
			bench_snapshot "$ev"
			case $3 in keepalive | beat | user-beat)
				[[ $ev == window_end* ]] && ss_rtt "$2/ss-rtt.txt" ;;
			esac
			;;
		setup_done*)
			bench_snapshot setup_done
			place_measure
			;;
		esac
	done < "$1"
}

# One run: a fresh server, one load client run, its samples, run.json. The client runs 3 s past
# the window, so that every connection is still up when the window's end is sampled.
run_one() { # ROUND SERVER
	local round=$1 server=$2 dir=$OUT/r$1-$2 rc=0 client proto port extra=()
	rm -rf "$dir"
	mkdir -p "$dir"
	SAMPLES=$dir/samples.jsonl
	PSAMPLES=$dir/peer-samples.jsonl
	HBD_PID=
	client=$BUILD/hbload proto=tcp port=$PORT
	case ${VARIANT_MODE[$server]:-$server} in
	mosquitto | mqtt-*)
		if [ "$server" = mosquitto ]; then
			start_mosquitto "$dir"
		else
			# shellcheck disable=SC2086 # the variant's arguments, split as given
			start_hbd "$dir" "${VARIANT_MODE[$server]:-$server}" ${VARIANT_ARGS[$server]:-}
		fi
		port=$MQTT_PORT proto=mqtt
		if [ "$MQTT_CLIENT" = tool ]; then
			client=$TOOL_BUILD/tools/mqttload
			extra+=(--keepalive $(((SLACK * INTERVAL * 2 + 2) / 3)))
		else
			# user name the device id, password derived from its key: Mosquitto, with no
			# password file, takes any
			client=$MQTT_HBLOAD extra+=(--keys "$OUT/keys")
		fi
		;;
	*)
		if [ -n "${VARIANT_MODE[$server]:-}" ]; then
			# shellcheck disable=SC2086 # the variant's arguments, split as given
			start_hbd "$dir" "${VARIANT_MODE[$server]}" ${VARIANT_ARGS[$server]}
		else
			start_hbd "$dir" "$server"
		fi
		;;
	esac
	[ "$proto" = tcp ] && extra+=(--keys "$OUT/keys")
	case ${VARIANT_MODE[$server]:-$server} in
	beat | user-beat) extra+=(--beat) ;;
	esac
	driver_log "round $round, $server: $CONNS connections, 1 heartbeat / ${INTERVAL} s each"
	mkfifo "$dir/events.fifo"
	nsenter --net="/run/netns/$CLI_NS" "$client" --server "$SRV_ADDR" --port $port --clients "$CONNS" --proto $proto \
		--interval "$INTERVAL" --duration $((WARMUP + STEADY + 3)) --warmup "$WARMUP" \
		--steady "$STEADY" --source "10.77.1.1-10.77.1.16" --setup-timeout 60 \
		--connect-rate "$CONNECT_RATE" \
		--events "$dir/events.fifo" --hist "$dir/hist.txt" --json --no-progress "${extra[@]}" \
		> "$dir/hbload.json" 2> "$dir/hbload.log" &
	HBL_PID=$!
	RUN_SRV_PID=$SRV_PID RUN_CLI_PID=$HBL_PID
	printf 'RUN_SRV_PID=%s RUN_CLI_PID=%s\n' "$RUN_SRV_PID" "$RUN_CLI_PID" > "$dir/pids"
	place_none
	peer_sampler "$dir/events.fifo" "$dir" "${VARIANT_MODE[$server]:-$server}" &
	SAMPLER_PID=$!
	wait "$HBL_PID" || rc=$?
	HBL_PID=
	wait "$SAMPLER_PID" || true
	SAMPLER_PID=
	rm -f "$dir/events.fifo"
	[ "$LOADED" = 1 ] && in_srv "$BUILD/hbctl" stats --json --pin-path "$PIN" > "$dir/hbctl-stats.json"
	stop_server
	if [ "$rc" -ne 0 ]; then
		tail -n 20 "$dir/hbload.log" >&2
		echo "peer-bench: the load client failed ($rc) in round $round, $server" >&2
		return 1
	fi
	bench_wait_sockets "$SRV_NS" 50 60 || true
	if [ "$(grep -c '"ev":"window_' "$PSAMPLES" 2> /dev/null)" != 2 ]; then
		echo "peer-bench: round $round, $server: the window's samples are missing (the sampler failed?)" >&2
		return 1
	fi
	run_json "$dir" "$server" "$round" "${VARIANT_MODE[$server]:-$server}" "${VARIANT_ARGS[$server]:-}" > "$dir/run.json"
	driver_log "round $round, $server: $(jq -c '{hb, answered, cpu_us_per_hb, machine_cpu_us_per_hb, split_cpu_us_per_hb, rtt_p99: .rtt_us.p99, other_cpu_pct, other_reaped_cpu_pct, steal_pct}' "$dir/run.json")"
}

# The figures of one run. The window is hbload's steady window; its edges are the two
# peer-samples lines. CPU busy = user + nice + system + irq + softirq ticks of /proc/stat
# (iowait, where io_uring waits show, is idle; steal is the hypervisor's).
run_json() { # DIR SERVER ROUND MODE HBD-ARGS
	local dir=$1 ss=null other=null took=0
	# BEATs the server took: the verdict's (hbctl stats, read before hbd stopped) and hbd's
	# own (its exit summary); a BEAT has no answer the client could count
	[ -s "$dir/hbctl-stats.json" ] && took=$((took + $(jq '.kernel.sk_beat // 0' "$dir/hbctl-stats.json")))
	[ -s "$dir/hbd-stats.json" ] && took=$((took + $(jq '.beats_user // 0' "$dir/hbd-stats.json")))
	if [ -n "$RUN_SRV_PID" ] && [ -s "$dir/procs-window_start.txt" ] &&
		[ -s "$dir/procs-window_end.txt" ]; then
		# neither the server, the client nor a kernel thread (ppid 2: kworkers, ksoftirqd
		# are part of what the server costs)
		other=$(awk -v srv="$RUN_SRV_PID" -v cli="$RUN_CLI_PID" 'NR == FNR { a[$1] = $3; c[$1] = $4; next }
			($1 in a) && $1 != srv && $1 != cli && $2 != 2 && $1 != 2 { d += $3 - a[$1]; e += $4 - c[$1] }
			END { printf "[%d,%d]\n", d, e }' "$dir/procs-window_start.txt" "$dir/procs-window_end.txt")
	fi
	if [ -s "$dir/ss-rtt.txt" ]; then
		ss=$(sort -n "$dir/ss-rtt.txt" | awk '{ v[NR] = $1 } END { if (!NR) { print "null"; exit }
			i50 = int(NR * 0.50 + 0.999); i99 = int(NR * 0.99 + 0.999)
			printf "{\"p50\":%d,\"p99\":%d,\"max\":%d,\"conns\":%d}\n", v[i50], v[i99], v[NR], NR }')
	fi
	jq -n --slurpfile p "$dir/peer-samples.jsonl" --slurpfile b "$dir/samples.jsonl" \
		--slurpfile h "$dir/hbload.json" --arg server "$2" --argjson round "$3" --arg mode "$4" --arg hbd_args "$5" \
		--argjson tck "$CLK_TCK" --argjson conns "$CONNS" --argjson interval "$INTERVAL" \
		--argjson ss "$ss" --argjson other_ticks "$other" --argjson took "$took" "$DRIVER_JQ"'
	  def per($ns; $n): if $n > 0 then ($ns / 1000 / $n | r2) else null end;
	  ($p | map(select(.ev == "window_start")) | first) as $a
	  | ($p | map(select(.ev == "window_end")) | first) as $z
	  | $h[0] as $hl
	  | (1e9 / $tck) as $tick
	  | ($z.t - $a.t) as $secs
	  | ($z.cpu | with_entries(.key as $k | .value as $v
	      | ([range(0; 8)] | map($v[.] - $a.cpu[$k][.])) as $d
	      | .value = {busy: ($d[0] + $d[1] + $d[2] + $d[5] + $d[6]), steal: $d[7],
	                  total: ($d | add)})) as $cpu
	  | ([$cpu[].busy] | add * $tick) as $machine_ns
	  | (($z.client_ticks - $a.client_ticks) * $tick) as $client_ns
	  | (($z.server_ticks - $a.server_ticks) * $tick) as $server_proc_ns
	  | ($cpu.cpu1.busy * $tick) as $cpu1_ns
	  | ($z.ka_srv - $a.ka_srv) as $probes
	  # tasks of neither side alive at both edges (a shared machine), from the schedstat walk
	  | (if $other_ticks then $other_ticks[0] * $tick else null end) as $other_ns
	  | (if $other_ticks then $other_ticks[1] * $tick else null end) as $reaped_ns
	  | (if $mode == "keepalive" and ($hl.steady.pings // 0) == 0 then "keepalive"
	     elif ($hl.steady.beats // 0) > 0 then "beat" else "app" end) as $kind
	  # keepalive: a liveness check is one connection for one interval (as a PINGREQ is);
	  # the kernel may send more probes than one per interval (a probe whose ACK came back
	  # a moment before the timer fired is followed by another soon after)
	  | ($conns * $secs / $interval) as $checks
	  | (if $kind == "keepalive" then $checks elif $kind == "beat" then $hl.steady.beats
	     else $hl.steady.pings end) as $hb
	  | {server: $server, mode: $mode, hbd_args: $hbd_args, round: $round, kind: $kind, secs: ($secs | r2),
	     conns: $conns, connected: $hl.connected,
	     hb: ($hb | round), hb_per_s: (if $secs > 0 then ($hb / $secs | round) else null end),
	     expected_hb: ($conns * $secs / $interval | round),
	     pings: $hl.steady.pings, pongs: $hl.steady.pongs, lost: $hl.steady.lost,
	     beats: $hl.steady.beats, beats_sent: $hl.beats, beats_taken: $took,
	     probes_srv: $probes, probes_cli: ($z.ka_cli - $a.ka_cli),
	     probes_per_check: (if $kind == "keepalive" then ($probes / $checks | r2) else null end),
	     cpu_us_per_probe: (if $kind == "keepalive" then per($machine_ns - $client_ns; $probes) else null end),
	     answered: (if $kind == "keepalive" then
	         ($hl.connected == $conns and $hl.connected_end == $conns and $hl.expired == 0
	          and $probes > 0.9 * $conns * $secs / $interval)
	       # every BEAT the client sent was taken by the server, and every connection stayed
	       elif $kind == "beat" then
	         ($hl.connected == $conns and $hl.connected_end == $conns and $hl.expired == 0
	          and $took >= $hl.beats)
	       else ($hl.steady.pings > 0 and $hl.steady.lost == 0 and $hl.connected == $conns) end),
	     cpu_us_per_hb: per($machine_ns - $client_ns; $hb),
	     machine_cpu_us_per_hb: per($machine_ns; $hb),
	     client_cpu_us_per_hb: per($client_ns; $hb),
	     split_cpu_us_per_hb: per($cpu1_ns; $hb),
	     server_proc_cpu_us_per_hb: per($server_proc_ns; $hb),
	     rtt_us: (if $kind == "app" then $hl.steady.rtt_us else $ss end),
	     rtt_source: (if $kind == "app" then "client, per heartbeat" else "client kernel srtt (ss), per connection" end),
	     other_cpu_pct: (if $other_ns then (100 * $other_ns / ($secs * 1e9) | round) else null end),
	     other_reaped_cpu_pct: (if $reaped_ns then (100 * $reaped_ns / ($secs * 1e9) | round) else null end),
	     steal_pct: ([$cpu[] | if .total > 0 then 100 * .steal / .total else 0 end] | max | round),
	     forks: ($z.forks - $a.forks), load1: $a.load1,
	     client_lag_p99_us: $hl.lag_us.p99}'
}

if [ "$REPORT_ONLY" = 1 ]; then
	# the figures again from the raw samples of an earlier run (after a change to run_json)
	[ -s "$OUT/result.json" ] || { echo "peer-bench: no $OUT/result.json to report again" >&2; exit 1; }
	CMDLINE=$(jq -r .command "$OUT/result.json")
	eval "$(jq -r '@sh "CONNS=\(.conns) ROUNDS=\(.rounds) STEADY=\(.steady_s) INTERVAL=\(.interval_s) MQTT_CLIENT=\(.mqtt_client) CONNECT_RATE=\(.connect_rate // 0) SLACK=\(.slack_intervals // 0)"' "$OUT/result.json")"
	START=0 END=$(jq -r '.seconds // 0' "$OUT/result.json")
	for d in "$OUT"/r[0-9]*-*/; do
		d=${d%/}
		b=${d##*/r}
		RUN_SRV_PID= RUN_CLI_PID=
		# shellcheck disable=SC1091
		[ -s "$d/pids" ] && . "$d/pids"
		run_json "$d" "${b#*-}" "${b%%-*}" "$(jq -r ".mode // \"${b#*-}\"" "$d/run.json")" \
			"$(jq -r '.hbd_args // ""' "$d/run.json")" > "$d/run.json.new"
		if [ -z "$RUN_SRV_PID" ]; then
			# a run from before the pids were kept: its noise figures as it computed them
			jq -s '.[1] + (.[0] | {other_cpu_pct, other_reaped_cpu_pct})' "$d/run.json" \
				"$d/run.json.new" > "$d/run.json.tmp" && mv "$d/run.json.tmp" "$d/run.json.new"
		fi
		mv "$d/run.json.new" "$d/run.json"
	done
	trap - EXIT
else
mkdir -p "$OUT"
rm -rf "$OUT/result.json" "$OUT"/r[0-9]*-*/
START=$(date +%s)
if [ "$TUNE" = 1 ]; then
	scripts/tune.sh apply
	TUNED=1
fi
NETNS=1
driver_log "creating $SRV_NS/$CLI_NS (veth $SRV_IF/$CLI_IF)"
BUILD=$BUILD scripts/netns.sh up $NAME 16 > /dev/null
scripts/tune.sh netns "$SRV_NS" "$CLI_NS"
umask 077
printf '1-%d derive %s\n' $((CONNS + 1)) "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" > "$OUT/keys"
umask 022
driver_log "$ROUNDS rounds of ${SERVERS[*]}; mqtt client: ${MQTT_CLIENT}; load: $(driver_loadavg)"

n=${#SERVERS[@]}
for ((r = 1; r <= ROUNDS; r++)); do
	for ((i = 0; i < n; i++)); do
		run_one "$r" "${SERVERS[$(((i + r - 1) % n))]}"
	done
done
cleanup
trap - EXIT
NETNS=0 TUNED=0
END=$(date +%s)
fi

# result.json: per server the medians over rounds, the per-round figures, and per round the
# ratio Mosquitto / hbeat mode of the server CPU per heartbeat (> 1: hbeat costs less)
# what was measured: the tree the binaries were built from, the broker's version
build_commit=$(git -C "$BUILD/.." describe --always --dirty 2> /dev/null || echo unknown)
mosq_version=$(mosquitto -h 2> /dev/null | sed -n 's/^mosquitto version //p' || true)
jq -s --argjson conns "$CONNS" --argjson rounds "$ROUNDS" --arg cmd "$CMDLINE" \
	--argjson connect_rate "$CONNECT_RATE" --argjson slack "$SLACK" \
	--arg build_commit "$build_commit" --arg mosq_version "$mosq_version" \
	--argjson secs $((END - START)) --arg mqtt_client "$MQTT_CLIENT" --argjson steady "$STEADY" \
	--argjson interval "$INTERVAL" --arg placement "$PLACEMENT" "$DRIVER_JQ"'
  def fig($runs): {
      cpu_us_per_hb: ($runs | map(.cpu_us_per_hb) | median | r2),
      machine_cpu_us_per_hb: ($runs | map(.machine_cpu_us_per_hb) | median | r2),
      rtt_us: {p99: ($runs | map(.rtt_us.p99) | median),
               p50: ($runs | map(.rtt_us.p50) | median)},
      rtt_source: ($runs[0].rtt_source),
      client_cpu_us_per_hb: ($runs | map(.client_cpu_us_per_hb) | median | r2),
      split_cpu_us_per_hb: ($runs | map(.split_cpu_us_per_hb) | median | r2),
      server_proc_cpu_us_per_hb: ($runs | map(.server_proc_cpu_us_per_hb) | median | r2),
      hb_per_s: ($runs | map(.hb_per_s) | median),
      all_answered: ($runs | all(.answered)),
      kind: $runs[0].kind, mode: $runs[0].mode, hbd_args: $runs[0].hbd_args,
      rounds: ($runs | map({round, hb, pings, pongs, lost, probes_srv, probes_cli, connected,
          answered, probes_per_check, cpu_us_per_probe, cpu_us_per_hb, machine_cpu_us_per_hb, client_cpu_us_per_hb,
          split_cpu_us_per_hb, server_proc_cpu_us_per_hb,
          rtt_p99: .rtt_us.p99, other_cpu_pct, other_reaped_cpu_pct, steal_pct, forks, load1}))};
  . as $all
  | ($all | map(select(.server == "mosquitto"))) as $mq
  | {conns: $conns, rounds: $rounds, steady_s: $steady, interval_s: $interval,
     command: $cmd, seconds: $secs, mqtt_client: $mqtt_client, placement: $placement,
     build_commit: $build_commit, mosquitto_version: $mosq_version, connect_rate: $connect_rate, slack_intervals: $slack,
     date: (now | strftime("%Y-%m-%d %H:%M UTC"))}
  + (if ($mq | length) > 0 then {mosquitto: fig($mq)} else {} end)
  + {hbeat: ([$all[] | .server | select(. != "mosquitto")] | unique
      | map(. as $m | ($all | map(select(.server == $m))) as $runs
        | {key: $m, value: (fig($runs)
          + (if ($mq | length) > 0 then
              (($runs | map(. as $x | ($mq[] | select(.round == $x.round)) as $y
                  | {round: $x.round,
                     cpu: (ratio($y.cpu_us_per_hb; $x.cpu_us_per_hb) | r2),
                     machine: (ratio($y.machine_cpu_us_per_hb; $x.machine_cpu_us_per_hb) | r2),
                     split: (ratio($y.split_cpu_us_per_hb; $x.split_cpu_us_per_hb) | r2)})) as $rr
               | {mosquitto_over_this: {per_round: $rr,
                   cpu_median: ($rr | map(.cpu) | median | r2),
                   machine_median: ($rr | map(.machine) | median | r2),
                   split_median: ($rr | map(.split) | median | r2)}})
             else {} end))}) | from_entries)}
' "$OUT"/r*-*/run.json > "$OUT/result.json.tmp"
mv "$OUT/result.json.tmp" "$OUT/result.json"
scripts/peer-bench-doc.sh "$OUT/result.json" > "$OUT/section.md"
if [ "$PUBLISH" = 1 ]; then
	cp "$OUT/result.json" docs/peer-result.json
	scripts/peer-bench-doc.sh --splice docs/BENCHMARKS.md docs/peer-result.json
	driver_log "docs/peer-result.json and the Peer bench section of docs/BENCHMARKS.md written"
fi
driver_log "done in $((END - START)) s: $OUT/result.json, $OUT/section.md"
jq -c '{mosquitto: (.mosquitto // null | if . then {cpu_us_per_hb, machine_cpu_us_per_hb, p99: .rtt_us.p99} else null end),
	hbeat: (.hbeat | map_values({cpu_us_per_hb, machine_cpu_us_per_hb, p99: .rtt_us.p99,
	  ratio: .mosquitto_over_this.cpu_median}))}' "$OUT/result.json" >&2
