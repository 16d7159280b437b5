#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Prints the "Peer bench: Mosquitto vs hbeat" section of docs/BENCHMARKS.md from a result.json
# of scripts/peer-bench.sh (default docs/peer-result.json). peer-bench.sh puts it into the doc
# after a run; scripts/bench-doc.sh prints it again when it rewrites the doc.
#
#   scripts/peer-bench-doc.sh [RESULT.json]
#   scripts/peer-bench-doc.sh --splice DOC [RESULT.json]   replace the section in DOC (or append)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --splice ]; then
	doc=$2
	shift 2
	sec=$(mktemp)
	"$0" "$@" > "$sec"
	# the section runs from its heading to the next level-2 heading or the end
	awk -v secfile="$sec" '
		function put() { while ((getline l < secfile) > 0) print l; done = 1 }
		/^## / { if (skip) { skip = 0; print "" }; if ($0 == "## Peer bench: Mosquitto vs hbeat") { put(); skip = 1; next } }
		!skip { print }
		END { if (!done) { print ""; put() } }' "$doc" > "$doc.tmp"
	mv "$doc.tmp" "$doc"
	rm -f "$sec"
	exit 0
fi

R=${1:-docs/peer-result.json}
[ -s "$R" ] || { echo "peer-bench-doc: $R missing" >&2; exit 1; }
q() { jq -r "$1" "$R"; }
# a figure, or n/a where the run has none
v() { jq -r "(try ($1) catch null) as \$x | if \$x == null then \"n/a\" else \$x end" "$R"; }

