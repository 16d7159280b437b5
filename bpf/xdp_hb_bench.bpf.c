// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Test vehicle: what hb_xdp costs per PING, measured with bpf_prog_test_run_opts' repeat, which
 * runs a program again and again on one buffer. hb_xdp turns that buffer into the PONG and moves
 * the session's replay window, so the next run would see a PONG (the pass path) or a replay.
 * hb_xdp_bench therefore saves the packet, runs hb_xdp's verdict, puts the PING back and resets
 * the window: every run answers a fresh, valid PING. hb_xdp_bench_base does the same saving,
 * restoring and resetting around no verdict at all; the difference of the two per-run times is
 * the verdict's cost. Never attached; its maps are its own (not pinned). */
#include "xdp_hb.bpf.c"

#define BENCH_BYTES 80 /* an IPv4 v2 PING is 74 bytes; the test pads it to 80 */

const volatile __u64 bench_token = 0;

static __always_inline int save(struct xdp_md *ctx, __u64 *copy)
{
	__u64 *p = (void *)(long)ctx->data;

	if ((void *)(p + BENCH_BYTES / 8) > (void *)(long)ctx->data_end)
		return -1;
#pragma unroll
	for (int i = 0; i < BENCH_BYTES / 8; i++)
		copy[i] = p[i];
	return 0;
}

static __always_inline void restore(struct xdp_md *ctx, const __u64 *copy)
{
	__u64 *p = (void *)(long)ctx->data;
	struct hb_session_key k = { .token = bench_token };
	struct hb_session *s;

	if ((void *)(p + BENCH_BYTES / 8) > (void *)(long)ctx->data_end)
		return;
#pragma unroll
	for (int i = 0; i < BENCH_BYTES / 8; i++)
		p[i] = copy[i];
	s = bpf_map_lookup_elem(&sessions, &k);
	if (s)
		s->last_ts = 1;
}

SEC("xdp")
int hb_xdp_bench(struct xdp_md *ctx)
{
	__u64 copy[BENCH_BYTES / 8];
	int v;

	if (save(ctx, copy))
		return XDP_ABORTED;
	v = hb_xdp_verdict(ctx);
	restore(ctx, copy);
	return v;
}

SEC("xdp")
int hb_xdp_bench_base(struct xdp_md *ctx)
{
	__u64 copy[BENCH_BYTES / 8];

	if (save(ctx, copy))
		return XDP_ABORTED;
	restore(ctx, copy);
	return XDP_TX;
}
