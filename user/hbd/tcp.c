// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP connections on direct descriptors: accept, frame reassembly, replies, expiry, close.
 *
 * Connection lifecycle, all of it managed in this file:
 *
 *   multishot accept into a direct descriptor (the kernel picks the slot)
 *     -> NEW: SO_COOKIE requested (offload mode), multishot recv armed, on the expiry wheel
 *        (a connection that never authenticates is closed after the timeout too)
 *     -> HELLO verified (MAC, clock window, replay): conns[cookie] = {device_id, AUTHED} and,
 *        in offload mode, the socket into the sockhash (a regular fd made for it and closed
 *        again) BEFORE the WELCOME leaves, so the kernel answers the first PING; the device
 *        table now names (worker, slot, gen) as the device's session and an older session of
 *        the device is told to go (BYE SUPERSEDED)
 *     -> AUTHED: PING -> PONG, ECHO -> ECHO, DATA -> sink then ACK; every frame is proof of
 *        life (last_seen); in offload mode the kernel's last_seen_ns counts too
 *     -> CLOSING (client BYE or EOF, error, malformed frame, expiry, superseded, drain):
 *        conns entry deleted so the kernel stops answering, input ignored, the device released;
 *        waits for pending sink ACKs, then queues the final BYE/ERROR, then drains output
 *     -> SHUTDOWN: recv cancelled; waits for the last CQEs of the recv, cookie and fd ops
 *     -> CLOSED: io_uring close of the direct descriptor submitted
 *     -> FREE at its CQE: gen + 1. Only then can the kernel hand the slot to a new connection,
 *        so nothing of the old connection is in flight when a new one takes the slot; the gen
 *        in user_data and in device-table/sink references catches anything addressed to it.
 * A connection stuck in CLOSING..CLOSED for a whole timeout (a peer that never reads) has its
 * operations cancelled by the wheel and is closed anyway.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "reasm.h"
#include "uring_sock.h"
#include "vg.h"
#include "worker.h"

static inline uint32_t clock32(const struct hbd_worker *w)
{
	return (uint32_t)w->now_ms;
}

static inline bool conn_live(const struct hbd_conn *c)
{
	return c->state == CONN_NEW || c->state == CONN_AUTHED;
}

static struct hbd_conn *conn_of(struct hbd_worker *w, uint32_t slot, uint16_t gen)
{
	if (slot >= w->nslots || w->conns[slot].gen != gen || w->conns[slot].state == CONN_FREE)
		return NULL;
	return &w->conns[slot];
}

static int arm_recv(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe = hbd_sqe(w);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_recv_multishot(sqe, (int)slot, NULL, 0, 0);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
	sqe->buf_group = HBD_BGID_TCP;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_RECV, slot, c->gen, 0));
	c->flags |= CF_RECV;
	return 0;
}

static void mark_dirty(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];

	if (!(c->flags & CF_DIRTY)) {
		c->flags |= CF_DIRTY;
		w->dirty[w->ndirty++] = slot;
	}
}

static void conn_close(struct hbd_worker *w, uint32_t slot, uint8_t final_type, uint16_t code);

static void drop_output(struct hbd_worker *w, struct hbd_conn *c)
{
	while (c->out != HBD_NONE) {
		uint32_t next = hbd_chunk(&w->chunks, c->out)->next;

		hbd_chunk_put(&w->chunks, c->out);
		c->out = next;
	}
}

/* Queues one frame on the connection's output. Frames never straddle chunks, and appending
 * to the chunk a send is reading from is safe: the kernel only reads the range it was given.
 */
