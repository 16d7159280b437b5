// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP input: received bytes to frames (reasm.c), each frame to its handler, and the replies. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "hello.h"
#include "log.h"
#include "mqtt_conn.h"
#include "reasm.h"
#include "tcp_impl.h"
#include "vg.h"

/* ERROR(NOT_AUTHED) replies a connection gets before its HELLO, the last one with the close */
#define HBD_NOAUTH_REPLIES 4

static void tcp_hello(struct hbd_worker *w, uint32_t slot, const struct hb_frame *f)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hbd_daemon *d = w->d;
	struct hbd_hello_result r;
	uint8_t wel[HB_WELCOME_FLAGS_LEN];
	struct hb_hello_msg h;
	uint32_t src;
	unsigned n, pending;
	bool over;
	size_t len;
	int rc;

	if (c->state != CONN_NEW) {
		/* one HELLO per connection: re-authenticating means a new connection */
		HBD_STAT_ADD(w->st, frames_bad, 1);
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_MALFORMED);
		return;
	}
	/* a connection was let in without counting against --max-clients (tcp_open.c); as a
	 * device it does, and the devices may have filled them meanwhile (this one is still
	 * pending, so not among them) */
	n = __atomic_load_n(&d->tcp_clients, __ATOMIC_RELAXED);
	pending = __atomic_load_n(&d->tcp_pending, __ATOMIC_RELAXED);
	if (n > pending && n - pending >= d->cfg->max_clients) {
		HBD_STAT_ADD(w->st, full, 1);
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_FULL);
		return;
	}
	hb_hello_parse(f->payload, f->len, &h); /* the decoder let only its two lengths by */
	src = w->src ? w->src[slot] : HBD_KEY_NONE;
	/* An address that failed too often is still checked: devices behind one NAT share it
	 * with whoever spent its budget, and one that proves itself gets in. What the budget
	 * changes is the answer to a failure (ERROR(RATE)). A check costs what it costs from any
	 * other address, and --accept-rate bounds how many a second reach this point. */
	over = src != HBD_KEY_NONE && hbd_keytab_over_at(&d->sources, src, hb_mono_us());
	rc = hbd_hello_check(w, &h, hbd_loc(0, w->id, c->gen, slot), &r);
	if (rc && over) {
		HBD_STAT_ADD(w->st, auth_rate_limited, 1);
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_RATE);
		return;
	}
	if (rc) {
		static uint64_t last_log;

		HBD_STAT_ADD(w->st, auth_fail, 1);
		if (rc > 0 && src != HBD_KEY_NONE)
			hbd_keytab_charge_at(&d->sources, src, hb_mono_us());
		if (hbd_log_due(&last_log, w->now_ms, 1000))
			hb_info("tcp: HELLO from device %" PRIu64
				" refused: %s (logged at most once "
				"a second)",
				r.device_id, hbd_auth_str(rc));
		hbd_tcp_close(w, slot, HB_ERROR, rc < 0 ? HB_ERR_INTERNAL : HB_ERR_AUTH);
		return;
	}
	c->device_id = r.device_id;
	c->state = CONN_AUTHED;
	hbd_tcp_pending_done(w, c);
	c->last_seen = hbd_tcp_now32(w);
	hb_wheel_del(&w->tcp_wheel, slot);
	if (hbd_tcp_kernel_admit(w, slot, r.device_id, 0)) {
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_FULL);
		return;
	}
	/* from --hello-timeout to the heartbeat timeout: not due (nor looked at) before that;
	 * one the kernel keeps alive leaves the wheel, since the kernel is its timer */
	if (!(c->flags & CF_KEEPALIVE))
		hb_wheel_add(&w->tcp_wheel, slot, w->now_ms + d->lim.timeout_ms);
	len = hbd_welcome(w, r.token, c->flags & CF_KEEPALIVE ? HB_WELCOME_KEEPALIVE : 0, wel);
	hbd_tcp_send(w, slot, HB_WELCOME, f->seq, wel, (uint16_t)len);
	HBD_STAT_ADD(w->st, auth_ok, 1);
	HBD_STAT_ADD(w->st, tcp_authed, 1);
	hb_dbg("tcp: device %" PRIu64 " authenticated (worker %u slot %u)", r.device_id, w->id,
	       slot);
	hbd_presence(w, HBD_EV_ONLINE, r.device_id, hbd_loc(0, w->id, c->gen, slot), NULL, 0);
	hbd_supersede(w, r.old_loc);
}

