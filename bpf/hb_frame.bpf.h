/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbeat frame validation shared by the XDP and sk_skb programs; the length rule itself is
 * hb_payload_len_ok() from the ABI header, the one the userspace codec uses too. */
#ifndef HB_FRAME_BPF_H
#define HB_FRAME_BPF_H

#include "hb_vmlinux.bpf.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "hbeat_abi.h"

/* Nonzero if magic, version, type and declared payload length are all acceptable. */
static __always_inline int hb_hdr_valid(const struct hb_hdr *h)
{
	return h->magic == bpf_htons(HB_MAGIC) && h->version == HB_VERSION &&
	       hb_payload_len_ok(h->type, bpf_ntohs(h->len));
}

/* The same for a UDP frame, which may also be of version 2 (a tag follows the payload). */
static __always_inline int hb_hdr_valid_udp(const struct hb_hdr *h)
{
	return h->magic == bpf_htons(HB_MAGIC) &&
	       (h->version == HB_VERSION || h->version == HB_VERSION_2) &&
	       hb_payload_len_ok(h->type, bpf_ntohs(h->len));
}

#endif /* HB_FRAME_BPF_H */
