// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP connection lifecycle on direct descriptors (tcp.h tells it): output, closing, freeing. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "hello.h"
#include "log.h"
#include "reasm.h"
#include "tcp_impl.h"

struct hbd_conn *hbd_tcp_slot_take(struct hbd_worker *w, uint32_t slot, const char *what,
				   unsigned *clients)
{
	struct hbd_conn *c;

	if (slot >= w->nslots || w->conns[slot].state != CONN_FREE) {
		hb_err("worker %u: %s slot %u that is not free", w->id, what, slot);
		HBD_STAT_ADD(w->st, errors, 1);
		return NULL;
	}
	c = &w->conns[slot];
	c->cookie = 0;
	c->device_id = 0;
	c->last_seen = hbd_tcp_now32(w);
	c->partial = c->out = HBD_NONE;
	c->sink_pending = 0;
	c->state = CONN_NEW;
	c->flags = CF_COUNTED;
	c->final_type = 0;
	c->noauth = 0;
	w->nconns++;
	HBD_STAT_ADD(w->st, tcp_active, 1);
	*clients = __atomic_fetch_add(&w->d->tcp_clients, 1, __ATOMIC_RELAXED);
	return c;
}

void hbd_tcp_pending_done(struct hbd_worker *w, struct hbd_conn *c)
{
	if (!(c->flags & CF_PENDING))
		return;
	c->flags &= ~CF_PENDING;
	w->pending--;
	__atomic_fetch_sub(&w->d->tcp_pending, 1, __ATOMIC_RELAXED);
}

/* Keepalive mode's receive side: a multishot poll armed for the connection's life and, each
 * time it fires, non-blocking recvs until the socket has nothing more (tcp_frames.c). An armed
 * poll holds only its request, where an armed multishot recv also holds its message header
 * and an async poll (docs/OPERATIONS.md has the measured memory); what the device sends in
 * keepalive mode is rare. The kernel's close of a dead connection (keepalive or user timeout,
 * reset) wakes the poll as data does, and the recv then returns the socket's error. */
static int arm_poll(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe = hbd_sqe(w);

	if (!sqe)
		return -EBUSY;
	/* errors and hangups are reported whatever the mask asks for */
	io_uring_prep_poll_multishot(sqe, (int)slot, POLLIN | POLLRDHUP);
	sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_POLL, slot, c->gen, 0));
	c->flags |= CF_POLL | CF_RECV;
	return 0;
}

int hbd_tcp_read(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe;

	if (c->flags & CF_READ) {
		c->flags |= CF_MORE;
		return 0;
	}
	sqe = hbd_sqe(w);
	if (!sqe)
		return -EBUSY;
	/* MSG_DONTWAIT: an empty socket completes it with -EAGAIN instead of making io_uring arm
	 * a poll of its own, which would hold memory while it waits; a provided buffer is taken
	 * only for data */
	io_uring_prep_recv(sqe, (int)slot, NULL, 0, MSG_DONTWAIT);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
	sqe->buf_group = HBD_BGID_TCP;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_RECV, slot, c->gen, 0));
	c->flags = (uint16_t)((c->flags | CF_READ | CF_RECV) & ~CF_MORE);
	return 0;
}

int hbd_tcp_arm_recv(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe;

	if (w->d->kern.tcp_keepalive)
		return arm_poll(w, slot);
	sqe = hbd_sqe(w);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_recv_multishot(sqe, (int)slot, NULL, 0, 0);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
	sqe->buf_group = HBD_BGID_TCP;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_RECV, slot, c->gen, 0));
	c->flags |= CF_RECV;
	return 0;
}

void hbd_tcp_cancel_recv(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe;

	if (!(c->flags & CF_RECV) || (c->flags & CF_CANCEL) || !(sqe = hbd_sqe(w)))
		return;
	/* keepalive mode: the poll; a recv in flight does not wait (MSG_DONTWAIT) */
	io_uring_prep_cancel64(
		sqe, hbd_ud(c->flags & CF_POLL ? HBD_OP_POLL : HBD_OP_RECV, slot, c->gen, 0), 0);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, slot, c->gen, 0));
	c->flags |= CF_CANCEL;
}

void hbd_tcp_want_rearm(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];

	if (!(c->flags & CF_REARM)) {
		c->flags |= CF_REARM;
		w->rearm[w->nrearm++] = slot;
	}
}

/* A connection on the re-arm list, at the end of the loop iteration: its receive side armed
 * again (keepalive mode: the poll if it ended, and a read if one is due). 0 or -EBUSY. */
static int rearm(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	int rc = 0;

	if (!w->d->kern.tcp_keepalive)
		return c->flags & CF_RECV ? 0 : hbd_tcp_arm_recv(w, slot);
	if (!(c->flags & CF_POLL))
		rc = hbd_tcp_arm_recv(w, slot);
	if (!rc && (c->flags & CF_MORE) && !(c->flags & CF_READ))
		rc = hbd_tcp_read(w, slot);
	return rc;
}