static void send_frame(struct hbd_worker *w, uint32_t slot, uint8_t type, uint16_t seq,
		       const void *payload, uint16_t len)
{
	struct hbd_conn *c = &w->conns[slot];
	size_t need = hb_frame_size(HB_TCP, len);
	struct hbd_chunk *k = NULL;
	uint32_t tail = c->out, idx;

	size_t queued = 0;

	if (c->flags & CF_BROKEN)
		return;
	if (tail != HBD_NONE) {
		for (;;) {
			k = hbd_chunk(&w->chunks, tail);
			queued += (size_t)(k->len - k->off);
			if (k->next == HBD_NONE)
				break;
			tail = k->next;
		}
	}
	if (queued + need > w->d->cfg->max_output) {
		/* a peer that sends but never reads would pin the worker's buffers */
		HBD_STAT_ADD(w->st, slow_reader, 1);
		hb_dbg("tcp: worker %u slot %u: %zu bytes unsent: closing a slow reader", w->id, slot,
		       queued);
		c->flags |= CF_BROKEN;
		if (!(c->flags & CF_SEND))
			drop_output(w, c);
		conn_close(w, slot, 0, 0);
		return;
	}
	if (!k || hbd_chunk_cap(&w->chunks, tail) - k->len < need) {
		idx = hbd_chunk_alloc(&w->chunks, need);
		if (idx == HBD_NONE) {
			/* out of output memory: this connection cannot be served correctly */
			hb_warn("worker %u: output buffers exhausted, dropping connection", w->id);
			HBD_STAT_ADD(w->st, errors, 1);
			c->flags |= CF_BROKEN;
			return;
		}
		if (k)
			k->next = idx;
		else
			c->out = idx;
		k = hbd_chunk(&w->chunks, idx);
		tail = idx;
	}
	k->len += (uint16_t)hb_encode(k->data + k->len, hbd_chunk_cap(&w->chunks, tail) - k->len,
				      HB_TCP, type, seq, 0, payload, len);
	mark_dirty(w, slot);
}

static void send_error(struct hbd_worker *w, uint32_t slot, uint16_t code)
{
	struct hb_error e = { .code = htobe16(code) };

	send_frame(w, slot, HB_ERROR, 0, &e, sizeof(e));
}

static void submit_send(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hbd_chunk *k = hbd_chunk(&w->chunks, c->out);
	struct io_uring_sqe *sqe = hbd_sqe(w);

	if (!sqe) {
		mark_dirty(w, slot); /* try again next iteration */
		return;
	}
	io_uring_prep_send(sqe, (int)slot, k->data + k->off, k->len - k->off, MSG_NOSIGNAL);
	sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_SEND, slot, c->gen, 0));
	c->flags |= CF_SEND;
}

/* Moves a closing connection along its lifecycle as far as its in-flight operations allow. */
static void advance(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe;

	if (c->state == CONN_CLOSING) {
		if (c->sink_pending)
			return;
		if (c->final_type == HB_BYE) {
			struct hb_bye b = { .reason = htobe16(c->final_code) };

			send_frame(w, slot, HB_BYE, 0, &b, sizeof(b));
		} else if (c->final_type == HB_ERROR) {
			send_error(w, slot, c->final_code);
		}
		c->final_type = 0;
		if (c->flags & CF_BROKEN) {
			if (!(c->flags & CF_SEND))
				drop_output(w, c);
		} else if (c->out != HBD_NONE) {
			if (!(c->flags & CF_SEND))
				mark_dirty(w, slot);
			return;
		}
		if (c->flags & CF_SEND)
			return;
		c->state = CONN_SHUTDOWN;
		if ((c->flags & CF_RECV) && !(c->flags & CF_CANCEL)) {
			sqe = hbd_sqe(w);
			if (sqe) {
				io_uring_prep_cancel64(sqe, hbd_ud(HBD_OP_RECV, slot, c->gen, 0), 0);
				sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
				io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, slot, c->gen, 0));
				c->flags |= CF_CANCEL;
			}
		}
	}
	if (c->state == CONN_SHUTDOWN && !(c->flags & (CF_RECV | CF_SEND | CF_COOKIE | CF_INSERT))) {
		sqe = hbd_sqe(w);
		if (!sqe)
			return; /* the wheel's close deadline retries */
		io_uring_prep_close_direct(sqe, slot);
		io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CLOSE, slot, c->gen, 0));
		c->state = CONN_CLOSED;
	}
}

/* Starts closing a live connection; final_type HB_BYE/HB_ERROR (with its code) or 0. */
static void conn_close(struct hbd_worker *w, uint32_t slot, uint8_t final_type, uint16_t code)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hbd_daemon *d = w->d;

	if (!conn_live(c))
		return;
	if (c->state == CONN_AUTHED) {
		uint64_t loc = hbd_loc(0, w->id, c->gen, slot);
		uint8_t reason = final_type == HB_BYE ? (uint8_t)code : 0;

		HBD_STAT_SUB(w->st, tcp_authed, 1);
		if (reason == HB_BYE_REVOKED)
			HBD_STAT_ADD(w->st, revoked, 1);
		hbd_presence(w, hbd_presence_end(reason), c->device_id, loc, NULL, 0);
		hbd_down_gone(w, loc);
	}
	c->state = CONN_CLOSING;
	c->final_type = final_type;
	c->final_code = (uint8_t)code;
	hbd_reasm_drop(&w->chunks, &c->partial);
	if (d->tcp_offload && c->cookie) {
		int rc = hbd_maps_conn_delete(&d->maps, c->cookie);

		if (rc)
			hb_dbg("conns delete %" PRIu64 ": %s", c->cookie, strerror(-rc));
	}
	if (c->device_id)
		hbd_devices_release(d->devices, c->device_id, hbd_loc(0, w->id, c->gen, slot));
	/* close deadline: a peer that never reads must not pin the slot forever */
	hb_wheel_del(&w->tcp_wheel, slot);
	hb_wheel_add(&w->tcp_wheel, slot, w->now_ms + d->timeout_ms);
	advance(w, slot);
}

