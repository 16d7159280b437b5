// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Admission of a new TCP connection: the daemon's and the source's limits, cookie, first recv. */
#include <errno.h>

#include "log.h"
#include "tcp_impl.h"

/* Admission of a connection accept.c took into slot: the daemon's and the source's limits,
 * then the cookie (offload mode) and the first recv, hard-linked so the cookie is known before
 * the first frame is handled.
 */
void hbd_tcp_open(struct hbd_worker *w, uint32_t slot, const uint8_t addr[16])
{
	struct hbd_daemon *d = w->d;
	unsigned n, count = 0;
	uint8_t key[16];
	int rc;

	if (!hbd_tcp_slot_take(w, slot, "accept into", &n))
		return;
	HBD_STAT_ADD(w->st, tcp_accepted, 1);
	/* until it authenticates, a connection has --hello-timeout, not the heartbeat timeout */
	hb_wheel_add(&w->tcp_wheel, slot, w->now_ms + d->lim.hello_timeout_ms);
	if (d->lim.track_sources) {
		w->src[slot] = HBD_KEY_NONE;
		hbd_key_source(addr, key);
		rc = hbd_keytab_conn_open(&d->sources, key, d->cfg->max_per_source, &w->src[slot],
					  &count);
		if (rc == -EMFILE && !w->draining) {
			static uint64_t last_log;
			char peer[HB_PEER_STR];

			HBD_STAT_ADD(w->st, refused_per_source, 1);
			if (hbd_log_due(&last_log, w->now_ms, 10000)) {
				hbd_addr_str(addr, peer);
				hb_warn("source %s has %u connections open (--max-per-source): refusing "
					"more (logged once per 10 s)",
					peer, count);
			}
			hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_FULL);
			return;
		}
		/* -ENOMEM (table at its size limit): admitted untracked rather than refused */
	}
	if (n >= d->cfg->max_clients || w->draining) {
		if (!w->draining)
			HBD_STAT_ADD(w->st, full, 1);
		hbd_tcp_close(w, slot, w->draining ? HB_BYE : HB_ERROR,
			      w->draining ? HB_BYE_SHUTDOWN : HB_ERR_FULL);
		return;
	}
	hbd_tcp_ask_cookie(w, slot);
	if (hbd_tcp_arm_recv(w, slot))
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_INTERNAL);
}
