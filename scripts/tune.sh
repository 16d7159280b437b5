#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Kernel settings the scale benchmark needs, applied and reverted exactly.
#
#   tune.sh apply            host-wide settings; the old values go to the state file first
#   tune.sh netns SRV CLI    settings inside the benchmark's two namespaces (they vanish with them)
#   tune.sh revert           restore every host-wide value the state file recorded, then delete it
#   tune.sh show             the values now
#
# apply refuses to run twice (the state file would lose the original values); revert is safe
# to call when nothing was applied. State file: $HBEAT_TUNE_STATE (default /run/hbeat-tune.state).
set -euo pipefail

STATE=${HBEAT_TUNE_STATE:-/run/hbeat-tune.state}

# Host-wide: name, value, why. Only what the benchmark measurably needs.
HOST=(
	# a namespace created after this gets its own established-hash of this size; the host's
	# 262,144 buckets would hold 1M sockets (both ends of 500k connections) in chains of 4+
	"net.ipv4.tcp_child_ehash_entries|1048576|per-netns TCP hash sized for 1M sockets"
	# 1M sockets whose buffers the kernel has not reclaimed yet must not push TCP into memory
	# pressure (it then shrinks windows and drops): pages, 2/3/4 GiB
	"net.ipv4.tcp_mem|524288 786432 1048576|no TCP memory pressure with 1M sockets"
	# the XDP program runs on the CPU that sent the packet (veth has no interrupt): its run
	# time is read from the kernel's per-program counters and charged to the server
	"kernel.bpf_stats_enabled|1|per-program run time, to charge XDP to the server"
)

# Deferred softirq work runs in ksoftirqd, a plain SCHED_OTHER thread: behind hbd's and
# hbload's ~55 threads it waits long enough for a veth ring (256 packets, no interrupt to
# push back) to overflow, and the dropped SYNs and segments come back as 1 s retransmissions.
# A NIC's interrupt would not wait: SCHED_FIFO 10 for ksoftirqd while the benchmark runs.
KSOFTIRQD_PRIO=10

# Per namespace: they die with the namespace, so nothing to revert.
SRV=(
	# 29 listeners take 20k+ connects/s in bursts: a short accept queue would drop SYNs
	"net.core.somaxconn|65535|deep accept queues for connect bursts"
	"net.ipv4.tcp_max_syn_backlog|65535|half-open connections during a 500k connect burst"
	# a heartbeat connection has one 16-byte segment in flight at most: reno does the least
	# work per ACK (bbr keeps a model and pacing state per socket)
	"net.ipv4.tcp_congestion_control|reno|least per-ACK work for one-segment flows"
)
CLI=(
	# 16 source addresses x 64k ports hold 500k connections to one server port
	"net.ipv4.ip_local_port_range|1024 65535|every port for 500k client connections"
	"net.ipv4.tcp_congestion_control|reno|the same congestion control on both ends"
)

need_root() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "tune.sh: needs root (sysctl)" >&2
		exit 1
	fi
}

set_list() { # set_list NETNS|'' ENTRY...
	local ns=$1 e key val
	shift
	for e in "$@"; do
		key=${e%%|*}
		val=${e#*|}
		val=${val%%|*}
		if [ -n "$ns" ]; then
			ip netns exec "$ns" sysctl -qw "$key=$val"
		else
			sysctl -qw "$key=$val"
		fi
	done
}

case ${1:-} in
apply)
	need_root
	if [ -e "$STATE" ]; then
		echo "tune.sh: $STATE exists: settings already applied (run: tune.sh revert)" >&2
		exit 1
	fi
	umask 077
	{
		for e in "${HOST[@]}"; do
			key=${e%%|*}
			printf '%s|%s\n' "$key" "$(sysctl -n "$key" | tr '\t' ' ')"
		done
		for p in $(pgrep '^ksoftirqd/'); do
			printf 'chrt:%s|%s %s\n' "$p" "$(chrt -p "$p" | sed -n 's/.*policy: SCHED_\([A-Z]*\).*/\1/p' | tr A-Z a-z)" \
				"$(chrt -p "$p" | sed -n 's/.*priority: //p')"
		done
	} > "$STATE.tmp"
	mv "$STATE.tmp" "$STATE"
	set_list "" "${HOST[@]}"
	for p in $(pgrep '^ksoftirqd/'); do
		chrt -f -p $KSOFTIRQD_PRIO "$p"
	done
	;;
netns)
	need_root
	[ $# -eq 3 ] || { echo "usage: tune.sh netns SRV_NS CLI_NS" >&2; exit 2; }
	set_list "$2" "${SRV[@]}"
	set_list "$3" "${CLI[@]}"
	;;
revert)
	need_root
	[ -e "$STATE" ] || exit 0
	while IFS='|' read -r key val; do
		case $key in
		chrt:*)
			set -- $val # policy (other, fifo, ...) and priority
			chrt "--$1" -p "$2" "${key#chrt:}" 2>/dev/null ||
				echo "tune.sh: could not restore the policy of ksoftirqd ${key#chrt:}" >&2
			;;
		*) sysctl -qw "$key=$val" || echo "tune.sh: could not restore $key=$val" >&2 ;;
		esac
	done < "$STATE"
	rm -f "$STATE"
	;;
show)
	for e in "${HOST[@]}"; do
		key=${e%%|*}
		printf '%-40s %s\n' "$key" "$(sysctl -n "$key")"
	done
	for p in $(pgrep '^ksoftirqd/'); do
		printf '%-40s %s\n' "ksoftirqd pid $p" "$(chrt -p "$p" | tr '\n' ' ')"
	done
	;;
*)
	echo "usage: tune.sh apply | netns SRV_NS CLI_NS | revert | show" >&2
	exit 2
	;;
esac
