#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Where does the TCP heartbeat path break, and what moves the break? One setup of N clients,
# then the same rate ramp under each CPU configuration in turn, switched at runtime between
# ramps (a low-rate step in between lets queues drain). Each step's RTT, server and client CPU
# are measured as in scripts/bench.sh.
#
#   scripts/ceiling.sh [--clients N] [--mode offload|user] [--configs LIST] [--rates LIST]
#
# Configurations (LIST, comma-separated, in order):
#   none      stock: every packet's receive path runs in the softirq of the CPU that sent it
#             (the client's), and so does the sockmap verdict; its kworker is that CPU's
#   rps       RPS: the server veth's receive path on CPU 1, the client veth's on CPU 0; hbd
#             pinned to CPU 1, hbload to CPU 0 (XDP itself still runs on the sender's CPU)
#   threaded  threaded NAPI on both veths, SCHED_FIFO, server's on CPU 1 and client's on CPU 0;
#             hbd on CPU 1, hbload on CPU 0
#   rps-kw    rps, and every per-CPU kworker at nice -20 (sockmap's PONGs are sent by them)
#   rps-both  RPS spreads the server veth's receive path over both CPUs by flow, so the sockmap
#             verdict and the kworkers that send its PONGs run on both; client's on CPU 0;
#             hbd on CPU 1, hbload on CPU 0
# Writes build/ceiling/<mode>/ (hbload.json, samples.jsonl) and prints one line per step.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh

BUILD=${BUILD:-build}
OUT=${CEILING_OUT:-build/ceiling}
CLIENTS=500000
MODE=offload
CONFIGS=none,rps,threaded,rps-kw
RATES=16667,30000,40000,50000,60000
RECOVER=5000
STEP=10
NAME=hbsc PORT=7660 PIN=/sys/fs/bpf/hbeat-scale-ceiling

while [ $# -gt 0 ]; do
	case $1 in
	--clients) CLIENTS=$2; shift ;;
	--mode) MODE=$2; shift ;;
	--configs) CONFIGS=$2; shift ;;
	--rates) RATES=$2; shift ;;
	--step) STEP=$2; shift ;;
	-h | --help) sed -n '3,20p' "$0"; exit 0 ;;
	*) echo "ceiling: unknown option '$1'" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" -eq 0 ] || { echo "ceiling: needs root" >&2; exit 1; }
[ -e "$PIN" ] && { echo "ceiling: $PIN exists (another run, or a killed one: hbctl unload)" >&2; exit 1; }

eval "$(scripts/netns.sh env $NAME)"
dir=$OUT/$MODE
rm -rf "$dir"
mkdir -p "$dir"
SAMPLES=$dir/samples.jsonl
HBD_PID= HBL_PID= SAMPLER_PID= TUNED=0 NETNS=0
declare -A KW_NICE=()
cleanup() {
	set +e
	local p
	for p in $HBL_PID $SAMPLER_PID $HBD_PID; do kill -KILL "$p" 2>/dev/null; done
	[ -n "$HBD_PID" ] && wait "$HBD_PID" 2>/dev/null
	[ -d "$PIN" ] && nsenter --net="/run/netns/$SRV_NS" "$BUILD/hbctl" unload --dev "$SRV_IF" --pin-path "$PIN" >/dev/null 2>&1
	kworkers_nice restore
	[ "$NETNS" = 1 ] && scripts/netns.sh down $NAME
	[ "$TUNED" = 1 ] && scripts/tune.sh revert
	rm -f "$dir/events.fifo"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

kworkers_nice() { # set N | restore
	local p
	if [ "$1" = restore ]; then
		for p in "${!KW_NICE[@]}"; do renice -n "${KW_NICE[$p]}" -p "$p" >/dev/null 2>&1; done
		KW_NICE=()
		return 0
	fi
	for p in $(pgrep '^kworker/[0-9]+:[0-9]+'); do
		[ -n "${KW_NICE[$p]:-}" ] || KW_NICE[$p]=$(ps -o nice= -p "$p" | tr -d ' ')
		renice -n "$2" -p "$p" >/dev/null 2>&1 || true
	done
}

rps() { # SRV_MASK CLI_MASK (hex; 0 = off)
	ip netns exec "$SRV_NS" sh -c "echo $1 > /sys/class/net/$SRV_IF/queues/rx-0/rps_cpus"
	ip netns exec "$CLI_NS" sh -c "echo $2 > /sys/class/net/$CLI_IF/queues/rx-0/rps_cpus"
}

threaded() { # 0|1
	local p
	# a veth has NAPI (and so can thread it) only with an XDP program or GRO on
	ip netns exec "$SRV_NS" ethtool -K "$SRV_IF" gro "$( [ "$1" = 1 ] && echo on || echo off)" >/dev/null
	ip netns exec "$SRV_NS" sh -c "echo $1 > /sys/class/net/$SRV_IF/threaded"
	ip netns exec "$CLI_NS" sh -c "echo $1 > /sys/class/net/$CLI_IF/threaded"
	[ "$1" = 1 ] || return 0
	for p in $(pgrep "^napi/$SRV_IF-"); do taskset -pc 1 "$p" >/dev/null; chrt -f -p 50 "$p"; done
	for p in $(pgrep "^napi/$CLI_IF-"); do taskset -pc 0 "$p" >/dev/null; chrt -f -p 50 "$p"; done
}

affinity() { # SRV_CPUS CLI_CPUS: every thread of hbd and hbload
	taskset -a -pc "$1" "$HBD_PID" >/dev/null
	taskset -a -pc "$2" "$HBL_PID" >/dev/null
}

apply_config() {
	kworkers_nice restore
	rps 0 0
	threaded 0
	affinity 0-1 0-1
	case $1 in
	none) ;;
	rps) rps 2 1; affinity 1 0 ;;
	threaded) threaded 1; affinity 1 0 ;;
	rps-kw) rps 2 1; affinity 1 0; kworkers_nice set -20 ;;
	rps-both) rps 3 1; affinity 1 0 ;;
	*) echo "ceiling: unknown configuration '$1'" >&2; return 1 ;;
	esac
}