modes=$(q '.hbeat | ["user", "user-loaded", "kernel", "beat", "user-beat", "keepalive", "mqtt-user", "mqtt-kernel"] as $o
	| ([$o[] as $m | select(has($m)) | $m] + (keys - $o)) | join(" ")')
has_mq=$(q 'if .mosquitto then 1 else 0 end')

cat <<EOF
## Peer bench: Mosquitto vs hbeat

The same TCP heartbeat load, one heartbeat per interval on every connection, against a plain
MQTT broker and against hbeat's TCP modes, alternated in one sitting. Produced by
\`scripts/peer-bench.sh\` (\`make peer-bench\`); this section is printed from its
\`result.json\` (copied to \`docs/peer-result.json\`) by \`scripts/peer-bench-doc.sh\`.

| | |
|---|---|
| command | \`$(q .command)\` |
| date | $(q .date) |
| connections, interval | $(q .conns), $(q .interval_s) s (a heartbeat per connection per interval) |
| rounds, steady window | $(q .rounds), $(q .steady_s) s each |
| MQTT client | $(q '.mqtt_client | if . == "hbload" then "hbload --proto mqtt (the same program as for hbeat)" elif . == "tool" then "build/tools/mqttload (tools/mqttload.c: one epoll thread; a different client from the one hbeat is measured with)" else . end') |
| binaries built from | $(q '.build_commit // "n/a"') (\`git describe\` of the tree \`BUILD\` is in) |
| run time | $(q .seconds) s |

### Results (medians of the rounds)

| server | server CPU µs / hb | machine CPU µs / hb | client CPU µs / hb | CPU 1 (split) µs / hb | p50 / p99 RTT µs | hb/s | all answered | Mosquitto / this, server CPU (median of per-round ratios) |
|---|---|---|---|---|---|---|---|---|
EOF
row() { # JQ-PATH LABEL RATIO
	printf '| %s | %s | %s | %s | %s | %s / %s | %s | %s | %s |\n' "$2" \
		"$(v "$1.cpu_us_per_hb")" "$(v "$1.machine_cpu_us_per_hb")" \
		"$(v "$1.client_cpu_us_per_hb")" "$(v "$1.split_cpu_us_per_hb")" \
		"$(v "$1.rtt_us.p50")" "$(v "$1.rtt_us.p99")" "$(v "$1.hb_per_s")" \
		"$(v "$1.all_answered")" "$3"
}
[ "$has_mq" = 1 ] && row .mosquitto "Mosquitto $(q '.mosquitto_version // ""')" "1"
for m in $modes; do
	case $m in
	user) label="hbeat user (hbd --no-offload)" ;;
	user-loaded) label="hbeat user (hbctl load --tcp user, default)" ;;
	kernel) label="hbeat kernel (hbctl load --tcp kernel)" ;;
	keepalive) label="hbeat keepalive (hbctl load --tcp keepalive)" ;;
	beat) label="hbeat BEAT frames, the verdict takes them (hbctl load --tcp kernel; hbload --beat)" ;;
	user-beat) label="hbeat BEAT frames, hbd takes them (hbd --no-offload; hbload --beat)" ;;
	mqtt-user) label="hbd as MQTT endpoint, hbd answers (--no-offload --mqtt-port)" ;;
	mqtt-kernel) label="hbd as MQTT endpoint, the verdict answers (hbctl load --tcp kernel --mqtt-port)" ;;
	*) label="hbeat $m ($(q ".hbeat[\"$m\"] | \"\(.mode), hbd \(.hbd_args)\""))" ;;
	esac
	row ".hbeat[\"$m\"]" "$label" "$(v ".hbeat[\"$m\"].mosquitto_over_this.cpu_median")×"
done

cat <<EOF

Per round (server CPU µs per heartbeat; in brackets the ratio Mosquitto / this of the same round):

| server | $(q '[range(1; .rounds + 1) | "round \(.)"] | join(" | ")') |
|---|$(q '[range(1; .rounds + 1) | "---"] | join("|")')|
EOF
[ "$has_mq" = 1 ] && printf '| Mosquitto | %s |\n' "$(q '[.mosquitto.rounds | sort_by(.round)[] | "\(.cpu_us_per_hb)"] | join(" | ")')"
for m in $modes; do
	printf '| %s | %s |\n' "$m" "$(jq -r --arg m "$m" '.hbeat[$m] as $x | [$x.rounds | sort_by(.round)[]
		| .round as $r | "\(.cpu_us_per_hb)" + (($x.mosquitto_over_this.per_round // []
		| map(select(.round == $r)) | first) | if . then " (\(.cpu)×)" else "" end)] | join(" | ")' "$R")"
done

cat <<EOF

Noise per run, in % of one CPU: other processes' CPU time in the window (those alive at both
ends; "+ reaped" is what their children that ended in the window used over their whole life),
the higher hypervisor steal of the two CPUs, and the 1-minute load average at the start. Figures
from a window with other work on the machine are not comparable:

| server | $(q '[range(1; .rounds + 1) | "round \(.)"] | join(" | ")') |
|---|$(q '[range(1; .rounds + 1) | "---"] | join("|")')|
EOF
noise() { jq -r "[$1.rounds | sort_by(.round)[] | \"other \(.other_cpu_pct) % + reaped \(.other_reaped_cpu_pct) %, steal \(.steal_pct) %, load \(.load1)\"] | join(\" | \")" "$R"; }
[ "$has_mq" = 1 ] && printf '| Mosquitto | %s |\n' "$(noise .mosquitto)"
for m in $modes; do
	printf '| %s | %s |\n' "$m" "$(noise ".hbeat[\"$m\"]")"
done

# the targets: the default TCP mode (user-loaded: hbctl load --tcp user) >= 1.5x less server CPU than Mosquitto, keepalive >= 3x
judge() { # MODE FACTOR
	jq -r --arg m "$1" --argjson f "$2" '.steady_s as $w
		| ([(.mosquitto // empty), .hbeat[] | .rounds[] | select(.machine_cpu_us_per_hb != null)
		    | .machine_cpu_us_per_hb * .hb / 1e6 / $w | select(. >= 1.8)] | length) as $sat
		| .hbeat[$m].mosquitto_over_this.cpu_median as $r
		| if $r == null then "not measured in this run"
		  elif $sat > 0 then "not judged: the machine was saturated (below) (\($r)×)"
		  elif (.hbeat[$m].all_answered | not) or (.mosquitto.all_answered | not) then
		    "not judged: in some round not every heartbeat was answered or a connection was lost (\($r)×)"
		  elif $r >= $f then "**yes**: \($r)× (median of the rounds'"'"' ratios)"
		  else "**no**: \($r)× (median of the rounds'"'"' ratios)" end' "$R"
}
# keepalive mode out of this run: the figures of the last run that had it, if it is kept
ka_earlier() {
	local f=docs/peer-result-keepalive.json
	[ "$(q '.hbeat.keepalive // null')" = null ] && [ -s "$f" ] || return 0
	jq -r '"; in the run of \(.date) (docs/peer-result-keepalive.json, `\(.command)`): \(.hbeat.keepalive.cpu_us_per_hb) vs \(.mosquitto.cpu_us_per_hb) µs, \(.hbeat.keepalive.mosquitto_over_this.cpu_median)×"' "$f"
}
cat <<EOF

### Targets

| target | this run | met |
|---|---|---|
| default TCP mode (\`--tcp user\`): ≥ 1.5× less server CPU per heartbeat than Mosquitto | $(v '.hbeat["user-loaded"].cpu_us_per_hb') vs $(v '.mosquitto.cpu_us_per_hb') µs | $(judge user-loaded 1.5) |
| \`--tcp kernel\` (the sockmap verdict answers): ≥ 1.5× | $(v '.hbeat.kernel.cpu_us_per_hb') vs $(v '.mosquitto.cpu_us_per_hb') µs | $(judge kernel 1.5) |
| \`--tcp kernel\` with devices that heartbeat with BEAT frames (answered by TCP's ACK, no PONG): ≥ 1.5× | $(v '.hbeat.beat.cpu_us_per_hb') vs $(v '.mosquitto.cpu_us_per_hb') µs | $(judge beat 1.5) |
| keepalive mode: ≥ 3× less server CPU per liveness check than Mosquitto per heartbeat | $(v '.hbeat.keepalive.cpu_us_per_hb') vs $(v '.mosquitto.cpu_us_per_hb') µs | $(judge keepalive 3)$(ka_earlier) |
| (for comparison) hbd answering with no BPF loaded (\`--no-offload\`) | $(v '.hbeat.user.cpu_us_per_hb') vs $(v '.mosquitto.cpu_us_per_hb') µs | $(jq -r '.hbeat.user.mosquitto_over_this.cpu_median // "n/a"' "$R")× |

$(jq -r --argjson w "$(q .steady_s)" '[(.mosquitto // empty), .hbeat[] | .rounds[]
	| select(.machine_cpu_us_per_hb != null) | .machine_cpu_us_per_hb * .hb / 1e6 / $w] as $b
	| ($b | map(select(. >= 1.8)) | length) as $n
	| if $n > 0 then "**The machine was saturated**: in \($n) of \($b | length) runs both CPUs together were at least 90% busy over the window (\($b | min * 100 | round / 100)–\($b | max * 100 | round / 100) CPUs busy in all runs). The server figures then hold whatever else ran (the noise table) and a starved server falls behind, so no target is judged from them." else empty end' "$R")

$(q '.hbeat.keepalive.kind // empty | if . == "app" then "**Keepalive mode was measured with a client that still sent PINGs** (its WELCOME said keepalive, the client PINGed anyway and hbd answered them): its figures are per PING, not per keepalive probe, and say nothing about the target." else empty end')

### Reading it

- Every server here pays the same TCP work per heartbeat at least once: the PING's (PINGREQ's)
  receive, the answer's send and the ACKs. What differs is what is added on top: Mosquitto's
  and hbd's userspace loop (a wakeup, a receive and a send syscall or io_uring completion per
  heartbeat), or on the sockmap path the verdict and a kworker work item that sends each PONG
  with \`tcp_sendmsg\` (the verdict cannot send from softirq). A BEAT has no answer frame:
  the server's TCP ACKs it as it arrives (not delayed: the beat rows' RTT, the client
  kernel's smoothed RTT those ACKs refresh, would hold a delayed ACK's 40 ms) and the
  verdict, or hbd, records it; there is no PONG to send, so no kworker, no send syscall and
  no PONG to receive on the client. Keepalive mode has no application frame at all: per
  check, the server's probe and the device kernel's ACK.
- A figure from a window in which the noise table shows other work, or in which not every
  heartbeat was answered, is not a measurement of the server: compare rounds, not single runs.

### Method

- **Where**: two network namespaces (\`hbpr-srv\`, \`hbpr-cli\`) joined by a veth pair
  (\`scripts/netns.sh\`); the server in the first, the load client in the second, 16 client
  source addresses. Per-namespace settings of \`scripts/tune.sh netns\` (deep accept queues,
  reno on both ends); the host-wide ones only with \`--tune\` (this run: they were
  $(q 'if (.command | test("--tune")) then "applied" else "not applied (shared machine)" end')).
- **Servers**: each run starts its server afresh and ends it by PID. Mosquitto with a config
  the script writes (one listener on the server address, anonymous, no persistence, no
  connection logging, \`max_connections -1\`), single-threaded as it is. hbd with bench.sh's
  options (\`--max-per-source 0 --accept-rate 0\`, \`--interval\` the heartbeat interval):
  \`user\` is \`hbd --no-offload\` with no BPF program loaded at all (bench.sh's userspace
  phase); \`kernel\` and \`keepalive\` are \`hbctl load --tcp kernel|keepalive\` (XDP on the
  server veth, sock_ops, and for \`kernel\` the sockmap), then hbd.
- **Client and load**: \`hbload --proto tcp\` for hbeat (HELLO with a derived key, then a PING
  per interval on a fixed schedule; in keepalive mode no PINGs once the WELCOME carries the
  KEEPALIVE flag); for Mosquitto the MQTT client named above (CONNECT, then a PINGREQ per
  interval on a fixed schedule: hbload's with its jitter, mqttload's with the connections'
  phases spread evenly over the interval). RTT runs from the scheduled send time to the answer.
  Keepalive mode has no application answer: its RTT column is the client kernel's smoothed RTT
  of each connection (\`ss -ti\` at the window's end; p50/p99 over connections), which probe
  ACKs do not necessarily refresh, so it is not comparable to the others' per-heartbeat RTT.
  The beat modes (\`hbload --beat\`: a BEAT instead of each PING) have no answer frame either:
  their RTT column is the same \`ss\` figure, which each BEAT's ACK refreshes (an average
  with 1/8 weight per sample, so it is still close to the setup's RTTs after few samples).
  A BEAT counts as answered when the server took it: *all answered* there means every
  connection stayed up, none expired, and the server's count of BEATs it took (the verdict's
  \`sk_beat\` from \`hbctl stats\`, hbd's \`beats_user\`) reached the client's count of
  BEATs sent.
- **Setup and slack**: every client connects at $(q '.connect_rate // "n/a"') connections a second (Mosquitto
  2.0 listens with a backlog of 100; an unpaced burst of 18,000 connects is partly dropped and
  retried). A server drops a device after $(q '.slack_intervals // "n/a"') intervals of silence (hbd
  \`--expiry-mult\`; the MQTT client's keep alive is that / 1.5, as Mosquitto disconnects after
  1.5 keep alives), so that a stall of the shared machine ends no connection. Keepalive mode
  keeps hbd's probe timing (\`--keepalive-probes\` 2).
- **Order**: round r runs the servers in the order of \`--modes\` rotated by r - 1, so no
  server always runs first or after the same neighbour.
- **Placement**: setup on both CPUs; from the end of setup the server on CPU 1 (every thread
  pinned; the server veth's receive path steered there by RPS, so the sockmap verdict and the
  kworker that sends its PONGs run there), the client on CPU 0 (pinned, its receive path
  there).
- **Heartbeats**: PING/PONG and MQTT: the PINGs (PINGREQs) the client scheduled inside the
  steady window; *all answered* means every one got its answer and every connection was up.
  Keepalive: a heartbeat is a liveness check, one connection for one interval (the figures are
  per connection per interval, as Mosquitto's are per PINGREQ); the probes the server's kernel
  sent in the window are counted beside it (\`probes_per_check\`, \`cpu_us_per_probe\` in
  result.json: the kernel may send a second probe soon after one whose ACK came back just
  before its timer fired) from \`TcpExt TCPKeepAlive\` of
  the server namespace's \`/proc/net/netstat\`, which is per namespace: the client namespace's
  count is recorded beside it, \`probes_cli\`); *all answered* means every connection was still
  up at the end, none expired, and the server sent at least 90% of one probe per connection
  per interval. A liveness check of keepalive mode is the server's probe and the device's ACK;
  the client's kernel probes too, and that probe and the server kernel's ACK are in the server
  CPU figure.
- **Server CPU per heartbeat** (\`cpu_us_per_hb\`): over the steady window (the client's
  \`window_start\`/\`window_end\` events), both CPUs' busy time from \`/proc/stat\` (user + nice +
  system + irq + softirq; iowait, where io_uring waits show, is idle) minus the client
  process's own CPU time (utime + stime of all its threads from \`/proc/PID/stat\`, which is
  what its \`getrusage(RUSAGE_SELF)\` returns), divided by the heartbeats of the window. What
  it holds besides the server: every kernel thread (the sockmap kworker, ksoftirqd), softirq
  work that ran while no client thread was on the CPU (this kernel has no IRQ time
  accounting: softirq work is charged to whichever task it interrupts, so the client's
  receive processing lands in the client's figure only when it interrupts the client), the
  sampler's few reads at the window's edges, and any other task of the machine (the noise
  table). The **machine** figure is both CPUs' busy time per heartbeat. The **CPU 1** figure is
  the split placement's attribution (bench.sh's method without its XDP correction): the
  server's CPU alone.
EOF
