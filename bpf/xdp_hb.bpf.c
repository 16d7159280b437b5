// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hb_xdp: answers UDP heartbeats of admitted sessions in the driver (PING → PONG, XDP_TX).
 *
 * Frame on the wire: Ethernet [VLAN [VLAN]] IPv4|IPv6 UDP(dport = hb_port)
 *                    hb_hdr (8 B) | token (8 B) | payload (hb_hdr.len B) [| tag (8 B), v2]
 *
 * Verdicts:
 *  - valid PING to a unicast MAC and an address of this host (local_addrs), token in sessions,
 *    (version 2: the right tag, newer than the last), state AUTHED, source address and port the
 *    session's, daemon alive: rewritten in place into the PONG (version 2: tagged under the
 *    session key) and sent back with XDP_TX (xdp_pong);
 *  - a version 2 PING with a wrong tag or a replayed timestamp, or a version 1 PING while the
 *    daemon requires version 2: XDP_DROP (xdp_bad_tag, xdp_replay, xdp_v1_refused);
 *  - any other valid frame, or a PING that fails one of those checks: XDP_PASS to hbd, with the
 *    counter naming why; an unknown or spoofed source never gets a reply from here;
 *  - a datagram to the service port that is not a well-formed frame: XDP_DROP (xdp_drop_malformed);
 *  - everything else: XDP_PASS untouched (xdp_other).
 *
 * Kernel features: XDP (4.8), bpf_ktime_get_ns, BTF-defined maps with pinning (libbpf), global
 * const volatile data (5.2, frozen .rodata map), bounded loops are unrolled, tail calls.
 * Attached through libxdp's dispatcher (freplace, 5.10) or, where the kernel refuses freplace,
 * alone, with an optional next program in xdp_chain.
 */
#include "hb_vmlinux.bpf.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <xdp/xdp_helpers.h>

#include "hbeat_abi.h"
#include "hb_csum.bpf.h"
#include "hb_frame.bpf.h"
#include "hb_maps.bpf.h"
#include "hb_parse.bpf.h"
#include "hb_siphash.bpf.h"

/* Service port, host order; set by the loader before load. */
const volatile __u16 hb_port = HB_DEFAULT_PORT;

/* libxdp dispatcher settings: run early (the heartbeat path is the hot one) and hand every
 * XDP_PASS on to the next program, so hbeat coexists with others on the same NIC. */
struct {
	__uint(priority, 10);
	__uint(XDP_PASS, 1);
} XDP_RUN_CONFIG(hb_xdp);

/* The UDP part of a PING, as it follows the UDP header. */
struct hb_udp_ping {
	struct hb_hdr hdr;
	__be64 token;
	struct hb_ping ping;
};

/* Source check for an IPv4 packet against the session's v4-mapped address. */
static __always_inline int v4_matches(const struct hb_session *s, __be32 saddr)
{
	const __u32 *a = (const __u32 *)s->addr;

	return a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff) && a[3] == saddr;
}

static __always_inline int v6_matches(const struct hb_session *s, const struct in6_addr *saddr)
{
	const __u32 *a = (const __u32 *)s->addr;

	return a[0] == saddr->in6_u.u6_addr32[0] && a[1] == saddr->in6_u.u6_addr32[1] &&
	       a[2] == saddr->in6_u.u6_addr32[2] && a[3] == saddr->in6_u.u6_addr32[3];
}

/* Whether the frame is addressed to this host: a unicast destination MAC and a destination
 * address in local_addrs (of the NIC itself for an untagged frame, see struct hb_local_addrs).
 * Broadcast and multicast IPs are refused by value as well, so that no entry can make XDP answer
 * with one of them as its source. */
static __always_inline int dest_local(const struct ethhdr *eth, const void *l3, const int v6,
				      int vlans)
{
	const struct iphdr *iph = l3;
	const struct ipv6hdr *ip6h = l3;
	__u32 want = vlans ? HB_LOCAL_NIC | HB_LOCAL_VLAN : HB_LOCAL_NIC, zero = 0, n, i;
	struct hb_local_addrs *la;
	__u32 w0, w1, w2, w3;

	if (eth->h_dest[0] & 1) /* the group bit: broadcast or multicast */
		return 0;
	if (v6) {
		if (ip6h->daddr.in6_u.u6_addr8[0] == 0xff)
			return 0;
		w0 = ip6h->daddr.in6_u.u6_addr32[0];
		w1 = ip6h->daddr.in6_u.u6_addr32[1];
		w2 = ip6h->daddr.in6_u.u6_addr32[2];
		w3 = ip6h->daddr.in6_u.u6_addr32[3];
	} else {
		__u32 d = bpf_ntohl(iph->daddr);

		if ((d >> 28) == 0xe || d == 0xffffffff)
			return 0;
		w0 = 0;
		w1 = 0;
		w2 = bpf_htonl(0xffff);
		w3 = iph->daddr;
	}
	la = bpf_map_lookup_elem(&local_addrs, &zero);
	if (!la)
		return 0;
	n = la->n;
	for (i = 0; i < HB_MAX_LOCAL_ADDRS; i++) {
		const __u32 *a;

		if (i >= n)
			break;
		a = (const __u32 *)la->a[i].addr;
		if (a[3] == w3 && a[2] == w2 && a[1] == w1 && a[0] == w0)
			return la->a[i].flags & want;
	}
	return 0;
}

