// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* An XDP program that knows nothing of hbeat: it drops IPv4 UDP datagrams to one port and
 * counts them. The coexistence test runs it after hb_xdp (hbctl load --then) on the same NIC.
 */
#include "vmlinux.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ETH_P_IP 0x0800

const volatile __u16 drop_port = 9999;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

SEC("xdp")
int portfilter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;
	__u32 zero = 0;
	__u64 *n;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->protocol != IPPROTO_UDP || ip->ihl != 5)
		return XDP_PASS;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end || udp->dest != bpf_htons(drop_port))
		return XDP_PASS;
	n = bpf_map_lookup_elem(&dropped, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
