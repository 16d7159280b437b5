#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The fleet demo behind `make fleet` (docs/FLEET.md): a 3-server NATS cluster with JetStream,
# N hbd nodes (each with its own BPF side) behind an nftables balancer, one client namespace,
# then the six steps: connect, downlink, DATA, a node killed, a NATS server stopped, clean-up.
#
#   scripts/fleet.sh [--nodes 3] [--devices N]     N TCP and N UDP devices (default 10000)
#
# Namespaces (all hbfl-*): hbfl-cli (hbload, 10.88.1.2 + sources 10.88.2.1..), hbfl-lb (the
# balancer: the service address 10.88.100.1 port 7600, routes to everything), hbfl-nats (three
# nats-server on 10.88.9.2 ports 4222..4224, cluster ports 6222..6224), hbfl-nK (hbd node K,
# 10.88.(10+K).2, its BPF pinned at /sys/fs/bpf/fleet-nK). Writes build/fleet/result.json; the
# logs stay in build/fleet. Everything it made is removed at the end, also on failure or ^C.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NODES=3
DEVICES=10000
while [ $# -gt 0 ]; do
	case $1 in
	--nodes) NODES=$2; shift 2 ;;
	--devices) DEVICES=$2; shift 2 ;;
	-h|--help) sed -n 2,13p "$0"; exit 0 ;;
	*) echo "fleet.sh: unknown argument '$1' (--nodes N, --devices N)" >&2; exit 1 ;;
	esac
done
[ "$NODES" -ge 2 ] && [ "$NODES" -le 8 ] || { echo "fleet.sh: --nodes 2..8" >&2; exit 1; }
OUT=$BUILD/fleet
PORT=7600
VIP=10.88.100.1
NATS_ADDR=10.88.9.2
BUCKETS=64
HASH_SEED=0x68626561 # any fixed value: the same in every rule the balancer loads
INTERVAL=${INTERVAL:-2}
DOWNLINKS=${DOWNLINKS:-200}
NATS_URLS=nats://$NATS_ADDR:4222,nats://$NATS_ADDR:4223,nats://$NATS_ADDR:4224
LB=hbfl-lb CLI=hbfl-cli NATS=hbfl-nats
CG=/sys/fs/cgroup/unified # each node's sock_ops sees only its own hbd's sockets: a cgroup each

node_ns() { echo "hbfl-n$1"; }
node_addr() { echo "10.88.$((10 + $1)).2"; }
in_ns() { local ns=$1; shift; nsenter --net=/run/netns/"$ns" "$@"; }
step() { printf '\n== %s\n' "$*" >&2; }
now_ms() { date +%s%3N; }