/* Admission of a connection accept.c took into slot: the daemon's and the source's limits,
 * then the cookie (offload mode) and the first recv, hard-linked so the cookie is known before
 * the first frame is handled.
 */
void hbd_tcp_open(struct hbd_worker *w, uint32_t slot, const uint8_t addr[16])
{
	struct hbd_daemon *d = w->d;
	struct hbd_conn *c;
	uint32_t n, count = 0;
	uint8_t key[16];
	int rc;

	if (slot >= w->nslots || w->conns[slot].state != CONN_FREE) {
		hb_err("worker %u: accept into slot %u that is not free", w->id, slot);
		HBD_STAT_ADD(w->st, errors, 1);
		return;
	}
	c = &w->conns[slot];
	c->cookie = 0;
	c->device_id = 0;
	c->last_seen = clock32(w);
	c->partial = c->out = HBD_NONE;
	c->sink_pending = 0;
	c->state = CONN_NEW;
	c->flags = CF_COUNTED;
	c->final_type = 0;
	w->nconns++;
	HBD_STAT_ADD(w->st, tcp_accepted, 1);
	HBD_STAT_ADD(w->st, tcp_active, 1);
	/* until it authenticates, a connection has --hello-timeout, not the heartbeat timeout */
	hb_wheel_add(&w->tcp_wheel, slot, w->now_ms + d->hello_timeout_ms);
	n = __atomic_fetch_add(&d->tcp_clients, 1, __ATOMIC_RELAXED);
	if (d->track_sources) {
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
			conn_close(w, slot, HB_ERROR, HB_ERR_FULL);
			return;
		}
		/* -ENOMEM (table at its size limit): admitted untracked rather than refused */
	}
	if (n >= d->cfg->max_clients || w->draining) {
		if (!w->draining)
			HBD_STAT_ADD(w->st, full, 1);
		conn_close(w, slot, w->draining ? HB_BYE : HB_ERROR,
			   w->draining ? HB_BYE_SHUTDOWN : HB_ERR_FULL);
		return;
	}
	if (d->tcp_offload) {
		struct io_uring_sqe *sqe = hbd_sqe(w);

		if (sqe) {
			hb_prep_getsockopt(sqe, (int)slot, SOL_SOCKET, SO_COOKIE, &c->cookie,
					    sizeof(c->cookie));
			/* hard link: the cookie is known before the first frame is handled */
			sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;
			io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_COOKIE, slot, c->gen, 0));
			c->flags |= CF_COOKIE;
		}
	}
	if (arm_recv(w, slot))
		conn_close(w, slot, HB_ERROR, HB_ERR_INTERNAL);
}

void hbd_tcp_on_cookie(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	struct hbd_conn *c = conn_of(w, hbd_ud_index(cqe->user_data), hbd_ud_gen(cqe->user_data));

	if (!c)
		return;
	c->flags &= ~CF_COOKIE;
	HBD_KERNEL_WROTE(&c->cookie, sizeof(c->cookie));
	if (cqe->res < 0) {
		hb_warn("worker %u: SO_COOKIE: %s: the kernel fast path will not serve this "
			"connection",
			w->id, strerror(-cqe->res));
		c->cookie = 0;
	}
	advance(w, hbd_ud_index(cqe->user_data));
}

/* The kernel answers a connection's heartbeats once the socket is in the sockhash, and it goes
 * in when it authenticates, not when it connects: HELLO, and whatever a peer that never
 * authenticates sends, come to the daemon straight, without the stream parser and the psock's
 * kworker on the way (setup: docs/SETUP.md). The map takes only a regular fd, hence the
 * install; the WELCOME is held (CF_INSERT) until the socket is in, so that the device's first
 * PING finds it there. Whatever arrived meanwhile goes through the parser on hbd's next read.
 */
