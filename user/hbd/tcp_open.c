// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Admission of a new TCP connection: the daemon's and the source's limits, the budget of
 * connections without a HELLO, cookie, first recv.
 *
 * Connections that have not authenticated are counted apart from the devices (--max-pending,
 * a share of it a worker) and never against --max-clients, so peers that connect and never
 * send a HELLO cannot fill the daemon: when a worker's share is spent, the oldest of them is
 * closed for the new one, and from half of it on a new one gets the short HELLO deadline
 * (HBD_HELLO_BUSY_MS). A device authenticates within a round trip of connecting; to push one
 * out, a flood would have to bring a worker's whole share of new connections within that.
 */
#include <errno.h>

#include "log.h"
#include "tcp_impl.h"

#define EVICT_LOOK 8 /* pending connections compared to find the oldest one to close */

/* Closes the earliest accepted of the next EVICT_LOOK connections without a HELLO, from where
 * the last search stopped (a clock sweep over the slots: every one is looked at in turn, and
 * the one closed came before the others looked at). Accept order, not time: a burst accepts
 * hundreds in one millisecond, and the device among them that is about to send its HELLO must
 * not lose a tie. At most one pass over the slots. */
static void evict_pending(struct hbd_worker *w)
{
	uint32_t victim = HBD_NONE, seen = 0;
	uint16_t oldest = 0;

	if (!w->nslots)
		return;
	for (uint32_t i = 0; i < w->nslots && seen < EVICT_LOOK; i++) {
		uint32_t slot = w->pend_scan++ % w->nslots;
		struct hbd_conn *c = &w->conns[slot];
		uint16_t before; /* accepts since this one (wraps after 65536) */

		if (!(c->flags & CF_PENDING) || c->state != CONN_NEW)
			continue;
		before = (uint16_t)(w->pend_next - c->pend_seq);
		if (victim == HBD_NONE || before > oldest) {
			victim = slot;
			oldest = before;
		}
		seen++;
	}
	w->pend_scan %= w->nslots;
	if (victim == HBD_NONE)
		return;
	HBD_STAT_ADD(w->st, pending_evicted, 1);
	hb_dbg("tcp: worker %u slot %u: no HELLO %u accepts later, closed for a newer connection "
	       "(--max-pending)",
	       w->id, victim, oldest);
	hbd_tcp_close(w, victim, HB_ERROR, HB_ERR_FULL);
}

/* A new connection joins the pending ones, with its HELLO deadline: --hello-timeout, or the
 * short one while the worker's share is half spent. tcp_expire.c measures a connection's HELLO
 * time from last_seen, so the short deadline starts it that much earlier. */
static void pending_start(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	const struct hbd_limits *lim = &w->d->lim;
	uint64_t due = lim->hello_timeout_ms;

	if (w->pending >= lim->pending_per_worker)
		evict_pending(w);
	c->flags |= CF_PENDING;
	c->pend_seq = w->pend_next++;
	w->pending++;
	__atomic_fetch_add(&w->d->tcp_pending, 1, __ATOMIC_RELAXED);
	if (2 * w->pending > lim->pending_per_worker) {
		due = lim->hello_busy_ms;
		c->last_seen -= (uint32_t)(lim->hello_timeout_ms - due);
	}
	hb_wheel_add(&w->tcp_wheel, slot, w->now_ms + due);
}

/* Admission of a connection accept.c took into slot: the daemon's and the source's limits,
 * then the cookie (offload mode) and the first recv, hard-linked so the cookie is known before
 * the first frame is handled.
 */
void hbd_tcp_open(struct hbd_worker *w, uint32_t slot, const uint8_t addr[16], bool mqtt)
{
	struct hbd_daemon *d = w->d;
	unsigned n, count = 0, pending;
	uint8_t key[16];
	int rc;

	if (!hbd_tcp_slot_take(w, slot, "accept into", &n))
		return;
	if (mqtt) {
		w->conns[slot].flags |= CF_MQTT;
		hbd_mqtt_sess_reset(&w->mq[slot]);
	}
	HBD_STAT_ADD(w->st, tcp_accepted, 1);
	/* until it authenticates, a connection has --hello-timeout, not the heartbeat timeout;
	 * pending_start() sets it (the closes below have their own deadline) */
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
	/* the connections that are not pending are the devices (and the few closing); another
	 * worker's new one may be counted pending already but not yet in n */
	pending = __atomic_load_n(&d->tcp_pending, __ATOMIC_RELAXED);
	if ((n > pending && n - pending >= d->cfg->max_clients) || w->draining) {
		if (!w->draining)
			HBD_STAT_ADD(w->st, full, 1);
		hbd_tcp_close(w, slot, w->draining ? HB_BYE : HB_ERROR,
			      w->draining ? HB_BYE_SHUTDOWN : HB_ERR_FULL);
		return;
	}
	pending_start(w, slot);
	hbd_tcp_ask_cookie(w, slot);
	if (hbd_tcp_arm_recv(w, slot))
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_INTERNAL);
}
