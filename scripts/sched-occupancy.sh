#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Who had one CPU, from a scheduler trace: reads a perf.data recorded with
#   perf record -a -e sched:sched_switch -e workqueue:workqueue_execute_start -- sleep S
# (scripts/fleet-login-ab.sh --trace records one) and prints one JSON line:
#   by_task         seconds on CPU in the window per task name and priority ("comm@prio";
#                   prio as the kernel prints it: 120 + nice, below 100 real-time)
#   longest_wait    for the tasks whose name starts with WAITER: the longest time one of them
#                   stayed runnable (switched out in state R) before it ran again, and when
#   works_per_s     workqueue items of FUNCTION started on the CPU, a count per second
# Times are seconds from the trace's first event. Needs perf (linux-perf).
#
#   scripts/sched-occupancy.sh PERF_DATA CPU [FROM_S TO_S [WAITER [FUNCTION]]]
#       (defaults: the whole trace, WAITER kworker/CPU:, FUNCTION sk_psock_backlog)
set -euo pipefail
USAGE="usage: scripts/sched-occupancy.sh PERF_DATA CPU [FROM_S TO_S [WAITER [FUNCTION]]]"
[ $# -ge 2 ] || { echo "$USAGE" >&2; exit 2; }
DATA=$1 CPU=$2 FROM=${3:-0} TO=${4:-1e9} WAITER=${5:-kworker/$2:} FN=${6:-sk_psock_backlog}
[[ $CPU =~ ^[0-9]+$ ]] || { echo "sched-occupancy: CPU is a number, not '$CPU'" >&2; exit 2; }
[ -r "$DATA" ] || { echo "sched-occupancy: cannot read $DATA" >&2; exit 1; }
command -v perf > /dev/null || { echo "sched-occupancy: needs perf" >&2; exit 1; }
perf script -i "$DATA" -F cpu,time,event,trace 2> /dev/null | awk -v cpu="$(printf '[%03d]' "$CPU")" \
	-v from="$FROM" -v to="$TO" -v waiter="$WAITER" -v fn="$FN" '
function field(line, key,   i) { # value of key=VALUE in line
	i = index(line, key "=")
	if (!i) return ""
	line = substr(line, i + length(key) + 1)
	sub(/ .*/, "", line)
	return line
}
{
	t = $2; sub(":", "", t); t += 0
	if (t0 == "") t0 = t
	t -= t0
	if ($1 != cpu) next
}
/sched:sched_switch:/ {
	if (cur != "" && t > from && last < to) {
		a = last > from ? last : from; b = t < to ? t : to
		if (b > a) on[cur] += b - a
	}
	prev = field($0, "prev_comm"); state = field($0, "prev_state"); next_ = field($0, "next_comm")
	pid = field($0, "next_pid")
	if (index(prev, waiter) == 1 && state ~ /^R/) waiting[field($0, "prev_pid")] = t
	if (pid in waiting) {
		w = t - waiting[pid]
		if (waiting[pid] >= from && waiting[pid] < to && w > longest) { longest = w; at = waiting[pid]; who = next_ }
		delete waiting[pid]
	}
	cur = next_ "@" field($0, "next_prio"); last = t
	next
}
/workqueue:workqueue_execute_start:/ && $NF == fn && t >= from && t < to { works[int(t)]++ }
END {
	printf "{\"cpu\":%d,\"from_s\":%s,\"to_s\":%s,\"by_task\":{", substr(cpu, 2, 3) + 0, from, (to > last ? last : to)
	n = 0
	for (k in on) if (on[k] >= 0.001) { printf "%s\"%s\":%.3f", (n++ ? "," : ""), k, on[k] }
	printf "},\"longest_wait\":{\"task\":\"%s\",\"s\":%.3f,\"from_s\":%.3f}", who, longest, at
	printf ",\"function\":\"%s\",\"works_per_s\":[", fn
	for (s = int(from); s <= int(last < to ? last : to); s++) printf "%s%d", (s > int(from) ? "," : ""), works[s] + 0
	printf "]}\n"
}' | jq -c '.by_task |= (to_entries | sort_by(-.value) | from_entries)'