static void tcp_data(struct hbd_worker *w, uint32_t slot, const struct hb_frame *f)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hbd_ack a = { .slot = slot, .gen = c->gen, .seq = f->seq };
	struct timespec now;
	uint8_t key[16];

	hbd_key_u64(c->device_id, key);
	if (c->sink_pending == UINT16_MAX || !hbd_keytab_take(&w->d->data_rl, key, hb_mono_us())) {
		HBD_STAT_ADD(w->st, data_rate_limited, 1);
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_RATE);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &now); /* the sink record's time, to the ns */
	if (hbd_sink_add(&w->sink, c->device_id, false, f->seq, &now, f->payload, f->len, &a)) {
		HBD_STAT_ADD(w->st, errors, 1);
		hbd_tcp_send_error(w, slot, HB_ERR_INTERNAL);
		return;
	}
	c->sink_pending++;
}

static void handle_frame(struct hbd_worker *w, uint32_t slot, const struct hb_frame *f)
{
	struct hbd_conn *c = &w->conns[slot];
	bool authed = c->state == CONN_AUTHED;

	if (authed)
		hbd_tcp_heard(w, slot);
	switch (f->type) {
	case HB_HELLO:
		HBD_STAT_ADD(w->st, frames_hello, 1);
		tcp_hello(w, slot, f);
		return;
	case HB_PING:
		HBD_STAT_ADD(w->st, frames_ping, 1);
		if (!authed)
			break;
		/* offload mode: the kernel did not answer this one (not in the sockhash yet, or
		 * the verdict passed it); the daemon is the fallback on every path
		 */
		HBD_STAT_ADD(w->st, pings_user, 1);
		hbd_tcp_send(w, slot, HB_PONG, f->seq, f->payload, f->len);
		return;
	case HB_BEAT:
		/* a heartbeat that wants no answer: last_seen above is all it does (before the
		 * HELLO it is refused like any frame) */
		HBD_STAT_ADD(w->st, frames_beat, 1);
		if (!authed)
			break;
		HBD_STAT_ADD(w->st, beats_user, 1);
		return;
	case HB_ECHO:
		HBD_STAT_ADD(w->st, frames_echo, 1);
		if (!authed)
			break;
		hbd_tcp_send(w, slot, HB_ECHO, f->seq, f->payload, f->len);
		return;
	case HB_DATA:
		HBD_STAT_ADD(w->st, frames_data, 1);
		if (!authed)
			break;
		tcp_data(w, slot, f);
		return;
	case HB_BYE:
		HBD_STAT_ADD(w->st, frames_bye, 1);
		hbd_tcp_close(w, slot, 0, 0);
		return;
	case HB_ACK:
		/* the device acknowledges a downlink (DOWN) with that frame's seq */
		if (!authed)
			break;
		hbd_down_acked(w, hbd_loc(0, w->id, c->gen, slot), f->seq);
		return;
	default:
		/* WELCOME, PONG, ERROR, DOWN are server frames: a client sending them is broken */
		HBD_STAT_ADD(w->st, frames_other, 1);
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_MALFORMED);
		return;
	}
	/* Before its HELLO a connection gets a few of these, the last one with the close: a peer
	 * that sends and never reads could otherwise grow a --max-output queue for each (and a
	 * few thousand such peers empty the worker's chunk pool, leaving no buffer for anyone's
	 * WELCOME, ACK or DOWN). A handful fit the socket's own buffer and cost no chunk.
	 */
	if (++c->noauth >= HBD_NOAUTH_REPLIES) {
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_NOT_AUTHED);
		return;
	}
	hbd_tcp_send_error(w, slot, HB_ERR_NOT_AUTHED);
}

static void bad_frame(struct hbd_worker *w, uint32_t slot, enum hb_decode bad)
{
	if (bad == HB_DECODE_TOO_LARGE)
		HBD_STAT_ADD(w->st, too_large, 1);
	else
		HBD_STAT_ADD(w->st, frames_bad, 1);
	hb_dbg("tcp: worker %u slot %u: %s: closing", w->id, slot, hb_decode_str(bad));
	hbd_tcp_close(w, slot, HB_ERROR,
		      bad == HB_DECODE_TOO_LARGE ? HB_ERR_TOO_LARGE : HB_ERR_MALFORMED);
}

struct tcp_feed {
	struct hbd_worker *w;
	uint32_t slot;
};

