/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Packet parsing for XDP: a cursor that each helper advances past one header after checking the
 * header lies entirely before data_end (the shape of xdp-tools' parsing_helpers.h).
 *
 * Hand-written rather than including <xdp/parsing_helpers.h>: that header pulls the UAPI
 * <linux/if_ether.h>/<linux/ipv6.h>, which clash with the vmlinux.h every hbeat object uses.
 */
#ifndef HB_PARSE_BPF_H
#define HB_PARSE_BPF_H

#include "hb_vmlinux.bpf.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* UAPI constants vmlinux.h does not carry (they are #defines, not BTF). */
#ifndef ETH_P_IP
#define ETH_P_IP 0x0800
#endif
#ifndef ETH_P_IPV6
#define ETH_P_IPV6 0x86DD
#endif
#ifndef ETH_P_8021Q
#define ETH_P_8021Q 0x8100
#endif
#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#ifndef IPPROTO_UDP
#define IPPROTO_UDP 17
#endif
#define HB_IP_MF 0x2000
#define HB_IP_OFFMASK 0x1fff
#define HB_VLAN_MAX_DEPTH 2 /* 802.1ad outer + 802.1Q inner is the deepest stack we accept */

struct hdr_cursor {
	void *pos;
	int vlans; /* VLAN tags parse_ethhdr stepped over */
};

struct hb_vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

static __always_inline int proto_is_vlan(__u16 h_proto)
{
	return h_proto == bpf_htons(ETH_P_8021Q) || h_proto == bpf_htons(ETH_P_8021AD);
}

/* Ethernet plus up to HB_VLAN_MAX_DEPTH VLAN tags. Returns the inner EtherType (network order)
 * or -1 if the frame is too short. */
static __always_inline int parse_ethhdr(struct hdr_cursor *nh, void *data_end,
					struct ethhdr **ethhdr)
{
	struct ethhdr *eth = nh->pos;
	struct hb_vlan_hdr *vlh;
	__u16 h_proto;
	int i;

	if ((void *)(eth + 1) > data_end)
		return -1;
	nh->pos = eth + 1;
	*ethhdr = eth;
	h_proto = eth->h_proto;
	vlh = nh->pos;

	/* Bounded by HB_VLAN_MAX_DEPTH; unrolled so older verifiers need no loop support. */
#pragma unroll
	for (i = 0; i < HB_VLAN_MAX_DEPTH; i++) {
		if (!proto_is_vlan(h_proto))
			break;
		if ((void *)(vlh + 1) > data_end)
			return -1;
		h_proto = vlh->encap_proto;
		vlh++;
		nh->vlans++;
	}
	nh->pos = vlh;
	return h_proto;
}

/* IPv4 header including options. Returns the L4 protocol or -1. *frag is set if the packet is a
 * fragment (MF set or nonzero offset): only the reassembled datagram is meaningful to us. */
static __always_inline int parse_iphdr(struct hdr_cursor *nh, void *data_end, struct iphdr **iphdr,
				       int *frag)
{
	struct iphdr *iph = nh->pos;
	int hdrsize;

	if ((void *)(iph + 1) > data_end)
		return -1;
	hdrsize = iph->ihl * 4;
	if (hdrsize < (int)sizeof(*iph))
		return -1;
	if (nh->pos + hdrsize > data_end)
		return -1;
	nh->pos += hdrsize;
	*iphdr = iph;
	*frag = !!(iph->frag_off & bpf_htons(HB_IP_MF | HB_IP_OFFMASK));
	return iph->protocol;
}

/* Fixed IPv6 header only. Returns nexthdr or -1. Extension headers are not walked: a heartbeat
 * never carries them, and anything with them goes to the stack untouched. */
static __always_inline int parse_ip6hdr(struct hdr_cursor *nh, void *data_end,
					struct ipv6hdr **ip6hdr)
{
	struct ipv6hdr *ip6h = nh->pos;

	if ((void *)(ip6h + 1) > data_end)
		return -1;
	nh->pos = ip6h + 1;
	*ip6hdr = ip6h;
	return ip6h->nexthdr;
}

static __always_inline int parse_udphdr(struct hdr_cursor *nh, void *data_end,
					struct udphdr **udphdr)
{
	struct udphdr *h = nh->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	nh->pos = h + 1;
	*udphdr = h;
	return 0;
}

#endif /* HB_PARSE_BPF_H */