void hbd_tcp_mark_dirty(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];

	if (!(c->flags & CF_DIRTY)) {
		c->flags |= CF_DIRTY;
		w->dirty[w->ndirty++] = slot;
	}
}

int hbd_tcp_close_direct(struct hbd_worker *w, uint32_t slot)
{
	struct io_uring_sqe *sqe = hbd_sqe(w);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_close_direct(sqe, slot);
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CLOSE, slot, w->conns[slot].gen, 0));
	return 0;
}

/* Queues a frame. Returns what hbd_outq_push() does; a connection whose output failed is
 * marked broken (its output is dropped) and counted, but closing it is the caller's choice.
 */
static int queue_out(struct hbd_worker *w, uint32_t slot, uint8_t type, uint16_t seq,
		     const void *payload, uint16_t len, bool raw)
{
	struct hbd_conn *c = &w->conns[slot];
	size_t queued;
	int rc;

	/* an hbeat frame never goes into an MQTT stream (the final BYE/ERROR of a close) */
	if ((c->flags & CF_BROKEN) || (!raw && (c->flags & CF_MQTT)))
		return 0;
	if (raw)
		rc = hbd_outq_push_raw(&w->chunks, &c->out, w->d->cfg->max_output, payload, len,
				       &queued);
	else
		rc = hbd_outq_push(&w->chunks, &c->out, w->d->cfg->max_output, type, seq, payload,
				   len, &queued);
	if (!rc) {
		hbd_tcp_mark_dirty(w, slot);
		return 0;
	}
	c->flags |= CF_BROKEN;
	if (rc == -ENOBUFS) {
		/* a peer that sends but never reads would pin the worker's buffers */
		HBD_STAT_ADD(w->st, slow_reader, 1);
		hb_dbg("tcp: worker %u slot %u: %zu bytes unsent: closing a slow reader", w->id,
		       slot, queued);
		if (!(c->flags & CF_SEND))
			hbd_outq_drop(&w->chunks, &c->out);
	} else {
		/* out of output memory: this connection cannot be served correctly */
		hb_warn("worker %u: output buffers exhausted, dropping connection", w->id);
		HBD_STAT_ADD(w->st, errors, 1);
	}
	return rc;
}

static int queue_frame(struct hbd_worker *w, uint32_t slot, uint8_t type, uint16_t seq,
		       const void *payload, uint16_t len)
{
	return queue_out(w, slot, type, seq, payload, len, false);
}

static void submit_send(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe = hbd_sqe(w);
	const uint8_t *p;
	uint32_t len;

	if (!sqe) {
		hbd_tcp_mark_dirty(w, slot); /* try again next iteration */
		return;
	}
	p = hbd_outq_peek(&w->chunks, c->out, &len);
	io_uring_prep_send(sqe, (int)slot, p, len, MSG_NOSIGNAL);
	sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_SEND, slot, c->gen, 0));
	c->flags |= CF_SEND;
}

void hbd_tcp_advance(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];

	if (c->state == CONN_CLOSING) {
		if (c->sink_pending)
			return;
		/* already closing: a final frame that does not fit leaves the connection broken */
		if (c->final_type == HB_BYE) {
			struct hb_bye b = { .reason = htobe16(c->final_code) };

			queue_frame(w, slot, HB_BYE, 0, &b, sizeof(b));
		} else if (c->final_type == HB_ERROR) {
			struct hb_error e = { .code = htobe16(c->final_code) };

			queue_frame(w, slot, HB_ERROR, 0, &e, sizeof(e));
		}
		c->final_type = 0;
		if (c->flags & CF_BROKEN) {
			if (!(c->flags & CF_SEND))
				hbd_outq_drop(&w->chunks, &c->out);
		} else if (c->out != HBD_NONE) {
			if (!(c->flags & CF_SEND))
				hbd_tcp_mark_dirty(w, slot);
			return;
		}
		if (c->flags & CF_SEND)
			return;
		c->state = CONN_SHUTDOWN;
		hbd_tcp_cancel_recv(w, slot);
	}
	if (c->state == CONN_SHUTDOWN &&
	    !(c->flags & (CF_RECV | CF_SEND | CF_COOKIE | CF_INSERT))) {
		if (hbd_tcp_close_direct(w, slot))
			return; /* the wheel's close deadline retries */
		c->state = CONN_CLOSED;
	}
}

/* An MQTT session that ends without its DISCONNECT (which spends the Will first): its Will
 * goes into the sink, acknowledged to no one (a slot no connection has). Not when hbd itself
 * ends the session by shutting down or handing over: the device did nothing wrong, and a
 * restart would otherwise write one Will per device. */