static void join_sockhash(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe = hbd_sqe(w);

	if (!sqe) {
		hbd_map_full(w, -EBUSY, "sockhash", c->device_id); /* counted; served here */
		return;
	}
	hb_prep_fixed_fd_install(sqe, (int)slot);
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_SOCKHASH, slot, c->gen, 0));
	c->flags |= CF_INSERT;
}

void hbd_tcp_on_sockhash(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	uint32_t slot = hbd_ud_index(cqe->user_data);
	struct hbd_conn *c = conn_of(w, slot, hbd_ud_gen(cqe->user_data));
	int rc = cqe->res;

	if (rc >= 0) {
		int fd = rc;

		/* a connection closing meanwhile has no conns entry left: not worth adding */
		rc = c && c->state == CONN_AUTHED ? hbd_maps_sockhash_add(&w->d->maps, c->cookie, fd)
						  : 0;
		close(fd);
	}
	if (!c)
		return;
	c->flags &= ~CF_INSERT;
	if (rc < 0 && c->state == CONN_AUTHED && hbd_map_full(w, rc, "sockhash", c->device_id)) {
		/* --on-map-full refuse: ERROR(FULL) instead of the WELCOME still held */
		drop_output(w, c);
		conn_close(w, slot, HB_ERROR, HB_ERR_FULL);
	}
	if (c->out != HBD_NONE)
		mark_dirty(w, slot);
	advance(w, slot);
}

static void tcp_hello(struct hbd_worker *w, uint32_t slot, const struct hb_frame *f)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hbd_daemon *d = w->d;
	struct hbd_hello_result r;
	struct hb_welcome wel;
	struct hb_hello h;
	uint32_t src;
	int rc;

	if (c->state != CONN_NEW) {
		/* one HELLO per connection: re-authenticating means a new connection */
		HBD_STAT_ADD(w->st, frames_bad, 1);
		conn_close(w, slot, HB_ERROR, HB_ERR_MALFORMED);
		return;
	}
	memcpy(&h, f->payload, sizeof(h)); /* the payload may sit at any alignment */
	src = w->src ? w->src[slot] : HBD_KEY_NONE;
	if (src != HBD_KEY_NONE && hbd_keytab_over_at(&d->sources, src, hb_mono_us())) {
		/* this address failed too often: not worth an HMAC until its budget refills */
		HBD_STAT_ADD(w->st, auth_rate_limited, 1);
		conn_close(w, slot, HB_ERROR, HB_ERR_RATE);
		return;
	}
	rc = hbd_hello_check(w, &h, hbd_loc(0, w->id, c->gen, slot), &r);
	if (rc) {
		static uint64_t last_log;

		HBD_STAT_ADD(w->st, auth_fail, 1);
		if (rc > 0 && src != HBD_KEY_NONE)
			hbd_keytab_charge_at(&d->sources, src, hb_mono_us());
		if (hbd_log_due(&last_log, w->now_ms, 1000))
			hb_info("tcp: HELLO from device %" PRIu64 " refused: %s (logged at most once "
				"a second)",
				r.device_id, hbd_auth_str(rc));
		conn_close(w, slot, HB_ERROR, rc < 0 ? HB_ERR_INTERNAL : HB_ERR_AUTH);
		return;
	}
	c->device_id = r.device_id;
	c->state = CONN_AUTHED;
	c->last_seen = clock32(w);
	/* from --hello-timeout to the heartbeat timeout: not due (nor looked at) before that */
	hb_wheel_del(&w->tcp_wheel, slot);
	hb_wheel_add(&w->tcp_wheel, slot, w->now_ms + d->timeout_ms);
	if (d->tcp_offload && c->cookie) {
		rc = hbd_maps_conn_auth(&d->maps, c->cookie, r.device_id, hb_mono_ns(),
					hbd_seen_tcp(w, slot));
		if (rc && hbd_map_full(w, rc, "conns", r.device_id)) {
			conn_close(w, slot, HB_ERROR, HB_ERR_FULL);
			return;
		}
		if (!rc)
			join_sockhash(w, slot);
	}
	hbd_welcome(w, r.token, &wel);
	send_frame(w, slot, HB_WELCOME, f->seq, &wel, sizeof(wel));
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
	if (c->sink_pending == UINT16_MAX ||
	    !hbd_keytab_take(&w->d->data_rl, key, hb_mono_us())) {
		HBD_STAT_ADD(w->st, data_rate_limited, 1);
		conn_close(w, slot, HB_ERROR, HB_ERR_RATE);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	if (hbd_sink_add(&w->sink, c->device_id, false, f->seq, &now, f->payload, f->len, &a)) {
		HBD_STAT_ADD(w->st, errors, 1);
		send_error(w, slot, HB_ERR_INTERNAL);
		return;
	}
	c->sink_pending++;
}

