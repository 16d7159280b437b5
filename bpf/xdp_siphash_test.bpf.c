// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Test vehicle for bpf/hb_siphash.bpf.h, run with bpf_prog_test_run_opts only (never attached):
 * the packet is key (16 B) | mode (1 B) | message; the program writes the SipHash-2-4 of the
 * message over the first 8 bytes (little-endian) and returns XDP_TX, or XDP_ABORTED if the
 * input is malformed. Mode 0..63 is the message length, through hb_siphash_buf(); mode 0x80 is
 * a 24-byte message through hb_siphash_3w(), the form hb_xdp's PING path uses. */
#include "hb_vmlinux.bpf.h"
#include <bpf/bpf_helpers.h>

#include "hb_siphash.bpf.h"

SEC("xdp")
int hb_siphash_test(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u8 buf[HB_SIP_BUF_MAX] = { 0 };
	__u64 k0, k1, h, *out = (__u64 *)data;
	__u32 mode, i;

	if (data + 17 > end)
		return XDP_ABORTED;
	__builtin_memcpy(&k0, data, 8);
	__builtin_memcpy(&k1, data + 8, 8);
	k0 = HB_SIP_LE64(k0);
	k1 = HB_SIP_LE64(k1);
	mode = data[16];
	if (mode == 0x80) {
		__u64 *m = (__u64 *)(data + 17);

		if ((void *)(m + 3) > (void *)end)
			return XDP_ABORTED;
		h = hb_siphash_3w(k0, k1, HB_SIP_LE64(m[0]), HB_SIP_LE64(m[1]), HB_SIP_LE64(m[2]));
	} else {
		if (mode >= HB_SIP_BUF_MAX)
			return XDP_ABORTED;
		for (i = 0; i < HB_SIP_BUF_MAX; i++) {
			if (i >= mode)
				break;
			if (data + 17 + i + 1 > end)
				return XDP_ABORTED;
			buf[i] = data[17 + i];
		}
		h = hb_siphash_buf(k0, k1, buf, mode);
	}
	*out = HB_SIP_LE64(h);
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
