# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Helpers for scripts/bench.sh (sourced): CPU and memory snapshots, the sampler that takes one
# at every event hbload reports, and the CPU placement of server and client.
#
# How CPU is attributed (docs/BENCHMARKS.md, "Method"): the server owns CPU 1 (hbd pinned
# there, the server veth's receive path steered there by RPS, so the sockmap verdict and its
# kworker run there too) and the client CPU 0; /proc/stat gives each CPU's busy time. veth has
# no interrupt: its NAPI poll, and so an XDP program, runs on the CPU that transmitted, i.e. the
# server's XDP program on the client's CPU. Its run time is counted exactly (bpf_stats) and
# moved to the server. Per-task run times (/proc/PID/task/TID/schedstat) are recorded too, to
# see who used the CPU.

# Called with: SRV_IF, CLI_IF set; HBD_PID, HBL_PID (and NATS_PID with bench.sh --nats) set
# when those run; XDP_ID the server's XDP program when loaded; SAMPLES the output.

# One JSON line: the event, the time, /proc/stat per CPU, CPU ns per task group, slab and hbd
# memory, the server namespace's keepalive probes. Runs in ~20 ms (a walk over every thread's schedstat).
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
		elif [ "$tgid" = "${NATS_PID:-x}" ]; then
			grp=nats # bench.sh --nats: fleet mode's NATS server, part of the server
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
	# TcpExt TCPKeepAlive: keepalive probes sent, counted per network namespace (the netns
	# of hbd, whose /proc/PID/net is its own): the liveness checks of --tcp keepalive
	# and the server veth's transmitted and dropped packets (a full ring on the way out)
	local ka=0 tx="0 0"
	if [ -n "${HBD_PID:-}" ] && [ -r "/proc/$HBD_PID/net/netstat" ]; then
		ka=$(awk '/^TcpExt:/ { if (!h) { for (i = 1; i <= NF; i++) n[i] = $i; h = 1 }
			else for (i = 1; i <= NF; i++) if (n[i] == "TCPKeepAlive") print $i }' \
			"/proc/$HBD_PID/net/netstat")
		tx=$(awk -v d="$SRV_IF:" '$1 == d { print $11, $13 }' "/proc/$HBD_PID/net/dev")
	fi
	set -- ${tx:-0 0}
	local xdp=0
	if [ -n "${XDP_ID:-}" ]; then
		xdp=$(bpftool prog show id "$XDP_ID" --json 2>/dev/null | jq '.run_time_ns // 0')
	fi
	printf '{"ev":"%s","t":%s,"cpu":{%s},"ns":{%s},"xdp_ns":%s,"tcp_ka":%s,"srv_tx":%s,"srv_txd":%s,"slab_kb":%s,"hbd_rss_kb":%s,"hbd_anon_kb":%s}\n' \
		"$ev" "$t" "$cpuj" "$nsj" "${xdp:-0}" "${ka:-0}" "${1:-0}" "${2:-0}" "$slab" "${rss:-0}" "${anon:-0}" >> "$SAMPLES"
}

# Reads hbload's --events lines ("SECONDS EVENT ARGS") and snapshots at each; returns at EOF.
# HOOK (optional) is called with each event after its snapshot.
bench_sampler() { # FIFO [HOOK]
	local s ev
	while read -r s ev; do
		bench_snapshot "$ev"
		[ -z "${2:-}" ] || "$2" $ev
	done < "$1"
}

# RPS: a veth's receive path (after its NAPI poll and XDP) on the CPUs of a hex mask (0: off).
bench_rps() { # NETNS IFACE MASK
	ip netns exec "$1" sh -c "echo $3 > /sys/class/net/$2/queues/rx-0/rps_cpus"
}

# The id of the XDP program attached to a device (empty if none).
bench_xdp_id() { # NETNS IFACE
	ip -n "$1" -d link show dev "$2" | sed -n 's/.*prog\/xdp id \([0-9]*\).*/\1/p' | head -n 1
}

# Kernel slab caches (name, bytes in use) for a per-cache breakdown of kernel memory.
bench_slabinfo() { # FILE
	awk 'NR > 2 { printf "%s %d\n", $1, $2 * $4 }' /proc/slabinfo > "$1"
}

# Waits until the kernel has given back the TCP sockets of the last phase (TCP and TCPv6 slab
# objects in use below N; they are freed after an RCU grace period, seconds after the close at
# 500k), at most S seconds: otherwise the next phase reuses them and its slab delta reads low.
bench_wait_slab() { # N S
	local i n
	for ((i = 0; i < $2 * 10; i++)); do
		n=$(awk '$1 == "TCP" || $1 == "TCPv6" { s += $2 } END { print s + 0 }' /proc/slabinfo)
		[ "$n" -lt "$1" ] && return 0
		sleep 0.1
	done
	echo "bench: $n TCP socket objects still allocated after $2 s" >&2
	return 1
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