static void handle_frame(struct hbd_worker *w, uint32_t slot, const struct hb_frame *f)
{
	struct hbd_conn *c = &w->conns[slot];
	bool authed = c->state == CONN_AUTHED;

	if (authed)
		c->last_seen = clock32(w);
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
		send_frame(w, slot, HB_PONG, f->seq, f->payload, f->len);
		return;
	case HB_ECHO:
		HBD_STAT_ADD(w->st, frames_echo, 1);
		if (!authed)
			break;
		send_frame(w, slot, HB_ECHO, f->seq, f->payload, f->len);
		return;
	case HB_DATA:
		HBD_STAT_ADD(w->st, frames_data, 1);
		if (!authed)
			break;
		tcp_data(w, slot, f);
		return;
	case HB_BYE:
		HBD_STAT_ADD(w->st, frames_bye, 1);
		conn_close(w, slot, 0, 0);
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
		conn_close(w, slot, HB_ERROR, HB_ERR_MALFORMED);
		return;
	}
	send_error(w, slot, HB_ERR_NOT_AUTHED);
}

static void bad_frame(struct hbd_worker *w, uint32_t slot, int rc)
{
	if (rc == HB_DECODE_TOO_LARGE)
		HBD_STAT_ADD(w->st, too_large, 1);
	else
		HBD_STAT_ADD(w->st, frames_bad, 1);
	hb_dbg("tcp: worker %u slot %u: %s: closing", w->id, slot, hb_decode_str(rc));
	conn_close(w, slot, HB_ERROR,
		   rc == HB_DECODE_TOO_LARGE ? HB_ERR_TOO_LARGE : HB_ERR_MALFORMED);
}

struct tcp_feed {
	struct hbd_worker *w;
	uint32_t slot;
};

static bool feed_frame(void *ctx, const struct hb_frame *f)
{
	struct tcp_feed *t = ctx;

	handle_frame(t->w, t->slot, f);
	return conn_live(&t->w->conns[t->slot]);
}

/* Received bytes to the frame decoder (reasm.c keeps an incomplete frame in c->partial). */
static void tcp_input(struct hbd_worker *w, uint32_t slot, const uint8_t *p, size_t n)
{
	struct hbd_conn *c = &w->conns[slot];
	struct tcp_feed t = { w, slot };
	int rc = hbd_reasm_feed(&w->chunks, &c->partial, (uint16_t)w->d->cfg->max_payload, p, n,
				feed_frame, &t);

	if (rc == HBD_REASM_NOMEM) {
		HBD_STAT_ADD(w->st, errors, 1);
		conn_close(w, slot, HB_ERROR, HB_ERR_INTERNAL);
	} else if (rc < 0) {
		bad_frame(w, slot, rc);
	}
}

static void give_back_rx(struct hbd_worker *w, uint16_t bid)
{
	io_uring_buf_ring_add(w->rx_br, w->rx_mem + (size_t)bid * w->rx_size, w->rx_size, bid,
			      io_uring_buf_ring_mask(w->rx_count), (int)w->rx_ret++);
}

void hbd_tcp_on_recv(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	uint32_t slot = hbd_ud_index(cqe->user_data);
	struct hbd_conn *c = conn_of(w, slot, hbd_ud_gen(cqe->user_data));
	bool more = cqe->flags & IORING_CQE_F_MORE;
	bool buf = cqe->flags & IORING_CQE_F_BUFFER;
	uint16_t bid = (uint16_t)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);

	if (!c) {
		if (buf)
			give_back_rx(w, bid);
		return;
	}
	if (!more)
		c->flags &= ~CF_RECV;
	if (cqe->res > 0 && buf && conn_live(c)) {
		uint8_t *p = w->rx_mem + (size_t)bid * w->rx_size;

		HBD_KERNEL_WROTE(p, cqe->res);
		tcp_input(w, slot, p, (size_t)cqe->res);
	}
	if (buf)
		give_back_rx(w, bid);
	if (more)
		return;
	if (conn_live(c)) {
		if (w->ho.exporting && cqe->res == -ECANCELED)
			return; /* quiesced for the handoff: the socket goes on in the new daemon */
		if (cqe->res == -ENOBUFS || cqe->res > 0) {
			/* out of provided buffers (or the multishot simply ended): re-arm once
			 * the buffers of this batch are back in the ring
			 */
			if (!(c->flags & CF_REARM)) {
				c->flags |= CF_REARM;
				w->rearm[w->nrearm++] = slot;
			}
			return;
		}
		if (cqe->res < 0 && cqe->res != -ECONNRESET)
			hb_dbg("tcp: worker %u slot %u: recv: %s", w->id, slot,
			       strerror(-cqe->res));
		conn_close(w, slot, 0, 0); /* EOF or error: the peer is gone */
		return;
	}
	advance(w, slot);
}