static __always_inline void swap_macs(struct ethhdr *eth)
{
	__u8 tmp[ETH_ALEN];

	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
}

/* A version 2 PING's checks, before the source address is looked at: the tag (SipHash-2-4 under
 * the session key over header, token and timestamp) and the replay window. 0 if it passes,
 * else the verdict. A copy of a PING already answered never is again, from any address. */
static __always_inline int v2_ping_ok(const struct hb_session *sess, const __u64 *w, __u64 *ts)
{
	const __u64 *k = (const __u64 *)sess->key;
	__u64 last = sess->last_ts;

	if (hb_siphash_3w(HB_SIP_LE64(k[0]), HB_SIP_LE64(k[1]), HB_SIP_LE64(w[0]),
			  HB_SIP_LE64(w[1]), HB_SIP_LE64(w[2])) != HB_SIP_LE64(w[3])) {
		HB_COUNT(xdp_bad_tag);
		return XDP_DROP;
	}
	*ts = bpf_be64_to_cpu(w[2]);
	if (last && (*ts <= last || *ts - last > HB_V2_TS_AHEAD)) {
		HB_COUNT(xdp_replay);
		return XDP_DROP;
	}
	return 0;
}

/* The PONG's tag in place of the PING's, and the UDP checksum adjusted for both changes (the
 * type word and the tag's four 16-bit words; all sit at even offsets of the UDP payload). */
static __always_inline void v2_pong_tag(const struct hb_session *sess, __u64 *w, struct udphdr *udp)
{
	const __u64 *k = (const __u64 *)sess->key;
	__u64 old = w[3], m0 = HB_SIP_LE64(w[0]), tag;
	__u16 c = udp->check;

	/* the type is byte 3 of the header: bits 24..31 of its little-endian word */
	m0 = (m0 & ~(0xffULL << 24)) | ((__u64)HB_PONG << 24);
	tag = HB_SIP_LE64(hb_siphash_3w(HB_SIP_LE64(k[0]), HB_SIP_LE64(k[1]), m0, HB_SIP_LE64(w[1]),
					HB_SIP_LE64(w[2])));
	w[3] = tag;
	if (!c)
		return;
	for (int i = 0; i < 4; i++)
		c = csum16_replace(c, (__u16)(old >> (16 * i)), (__u16)(tag >> (16 * i)));
	udp->check = c ? c : 0xffff;
}

/* Everything after the IP header. Inlined twice with a constant v6, so each copy knows which
 * L3 header it has: a single copy testing "iph != NULL" makes the verifier walk the impossible
 * path where neither header pointer is set (it cannot prove a packet pointer non-NULL). */
