// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP expiry: the connections whose deadline on the worker's wheel came due. */
#include <inttypes.h>

#include "log.h"
#include "tcp_impl.h"

/* A connection stuck closing for a whole timeout: cancel whatever its socket still has in
 * flight, and give it another timeout to finish.
 */
static void close_timed_out(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe = hbd_sqe(w);

	hb_dbg("tcp: worker %u slot %u: close timed out, cancelling", w->id, slot);
	c->flags |= CF_BROKEN;
	if (sqe) {
		io_uring_prep_cancel_fd(sqe, (int)slot,
					IORING_ASYNC_CANCEL_ALL | IORING_ASYNC_CANCEL_FD_FIXED);
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, slot, c->gen, 0));
	}
	hb_wheel_add(&w->tcp_wheel, slot, w->now_ms + w->d->lim.timeout_ms);
	hbd_tcp_advance(w, slot);
}

/* An authenticated connection's silence limit: the heartbeat timeout, or for MQTT 1.5 times
 * the keepalive its CONNECT asked for. */
static uint64_t timeout_of(const struct hbd_worker *w, uint32_t slot)
{
	if (w->conns[slot].flags & CF_MQTT)
		return hbd_mqtt_timeout_ms(&w->mq[slot]);
	return w->d->lim.timeout_ms;
}

/* Expires the silent connections among those due and puts the others back at last_seen +
 * timeout. In offload mode the kernel answers heartbeats, so last_seen comes from the kernel's
 * stamp when that is newer: a read of the seen array for each connection due, and a conns
 * lookup only to confirm a silence before expiring.
 */
void hbd_tcp_expire(struct hbd_worker *w)
{
	struct hbd_daemon *d = w->d;
	uint32_t n;

	do {
		n = hb_wheel_due(&w->tcp_wheel, w->now_ms, w->due, HBD_DUE_BATCH);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t slot = w->due[i], silent;
			struct hbd_conn *c = &w->conns[slot];
			uint64_t timeout;
			bool kernel;

			if (!hbd_conn_live(c)) {
				if (c->state != CONN_FREE)
					close_timed_out(w, slot);
				continue;
			}
			/* keepalive mode (one adopted in an upgrade): the kernel is its timer */
			if (c->state == CONN_AUTHED && (c->flags & CF_KEEPALIVE))
				continue;
			if (c->state == CONN_NEW) {
				/* slowloris: a connection that never completes its HELLO */
				silent = hbd_tcp_now32(w) - c->last_seen;
				if (silent >= d->lim.hello_timeout_ms) {
					HBD_STAT_ADD(w->st, hello_timeout, 1);
					hb_dbg("tcp: worker %u slot %u: no HELLO in %u ms: closing",
					       w->id, slot, silent);
					hbd_tcp_close(w, slot, HB_BYE, HB_BYE_EXPIRED);
				} else {
					hb_wheel_add(&w->tcp_wheel, slot,
						     w->now_ms - silent + d->lim.hello_timeout_ms);
				}
				continue;
			}
			timeout = timeout_of(w, slot);
			/* an MQTT connection has kernel stamps only if the kernel answers on its
			 * port; otherwise its seen slot may hold an earlier connection's */
			kernel = c->state == CONN_AUTHED && d->kern.tcp_offload && c->cookie &&
				 (!(c->flags & CF_MQTT) || d->kern.mqtt_kernel);
			if (kernel)
				hbd_tcp_kernel_last_seen(w, slot, false);
			silent = hbd_silence(w, c->last_seen);
			if (silent >= timeout && kernel && hbd_seen_tcp(w, slot)) {
				/* conns is the record: a stamp can lag it after an adoption */
				hbd_tcp_kernel_last_seen(w, slot, true);
				silent = hbd_silence(w, c->last_seen);
			}
			if (silent >= timeout) {
				HBD_STAT_ADD(w->st, expired_tcp, 1);
				hb_dbg("tcp: device %" PRIu64 " silent for %u ms: expired",
				       c->device_id, silent);
				hbd_tcp_close(w, slot, HB_BYE, HB_BYE_EXPIRED);
			} else {
				hb_wheel_add(&w->tcp_wheel, slot, w->now_ms - silent + timeout);
			}
		}
	} while (n == HBD_DUE_BATCH);
}