# the ramp: per configuration, a recovery step then the rates
IFS=, read -r -a configs <<< "$CONFIGS"
IFS=, read -r -a rates <<< "$RATES"
steps="" declare -a step_config=()
for c in "${configs[@]}"; do
	steps+="${steps:+,}$RECOVER"
	step_config+=("$c:recover")
	for r in "${rates[@]}"; do
		steps+=",$r"
		step_config+=("$c")
	done
done

scripts/tune.sh apply
TUNED=1 NETNS=1
BUILD=$BUILD scripts/netns.sh up $NAME 16 > /dev/null
scripts/tune.sh netns "$SRV_NS" "$CLI_NS"
umask 077
printf '1-%d derive %s\n' $((CLIENTS + 1)) "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" > "$OUT/keys"
umask 022
args=()
if [ "$MODE" = offload ]; then
	nsenter --net="/run/netns/$SRV_NS" "$BUILD/hbctl" load --dev "$SRV_IF" --port $PORT --pin-path "$PIN" --tcp kernel > /dev/null
else
	args+=(--no-offload)
fi
nsenter --net="/run/netns/$SRV_NS" "$BUILD/hbd" --port $PORT --keys "$OUT/keys" \
	--sink "$dir/sink.jsonl" --pin-path "$PIN" --interval 30 \
	--max-clients $((CLIENTS + CLIENTS / 10 + 100)) --max-per-source 0 --accept-rate 0 "${args[@]}" \
	> /dev/null 2> "$dir/hbd.log" &
HBD_PID=$!
sleep 2
mkfifo "$dir/events.fifo"
nsenter --net="/run/netns/$CLI_NS" "$BUILD/hbload" --server "$SRV_ADDR" --port $PORT \
	--clients "$CLIENTS" --proto tcp --interval 30 --duration 10 --warmup 5 --keys "$OUT/keys" \
	--source "10.77.1.1-10.77.1.16" --setup-timeout $((60 + CLIENTS / 10000)) \
	--steps "$steps" --step-s "$STEP" --step-settle 3 --step-stop-p99 0 \
	--events "$dir/events.fifo" --json > "$dir/hbload.json" 2> "$dir/hbload.log" &
HBL_PID=$!
# the sampler snapshots every event; this loop also switches the configuration at each
# recovery step
while read -r t ev a b; do
	bench_snapshot "$ev${a:+ $a}${b:+ $b}"
	case $ev in
	setup_done) echo "ceiling: setup $a s, $b clients" >&2 ;;
	step)
		c=${step_config[$((a - 1))]}
		case $c in *:recover) apply_config "${c%:recover}"; echo "ceiling: configuration ${c%:recover}" >&2 ;; esac
		;;
	esac
done < "$dir/events.fifo"
wait "$HBL_PID" || true
HBL_PID=
printf '%s\n' "${step_config[@]}" > "$dir/step-configs.txt"

# one line per step: configuration, rate, RTT, CPU
jq -n -r --slurpfile s "$SAMPLES" --slurpfile h "$dir/hbload.json" --rawfile cf "$dir/step-configs.txt" '
	($cf | split("\n")) as $cfg
	| def win($w): ([$s[] | select(.ev | startswith("window_start " + $w + " "))] | first) as $a
	    | ([$s[] | select(.ev == "window_end " + $w)] | first) as $b
	    | if $a and $b then {secs: ($b.t - $a.t),
	        srv: (($b.ns.hbd // 0) - ($a.ns.hbd // 0) + ($b.ns.napi_srv // 0) - ($a.ns.napi_srv // 0)
	              + ([$b.ns | to_entries[] | select(.key | startswith("kworker")) | .value] | add)
	              - ([$a.ns | to_entries[] | select(.key | startswith("kworker")) | .value] | add)),
	        busy: ($b.cpu | with_entries(.key as $k | .value as $v
	              | ([range(0; 8)] | map($v[.] - $a.cpu[$k][.])) as $d
	              | .value = (100 * (($d | add) - $d[3] - $d[4] - $d[7]) / ($d | add) | round)))}
	      else null end;
	"config rate sent p50_us p99_us p999_us lost cpu0% cpu1% kworker+hbd+napi_srv%",
	($h[0].steps | to_entries[] | .key as $i | .value as $st | select($cfg[$i] | endswith(":recover") | not)
	  | win("step\($i + 1)") as $w
	  | "\($cfg[$i]) \($st.rate) \($st.hb_per_s | round) \($st.rtt_us.p50) \($st.rtt_us.p99) \($st.rtt_us.p999) \($st.lost) \($w.busy.cpu0 // "-") \($w.busy.cpu1 // "-") \(if $w then (100 * $w.srv / ($w.secs * 1e9) | round) else "-" end)")' \
	| column -t | tee "$dir/table.txt"