static void will(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hbd_ack a = { .slot = UINT32_MAX };
	int rc;

	if (w->draining || hbd_handing_off(w)) {
		hbd_mqtt_sess_reset(&w->mq[slot]);
		return;
	}
	rc = hbd_mqtt_sess_fire_will(&w->mq[slot], &w->sink, c->device_id, &a);

	if (rc > 0)
		HBD_STAT_ADD(w->st, mqtt_wills, 1);
	else if (rc < 0)
		HBD_STAT_ADD(w->st, errors, 1);
}

void hbd_tcp_close(struct hbd_worker *w, uint32_t slot, uint8_t final_type, uint16_t code)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hbd_daemon *d = w->d;

	if (!hbd_conn_live(c))
		return;
	hbd_tcp_pending_done(w, c);
	if (c->state == CONN_AUTHED) {
		uint64_t loc = hbd_loc(0, w->id, c->gen, slot);
		uint8_t reason = final_type == HB_BYE ? (uint8_t)code : 0;

		HBD_STAT_SUB(w->st, tcp_authed, 1);
		if (reason == HB_BYE_REVOKED)
			HBD_STAT_ADD(w->st, revoked, 1);
		hbd_presence(w, hbd_presence_end(reason), c->device_id, loc, NULL, 0);
		hbd_down_gone(w, loc);
		if (c->flags & CF_MQTT)
			will(w, slot);
	}
	c->state = CONN_CLOSING;
	c->final_type = final_type;
	c->final_code = (uint8_t)code;
	hbd_reasm_drop(&w->chunks, &c->partial);
	hbd_tcp_kernel_forget(w, c);
	if (c->device_id)
		hbd_devices_release(d->devices, c->device_id, hbd_loc(0, w->id, c->gen, slot));
	/* close deadline: a peer that never reads must not pin the slot forever */
	hb_wheel_del(&w->tcp_wheel, slot);
	hb_wheel_add(&w->tcp_wheel, slot, w->now_ms + d->lim.timeout_ms);
	hbd_tcp_advance(w, slot);
}

void hbd_tcp_send(struct hbd_worker *w, uint32_t slot, uint8_t type, uint16_t seq,
		  const void *payload, uint16_t len)
{
	if (queue_frame(w, slot, type, seq, payload, len) == -ENOBUFS)
		hbd_tcp_close(w, slot, 0, 0);
}

void hbd_tcp_send_raw(struct hbd_worker *w, uint32_t slot, const void *bytes, uint16_t len)
{
	if (queue_out(w, slot, 0, 0, bytes, len, true) == -ENOBUFS)
		hbd_tcp_close(w, slot, 0, 0);
}

void hbd_tcp_send_error(struct hbd_worker *w, uint32_t slot, uint16_t code)
{
	struct hb_error e = { .code = htobe16(code) };

	hbd_tcp_send(w, slot, HB_ERROR, 0, &e, sizeof(e));
}

void hbd_tcp_on_cookie(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	struct hbd_conn *c =
		hbd_conn_of(w, hbd_ud_index(cqe->user_data), hbd_ud_gen(cqe->user_data));

	if (!c)
		return;
	hbd_tcp_cookie_done(w, c, cqe->res);
	hbd_tcp_advance(w, hbd_ud_index(cqe->user_data));
}

void hbd_tcp_on_sockhash(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	uint32_t slot = hbd_ud_index(cqe->user_data);
	struct hbd_conn *c = hbd_conn_of(w, slot, hbd_ud_gen(cqe->user_data));
	int rc = hbd_tcp_sockhash_done(w, c, cqe->res);

	if (!c)
		return;
	if (rc < 0 && c->state == CONN_AUTHED && hbd_map_full(w, rc, "sockhash", c->device_id)) {
		/* --on-map-full refuse: ERROR(FULL) instead of the WELCOME still held */
		hbd_outq_drop(&w->chunks, &c->out);
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_FULL);
	}
	if (c->out != HBD_NONE)
		hbd_tcp_mark_dirty(w, slot);
	hbd_tcp_advance(w, slot);
}

/* The send failed, or must not be finished: whatever is queued goes, and so does the peer. */
static void send_failed(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];

	c->flags |= CF_BROKEN;
	hbd_outq_drop(&w->chunks, &c->out);
	hbd_tcp_close(w, slot, 0, 0);
	hbd_tcp_advance(w, slot);
}

