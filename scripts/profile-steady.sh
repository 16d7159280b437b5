#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Where the CPU goes in the benchmark: runs scripts/bench.sh for the given phases (short steady
# windows, no ramp, no storm) and samples both CPUs with perf (cpu-clock, call graphs) for PERF_S
# seconds inside each phase's steady window (or, with --window setup, from the first connected
# clients on, while 500k connect); then prints, per phase, the busiest functions and the share of
# samples under a few frames of interest: of the server's CPU (1, the split placement) in the
# steady window, of both CPUs during setup (nothing is pinned then). --side client reads the
# steady window's samples of CPU 0 instead: hbload and the client veth's receive path.
#
#   scripts/profile-steady.sh [--clients N] [--phases tcp-offload,tcp-user] [--out DIR]
#                             [--window steady|setup] [--side server|client]
#                             [--hbd-args "ARGS"] (more hbd options, as scripts/bench.sh's)
#                             [--summary-only]   (again from DIR's recordings, no new run)
#
# perf samples with a software clock here (no PMU in this VM), at 499 Hz: the shares are
# estimates, and CPU time comes from scripts/bench.sh's /proc/stat figures, not from these.
# Needs root and perf (Debian: linux-perf). Writes DIR/<phase>.perf and DIR/summary.txt (summary-client.txt);
# docs/BENCHMARKS.md is left as it was.
set -euo pipefail
cd "$(dirname "$0")/.."

CLIENTS=500000
PHASES=tcp-offload,tcp-user
OUT=build/profile
PERF_S=30
WINDOW=steady
SIDE=server
RUN=1
HBD_ARGS=()
while [ $# -gt 0 ]; do
	case $1 in
	--clients) CLIENTS=$2; shift ;;
	--phases) PHASES=$2; shift ;;
	--out) OUT=$2; shift ;;
	--summary-only) RUN=0 ;;
	--window) WINDOW=$2; shift ;;
	--side) SIDE=$2; shift ;;
	--hbd-args) HBD_ARGS=(--hbd-args "$2"); shift ;;
	-h | --help) sed -n '3,19p' "$0"; exit 0 ;;
	*) echo "profile-steady: unknown option '$1'" >&2; exit 2 ;;
	esac
	shift
done
case $WINDOW in
steady) CPUS='\[001\]' ;;
setup) CPUS='\[00[01]\]'; PERF_S=16 ;; # the first 16 s: the connections come at ~20k/s
*) echo "profile-steady: --window steady|setup" >&2; exit 2 ;;
esac
case $SIDE in
server) ;;
client) [ "$WINDOW" = steady ] || { echo "profile-steady: --side client needs --window steady" >&2; exit 2; }
	CPUS='\[000\]' ;;
*) echo "profile-steady: --side server|client" >&2; exit 2 ;;
esac
SIDE_NAME=$([ "$SIDE" = client ] && echo "client CPU 0" || echo "server CPU 1")
IFS=, read -r -a phases <<< "$PHASES"
if [ "$RUN" = 1 ]; then
	command -v perf > /dev/null || { echo "profile-steady: perf missing (apt-get install linux-perf)" >&2; exit 1; }
	git diff --quiet -- docs/BENCHMARKS.md docs/bench-rtt.png ||
		{ echo "profile-steady: docs/BENCHMARKS.md has changes: commit them first (bench.sh rewrites it)" >&2; exit 1; }

	rm -rf "$OUT"
	mkdir -p "$OUT"
	# 20 s of warmup and a steady window long enough to hold the sampling with room on both sides
	BENCH_OUT="$OUT/bench" scripts/bench.sh --clients "$CLIENTS" --phases "$PHASES" \
		--steady $((PERF_S + 30)) --steady-user $((PERF_S + 30)) --steady-udp $((PERF_S + 30)) \
		--warmup 20 --ramp '' --no-storm ${HBD_ARGS[@]+"${HBD_ARGS[@]}"} > "$OUT/bench.log" 2>&1 &
	BENCH=$!
	trap 'kill "$BENCH" 2>/dev/null; wait "$BENCH" 2>/dev/null; git checkout -- docs/BENCHMARKS.md docs/bench-rtt.png' EXIT

	for ph in "${phases[@]}"; do
		# bounded wait for the phase's window (setup of 500k takes under a minute)
		if [ "$WINDOW" = steady ]; then
			pat='window_start steady' f=$OUT/bench/$ph/samples.jsonl
		else
			pat='connected [1-9]' f=$OUT/bench/$ph/hbload.log
		fi
		for _ in $(seq 1200); do
			grep -q "$pat" "$f" 2>/dev/null && break
			kill -0 "$BENCH" 2>/dev/null || break
			sleep 0.2
		done
		grep -q "$pat" "$f" 2>/dev/null ||
			{ echo "profile-steady: $ph never reached its $WINDOW window ($OUT/bench.log)" >&2; exit 1; }
		[ "$WINDOW" = steady ] && sleep 5
		# IPIs counted exactly (tracepoints), per CPU, over the same seconds as the samples
		perf stat -e ipi:ipi_send_cpu,ipi:ipi_send_cpumask -a -A -x, -o "$OUT/$ph.ipi.csv" \
			-- sleep "$PERF_S" > /dev/null 2>&1 &
		STAT=$!
		perf record -a -g -F 499 -o "$OUT/$ph.perf" -- sleep "$PERF_S" > /dev/null 2>&1
		wait "$STAT" || true
	done
	wait "$BENCH"
	trap - EXIT
	git checkout -- docs/BENCHMARKS.md docs/bench-rtt.png
