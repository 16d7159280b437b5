// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP connections across an upgrade (handoff.c drives these): quiesce, export, hand over,
 * and on the new daemon's side adopt.
 */
#include <string.h>

#include "devices.h"
#include "log.h"
#include "reasm.h"
#include "tcp_impl.h"

enum hbd_tcp_quiet hbd_tcp_quiesce(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];

	if (!hbd_conn_live(c))
		return HBD_TCP_GONE;
	/* an MQTT session does not travel (its state is in mqtt_sess): it is closed, and the
	 * device reconnects to the new daemon */
	if (c->flags & CF_MQTT) {
		hbd_tcp_close(w, slot, 0, 0);
		return HBD_TCP_BUSY;
	}
	/* whatever arrives before the cancel is handled here; the rest waits in the socket */
	hbd_tcp_cancel_recv(w, slot);
	if (c->flags & (CF_RECV | CF_SEND | CF_COOKIE | CF_INSERT | CF_DIRTY | CF_REARM) ||
	    c->out != HBD_NONE || c->sink_pending)
		return HBD_TCP_BUSY;
	return HBD_TCP_QUIET;
}

size_t hbd_tcp_export(struct hbd_worker *w, uint32_t slot, uint8_t *out)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hbd_ho_conn rec = { .cookie = c->cookie,
				   .device_id = c->device_id,
				   .authed = c->state == CONN_AUTHED };
	uint32_t age = hbd_tcp_now32(w) - c->last_seen;
	size_t plen = 0;

	rec.age_ms = (int32_t)age > 0 ? age : 0;
	if (w->src && w->src[slot] != HBD_KEY_NONE)
		hbd_keytab_key(&w->d->sources, w->src[slot], rec.src);
	if (c->partial != HBD_NONE) {
		plen = hbd_chunk(&w->chunks, c->partial)->len;
		memcpy(out + sizeof(rec), hbd_chunk(&w->chunks, c->partial)->data, plen);
		memset(out + sizeof(rec) + plen, 0, ((plen + 7) & ~(size_t)7) - plen);
	}
	rec.partial_len = (uint16_t)plen;
	memcpy(out, &rec, sizeof(rec));
	return sizeof(rec) + ((plen + 7) & ~(size_t)7);
}

/* The connection lives on in the new daemon: forget it here without a word to the peer and
 * without touching its conns entry, then close this process's direct descriptor.
 */
void hbd_tcp_handed(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];

	hbd_reasm_drop(&w->chunks, &c->partial);
	if (c->state == CONN_AUTHED) {
		uint64_t loc = hbd_loc(0, w->id, c->gen, slot);

		/* still online (no presence event), but not here: downlinks waiting for its ACK
		 * are reported undelivered
		 */
		HBD_STAT_SUB(w->st, tcp_authed, 1);
		hbd_down_gone(w, loc);
		hbd_devices_release(w->d->devices, c->device_id, loc);
	}
	c->state = CONN_HANDED;
	hb_wheel_del(&w->tcp_wheel, slot); /* its deadlines are the new daemon's now */
	if (hbd_tcp_close_direct(w, slot)) {
		/* a full SQ here is unexpected: the slot stays taken until the worker exits */
		HBD_STAT_ADD(w->st, errors, 1);
	}
}

void hbd_tcp_drop(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];

	HBD_STAT_ADD(w->st, errors, 1);
	c->flags |= CF_BROKEN;
	hbd_tcp_close(w, slot, 0, 0);
	hbd_tcp_advance(w, slot);
}

void hbd_tcp_adopt(struct hbd_worker *w, uint32_t slot, const struct hbd_ho_conn *rec,
		   const uint8_t *partial)
{
	struct hbd_daemon *d = w->d;
	struct hbd_conn *c;
	unsigned clients;
	uint64_t due;
	uint32_t silent;

	c = hbd_tcp_slot_take(w, slot, "handed-over connection in", &clients);
	if (!c)
		return;
	c->cookie = rec->cookie;
	c->device_id = rec->authed ? rec->device_id : 0;
	c->last_seen = hbd_tcp_now32(w) - rec->age_ms;
	c->state = rec->authed ? CONN_AUTHED : CONN_NEW;
	if (rec->authed)
		HBD_STAT_ADD(w->st, tcp_authed, 1);
	HBD_STAT_ADD(w->st, handoff_in, 1);
	if (w->src) {
		/* counted, never refused: a live device is not turned away by its own upgrade */
		w->src[slot] = HBD_KEY_NONE;
		hbd_keytab_conn_open(&d->sources, rec->src, 0, &w->src[slot], NULL);
	}
	if (rec->authed)
		hbd_tcp_kernel_reseat(w, slot);
	/* the deadline from what we know now, the kernel's last heartbeat included */
	due = (rec->authed ? d->lim.timeout_ms : d->lim.hello_timeout_ms);
	silent = hbd_silence(w, c->last_seen);
	hb_wheel_add(&w->tcp_wheel, slot, w->now_ms - (silent < due ? silent : due) + due);
	if (rec->partial_len) {
		enum hb_decode bad;

		/* an incomplete frame: fed to an empty reassembler, it comes out as c->partial */
		hbd_tcp_feed(w, slot, partial, rec->partial_len, &bad);
	}
	if (hbd_tcp_arm_recv(w, slot)) {
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_INTERNAL);
		return;
	}
	if (c->device_id) {
		uint64_t loc = hbd_loc(0, w->id, c->gen, slot);

		/* the device authenticated again meanwhile (here): this older session goes */
		if (hbd_devices_adopt(d->devices, c->device_id, 0, loc))
			hbd_tcp_close(w, slot, HB_BYE, HB_BYE_SUPERSEDED);
	}
}