void hbd_tcp_on_send(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	uint32_t slot = hbd_ud_index(cqe->user_data);
	struct hbd_conn *c = hbd_conn_of(w, slot, hbd_ud_gen(cqe->user_data));
	uint32_t len;

	if (!c)
		return;
	c->flags &= ~CF_SEND;
	if (cqe->res < 0) {
		hb_dbg("tcp: worker %u slot %u: send: %s", w->id, slot, strerror(-cqe->res));
		send_failed(w, slot);
		return;
	}
	hbd_outq_peek(&w->chunks, c->out, &len);
	if (w->d->kern.tcp_offload && c->state == CONN_AUTHED && (uint32_t)cqe->res < len) {
		/* A short send means the peer left the send buffer full. In offload mode the
		 * kernel writes PONGs into this same stream (sk_skb redirect), so sending the rest
		 * later could put a PONG in the middle of our frame. The peer is not reading
		 * anyway: close rather than risk a stream it would misparse.
		 */
		hb_dbg("tcp: worker %u slot %u: short send (%d of %u): closing", w->id, slot,
		       cqe->res, len);
		HBD_STAT_ADD(w->st, errors, 1);
		send_failed(w, slot);
		return;
	}
	hbd_outq_sent(&w->chunks, &c->out, (uint32_t)cqe->res);
	if (c->flags & CF_BROKEN)
		hbd_outq_drop(&w->chunks, &c->out);
	if (c->out != HBD_NONE)
		submit_send(w, slot);
	else
		hbd_tcp_advance(w, slot);
}

void hbd_tcp_on_close(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	uint32_t slot = hbd_ud_index(cqe->user_data);
	struct hbd_conn *c = hbd_conn_of(w, slot, hbd_ud_gen(cqe->user_data));

	if (!c || (c->state != CONN_CLOSED && c->state != CONN_HANDED))
		return;
	if (cqe->res < 0) {
		/* the slot stays taken in the kernel's table; nothing better to do than say so */
		hb_err("worker %u: close of slot %u: %s", w->id, slot, strerror(-cqe->res));
		HBD_STAT_ADD(w->st, errors, 1);
	}
	hb_wheel_del(&w->tcp_wheel, slot);
	hbd_outq_drop(&w->chunks, &c->out);
	hbd_tcp_pending_done(w, c); /* one that left without a close (handed over, dropped) */
	if (c->flags & CF_COUNTED)
		__atomic_fetch_sub(&w->d->tcp_clients, 1, __ATOMIC_RELAXED);
	if (w->src && w->src[slot] != HBD_KEY_NONE) {
		hbd_keytab_conn_close(&w->d->sources, w->src[slot]);
		w->src[slot] = HBD_KEY_NONE;
	}
	HBD_STAT_SUB(w->st, tcp_active, 1);
	if (c->state == CONN_HANDED)
		HBD_STAT_ADD(w->st, handoff_out, 1); /* not closed: it lives on in the new daemon */
	else
		HBD_STAT_ADD(w->st, tcp_closed, 1);
	c->gen++;
	c->state = CONN_FREE;
	c->flags = 0;
	w->nconns--;
}

void hbd_tcp_kill(struct hbd_worker *w, uint32_t slot, uint16_t gen, uint8_t reason)
{
	struct hbd_conn *c = hbd_conn_of(w, slot, gen);

	if (c && hbd_conn_live(c)) {
		hb_dbg("tcp: device %" PRIu64 " slot %u: ending (BYE %u)", c->device_id, slot,
		       reason);
		hbd_tcp_close(w, slot, reason == HBD_NO_BYE ? 0 : HB_BYE, reason);
	}
}

void hbd_tcp_flush(struct hbd_worker *w)
{
	for (uint32_t i = 0; i < w->nrearm; i++) {
		uint32_t slot = w->rearm[i];
		struct hbd_conn *c = &w->conns[slot];

		c->flags &= ~CF_REARM;
		if (hbd_conn_live(c) && !w->ho.exporting && rearm(w, slot))
			hbd_tcp_close(w, slot, 0, 0);
	}
	w->nrearm = 0;
	/* submit_send may re-mark a slot dirty (SQ full): walk a snapshot of the count */
	for (uint32_t i = 0, n = w->ndirty; i < n; i++) {
		uint32_t slot = w->dirty[i];
		struct hbd_conn *c = &w->conns[slot];

		c->flags &= ~CF_DIRTY;
		if (c->state != CONN_FREE && !(c->flags & (CF_SEND | CF_INSERT)) &&
		    c->out != HBD_NONE)
			submit_send(w, slot);
	}
	/* entries re-added during the walk were appended after n */
	if (w->ndirty) {
		uint32_t n = 0;

		for (uint32_t i = 0; i < w->ndirty; i++) {
			if (w->conns[w->dirty[i]].flags & CF_DIRTY)
				w->dirty[n++] = w->dirty[i];
		}
		w->ndirty = n;
	}
}

void hbd_tcp_drain(struct hbd_worker *w)
{
	for (uint32_t slot = 0; slot < w->nslots; slot++) {
		if (hbd_conn_live(&w->conns[slot]))
			hbd_tcp_close(w, slot, HB_BYE, HB_BYE_SHUTDOWN);
	}
}