static bool feed_frame(void *ctx, const struct hb_frame *f)
{
	struct tcp_feed *t = ctx;

	handle_frame(t->w, t->slot, f);
	return hbd_conn_live(&t->w->conns[t->slot]);
}

int hbd_tcp_feed(struct hbd_worker *w, uint32_t slot, const uint8_t *p, size_t n,
		 enum hb_decode *bad)
{
	struct tcp_feed t = { w, slot };

	return hbd_reasm_feed(&w->chunks, &w->conns[slot].partial, (uint16_t)w->d->cfg->max_payload,
			      p, n, feed_frame, &t, bad);
}

/* Received bytes to the frame decoder (reasm.c keeps an incomplete frame in c->partial). */
static void tcp_input(struct hbd_worker *w, uint32_t slot, const uint8_t *p, size_t n)
{
	enum hb_decode bad;
	int rc;

	if (w->conns[slot].flags & CF_MQTT) {
		hbd_mqtt_input(w, slot, p, n);
		return;
	}
	rc = hbd_tcp_feed(w, slot, p, n, &bad);
	if (rc == -ENOMEM) {
		HBD_STAT_ADD(w->st, errors, 1);
		hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_INTERNAL);
	} else if (rc == -EBADMSG) {
		bad_frame(w, slot, bad);
	}
}

static void give_back_rx(struct hbd_worker *w, uint16_t bid)
{
	io_uring_buf_ring_add(w->rx_br, w->rx_mem + (size_t)bid * w->rx_size, w->rx_size, bid,
			      io_uring_buf_ring_mask(w->rx_count), (int)w->rx_ret++);
}

/* The bytes a recv CQE carries, to the frame decoder, and its buffer back to the ring. */
static void take_rx(struct hbd_worker *w, uint32_t slot, struct io_uring_cqe *cqe)
{
	bool buf = cqe->flags & IORING_CQE_F_BUFFER;
	uint16_t bid = (uint16_t)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);

	if (cqe->res > 0 && buf && hbd_conn_live(&w->conns[slot])) {
		uint8_t *p = w->rx_mem + (size_t)bid * w->rx_size;

		HBD_KERNEL_WROTE(p, cqe->res);
		tcp_input(w, slot, p, (size_t)cqe->res);
	}
	if (buf)
		give_back_rx(w, bid);
}

/* The socket said EOF or an error: the peer is gone. One the kernel kept alive and then closed
 * for want of answers (keepalive or user timeout, which leave ETIMEDOUT, or the ICMP error
 * that came first) is expired; it cannot be told so. */
static void peer_gone(struct hbd_worker *w, uint32_t slot, int res)
{
	struct hbd_conn *c = &w->conns[slot];
	bool timed_out = res == -ETIMEDOUT || res == -EHOSTUNREACH || res == -ENETUNREACH;

	if (res < 0 && res != -ECONNRESET)
		hb_dbg("tcp: worker %u slot %u: recv: %s", w->id, slot, strerror(-res));
	if (timed_out && c->state == CONN_AUTHED && (c->flags & CF_KEEPALIVE)) {
		HBD_STAT_ADD(w->st, expired_tcp, 1);
		HBD_STAT_ADD(w->st, keepalive_expired, 1);
		hb_dbg("tcp: device %" PRIu64 " stopped answering keepalive probes (%s): expired",
		       c->device_id, strerror(-res));
		c->flags |= CF_BROKEN; /* nothing can reach it: no BYE */
		hbd_tcp_close(w, slot, HB_BYE, HB_BYE_EXPIRED);
		return;
	}
	hbd_tcp_close(w, slot, 0, 0);
}

/* Keepalive mode: a one-shot recv the poll asked for (tcp_conn.c, hbd_tcp_read). */
static void on_read(struct hbd_worker *w, uint32_t slot, struct io_uring_cqe *cqe)
{
	struct hbd_conn *c = &w->conns[slot];
	int res = cqe->res;

	c->flags &= ~CF_READ;
	if (!(c->flags & CF_POLL))
		c->flags &= ~CF_RECV;
	take_rx(w, slot, cqe);
	if (!hbd_conn_live(c)) {
		hbd_tcp_advance(w, slot);
		return;
	}
	if (res > 0 || res == -ENOBUFS) {
		/* read on until the socket says it is empty (-EAGAIN), at its end or its error
		 * (once the buffers are back in the ring): wakeups that come while a poll
		 * completion is made are folded into it, so its mask may not tell that a reset
		 * waits behind the data, and no further wakeup would come for it */
		c->flags |= CF_MORE;
		hbd_tcp_want_rearm(w, slot);
		return;
	}
	if (res == -EAGAIN) {
		if (c->flags & CF_MORE)
			hbd_tcp_want_rearm(w, slot);
		return;
	}
	peer_gone(w, slot, res);
}

