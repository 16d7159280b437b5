#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Two network namespaces joined by a veth pair, for the demo, the end-to-end test and the
# benchmark: NAME-srv holds the server side (hbctl, hbd), NAME-cli the load generator.
#
#   netns.sh up NAME [NSRC]   create; NSRC extra client source addresses 10.77.1.1.. (default 16)
#   netns.sh down NAME        delete everything `up` made (safe to call twice)
#   netns.sh env NAME         print shell assignments for the names and addresses below
#
# Server 10.77.0.1/24 and fd77::1/64 on NAME-s; client 10.77.0.2/24 and fd77::2/64 (plus the
# extra sources) on NAME-c. Interface names are NAME-s / NAME-c, so NAME is at most 13 chars.
set -euo pipefail

cmd=${1:?usage: netns.sh up|down|env NAME [NSRC]}
name=${2:?usage: netns.sh up|down|env NAME [NSRC]}
nsrc=${3:-16}
BUILD=${BUILD:-build}
srv=$name-srv cli=$name-cli sif=$name-s cif=$name-c

if [ ${#name} -gt 13 ]; then
	echo "netns.sh: NAME '$name' is longer than 13 characters (interface names max 15)" >&2
	exit 1
fi

case $cmd in
env)
	cat <<ENV
SRV_NS=$srv CLI_NS=$cli SRV_IF=$sif CLI_IF=$cif
SRV_ADDR=10.77.0.1 CLI_ADDR=10.77.0.2 SRV_ADDR6=fd77::1 CLI_ADDR6=fd77::2
ENV
	;;
up)
	for n in "$srv" "$cli"; do
		if ip netns list | grep -qw "^$n"; then
			echo "netns.sh: namespace $n already exists (run: scripts/netns.sh down $name)" >&2
			exit 1
		fi
	done
	ip netns add "$srv"
	ip netns add "$cli"
	ip link add "$sif" netns "$srv" type veth peer name "$cif" netns "$cli"
	ip -n "$srv" link set lo up
	ip -n "$cli" link set lo up
	ip -n "$srv" addr add 10.77.0.1/24 dev "$sif"
	ip -n "$srv" addr add fd77::1/64 dev "$sif" nodad
	ip -n "$cli" addr add 10.77.0.2/24 dev "$cif"
	ip -n "$cli" addr add fd77::2/64 dev "$cif" nodad
	for i in $(seq 1 "$nsrc"); do
		ip -n "$cli" addr add "10.77.1.$i/16" dev "$cif"
	done
	ip -n "$srv" link set "$sif" up
	ip -n "$cli" link set "$cif" up
	ip -n "$srv" route add 10.77.0.0/16 dev "$sif"
	# XDP_TX on veth delivers only if the peer has an XDP program (FIELD-NOTES): a plain pass.
	ip -n "$cli" link set dev "$cif" xdpdrv obj "$BUILD/bpf/xdp_pass.bpf.o" sec xdp
	# A veth sender with TX checksum offload leaves UDP checksums unfinished; after XDP_TX the
	# PONG would fail its checksum. Real NICs deliver complete checksums.
	ip netns exec "$cli" ethtool -K "$cif" tx off >/dev/null
	# Room for many clients: every port for sources, deep accept queues.
	ip netns exec "$cli" sysctl -qw net.ipv4.ip_local_port_range="1024 65535"
	ip netns exec "$srv" sysctl -qw net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535
	;;
down)
	ip netns del "$srv" 2>/dev/null || true
	ip netns del "$cli" 2>/dev/null || true
	;;
*)
	echo "netns.sh: unknown command '$cmd' (up, down, env)" >&2
	exit 1
	;;
esac