static __always_inline int hb_udp(struct hdr_cursor *nh, void *data_end, struct ethhdr *eth,
				  void *l3, const int v6)
{
	struct iphdr *iph = l3;
	struct ipv6hdr *ip6h = l3;
	struct hb_session_key key;
	struct hb_session *sess;
	struct hb_udp_ping *f;
	struct udphdr *udp;
	__u16 udp_len, old_word, new_word, tag_len;
	__be16 tmp_port;
	__u64 now, ts = 0;
	__u8 ver;
	int v;

	if (parse_udphdr(nh, data_end, &udp) < 0 || udp->dest != bpf_htons(hb_port))
		goto other;

	/* From here on the datagram is addressed to the service: it is a valid frame or dropped.
	 * The UDP length is authoritative (Ethernet padding may follow); it must fit the packet. */
	udp_len = bpf_ntohs(udp->len);
	if (udp_len < sizeof(*udp) + sizeof(struct hb_hdr) + HB_TOKEN_LEN ||
	    (void *)udp + udp_len > data_end)
		goto malformed;
	/* IPv6 forbids a zero UDP checksum; the stack would drop it, so do we. */
	if (v6 && udp->check == 0)
		goto malformed;
	f = nh->pos;
	if ((void *)&f->token + sizeof(f->token) > data_end)
		goto malformed;
	ver = f->hdr.version;
	tag_len = ver == HB_VERSION_2 ? HB_TAG_LEN : 0;
	if (!hb_hdr_valid_udp(&f->hdr) || udp_len != sizeof(*udp) + sizeof(struct hb_hdr) +
							     HB_TOKEN_LEN + bpf_ntohs(f->hdr.len) +
							     tag_len)
		goto malformed;

	if (f->hdr.type != HB_PING) {
		HB_COUNT(xdp_pass);
		return XDP_PASS;
	}
	/* A valid PING has an 8-byte payload (hb_payload_len_ok), and in version 2 a tag, inside
	 * udp_len, which is inside the packet; the verifier still wants to see the bound against
	 * data_end. */
	if ((void *)(f + 1) > data_end)
		goto malformed;

	if (!dest_local(eth, l3, v6, nh->vlans)) {
		HB_COUNT(xdp_not_local);
		return XDP_PASS;
	}
	key.token = bpf_be64_to_cpu(f->token);
	sess = bpf_map_lookup_elem(&sessions, &key);
	if (!sess) {
		HB_COUNT(xdp_unknown_session);
		return XDP_PASS;
	}
	if (ver == HB_VERSION_2 || sess->version == HB_VERSION_2) {
		/* a version 1 PING for a version 2 session has no tag, and the other way round
		 * none is owed: both are forgeries */
		if (ver != sess->version) {
			HB_COUNT(xdp_bad_tag);
			return XDP_DROP;
		}
		if ((void *)(f + 1) + HB_TAG_LEN > data_end)
			goto malformed;
		v = v2_ping_ok(sess, (const __u64 *)f, &ts);
		if (v)
			return v;
	} else if (hb_config_flags() & HB_CFG_REQUIRE_UDP_MAC) {
		HB_COUNT(xdp_v1_refused);
		return XDP_DROP;
	}
	if (sess->port != udp->source ||
	    (v6 ? !v6_matches(sess, &ip6h->saddr) : !v4_matches(sess, iph->saddr))) {
		HB_COUNT(xdp_addr_mismatch);
		return XDP_PASS;
	}
	if (sess->state != HB_STATE_AUTHED) {
		HB_COUNT(xdp_not_authed);
		return XDP_PASS;
	}
	now = bpf_ktime_get_ns();
	if (!hb_daemon_alive(now)) {
		HB_COUNT(xdp_daemon_dead);
		return XDP_PASS;
	}

	/* PING → PONG in place. Swapping addresses and ports leaves every checksum's sum unchanged
	 * (one's complement addition commutes), so only the type byte (and a version 2 tag) needs
	 * the UDP checksum fixed; the IPv4 header checksum covers no changed byte. The type shares
	 * a 16-bit word with the version at an even offset of the UDP payload, so that word is
	 * what changes in the sum. */
	swap_macs(eth);
	if (v6) {
		struct in6_addr a = ip6h->saddr;

		ip6h->saddr = ip6h->daddr;
		ip6h->daddr = a;
	} else {
		__be32 a = iph->saddr;

		iph->saddr = iph->daddr;
		iph->daddr = a;
	}
	tmp_port = udp->source;
	udp->source = udp->dest;
	udp->dest = tmp_port;

	old_word = bpf_htons((ver << 8) | HB_PING);
	new_word = bpf_htons((ver << 8) | HB_PONG);
	f->hdr.type = HB_PONG;
	/* An IPv4 sender that sent no checksum (0) gets none back. */
	if (udp->check)
		udp->check = udp_csum_replace(udp->check, old_word, new_word);
	if (tag_len) {
		if ((void *)(f + 1) + HB_TAG_LEN > data_end)
			goto malformed;
		v2_pong_tag(sess, (__u64 *)f, udp);
		sess->last_ts = ts;
	}

	sess->last_seen_ns = now;
	sess->last_seq = bpf_ntohs(f->hdr.seq);
	__sync_fetch_and_add(&sess->pings, 1);
	hb_stamp_seen(sess->seen_slot, now);
	HB_COUNT(xdp_pong);
	return XDP_TX;

malformed:
	HB_COUNT(xdp_drop_malformed);
	return XDP_DROP;
other:
	HB_COUNT(xdp_other);
	return XDP_PASS;
}

static __always_inline int hb_xdp_verdict(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct hdr_cursor nh = { .pos = data };
	struct ipv6hdr *ip6h;
	struct iphdr *iph;
	struct ethhdr *eth;
	int eth_type, frag;

	eth_type = parse_ethhdr(&nh, data_end, &eth);
	if (eth_type == bpf_htons(ETH_P_IP)) {
		/* Fragments go to the stack whole: only the reassembled datagram can be judged. */
		if (parse_iphdr(&nh, data_end, &iph, &frag) == IPPROTO_UDP && !frag)
			return hb_udp(&nh, data_end, eth, iph, 0);
	} else if (eth_type == bpf_htons(ETH_P_IPV6)) {
		if (parse_ip6hdr(&nh, data_end, &ip6h) == IPPROTO_UDP)
			return hb_udp(&nh, data_end, eth, ip6h, 1);
	}
	HB_COUNT(xdp_other);
	return XDP_PASS;
}

/* Every packet hbeat passes goes on to the chained program, if one is set: libxdp's chain
 * rule (run the next program on XDP_PASS) where its dispatcher cannot be used. A tail call
 * that finds the slot empty returns, and the packet passes as before. */
SEC("xdp")
int hb_xdp(struct xdp_md *ctx)
{
	int verdict = hb_xdp_verdict(ctx);

	if (verdict == XDP_PASS)
		bpf_tail_call(ctx, &xdp_chain, 0);
	return verdict;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