void hbd_tcp_on_send(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	uint32_t slot = hbd_ud_index(cqe->user_data);
	struct hbd_conn *c = conn_of(w, slot, hbd_ud_gen(cqe->user_data));
	struct hbd_chunk *k;

	if (!c)
		return;
	c->flags &= ~CF_SEND;
	if (cqe->res < 0) {
		hb_dbg("tcp: worker %u slot %u: send: %s", w->id, slot, strerror(-cqe->res));
		c->flags |= CF_BROKEN;
		drop_output(w, c);
		conn_close(w, slot, 0, 0);
		advance(w, slot);
		return;
	}
	k = hbd_chunk(&w->chunks, c->out);
	if (w->d->tcp_offload && c->state == CONN_AUTHED && cqe->res < k->len - k->off) {
		/* A short send means the peer left the send buffer full. In offload mode the
		 * kernel writes PONGs into this same stream (sk_skb redirect), so sending the rest
		 * later could put a PONG in the middle of our frame. The peer is not reading
		 * anyway: close rather than risk a stream it would misparse.
		 */
		hb_dbg("tcp: worker %u slot %u: short send (%d of %u): closing", w->id, slot,
		       cqe->res, (unsigned)(k->len - k->off));
		HBD_STAT_ADD(w->st, errors, 1);
		c->flags |= CF_BROKEN;
		drop_output(w, c);
		conn_close(w, slot, 0, 0);
		advance(w, slot);
		return;
	}
	k->off += (uint16_t)cqe->res;
	if (k->off == k->len) {
		uint32_t next = k->next;

		hbd_chunk_put(&w->chunks, c->out);
		c->out = next;
	}
	if (c->flags & CF_BROKEN)
		drop_output(w, c);
	if (c->out != HBD_NONE)
		submit_send(w, slot);
	else
		advance(w, slot);
}

void hbd_tcp_on_close(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	uint32_t slot = hbd_ud_index(cqe->user_data);
	struct hbd_conn *c = conn_of(w, slot, hbd_ud_gen(cqe->user_data));

	if (!c || (c->state != CONN_CLOSED && c->state != CONN_HANDED))
		return;
	if (cqe->res < 0) {
		/* the slot stays taken in the kernel's table; nothing better to do than say so */
		hb_err("worker %u: close of slot %u: %s", w->id, slot, strerror(-cqe->res));
		HBD_STAT_ADD(w->st, errors, 1);
	}
	hb_wheel_del(&w->tcp_wheel, slot);
	drop_output(w, c);
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
	struct hbd_conn *c = conn_of(w, slot, gen);

	if (c && conn_live(c)) {
		hb_dbg("tcp: device %" PRIu64 " slot %u: ending (BYE %u)", c->device_id, slot, reason);
		conn_close(w, slot, reason == HBD_NO_BYE ? 0 : HB_BYE, reason);
	}
}

int hbd_tcp_send_down(struct hbd_worker *w, uint32_t slot, uint16_t gen, uint16_t seq,
		      const void *payload, uint16_t len)
{
	struct hbd_conn *c = conn_of(w, slot, gen);

	if (!c || c->state != CONN_AUTHED)
		return -ENOENT;
	send_frame(w, slot, HB_DOWN, seq, payload, len);
	return c->flags & CF_BROKEN ? -ENOMEM : 0;
}

void hbd_tcp_ack(struct hbd_worker *w, const struct hbd_ack *a, bool ok)
{
	struct hbd_conn *c = conn_of(w, a->slot, a->gen);

	if (!c || !c->sink_pending)
		return;
	c->sink_pending--;
	if (ok) {
		send_frame(w, a->slot, HB_ACK, a->seq, NULL, 0);
		HBD_STAT_ADD(w->st, data_acked, 1);
	} else {
		conn_close(w, a->slot, HB_ERROR, HB_ERR_INTERNAL);
	}
	advance(w, a->slot);
}