fi

# One sample a paragraph: "comm [cpu]", then its frames, leaf first.
share() { # STACKS FRAME-REGEX: % of the samples with that frame anywhere in the stack
	awk -v A="$2" 'BEGIN { RS = ""; FS = "\n" }
		{ t++; for (i = 1; i <= NF; i++) if ($i ~ A) { n++; break } } # $1: comm [cpu]
		END { printf "%5.1f%%  %s\n", t ? 100 * n / t : 0, A }' "$1"
}
{
	echo "scripts/profile-steady.sh --clients $CLIENTS --phases $PHASES ($(date -u +%FT%TZ))"
	grep ' bench: .*: {' "$OUT/bench.log" | sed 's/^.* bench: /  /'
	jq -r '[.tcp, .udp][] | select(. != null) | "  server CPU per heartbeat (bench.sh, /proc/stat): kernel path \(.cpu_us_per_hb_offload) µs, hbd \(.cpu_us_per_hb_user) µs"' \
		"$OUT/bench/result.json"
	for ph in "${phases[@]}"; do
		perf script -i "$OUT/$ph.perf" -F comm,cpu,ip,sym 2> /dev/null |
			awk -v C="$CPUS" 'BEGIN { RS = ""; FS = "\n" } $1 ~ C { print $0 "\n" }' > "$OUT/$ph.cpu.stacks"
		echo
		echo "== $ph, $WINDOW: $([ "$WINDOW" = steady ] && echo "$SIDE_NAME" || echo "both CPUs"), $(grep -c '^[^[:space:]]' "$OUT/$ph.cpu.stacks") samples in ${PERF_S} s"
		echo "-- busiest functions (self)"
		awk 'BEGIN { RS = ""; FS = "\n" } { l = $2; sub(/^[ \t]*[0-9a-f]+ /, "", l); n[l]++; t++ }
			END { for (k in n) printf "%5.1f%%  %s\n", 100 * n[k] / t, k }' "$OUT/$ph.cpu.stacks" |
			sort -rn | sed -n 1,12p # not head: an early close would fail the pipeline
		rate=$(jq '.steady.hb_per_s' "$OUT/bench/$ph/hbload.json")
		cpu=$([ "$SIDE" = client ] && echo 0 || echo 1)
		[ "$WINDOW" = steady ] && awk -F, -v r="$rate" -v s="$PERF_S" -v c="CPU$cpu" '$1 == c && $4 ~ /^ipi:/ { n += $2 }
			END { printf "-- IPIs sent by %s: %d in %d s, %.2f per heartbeat (at %.0f/s)\n", c, n, s, n / (r * s), r }' \
			"$OUT/$ph.ipi.csv"
		[ "$WINDOW" = setup ] && grep -E "^\S+ hbload info: +(0\.[0-9]|1\.[0-9]|$((PERF_S + 1))\.[0-9])s" \
			"$OUT/bench/$ph/hbload.log" | awk '{ print "-- " $4 " " $5 " " $6 }'
		true
		# an idle CPU is not always sampled (its clock may stop): busy is against the window
		awk -v w=$((499 * PERF_S)) 'BEGIN { RS = ""; FS = "\n" } { t++; if ($1 !~ /^swapper/) b++; split($2, f, " "); if (f[1] !~ /^ffffffff/) u++ }
			END { printf "-- busy (samples not of the idle task, over 499 Hz x the window): %.1f%%; leaf in userspace (any process): %.1f%% of the busy samples\n",
				100 * b / w, b ? 100 * u / b : 0 }' \
			"$OUT/$ph.cpu.stacks"
		echo "-- under these frames (inclusive)"
		for f in net_rps_send_ipi sk_psock_backlog 'bpf_prog_[0-9a-f]+_hb_verdict' strp_data_ready \
			'hbd_' io_uring_enter tcp_sendmsg_locked tcp_v4_rcv skb_pp_cow_data veth_xdp_rcv_skb \
			'bpf_prog_[0-9a-f]+_hb_sockops' __sys_bpf hbd_tcp_expire tcp_bpf_recvmsg allocate_slab \
			'hbload \\[' io_send io_recv io_cqring_wait '[^_]schedule$' 'hbl_|hb_hist|hb_wheel|hbc_'; do
			share "$OUT/$ph.cpu.stacks" "$f"
		done
	done
} | tee "$OUT/summary$([ "$SIDE" = client ] && echo -client).txt"
