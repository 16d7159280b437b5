/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Incremental Internet checksum update (RFC 1624, eqn. 3).
 *
 * Hand-written rather than bpf_csum_diff(): the PING→PONG rewrite changes a single 16-bit word,
 * and bpf_csum_diff works on 4-byte multiples from buffers, which would cost a helper call and
 * stack copies for what is three additions.
 */
#ifndef HB_CSUM_BPF_H
#define HB_CSUM_BPF_H

#include "hb_vmlinux.bpf.h"
#include <bpf/bpf_helpers.h>

static __always_inline __u16 csum_fold32(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* HC' = ~(~HC + ~m + m'). All three values as they sit in the packet (network order): one's
 * complement addition is byte-order independent, so no swapping is needed. */
static __always_inline __u16 csum16_replace(__u16 check, __u16 old, __u16 new)
{
	__u32 sum = (__u16)~check + (__u16)~old + (__u32) new;

	return ~csum_fold32(sum);
}

/* The same for a UDP checksum, where 0 on the wire means "no checksum": a computed 0 is sent
 * as 0xffff (RFC 768; mandatory for IPv6, RFC 8200 8.1). */
static __always_inline __u16 udp_csum_replace(__u16 check, __u16 old, __u16 new)
{
	__u16 c = csum16_replace(check, old, new);

	return c ? c : 0xffff;
}

#endif /* HB_CSUM_BPF_H */
