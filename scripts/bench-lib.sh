# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Helpers for scripts/bench.sh (sourced): CPU and memory snapshots, the sampler that takes one
# at every event hbload reports, and the CPU placement of server and client.
#
# How CPU is attributed (docs/BENCHMARKS.md, "Method"): both veths run threaded NAPI, so the
# receive path of each side runs in a kernel thread of its own instead of in the softirq of
# whichever task sent the packet. Every task's CPU time is read from
# /proc/PID/task/TID/schedstat (nanoseconds the scheduler ran it, not 4 ms ticks) and
# grouped: the server is hbd's threads + the server veth's NAPI thread(s) + the per-CPU
# kworkers (where sockmap sends its redirected PONGs); the client is hbload's threads + the
# client veth's NAPI thread. /proc/stat per CPU is recorded beside it as a cross-check.

# Called with: SRV_IF, CLI_IF set; HBD_PID, HBL_PID set when those run; SAMPLES the output.

# One JSON line: the event, the time, /proc/stat per CPU, CPU ns per task group, slab and hbd
# memory. Runs in ~20 ms (a walk over every thread's schedstat).
bench_snapshot() {
	local ev=$1 t=$EPOCHREALTIME d comm rt _ grp tgid
	local -A ns=()
	for d in /proc/[0-9]*/task/[0-9]*; do
		# threads come and go during the walk: a vanished one is skipped quietly
		{ read -r rt _ < "$d/schedstat" && read -r comm < "$d/comm"; } 2>/dev/null || continue
		tgid=${d#/proc/}
		tgid=${tgid%%/*}
		if [ "$tgid" = "${HBD_PID:-x}" ]; then
			grp=hbd
		elif [ "$tgid" = "${HBL_PID:-x}" ]; then
			grp=hbload
		else
			case $comm in
			"napi/$SRV_IF-"*) grp=napi_srv ;;
			"napi/$CLI_IF-"*) grp=napi_cli ;;
			kworker/[0-9]*:*)
				grp=${comm#kworker/}
				grp=kworker${grp%%:*}
				;;
			ksoftirqd/*) grp=ksoftirqd ;;
			*) grp=other ;;
			esac
		fi
		ns[$grp]=$((${ns[$grp]:-0} + rt))
	done
	local nsj="" k
	for k in "${!ns[@]}"; do
		nsj+="${nsj:+,}\"$k\":${ns[$k]}"
	done
	local cpuj="" line
	while read -r line; do
		set -- $line
		case $1 in
		cpu[0-9]*) cpuj+="${cpuj:+,}\"$1\":[$2,$3,$4,$5,$6,$7,$8,$9]" ;;
		*) break ;;
		esac
	done < <(tail -n +2 /proc/stat)
	local slab rss=0 anon=0
	slab=$(awk '/^(SReclaimable|SUnreclaim):/ { s += $2 } END { print s }' /proc/meminfo)
	if [ -n "${HBD_PID:-}" ] && [ -r "/proc/$HBD_PID/status" ]; then
		rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$HBD_PID/status")
		anon=$(awk '/^RssAnon:/ { print $2 }' "/proc/$HBD_PID/status")
	fi
	printf '{"ev":"%s","t":%s,"cpu":{%s},"ns":{%s},"slab_kb":%s,"hbd_rss_kb":%s,"hbd_anon_kb":%s}\n' \
		"$ev" "$t" "$cpuj" "$nsj" "$slab" "${rss:-0}" "${anon:-0}" >> "$SAMPLES"
}

# Reads hbload's --events lines ("SECONDS EVENT ARGS") and snapshots at each; returns at EOF.
bench_sampler() { # FIFO
	local s ev
	while read -r s ev; do
		bench_snapshot "$ev"
	done < "$1"
}

# Threaded NAPI on a veth and its NAPI threads pinned to a CPU list (empty: unpinned). NAPI
# instances (and so their threads) are recreated when an XDP program comes or goes: call it
# again after hbctl load/unload.
bench_napi() { # NETNS IFACE CPUS
	local p
	ip netns exec "$1" sh -c "echo 1 > /sys/class/net/$2/threaded"
	[ -n "$3" ] || return 0
	for p in $(pgrep "^napi/$2-"); do
		taskset -pc "$3" "$p" >/dev/null
	done
}

# Kernel slab caches (name, bytes in use) for a per-cache breakdown of kernel memory.
bench_slabinfo() { # FILE
	awk 'NR > 2 { printf "%s %d\n", $1, $2 * $4 }' /proc/slabinfo > "$1"
}

# Waits until the server namespace has fewer than N TCP sockets (teardown of a phase's
# connections takes seconds at 500k), at most S seconds.
bench_wait_sockets() { # NETNS N S
	local i inuse
	for ((i = 0; i < $3 * 10; i++)); do
		inuse=$(ip netns exec "$1" awk '/^TCP:/ { print $3 }' /proc/net/sockstat)
		[ "${inuse:-0}" -lt "$2" ] && return 0
		sleep 0.1
	done
	echo "bench: $inuse TCP sockets still open in $1 after $3 s" >&2
	return 1
}