void hbd_tcp_flush(struct hbd_worker *w)
{
	for (uint32_t i = 0; i < w->nrearm; i++) {
		uint32_t slot = w->rearm[i];
		struct hbd_conn *c = &w->conns[slot];

		c->flags &= ~CF_REARM;
		if (conn_live(c) && !(c->flags & CF_RECV) && !w->ho.exporting && arm_recv(w, slot))
			conn_close(w, slot, 0, 0);
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

/* Folds the kernel's last heartbeat of an authenticated connection into c->last_seen: from
 * its seen stamp (a memory read), or with lookup (or without a seen slot) from conns[cookie]
 * (a syscall).
 */
static void kernel_last_seen(struct hbd_worker *w, uint32_t slot, bool lookup)
{
	struct hbd_daemon *d = w->d;
	struct hbd_conn *c = &w->conns[slot];
	uint32_t k = hbd_seen_tcp(w, slot);
	uint64_t ns;

	if (k && !lookup) {
		ns = hbd_seen_get(&d->maps, k);
	} else {
		HBD_STAT_ADD(w->st, expiry_lookups, 1);
		if (hbd_maps_conn_last_seen(&d->maps, c->cookie, &ns))
			return;
	}
	c->last_seen = hbd_seen_later(d, ns, c->last_seen);
}

/* Looks at the connections whose deadline came due: expires the silent ones and puts the
 * others back at last_seen + timeout. In offload mode the kernel answers heartbeats, so
 * last_seen comes from the kernel's stamp when that is newer: a read of the seen array for
 * each connection due, and a conns lookup only to confirm a silence before expiring.
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
			bool kernel;

			if (!conn_live(c)) {
				if (c->state == CONN_FREE)
					continue;
				/* stuck closing: cancel whatever the socket still has in flight */
				struct io_uring_sqe *sqe = hbd_sqe(w);

				hb_dbg("tcp: worker %u slot %u: close timed out, cancelling", w->id,
				       slot);
				c->flags |= CF_BROKEN;
				if (sqe) {
					io_uring_prep_cancel_fd(sqe, (int)slot,
								IORING_ASYNC_CANCEL_ALL |
									IORING_ASYNC_CANCEL_FD_FIXED);
					sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
					io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, slot, c->gen, 0));
				}
				hb_wheel_add(&w->tcp_wheel, slot, w->now_ms + d->timeout_ms);
				advance(w, slot);
				continue;
			}
			if (c->state == CONN_NEW) {
				/* slowloris: a connection that never completes its HELLO */
				silent = clock32(w) - c->last_seen;
				if (silent >= d->hello_timeout_ms) {
					HBD_STAT_ADD(w->st, hello_timeout, 1);
					hb_dbg("tcp: worker %u slot %u: no HELLO in %u ms: closing",
					       w->id, slot, silent);
					conn_close(w, slot, HB_BYE, HB_BYE_EXPIRED);
				} else {
					hb_wheel_add(&w->tcp_wheel, slot,
						     w->now_ms - silent + d->hello_timeout_ms);
				}
				continue;
			}
			kernel = c->state == CONN_AUTHED && d->tcp_offload && c->cookie;
			if (kernel)
				kernel_last_seen(w, slot, false);
			silent = hbd_silence(w, c->last_seen);
			if (silent >= d->timeout_ms && kernel && hbd_seen_tcp(w, slot)) {
				/* conns is the record: a stamp can lag it after an adoption */
				kernel_last_seen(w, slot, true);
				silent = hbd_silence(w, c->last_seen);
			}
			if (silent >= d->timeout_ms) {
				HBD_STAT_ADD(w->st, expired_tcp, 1);
				hb_dbg("tcp: device %" PRIu64 " silent for %u ms: expired",
				       c->device_id, silent);
				conn_close(w, slot, HB_BYE, HB_BYE_EXPIRED);
			} else {
				hb_wheel_add(&w->tcp_wheel, slot,
					     w->now_ms - silent + d->timeout_ms);
			}
		}
	} while (n == HBD_DUE_BATCH);
}

void hbd_tcp_drain(struct hbd_worker *w)
{
	for (uint32_t slot = 0; slot < w->nslots; slot++) {
		if (conn_live(&w->conns[slot]))
			conn_close(w, slot, HB_BYE, HB_BYE_SHUTDOWN);
	}
}

/* ---- upgrade handoff (handoff.c drives these) ------------------------------------------- */