void hbd_tcp_on_recv(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	uint32_t slot = hbd_ud_index(cqe->user_data);
	struct hbd_conn *c = hbd_conn_of(w, slot, hbd_ud_gen(cqe->user_data));
	bool more = cqe->flags & IORING_CQE_F_MORE;

	if (!c) {
		if (cqe->flags & IORING_CQE_F_BUFFER)
			give_back_rx(w, (uint16_t)(cqe->flags >> IORING_CQE_BUFFER_SHIFT));
		return;
	}
	if (w->d->kern.tcp_keepalive) {
		on_read(w, slot, cqe);
		return;
	}
	if (!more)
		c->flags &= ~CF_RECV;
	take_rx(w, slot, cqe);
	if (more)
		return;
	if (hbd_conn_live(c)) {
		if (w->ho.exporting && cqe->res == -ECANCELED)
			return; /* quiesced for the handoff: the socket goes on in the new daemon */
		if (cqe->res == -ENOBUFS || cqe->res > 0) {
			/* out of provided buffers (or the multishot simply ended): re-arm once
			 * the buffers of this batch are back in the ring
			 */
			hbd_tcp_want_rearm(w, slot);
			return;
		}
		peer_gone(w, slot, cqe->res); /* EOF or error */
		return;
	}
	hbd_tcp_advance(w, slot);
}

void hbd_tcp_on_poll(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	uint32_t slot = hbd_ud_index(cqe->user_data);
	struct hbd_conn *c = hbd_conn_of(w, slot, hbd_ud_gen(cqe->user_data));
	bool more = cqe->flags & IORING_CQE_F_MORE;
	int res = cqe->res;

	if (!c)
		return;
	if (!more) {
		c->flags &= ~CF_POLL;
		if (!(c->flags & CF_READ))
			c->flags &= ~CF_RECV;
	}
	if (!hbd_conn_live(c)) {
		hbd_tcp_advance(w, slot);
		return;
	}
	if (res > 0) { /* data, an error or a hangup: the recv says which */
		if (hbd_tcp_read(w, slot)) {
			hbd_tcp_close(w, slot, HB_ERROR, HB_ERR_INTERNAL);
			return;
		}
	}
	if (more)
		return;
	if (w->ho.exporting && res == -ECANCELED)
		return; /* quiesced for the handoff: the socket goes on in the new daemon */
	if (res < 0 && res != -ECANCELED) {
		hb_dbg("tcp: worker %u slot %u: poll: %s", w->id, slot, strerror(-res));
		HBD_STAT_ADD(w->st, errors, 1);
		hbd_tcp_close(w, slot, 0, 0);
		return;
	}
	hbd_tcp_want_rearm(w, slot); /* the multishot ended: armed again at the loop's end */
}

void hbd_tcp_ack(struct hbd_worker *w, const struct hbd_ack *a, bool ok)
{
	struct hbd_conn *c = hbd_conn_of(w, a->slot, a->gen);

	if (!c || !c->sink_pending)
		return;
	c->sink_pending--;
	if (ok && (c->flags & CF_MQTT)) {
		hbd_mqtt_ack(w, a->slot, a->seq);
		HBD_STAT_ADD(w->st, data_acked, 1);
	} else if (ok) {
		hbd_tcp_send(w, a->slot, HB_ACK, a->seq, NULL, 0);
		HBD_STAT_ADD(w->st, data_acked, 1);
	} else {
		hbd_tcp_close(w, a->slot, HB_ERROR, HB_ERR_INTERNAL);
	}
	hbd_tcp_advance(w, a->slot);
}

int hbd_tcp_send_down(struct hbd_worker *w, uint32_t slot, uint16_t gen, uint16_t seq,
		      const void *payload, uint16_t len)
{
	struct hbd_conn *c = hbd_conn_of(w, slot, gen);

	if (!c || c->state != CONN_AUTHED)
		return -ENOENT;
	if (c->flags & CF_MQTT)
		return hbd_mqtt_send_down(w, slot, seq, payload, len);
	hbd_tcp_send(w, slot, HB_DOWN, seq, payload, len);
	return c->flags & CF_BROKEN ? -ENOMEM : 0;
}
