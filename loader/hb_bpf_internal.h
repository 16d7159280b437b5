/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What the loader library's files share among themselves (not for its callers: hb_bpf.h). */
#ifndef HB_BPF_INTERNAL_H
#define HB_BPF_INTERNAL_H

#include <stdbool.h>

struct hbk;
struct xdp_multiprog;
struct xdp_program;

/* While set, libbpf's and libxdp's warnings are demoted to debug (hb_bpf_load.c says why). */
extern bool hbk_quiet_libs;

/* Opens xdp_hb over the maps of the handle's sk_skb_hb; loads it as a plain XDP program if
 * load, else leaves it for libxdp (hb_bpf_load.c). */
int hbk_open_xdp(struct hbk *h, bool load);
/* Closes what hbk_open made and frees h, detaching nothing (hbk_close detaches first). */
void hbk_free(struct hbk *h);

/* What libxdp finds on a NIC, or NULL; release with xdp_multiprog__close (hb_bpf_query.c). */
struct xdp_multiprog *hbk_get_multiprog(int ifindex);
/* The hbeat program among those, or NULL (owned by mp). */
struct xdp_program *hbk_find_hb_prog(struct xdp_multiprog *mp);

#endif