declare -a PIDS=()
NATS_PIDS=()
HBD_PIDS=()
cleanup() {
	set +e
	for p in "${PIDS[@]}" "${HBD_PIDS[@]}" "${NATS_PIDS[@]}"; do
		[ -n "$p" ] && kill -TERM "$p" 2>/dev/null
	done
	sleep 1
	for p in "${PIDS[@]}" "${HBD_PIDS[@]}" "${NATS_PIDS[@]}"; do
		[ -n "$p" ] && kill -KILL "$p" 2>/dev/null
	done
	for k in $(seq "$NODES"); do
		[ -d /sys/fs/bpf/fleet-n$k ] &&
			in_ns "$(node_ns $k)" "$BUILD/hbctl" unload --dev "fln$k" --pin-path /sys/fs/bpf/fleet-n$k >/dev/null 2>&1
		rm -rf /sys/fs/bpf/fleet-n$k
		ip netns del "$(node_ns $k)" 2>/dev/null
	done
	for ns in $LB $CLI $NATS; do ip netns del $ns 2>/dev/null; done
	for k in $(seq "$NODES"); do rmdir "$CG/hbfl-n$k" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for ns in $LB $CLI $NATS $(for k in $(seq "$NODES"); do node_ns $k; done); do
	if ip netns list | grep -qw "^$ns"; then
		echo "fleet.sh: namespace $ns exists (an earlier run?): ip netns del $ns" >&2
		exit 1
	fi
done
mkdir -p "$OUT"
rm -rf "$OUT"/nats-* "$OUT"/*.log "$OUT"/*.json "$OUT"/*.txt

step "network: $LB routes between $CLI, $NATS and $NODES node namespaces"
ip netns add $LB
ip netns exec $LB sysctl -qw net.ipv4.ip_forward=1
ip -n $LB link set lo up
# veth pair: namespace A, interface a, address a; namespace B, interface b, address b (/24)
pair() {
	ip link add "$2" netns "$1" type veth peer name "$5" netns "$4"
	ip -n "$1" addr add "$3/24" dev "$2"
	ip -n "$4" addr add "$6/24" dev "$5"
	ip -n "$1" link set "$2" up
	ip -n "$4" link set "$5" up
	# a veth sender with TX checksum offload leaves checksums unfinished (netns.sh says why)
	ip netns exec "$1" ethtool -K "$2" tx off >/dev/null
	ip netns exec "$4" ethtool -K "$5" tx off >/dev/null
}
ip netns add $CLI
ip -n $CLI link set lo up
pair $CLI flcli 10.88.1.2 $LB flcli-lb 10.88.1.1
for i in $(seq 1 16); do ip -n $CLI addr add "10.88.2.$i/32" dev flcli; done
ip -n $CLI route add default via 10.88.1.1
ip -n $LB route add 10.88.2.0/24 via 10.88.1.2
ip netns exec $CLI sysctl -qw net.ipv4.ip_local_port_range="1024 65535"
ip netns add $NATS
ip -n $NATS link set lo up
pair $NATS flnats $NATS_ADDR $LB flnats-lb 10.88.9.1
ip -n $NATS route add default via 10.88.9.1
for k in $(seq "$NODES"); do
	ns=$(node_ns $k)
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	pair "$ns" "fln$k" "$(node_addr $k)" $LB "fln$k-lb" "10.88.$((10 + k)).1"
	ip -n "$ns" route add default via "10.88.$((10 + k)).1"
	# XDP_TX on a veth is delivered only if the peer has an XDP program: a plain pass
	ip -n $LB link set dev "fln$k-lb" xdpdrv obj "$BUILD/bpf/xdp_pass.bpf.o" sec xdp
	ip netns exec "$ns" sysctl -qw net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535
done

step "NATS: 3 servers, one JetStream cluster (stream and buckets with 3 replicas)"
# Two users with the permissions hbeat ships (contrib/nats/hbeat-permissions.conf): the nodes
# as hbd, everything else here (hbctl fleet: presence, status, downlinks, DATA) as app.
umask 077
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$OUT/nats-hbd-password"
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$OUT/nats-app-password"
cp contrib/nats/hbeat-permissions.conf "$OUT/"
for i in 0 1 2; do
	mkdir -p "$OUT/nats-$i"
	cat > "$OUT/nats-$i.conf" << CONF
server_name: hbfl-s$i
listen: $NATS_ADDR:$((4222 + i))
jetstream { store_dir: "$(realpath "$OUT")/nats-$i" }
cluster {
  name: hbfl
  listen: $NATS_ADDR:$((6222 + i))
  routes: [nats://$NATS_ADDR:6222, nats://$NATS_ADDR:6223, nats://$NATS_ADDR:6224]
}
include "hbeat-permissions.conf"
authorization {
  users = [
    { user: hbd, password: "$(cat "$OUT/nats-hbd-password")", permissions: \$HBEAT_NODE }
    { user: app, password: "$(cat "$OUT/nats-app-password")", permissions: \$HBEAT_APP }
  ]
}
CONF
	nsenter --net=/run/netns/$NATS nats-server -c "$OUT/nats-$i.conf" > "$OUT/nats-$i.log" 2>&1 &
	NATS_PIDS+=($!)
done
umask 022
for _ in $(seq 100); do
	in_ns $NATS bash -c "exec 3<>/dev/tcp/$NATS_ADDR/4224" 2>/dev/null && break
	sleep 0.1
done

umask 077
printf '1-%d derive %s\n' 10000000 "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" > "$OUT/keys"
# the downlink targets: device-library devices (examples/device), which ACK what they get;
# hbload's simulated devices ignore DOWN frames
DL_FIRST=20000001
for i in $(seq 0 $((DOWNLINKS - 1))); do
	printf '%d %s\n' $((DL_FIRST + i)) "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
done > "$OUT/dl-keys"
cat "$OUT/dl-keys" >> "$OUT/keys"
umask 022

step "$NODES hbd nodes, each with hbctl load on its veth and hbd --nats"
for k in $(seq "$NODES"); do
	ns=$(node_ns $k)
	mkdir -p "$CG/hbfl-n$k"
	in_ns "$ns" "$BUILD/hbctl" load --dev "fln$k" --mode native --port $PORT --tcp kernel \
		--pin-path /sys/fs/bpf/fleet-n$k --cgroup "$CG/hbfl-n$k" --max-conns $((4 * DEVICES)) \
		--max-sessions $((4 * DEVICES)) >> "$OUT/hbctl-n$k.log" 2>&1 ||
		{ cat "$OUT/hbctl-n$k.log" >&2; exit 1; }
	# in its cgroup before the exec: $! is hbd itself
	bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG/hbfl-n$k" \
		nsenter --net=/run/netns/"$ns" "$BUILD/hbd" --port $PORT --keys "$OUT/keys" \
		--pin-path /sys/fs/bpf/fleet-n$k --interval "$INTERVAL" --expiry-mult 3 --max-clients $((2 * DEVICES + 1000)) \
		--max-per-source 0 --accept-rate 0 --nats "$NATS_URLS" --nats-node "n$k" \
		--nats-user hbd --nats-password-file "$OUT/nats-hbd-password" --nats-replicas 3 --nats-node-ttl 6 > "$OUT/hbd-n$k.out" 2> "$OUT/hbd-n$k.log" &
	HBD_PIDS+=($!)
done
for k in $(seq "$NODES"); do
	for _ in $(seq 200); do grep -q "fleet: .* ready" "$OUT/hbd-n$k.log" && break; sleep 0.1; done
	grep -q "fleet: .* ready" "$OUT/hbd-n$k.log" || { tail "$OUT/hbd-n$k.log" >&2; exit 1; }
done

# --- the balancer ------------------------------------------------------------------------
# A fixed table of BUCKETS buckets on a hash of (source address, source port): a node's death
# moves only its own buckets. The hash has a fixed seed (HASH_SEED): without one the kernel
# draws a random seed for every rule it loads, and the health checker's rewrite would move
# every device's bucket, not only the dead node's (docs/FLEET.md, "Figures"). Stateless NAT
# (notrack, addresses rewritten both ways): no conntrack entry keeps a flow on a dead node once its bucket has moved; a TCP connection whose
# bucket moved meets a node without its socket, gets a RST and reconnects at once.
declare -a OWNER
for b in $(seq 0 $((BUCKETS - 1))); do OWNER[$b]=$((b % NODES + 1)); done
write_lb() {
	local map="" b
	for b in $(seq 0 $((BUCKETS - 1))); do map+="$b : $(node_addr "${OWNER[$b]}"), "; done
	local nodes=""
	for k in $(seq "$NODES"); do nodes+="$(node_addr $k), "; done
	in_ns $LB nft -f - <<NFT
table ip hbfl
delete table ip hbfl
table ip hbfl {
	chain pre {
		type filter hook prerouting priority raw; policy accept;
		ip daddr $VIP meta l4proto { tcp, udp } th dport $PORT notrack ip daddr set jhash ip saddr . th sport mod $BUCKETS seed $HASH_SEED map { ${map%, } }
		ip saddr { ${nodes%, } } ip daddr { 10.88.1.2, 10.88.2.0/24 } meta l4proto { tcp, udp } th sport $PORT notrack ip saddr set $VIP
	}
}
NFT
}
write_lb
in_ns $LB nft list table ip hbfl > "$OUT/nft-initial.txt"

# The health checker: nftables has no health checks, keepalived's need IPVS (not in this
# kernel), and a TCP probe is all a node needs to answer: every 0.5 s a connect to each node's
# port; two failures in a row and the node's buckets go round-robin to the live ones.
cat > "$OUT/health.sh" <<'HEALTH'
#!/usr/bin/env bash
# health.sh NODES BUCKETS SEED OUTDIR ADDR... : probe, and rewrite the table when a node dies
nodes=$1 buckets=$2 seed=$3 out=$4; shift 4
addrs=("$@")
declare -A fails dead
while :; do
	changed=0
	for k in $(seq "$nodes"); do
		[ -n "${dead[$k]:-}" ] && continue
		a=${addrs[$((k - 1))]}
		if timeout 0.3 bash -c "exec 3<>/dev/tcp/$a/7600" 2>/dev/null; then
			fails[$k]=0
		else
			fails[$k]=$(( ${fails[$k]:-0} + 1 ))
			if [ "${fails[$k]}" -ge 2 ]; then dead[$k]=1; changed=1; fi
		fi
	done
	if [ $changed = 1 ]; then
		live=()
		for k in $(seq "$nodes"); do [ -z "${dead[$k]:-}" ] && live+=("$k"); done
		map="" i=0
		for b in $(seq 0 $((buckets - 1))); do
			o=$((b % nodes + 1))
			if [ -n "${dead[$o]:-}" ]; then o=${live[$((i % ${#live[@]}))]}; i=$((i + 1)); fi
			map+="$b : ${addrs[$((o - 1))]}, "
		done
		all=""
		for a in "${addrs[@]}"; do all+="$a, "; done
		nft -f - <<NFT
table ip hbfl
delete table ip hbfl
table ip hbfl {
	chain pre {
		type filter hook prerouting priority raw; policy accept;
		ip daddr 10.88.100.1 meta l4proto { tcp, udp } th dport 7600 notrack ip daddr set jhash ip saddr . th sport mod $buckets seed $seed map { ${map%, } }
		ip saddr { ${all%, } } ip daddr { 10.88.1.2, 10.88.2.0/24 } meta l4proto { tcp, udp } th sport 7600 notrack ip saddr set 10.88.100.1
	}
}
NFT
		echo "$(date +%s%3N) removed ${!dead[*]}" >> "$out/health.log"
	fi
	sleep 0.5
done
HEALTH
chmod +x "$OUT/health.sh"
addrs=()
for k in $(seq "$NODES"); do addrs+=("$(node_addr $k)"); done
nsenter --net=/run/netns/$LB "$OUT/health.sh" "$NODES" $BUCKETS $HASH_SEED "$OUT" "${addrs[@]}" &
PIDS+=($!)
ip -n $CLI route add $VIP/32 via 10.88.1.1 2>/dev/null || true

fleet() {
	in_ns $NATS "$BUILD/hbctl" fleet --nats "$NATS_URLS" --nats-user app \
		--nats-password-file "$OUT/nats-app-password" "$@"
}

# every entry of hbeat_presence as "ID NODE STATE" (again if a busy cluster cut the read short)
presence_dump() {
	local i
	for i in 1 2 3; do
		fleet presence > "$OUT/presence.json" && break
		sleep 1
	done
	jq -r '"\(.device) \(.node) \(.state)"' "$OUT/presence.json" > "$OUT/presence.txt"
}
# --- 1. devices ----------------------------------------------------------------------------
step "1. hbload: $DEVICES TCP and $DEVICES UDP devices through $VIP"
: > "$OUT/presence-rate.txt"
echo "$(now_ms) $(fleet status --json | jq '.presence_rev')" >> "$OUT/presence-rate.txt"
DURATION=${DURATION:-600}
for proto in tcp udp; do
	first=$([ $proto = tcp ] && echo 1 || echo $((DEVICES + 1)))
	nsenter --net=/run/netns/$CLI "$BUILD/hbload" --server $VIP --port $PORT --clients "$DEVICES" --proto $proto \
		--first-device "$first" --interval "$INTERVAL" --duration "$DURATION" --keys "$OUT/keys" \
		--source 10.88.2.1-10.88.2.16 --data-every 3 --setup-timeout 120 --json --no-progress \
		> "$OUT/hbload-$proto.json" 2> "$OUT/hbload-$proto.log" &
	PIDS+=($!)
	eval "LOAD_${proto}=$!"
done
i=0
while read -r id secret; do
	proto=$([ $((i % 2)) = 0 ] && echo "" || echo --udp)
	# shellcheck disable=SC2086
	nsenter --net=/run/netns/$CLI "$BUILD/examples/device" --server $VIP --port $PORT --id "$id" --secret "$secret" \
		--every 0 $proto > "$OUT/dl-$id.log" 2>&1 &
	PIDS+=($!)
	i=$((i + 1))
done < "$OUT/dl-keys"
total=$((2 * DEVICES + DOWNLINKS))
connected=0
# presence writes a second while they connect: the bucket's revision, sampled
for _ in $(seq 240); do
	fleet status --json > "$OUT/status.json"
	connected=$(jq '.devices' "$OUT/status.json")
	echo "$(now_ms) $(jq '.presence_rev' "$OUT/status.json")" >> "$OUT/presence-rate.txt"
	[ "$connected" -ge "$total" ] && break
	sleep 0.5
done
echo "connected: $connected of $total" >&2
# presence trails the connections by the writes still in flight: wait until every connected
# device is in it (at most 60 s), and say how long that took
t_conn=$(now_ms)
for _ in $(seq 60); do
	echo "$(now_ms) $(fleet status --json | jq '.presence_rev')" >> "$OUT/presence-rate.txt"
	presence_dump
	[ "$(awk '$3 == "online"' "$OUT/presence.txt" | wc -l)" -ge "$connected" ] && break
	sleep 1
done
echo "presence complete $(( $(now_ms) - t_conn )) ms after the node counts said connected" >&2
pres_rate=$(awk 'NR > 1 && $1 > t { r = ($2 - v) * 1000 / ($1 - t); if (r > max) max = r } { t = $1; v = $2 }
	END { printf "%d", max }' "$OUT/presence-rate.txt")
echo "presence writes: peak $pres_rate a second while connecting (bucket revision sampled twice a second)" >&2
# the truth per node: what each node's kernel maps hold (hbctl conns), against presence
truth() {
	: > "$OUT/truth.txt"
	for k in $(seq "$NODES"); do
		[ -d /sys/fs/bpf/fleet-n$k ] || continue
		kill -0 "${HBD_PIDS[$((k - 1))]}" 2>/dev/null || continue
		in_ns "$(node_ns $k)" "$BUILD/hbctl" conns --pin-path /sys/fs/bpf/fleet-n$k --state authed --json |
			jq -r --arg n "n$k" '.. | objects | select(has("device_id")) | "\(.device_id) \($n)"' \
			>> "$OUT/truth.txt"
	done
}
truth
presence_dump
p_online=$(awk '$3 == "online"' "$OUT/presence.txt" | wc -l)
p_correct=$(awk 'NR == FNR { node[$1] = $2; next } $3 == "online" && node[$1] == $2' \
	"$OUT/truth.txt" "$OUT/presence.txt" | wc -l)
echo "presence: $p_online online, $p_correct on the node that holds them ($(wc -l < "$OUT/truth.txt") held)" >&2
cp "$OUT/presence.txt" "$OUT/presence-step1.txt"
# a held device not online on its node in presence: what presence says of it
awk 'NR == FNR { p[$1] = $2 " " $3; next } !(($1) in p) || p[$1] != $2 " online" {
	print "  held by " $2 ", presence: " (($1) in p ? p[$1] : "none") " (device " $1 ")" }' \
	"$OUT/presence.txt" "$OUT/truth.txt" | head -5 >&2

# --- 2. downlinks ----------------------------------------------------------------------------
step "2. $DOWNLINKS downlinks through NATS requests to random devices"
ids=$(awk '{ print $1 }' "$OUT/dl-keys" | shuf | tr '\n' ' ')
# shellcheck disable=SC2086
fleet send --timeout 3000 "ping-from-nats" $ids > "$OUT/downlinks.json" || true
down_sent=$(wc -l < "$OUT/downlinks.json")
down_acked=$(jq -s '[.[] | select(.status == "delivered")] | length' "$OUT/downlinks.json")
read -r down_p50 down_p99 < <(jq -s '[.[] | select(.status == "delivered") | .request_us] | sort |
	if length == 0 then "0 0" else
	"\(.[(length * 0.5 | floor)] / 1000) \(.[((length - 1) * 0.99 | floor)] / 1000)" end' -r \
	"$OUT/downlinks.json")
echo "downlinks: $down_acked of $down_sent ACKed; request round trip p50 ${down_p50} ms p99 ${down_p99} ms" >&2
jq -r '.status' "$OUT/downlinks.json" | sort | uniq -c >&2

# --- 4. kill -9 a node -----------------------------------------------------------------------
VICTIM=$NODES
step "4. kill -9 node n$VICTIM"
on_victim=$(awk -v n="n$VICTIM" '$2 == n' "$OUT/truth.txt" | wc -l)
awk -v n="n$VICTIM" '$2 == n { print $1 }' "$OUT/truth.txt" | sort > "$OUT/victim-devices.txt"
t_kill=$(now_ms)
kill -KILL "${HBD_PIDS[$((VICTIM - 1))]}"
# rehomed: the victim's devices online on another node in presence; seconds: from the kill
# until the last of them got there (all of them, or the count stopped growing for 20 s)
rehomed=0
fo_seconds=-1
last_change=$(now_ms)
: > "$OUT/failover.txt"
deadline=$(( $(now_ms) + 90000 ))
while [ "$(now_ms)" -lt $deadline ]; do
	sleep 2
	presence_dump
	n=$(awk -v n="n$VICTIM" '$3 == "online" && $2 != n { print $1 }' "$OUT/presence.txt" | sort |
		join - "$OUT/victim-devices.txt" | wc -l)
	t=$(now_ms)
	echo "$((t - t_kill)) $n" >> "$OUT/failover.txt"
	if [ "$n" -gt "$rehomed" ]; then
		rehomed=$n
		last_change=$t
		fo_seconds=$(awk -v a="$t_kill" -v b="$t" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
	fi
	[ "$rehomed" -ge "$on_victim" ] && break
	[ $((t - last_change)) -gt 20000 ] && break
done
echo "failover: $rehomed of $on_victim devices of n$VICTIM back online elsewhere; the last after ${fo_seconds} s" >&2
kinds=$(join "$OUT/victim-devices.txt" <(awk -v n="n$VICTIM" '$3 == "online" && $2 != n { print $1 }' \
	"$OUT/presence.txt" | sort) -v 1 | awk -v d="$DEVICES" -v f="$DL_FIRST" \
	'{ if ($1 >= f) k = "device-library"; else if ($1 > d) k = "hbload UDP"; else k = "hbload TCP"; c[k]++ }
	END { for (k in c) printf "%s: %d, ", k, c[k] }')
echo "not back: ${kinds:-none}" >&2
# A node's death moves only its own devices: the survivors' devices online on another node
# than before the kill (a TCP device that reconnected for a reason of its own may move too)
others_moved=$(awk -v n="n$VICTIM" 'NR == FNR { if ($2 != n) home[$1] = $2; next }
	($1 in home) && $3 == "online" && $2 != home[$1]' "$OUT/truth.txt" "$OUT/presence.txt" | wc -l)
echo "devices of the surviving nodes now online on another node: $others_moved" >&2
cat "$OUT/health.log" >&2 2>/dev/null || true

# --- 5. stop a NATS server ------------------------------------------------------------------
step "5. stop NATS server hbfl-s0 while DATA flows"
acked_sum() {
	local s=0 k v
	for k in $(seq "$NODES"); do
		v=$(in_ns "$(node_ns $k)" "$BUILD/hbctl" stats --pin-path /sys/fs/bpf/fleet-n$k --json 2>/dev/null |
			jq '[.. | objects | .data_acked? // empty] | add // 0')
		s=$((s + ${v:-0}))
	done
	echo $s
}
before=$(acked_sum)
kill -TERM "${NATS_PIDS[0]}"
sleep 15
after=$(acked_sum)
nf_acked_after=$((after - before))
echo "DATA ACKed in the 15 s after the stop: $nf_acked_after" >&2

# --- 3. DATA against the stream ---------------------------------------------------------------
step "3. end the load; DATA ACKed against HBEAT_DATA"
kill -INT "$LOAD_tcp" "$LOAD_udp" 2>/dev/null || true
wait "$LOAD_tcp" "$LOAD_udp" 2>/dev/null || true
sleep 3
data_acked=0
for proto in tcp udp; do
	v=$(jq '.data_acked // 0' "$OUT/hbload-$proto.json" 2>/dev/null || echo 0)
	data_acked=$((data_acked + ${v:-0}))
done
hbd_acked=$(acked_sum)
fleet data --json > "$OUT/stream.json" || { cat "$OUT/stream.json" >&2; exit 1; }
in_stream=$(jq '.distinct' "$OUT/stream.json")
lost=$(( hbd_acked > in_stream ? hbd_acked - in_stream : 0 ))
echo "DATA: hbload saw $data_acked ACKed, hbd ACKed $hbd_acked, $in_stream distinct in HBEAT_DATA ($(jq '.messages' "$OUT/stream.json") messages)" >&2

jq -n --argjson nodes "$NODES" --argjson devices "$total" --argjson connected "$connected" \
	--argjson p_online "$p_online" --argjson p_correct "$p_correct" \
	--argjson d_sent "$down_sent" --argjson d_acked "$down_acked" --argjson d_p99 "$down_p99" \
	--argjson data_acked "$hbd_acked" --argjson in_stream "$in_stream" \
	--argjson on_victim "$on_victim" --argjson rehomed "$rehomed" --argjson fo_s "$fo_seconds" \
	--argjson others_moved "$others_moved" \
	--argjson nf_after "$nf_acked_after" --argjson lost "$lost" '{
	nodes: $nodes, nats_servers: 3, devices: $devices, connected: $connected,
	presence: { online: $p_online, correct_node: $p_correct },
	downlink: { sent: $d_sent, acked: $d_acked, p99_ms: $d_p99 },
	data: { acked: $data_acked, in_stream: $in_stream },
	failover: { devices_on_killed_node: $on_victim, rehomed: $rehomed, seconds: $fo_s,
		others_moved: $others_moved },
	nats_failover: { data_acked_after: $nf_after, lost: $lost }
}' > "$OUT/result.json"
step "6. clean-up"
cleanup
trap - EXIT
cat "$OUT/result.json"
