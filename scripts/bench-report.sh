#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Turns the raw outputs of scripts/bench.sh ($OUT/<phase>/) into $OUT/result.json,
# docs/BENCHMARKS.md and docs/bench-rtt.png. Can be run again on the same outputs.
#
# Per phase it reads: hbload.json (hbload's summary: steady window, ramp steps, storm),
# samples.jsonl (bench-lib.sh snapshots at hbload's events), hbctl-stats.json (offload phases),
# hist.txt (RTT histograms of the windows).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-build/bench}
DOC=${BENCH_DOC:-docs/BENCHMARKS.md}
PNG=${BENCH_PNG:-docs/bench-rtt.png}

# Per phase: {hbload, windows: {steady|stepN: {secs, server_ns, client_ns, machine_ns, ns, cpu}},
# mem, hbctl}. CPU busy = user + nice + system + irq + softirq jiffies (10 ms each); iowait
# counts as idle (io_uring waits show there) and steal is the hypervisor's. With the split
# placement the server is CPU 1's busy time plus the XDP program's run time (it runs on CPU 0:
# see scripts/bench-lib.sh), the client CPU 0's busy time minus it.
phase_json() { # DIR
	local d=$1 hbctl='null' drop='null'
	[ -s "$d/hbctl-stats.json" ] && hbctl=$(cat "$d/hbctl-stats.json")
	[ -s "$d/drop.json" ] && drop=$(cat "$d/drop.json")
	jq -n --slurpfile s "$d/samples.jsonl" --slurpfile h "$d/hbload.json" --argjson hbctl "$hbctl" \
		--argjson drop "$drop" \
		--arg placement "${PLACEMENT:-split}" '
	  # a thread that exits between two snapshots (an idle kworker) takes its run time
	  # with it: a group whose sum went down has no figure (null), not a negative one
	  def delta($a; $b): $b.ns | with_entries(.value -= ($a.ns[.key] // 0)
	      | if .value < 0 then .value = null else . end);
	  def cpu($a; $b): $b.cpu | with_entries(.key as $k | .value as $v
	      | ([range(0; 8)] | map($v[.] - $a.cpu[$k][.])) as $d
	      | ($d | add) as $tot
	      | .value = {busy_ns: (($d[0] + $d[1] + $d[2] + $d[5] + $d[6]) * 1e7),
	                  busy_pct: (if $tot > 0 then 100 * ($d[0] + $d[1] + $d[2] + $d[5] + $d[6]) / $tot else 0 end),
	                  steal_pct: (if $tot > 0 then 100 * $d[7] / $tot else 0 end)});
	  def window($a; $b): cpu($a; $b) as $c | (($b.xdp_ns // 0) - ($a.xdp_ns // 0)) as $x
	    | {secs: ($b.t - $a.t), ns: delta($a; $b), cpu: $c, xdp_ns: $x,
	       ka_probes: (($b.tcp_ka // 0) - ($a.tcp_ka // 0)),
	       srv_tx_packets: (($b.srv_tx // 0) - ($a.srv_tx // 0)),
	       srv_tx_dropped: (($b.srv_txd // 0) - ($a.srv_txd // 0)),
	       machine_ns: ([$c[].busy_ns] | add),
	       server_ns: (if $placement == "split" then $c.cpu1.busy_ns + $x else null end),
	       client_ns: (if $placement == "split" then $c.cpu0.busy_ns - $x else null end)};
	  [$s[] | select(.ev | startswith("window_start "))] as $starts
	  | {hbload: $h[0], hbctl: $hbctl, drop: $drop,
	     windows: ([$starts[] | (.ev | split(" ") | .[1]) as $w
	        | . as $a | ([$s[] | select(.ev == "window_end " + $w)] | first) as $b
	        | select($b != null) | {key: $w, value: window($a; $b)}] | from_entries),
	     mem: (([$s[] | select(.ev == "hbd_ready")] | first) as $r
	        | ([$s[] | select(.ev | startswith("window_start steady"))] | first) as $st
	        | {ready_rss_kb: $r.hbd_rss_kb, steady_rss_kb: $st.hbd_rss_kb,
	           steady_anon_kb: $st.hbd_anon_kb, slab_delta_kb: ($st.slab_kb - $r.slab_kb)})}'
}

phases=()
for d in "$OUT"/*/; do
	[ -s "$d/hbload.json" ] && [ -s "$d/samples.jsonl" ] && phases+=("$(basename "$d")")
done
if [ ${#phases[@]} -eq 0 ]; then
	echo "bench-report: no phase outputs under $OUT" >&2
	exit 1
fi
all='{}'
for p in "${phases[@]}"; do
	all=$(jq --arg p "$p" --argjson v "$(phase_json "$OUT/$p")" '.[$p] = $v' <<< "$all")
done

# cyclictest's histogram (lines "US COUNT-THREAD0 COUNT-THREAD1 ..."): wakeup latency
# percentiles over all threads
floor=null
if [ -s "$OUT/cyclictest.txt" ]; then
	floor=$(awk '/^[0-9]/ { c = 0; for (i = 2; i <= NF; i++) c += $i; if (c) { us[n] = $1 + 0; cnt[n] = c; tot += c; n++ } }
		END { if (!tot) { print "null"; exit }
		      split("50 99 99.9", q, " "); split("p50 p99 p999", k, " "); out = ""; cum = 0; j = 1
		      for (i = 0; i < n && j <= 3; i++) { cum += cnt[i]
		          while (j <= 3 && cum >= tot * q[j] / 100) { out = out (out ? "," : "") "\"" k[j] "\":" us[i]; j++ } }
		      printf "{%s,\"max\":%d,\"samples\":%d}\n", out, us[n - 1], tot }' "$OUT/cyclictest.txt")
fi

# Kernel memory per server-side client from slab deltas, which count both ends of every
# connection (client and server share the kernel): half of a plain connection's delta (the
# userspace phase: the two ends are alike) plus everything the offload phase adds on top
# (sockhash element, psock, conns entry is preallocated). Without the userspace phase: the
# whole both-ends delta, an upper bound.
result=$(jq --arg cmd "${BENCH_CMD:-scripts/bench.sh}" --arg placement "${PLACEMENT:-split}" \
	--argjson secs "${BENCH_SECONDS:-0}" --argjson floor "$floor" '
	def us_per_hb($p; $w): if $p.windows[$w].server_ns and $p.hbload[$w].pings > 0
	    then ($p.windows[$w].server_ns / 1000 / $p.hbload[$w].pings) else null end;
	def client_us_per_hb($p; $w): if $p.windows[$w].client_ns and $p.hbload[$w].pings > 0
	    then ($p.windows[$w].client_ns / 1000 / $p.hbload[$w].pings) else null end;
	def machine_us_per_hb($p; $w): if $p.windows[$w] and $p.hbload[$w].pings > 0
	    then ($p.windows[$w].machine_ns / 1000 / $p.hbload[$w].pings) else null end;
	# the threads of hbd (schedstat), part of the server figure: on the kernel paths that is
	# expiry, the liveness stamp and control, since the kernel answers every heartbeat
	def hbd_us_per_hb($p; $w): if $p.windows[$w].ns.hbd and $p.hbload[$w].pings > 0
	    then ($p.windows[$w].ns.hbd / 1000 / $p.hbload[$w].pings) else null end;
	def r2: if . == null then null else (. * 100 | round) / 100 end;
	def ratio($a; $b): if $a and $b and $a > 0 then ($b / $a | r2) else null end;
	# what else ran in the window: CPU of tasks that are neither hbeat nor the kernel threads
	# it uses (other users of a shared machine), and the hypervisor steal, in % of one CPU
	def noise($p): $p.windows.steady as $w | if $w then
	    {other_cpu_pct: ([100 * ($w.ns.other // 0) / ($w.secs * 1e9), 0] | max | round),
	     steal_pct: ([$w.cpu[].steal_pct] | max | round),
	     client_lag_p99_us: $p.hbload.lag_us.p99} else null end;
	def transport($off; $usr): {
	    clients: $off.hbload.clients, connected: $off.hbload.connected, setup_s: $off.hbload.setup_s,
	    pings: $off.hbload.steady.pings, pongs: $off.hbload.steady.pongs,
	    pings_user: ($off.hbctl.pings_user // null),
	    pings_kernel: ($off.hbctl.pings_kernel // null),
	    hb_per_s: $off.hbload.steady.hb_per_s, steady_s: $off.hbload.steady.seconds,
	    rtt_us: $off.hbload.steady.rtt_us,
	    cpu_us_per_hb_offload: (us_per_hb($off; "steady") | r2),
	    cpu_us_per_hb_user: (if $usr then (us_per_hb($usr; "steady") | r2) else null end),
	    user_over_offload: ratio(us_per_hb($off; "steady"); (if $usr then us_per_hb($usr; "steady") else null end)),
	    client_cpu_us_per_hb: (client_us_per_hb($off; "steady") | r2),
	    hbd_cpu_us_per_hb_offload: (hbd_us_per_hb($off; "steady") | r2),
	    machine_cpu_us_per_hb_offload: (machine_us_per_hb($off; "steady") | r2),
	    noise: noise($off),
	    machine_cpu_us_per_hb_user: (if $usr then (machine_us_per_hb($usr; "steady") | r2) else null end),
	    user: (if $usr then {connected: $usr.hbload.connected, setup_s: $usr.hbload.setup_s,
	        pings: $usr.hbload.steady.pings, pongs: $usr.hbload.steady.pongs,
	        rtt_us: $usr.hbload.steady.rtt_us, steady_s: $usr.hbload.steady.seconds,
	        client_cpu_us_per_hb: (client_us_per_hb($usr; "steady") | r2),
	        noise: noise($usr)} else null end)};
	# keepalive mode: the server CPU of its steady window per keepalive probe the server sent
	# in it (TcpExt TCPKeepAlive of the server namespace), against the CPU of the userspace path
	# per heartbeat (the tcp-user phase of this run); the drop; kernel memory: half the slab
	# delta per connection of the phase itself (both ends are in it; the server end, a poll
	# armed, holds less than the hbload end, a multishot recv armed: half is an upper bound)
	def keepalive($ka; $tu): $ka.windows.steady as $w | ($ka.hbload.connected) as $n | {
	    clients: $ka.hbload.clients, connected: $n,
	    cpu_us_per_check: (if $w.server_ns and $w.ka_probes > 0
	        then ($w.server_ns / 1000 / $w.ka_probes | r2) else null end),
	    user_cpu_us_per_hb: (if $tu then (us_per_hb($tu; "steady") | r2) else null end),
	    dead: ($ka.drop.dead // null), dead_detected: ($ka.drop.dead_detected // null),
	    detect_s: ($ka.drop.detect_s // null),
	    false_expiries: (if $ka.hbctl and $ka.drop
	        then ($ka.hbctl.user.expired_tcp - $ka.drop.dead_detected) else null end),
	    kernel_b_per_client: (if $n > 0 then ($ka.mem.slab_delta_kb * 1024 / (2 * $n) | round)
	        else null end)};
	# BEAT devices on the default TCP path: server CPU per BEAT against the PING/PONG of hbd in
	# the tcp-user phase of this run; every BEAT sent must have been taken by the verdict
	def beat($tb; $tu): $tb.windows.steady as $w | ($tb.hbload.steady.beats // 0) as $b | {
	    clients: $tb.hbload.clients, connected: $tb.hbload.connected,
	    setup_s: $tb.hbload.setup_s, beats: $b, beats_sent: ($tb.hbload.beats // null),
	    beats_kernel: ($tb.hbctl.kernel.sk_beat // null),
	    beats_user: ($tb.hbctl.user.beats_user // null),
	    expired: ($tb.hbctl.user.expired_tcp // null),
	    cpu_us_per_hb: (if $w.server_ns and $b > 0 then ($w.server_ns / 1000 / $b | r2) else null end),
	    client_cpu_us_per_hb: (if $w.client_ns and $b > 0 then ($w.client_ns / 1000 / $b | r2) else null end),
	    machine_cpu_us_per_hb: (if $w and $b > 0 then ($w.machine_ns / 1000 / $b | r2) else null end),
	    user_cpu_us_per_hb: (if $tu then (us_per_hb($tu; "steady") | r2) else null end),
	    user_over_beat: (if $tu and $w.server_ns and $b > 0
	        then ratio($w.server_ns / 1000 / $b; us_per_hb($tu; "steady")) else null end),
	    noise: noise($tb)};
	# the default TCP mode of hbctl load (--tcp user) against hbd with no BPF at all
	# (the tcp-user phase of this run), with its own ramp and storm
	def default_mode($td; $tu): {
	    clients: $td.hbload.clients, connected: $td.hbload.connected, setup_s: $td.hbload.setup_s,
	    pings: $td.hbload.steady.pings, pongs: $td.hbload.steady.pongs,
	    pings_user: ($td.hbctl.pings_user // null), pings_kernel: ($td.hbctl.pings_kernel // null),
	    hb_per_s: $td.hbload.steady.hb_per_s, steady_s: $td.hbload.steady.seconds,
	    rtt_us: $td.hbload.steady.rtt_us,
	    cpu_us_per_hb: (us_per_hb($td; "steady") | r2),
	    client_cpu_us_per_hb: (client_us_per_hb($td; "steady") | r2),
	    machine_cpu_us_per_hb: (machine_us_per_hb($td; "steady") | r2),
	    user_cpu_us_per_hb: (if $tu then (us_per_hb($tu; "steady") | r2) else null end),
	    default_over_user: (if $tu then ratio(us_per_hb($tu; "steady"); us_per_hb($td; "steady"))
	        else null end),
	    user: (if $tu then {connected: $tu.hbload.connected, setup_s: $tu.hbload.setup_s,
	        pings: $tu.hbload.steady.pings, pongs: $tu.hbload.steady.pongs,
	        rtt_us: $tu.hbload.steady.rtt_us,
	        ceiling_hb_per_s: ($tu.hbload.ceiling_hb_per_s // null)} else null end),
	    expired: ($td.hbload.expired // null),
	    ceiling_hb_per_s: ($td.hbload.ceiling_hb_per_s // null),
	    breaks_at_hb_per_s: ($td.hbload.breaks_at_hb_per_s // null),
	    steps: ($td.hbload.steps // []),
	    storm: {seconds: ($td.hbload.storm.seconds // null),
	            failures: ($td.hbload.storm.failures // null),
	            dropped: ($td.hbload.storm.dropped // null), back: ($td.hbload.storm.back // null)},
	    noise: noise($td)};
	. as $p
	| ($p["tcp-offload"] // null) as $to | ($p["tcp-user"] // null) as $tu
	| ($p["tcp-default"] // null) as $td
	| ($p["tcp-beat"] // null) as $tb
	| ($p["tcp-keepalive"] // null) as $tk
	| ($p["udp-offload"] // null) as $uo | ($p["udp-user"] // null) as $uu
	| {command: $cmd, placement: $placement, seconds: $secs,
	   machine: {wakeup_us: $floor},
	   tcp: (if $to then transport($to; $tu) else null end),
	   udp: (if $uo then transport($uo; $uu) else null end),
	   keepalive: (if $tk then keepalive($tk; $tu) else null end),
	   tcp_beat: (if $tb then beat($tb; $tu) else null end),
	   tcp_default: (if $td then default_mode($td; $tu) else null end),
	   memory: (if $to then
	      ($to.hbload.connected) as $n
	      | {rss_b_per_client: ($to.mem.steady_rss_kb * 1024 / $n | round),
	         rss_growth_b_per_client: (($to.mem.steady_rss_kb - $to.mem.ready_rss_kb) * 1024 / $n | round),
	         kernel_b_per_client: (if $tu then
	             (($tu.mem.slab_delta_kb * 1024 / (2 * $tu.hbload.connected))
	              + ($to.mem.slab_delta_kb * 1024 / $n) - ($tu.mem.slab_delta_kb * 1024 / $tu.hbload.connected)) | round
	           else ($to.mem.slab_delta_kb * 1024 / $n | round) end),
	         kernel_both_ends_b_per_client: ($to.mem.slab_delta_kb * 1024 / $n | round),
	         kernel_both_ends_user_b_per_client: (if $tu then ($tu.mem.slab_delta_kb * 1024 / $tu.hbload.connected | round) else null end)}
	    else null end),
	   ceiling: {tcp_offload_hb_per_s: ($to.hbload.ceiling_hb_per_s // null),
	             tcp_user_hb_per_s: ($tu.hbload.ceiling_hb_per_s // null),
	             tcp_offload_breaks_at: ($to.hbload.breaks_at_hb_per_s // null),
	             tcp_user_breaks_at: ($tu.hbload.breaks_at_hb_per_s // null),
	             offload_steps: [($to.hbload.steps // [])[] as $st | $st + {server_cpu_pct: null}],
	             user_steps: ($tu.hbload.steps // [])},
	   storm: {seconds: ($to.hbload.storm.seconds // null), failures: ($to.hbload.storm.failures // null),
	           dropped: ($to.hbload.storm.dropped // null), back: ($to.hbload.storm.back // null)},
	   phases: $p}' <<< "$all")

# Server and client CPU of every ramp step, from the step windows' samples.
result=$(jq '
	def steps($ph): [range(0; (.phases[$ph].hbload.steps // []) | length) as $i
	    | .phases[$ph].hbload.steps[$i] + (.phases[$ph].windows["step\($i + 1)"] as $w
	      | if $w then {server_cpu_pct: (if $w.server_ns then 100 * $w.server_ns / ($w.secs * 1e9) | round else null end),
	                    client_cpu_pct: (if $w.client_ns then 100 * $w.client_ns / ($w.secs * 1e9) | round else null end),
	                    cpu_busy_pct: ($w.cpu | map_values(.busy_pct | round))} else {} end)];
	.ceiling.offload_steps = steps("tcp-offload") | .ceiling.user_steps = steps("tcp-user")
	| if .tcp_default then .tcp_default.steps = steps("tcp-default") else . end' <<< "$result")
printf '%s\n' "$result" > "$OUT/result.json"

# RTT percentile plot: x = percentile on a "nines" scale, y = RTT. One curve per phase.
plotdata=$OUT/rtt-percentiles.dat
: > "$plotdata"
curves=()
for p in tcp-offload tcp-user tcp-default udp-offload udp-user; do
	[ -s "$OUT/$p/hist.txt" ] || continue
	awk -v name="$p" '
		/^# steady:/ { on = 1; next } /^# / { on = 0 } on && NF == 3 { hi[n] = $2; c[n] = $3; tot += $3; n++ }
		END { print "# " name; cum = 0
		      for (i = 0; i < n; i++) { cum += c[i]; q = cum / tot; if (q >= 1) q = 1 - 0.5 / tot
		                                 printf "%.9g %.6g\n", 1 / (1 - q), hi[i] / 1000.0 }
		      print ""; print "" }' "$OUT/$p/hist.txt" >> "$plotdata"
	curves+=("$p")
done
if [ ${#curves[@]} -gt 0 ] && command -v gnuplot > /dev/null; then
	plot="" i=0
	for c in "${curves[@]}"; do
		plot+="${plot:+, }'$plotdata' index $i using 1:2 with steps lw 2 title '$c'"
		i=$((i + 1))
	done
	gnuplot <<EOF
set terminal pngcairo size 900,560 font ",10"
set output '$PNG'
set title "hbeat: heartbeat RTT by percentile, steady window ($(jq -r '.tcp.clients // .udp.clients' "$OUT/result.json") clients, 30 s interval)"
set logscale xy
set xlabel "percentile"
set ylabel "RTT (ms, from the scheduled send time)"
set xtics ("50%%" 2, "90%%" 10, "99%%" 100, "99.9%%" 1000, "99.99%%" 10000, "99.999%%" 100000)
set grid
set key top left
plot $plot
EOF
fi

BENCH_MACHINE="$(uname -sr), $(nproc) vCPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)" \
	OUT=$OUT PNG=$PNG scripts/bench-doc.sh > "$DOC"
echo "bench-report: $OUT/result.json, $DOC, $PNG"
