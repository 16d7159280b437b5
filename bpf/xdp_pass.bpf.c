// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* xdp_pass: passes every frame. Attached to the client-side peer of a veth pair, it makes frames
 * the server side sends with XDP_TX arrive at all (veth delivers XDP_TX only to a peer that runs
 * XDP; see the field notes). Uses no maps, so loading it touches no hbeat state.
 *
 * Kernel features: XDP on veth (4.19 native).
 */
#include "hb_vmlinux.bpf.h"
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