int hbd_tcp_quiesce(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe;

	if (!conn_live(c))
		return 0;
	if ((c->flags & CF_RECV) && !(c->flags & CF_CANCEL) && (sqe = hbd_sqe(w))) {
		/* whatever arrives before the cancel is handled here; the rest waits in the socket */
		io_uring_prep_cancel64(sqe, hbd_ud(HBD_OP_RECV, slot, c->gen, 0), 0);
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, slot, c->gen, 0));
		c->flags |= CF_CANCEL;
	}
	if (c->flags & (CF_RECV | CF_SEND | CF_COOKIE | CF_INSERT | CF_DIRTY | CF_REARM) ||
	    c->out != HBD_NONE || c->sink_pending)
		return -1;
	return 1;
}

size_t hbd_tcp_export(struct hbd_worker *w, uint32_t slot, uint8_t *out)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hbd_ho_conn rec = { .cookie = c->cookie, .device_id = c->device_id,
				   .authed = c->state == CONN_AUTHED };
	uint32_t age = clock32(w) - c->last_seen;
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
	struct io_uring_sqe *sqe;

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
	sqe = hbd_sqe(w);
	if (!sqe) {
		/* a full SQ here is unexpected: the slot stays taken until the worker exits */
		HBD_STAT_ADD(w->st, errors, 1);
		return;
	}
	io_uring_prep_close_direct(sqe, slot);
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CLOSE, slot, c->gen, 0));
}

void hbd_tcp_drop(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];

	HBD_STAT_ADD(w->st, errors, 1);
	c->flags |= CF_BROKEN;
	conn_close(w, slot, 0, 0);
	advance(w, slot);
}

void hbd_tcp_adopt(struct hbd_worker *w, uint32_t slot, const struct hbd_ho_conn *rec,
		   const uint8_t *partial)
{
	struct hbd_daemon *d = w->d;
	struct hbd_conn *c;
	uint64_t due;

	if (slot >= w->nslots || w->conns[slot].state != CONN_FREE) {
		hb_err("worker %u: handed-over connection in slot %u that is not free", w->id, slot);
		HBD_STAT_ADD(w->st, errors, 1);
		return;
	}
	c = &w->conns[slot];
	c->cookie = rec->cookie;
	c->device_id = rec->authed ? rec->device_id : 0;
	c->last_seen = clock32(w) - rec->age_ms;
	c->partial = c->out = HBD_NONE;
	c->sink_pending = 0;
	c->state = rec->authed ? CONN_AUTHED : CONN_NEW;
	c->flags = CF_COUNTED;
	c->final_type = 0;
	w->nconns++;
	__atomic_fetch_add(&d->tcp_clients, 1, __ATOMIC_RELAXED);
	HBD_STAT_ADD(w->st, tcp_active, 1);
	if (rec->authed)
		HBD_STAT_ADD(w->st, tcp_authed, 1);
	HBD_STAT_ADD(w->st, handoff_in, 1);
	if (w->src) {
		/* counted, never refused: a live device is not turned away by its own upgrade */
		w->src[slot] = HBD_KEY_NONE;
		hbd_keytab_conn_open(&d->sources, rec->src, 0, &w->src[slot], NULL);
	}
	due = (rec->authed ? d->timeout_ms : d->hello_timeout_ms);
	hb_wheel_add(&w->tcp_wheel, slot, w->now_ms - (rec->age_ms < due ? rec->age_ms : due) + due);
	if (rec->authed && d->tcp_offload && c->cookie) {
		uint32_t k = hbd_seen_tcp(w, slot);

		/* the kernel stamps the old daemon's slot until the entry names ours */
		if (k)
			hbd_maps_conn_reseat(&d->maps, c->cookie, k);
	}
	if (rec->partial_len) {
		struct tcp_feed t = { w, slot };

		/* an incomplete frame: fed to an empty reassembler, it comes out as c->partial */
		hbd_reasm_feed(&w->chunks, &c->partial, (uint16_t)d->cfg->max_payload, partial,
			       rec->partial_len, feed_frame, &t);
	}
	if (arm_recv(w, slot)) {
		conn_close(w, slot, HB_ERROR, HB_ERR_INTERNAL);
		return;
	}
	if (c->device_id) {
		uint64_t loc = hbd_loc(0, w->id, c->gen, slot);

		/* the device authenticated again meanwhile (here): this older session goes */
		if (hbd_devices_adopt(d->devices, c->device_id, 0, loc))
			conn_close(w, slot, HB_BYE, HB_BYE_SUPERSEDED);
	}
}
