// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* UDP: one multishot recvmsg per worker, sessions by token, replies by io_uring sendmsg.
 *
 * Rules that keep the service from being a reflector: a datagram that does not decode, or
 * whose token is not a live session, gets no answer at all (counted as frames_bad or
 * unknown_session). The only answers to an unauthenticated source are to a well-formed HELLO:
 * WELCOME or ERROR, both smaller than the HELLO itself, so there is no amplification.
 *
 * NAT rebinding, version 1: a frame with a live session's token from a new address or port is
 * accepted and the session moves there (table and sessions map), because devices behind NAT
 * change ports. Moving a session takes knowing the token, which an on-path attacker sees in
 * any frame: one could redirect the session's answers, the price of rebinding without a key.
 * Version 2 (udp_v2.c) moves a session only once the device answered a path challenge sent
 * to the new address, under the session key.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <string.h>

#include "hello.h"
#include "sesskey.h"
#include "log.h"
#include "udp.h"
#include "udp_tx.h"
#include "udp_v2.h"
#include "vg.h"
#include "worker.h"

int hbd_udp_arm(struct hbd_worker *w)
{
	struct io_uring_sqe *sqe = hbd_sqe(w);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_recvmsg_multishot(sqe, w->ufd, &w->udp_msg, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = HBD_BGID_UDP;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_UDP_RECV, 0, 0, 0));
	w->udp_armed = true;
	return 0;
}

static int from_sockaddr(const struct sockaddr *sa, socklen_t len, uint8_t addr[16], uint16_t *port)
{
	if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		memcpy(addr, &s6->sin6_addr, 16);
		*port = s6->sin6_port;
		return 0;
	}
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		memset(addr, 0, 10);
		addr[10] = addr[11] = 0xff;
		memcpy(addr + 12, &s4->sin_addr, 4);
		*port = s4->sin_port;
		return 0;
	}
	return -EAFNOSUPPORT;
}

/* Writes the kernel's copy of a session (move: only over the one there, see
 * hbd_udp_rebind_entry). Returns nonzero if the client must be refused (the map is full and
 * --on-map-full says refuse); other failures leave it to userspace.
 */
static int put_map_entry(struct hbd_worker *w, const struct hbd_sess *s, uint32_t idx,
			 uint64_t token, bool move)
{
	struct hb_session v = {
		.port = s->port,
		.state = HB_STATE_AUTHED,
		.device_id = s->device_id,
		.last_seen_ns = hb_mono_ns(),
		.seen_slot = hbd_seen_udp(w->d, idx),
		.version = s->version,
		.last_ts = s->last_ts,
	}, old;
	int rc;

	memcpy(v.addr, s->addr, sizeof(v.addr));
	memcpy(v.key, s->key, sizeof(v.key));
	hbd_peer_str(s->addr, s->port, v.peer);
	if (move) {
		/* the replay window goes along: what XDP answered stays answered */
		rc = hbd_maps_sess_get(&w->d->kern.maps, token, &old);
		if (rc)
			return rc;
		if (old.last_ts > v.last_ts)
			v.last_ts = old.last_ts;
		v.pings = old.pings;
		rc = hbd_maps_sess_move(&w->d->kern.maps, token, &v);
		return rc == -ENOENT ? rc : rc ? hbd_map_full(w, rc, "sessions", s->device_id) : 0;
	}
	rc = hbd_maps_sess_put(&w->d->kern.maps, token, &v);
	return rc ? hbd_map_full(w, rc, "sessions", s->device_id) : 0;
}

/* Frames of a version 2 HELLO's refusal: no session key yet (hbclient.c says why). */
static const uint8_t no_key[HB_SESSION_KEY_LEN];

/* The version 2 WELCOME: the 20-byte form, then the server's nonce. */
static size_t welcome2(struct hbd_worker *w, uint64_t token, const uint8_t nonce[HB_NONCE_LEN],
		       struct hb_welcome2 *out)
{
	uint8_t b[HB_WELCOME_FLAGS_LEN] = { 0 };

	hbd_welcome(w, token, 0, b);
	memcpy(out, b, sizeof(b));
	memcpy(out->nonce, nonce, HB_NONCE_LEN);
	return sizeof(*out);
}

static void udp_hello(struct hbd_worker *w, const uint8_t addr[16], uint16_t port,
		      const struct hb_frame *f)
{
	struct hbd_daemon *d = w->d;
	struct hbd_sessions *t = &d->sessions;
	struct hb_error err = { .code = htobe16(HB_ERR_AUTH) };
	bool v2 = f->version == HB_VERSION_2;
	const uint8_t *ek = v2 ? no_key : NULL; /* the key of an ERROR to this HELLO */
	struct hbd_hello_result r;
	struct hb_welcome2 wel;
	struct hb_hello_msg h;
	struct hbd_sess *s;
	uint32_t idx;
	uint64_t loc, now_us = hb_mono_us();
	uint8_t key[16], nonce[HB_NONCE_LEN];
	size_t wlen;
	bool over;
	int rc, tries;

	/* version 2 signs its HELLO bound (to a server, or to none) */
	if (v2 && f->len != sizeof(struct hb_hello_bound)) {
		HBD_STAT_ADD(w->st, frames_bad, 1);
		return;
	}
	if (!v2 && d->cfg->require_udp_mac) {
		static uint64_t last_log;

		HBD_STAT_ADD(w->st, udp_v1_refused, 1);
		if (hbd_log_due(&last_log, w->now_ms, 1000))
			hb_info("udp: version 1 HELLO refused: --require-udp-mac takes version 2 "
				"only (logged at most once a second)");
		err.code = htobe16(HB_ERR_VERSION);
		hbd_udp_send(w, addr, port, HB_ERROR, f->seq, 0, &err, sizeof(err), NULL);
		return;
	}
	/* A source that failed too often is still checked (a device sharing the address, or
	 * whose address is spoofed, gets in with a good MAC), but a failure from it gets nothing,
	 * not even an ERROR: the source may be spoofed.
	 */
	hbd_key_source(addr, key);
	over = hbd_keytab_over(&d->sources, key, now_us);
	if (hbd_sess_alloc(t, w->id, &idx)) {
		HBD_STAT_ADD(w->st, full, 1);
		err.code = htobe16(HB_ERR_FULL);
		if (!over)
			hbd_udp_send(w, addr, port, HB_ERROR, f->seq, 0, &err, sizeof(err), ek);
		return;
	}
	s = &t->s[idx];
	loc = hbd_loc(1, w->id, s->gen, idx);
	hb_hello_parse(f->payload, f->len, &h);
	rc = hbd_hello_check(w, &h, loc, &r);
	if (rc && over) {
		hbd_sess_release(t, idx);
		HBD_STAT_ADD(w->st, auth_rate_limited, 1);
		return;
	}
	if (rc) {
		static uint64_t last_log;

		hbd_sess_release(t, idx);
		HBD_STAT_ADD(w->st, auth_fail, 1);
		if (rc > 0)
			hbd_keytab_charge(&d->sources, key, now_us);
		if (hbd_log_due(&last_log, w->now_ms, 1000))
			hb_info("udp: HELLO from device %" PRIu64
				" refused: %s (logged at most once "
				"a second)",
				r.device_id, hbd_auth_str(rc));
		if (rc < 0)
			err.code = htobe16(HB_ERR_INTERNAL);
		hbd_udp_send(w, addr, port, HB_ERROR, f->seq, 0, &err, sizeof(err), ek);
		return;
	}
	s->device_id = r.device_id;
	memcpy(s->addr, addr, 16);
	s->port = port;
	__atomic_store_n(&s->last_seen, (uint32_t)w->now_ms, __ATOMIC_RELAXED);
	/* 2^64 tokens: a collision is astronomically rare, but never hand out a live one */
	for (tries = 0; (rc = hbd_sess_publish(t, idx, r.token)) == -EEXIST && tries < 8; tries++)
		hb_random(&r.token, sizeof(r.token));
	/* the session key needs the final token; no frame can name the session before the
	 * device learns it from the WELCOME below */
	if (!rc && v2) {
		uint8_t sk[HB_SESSION_KEY_LEN];

		rc = hb_random(nonce, sizeof(nonce));
		if (!rc)
			rc = hb_session_key(r.prk, nonce, r.token, sk);
		if (!rc)
			hbd_sess_set_v2(s, HB_VERSION_2, sk, 0);
		OPENSSL_cleanse(sk, sizeof(sk));
		if (rc) {
			struct hbd_sess gone;

			hbd_sess_get(t, idx, s->gen, true, &gone);
		}
	}
	OPENSSL_cleanse(r.prk, sizeof(r.prk));
	if (rc) {
		hbd_devices_release(d->devices, r.device_id, loc);
		hbd_sess_release(t, idx);
		HBD_STAT_ADD(w->st, errors, 1);
		return;
	}
	/* the kernel must know the session before the device learns its token */
	if (d->kern.offload && put_map_entry(w, s, idx, r.token, false)) {
		struct hbd_sess gone;

		err.code = htobe16(HB_ERR_FULL);
		hbd_sess_get(t, idx, s->gen, true, &gone); /* out of the token hash */
		hbd_devices_release(d->devices, r.device_id, loc);
		hbd_sess_release(t, idx);
		hbd_udp_send(w, addr, port, HB_ERROR, f->seq, 0, &err, sizeof(err), ek);
		return;
	}
	hb_wheel_add(&w->udp_wheel, idx, w->now_ms + d->lim.timeout_ms);
	HBD_STAT_ADD(w->st, udp_sessions, 1);
	HBD_STAT_ADD(w->st, udp_active, 1);
	HBD_STAT_ADD(w->st, auth_ok, 1);
	wlen = v2 ? welcome2(w, r.token, nonce, &wel) : hbd_welcome(w, r.token, 0, &wel);
	hbd_udp_send(w, addr, port, HB_WELCOME, f->seq, r.token, &wel, (uint16_t)wlen,
		     v2 ? s->key : NULL);
	hb_dbg("udp: device %" PRIu64 " authenticated (session %u, version %u)", r.device_id, idx,
	       f->version);
	hbd_presence(w, HBD_EV_ONLINE, r.device_id, loc, addr, port);
	hbd_supersede(w, r.old_loc);
}

/* The table lookup and this write are not atomic: a kill on another worker may unhash the
 * session and delete its entry in between. The write therefore only replaces an entry that is
 * still there; otherwise it would create an AUTHED entry no one owns, which XDP answers for as
 * long as hbd lives and hbd never expires. A session that had no entry (a full map at its
 * HELLO) stays in userspace, as it was.
 */
int hbd_udp_rebind_entry(struct hbd_worker *w, const struct hbd_sess *s, uint32_t idx)
{
	return put_map_entry(w, s, idx, s->token, true);
}

static void rebind(struct hbd_worker *w, uint64_t token, uint32_t idx)
{
	struct hbd_sess s;

	if (!w->d->kern.offload || hbd_sess_lookup(&w->d->sessions, token, &s))
		return;
	hbd_udp_rebind_entry(w, &s, idx);
}

static void udp_datagram(struct hbd_worker *w, const struct sockaddr *sa, socklen_t salen,
			 const uint8_t *p, size_t n)
{
	struct hbd_sess_view v = { 0 };
	const uint8_t *key = NULL, *to = NULL;
	struct hb_frame f;
	uint8_t addr[16];
	uint16_t port, to_port;
	int rc;

	if (from_sockaddr(sa, salen, addr, &port) || (rc = hb_decode_dgram(p, n, &f))) {
		HBD_STAT_ADD(w->st, frames_bad, 1);
		return; /* never answered */
	}
	if (f.len > w->d->cfg->max_payload && (f.type == HB_DATA || f.type == HB_ECHO)) {
		HBD_STAT_ADD(w->st, too_large, 1);
		return;
	}
	switch (f.type) {
	case HB_HELLO:
		HBD_STAT_ADD(w->st, frames_hello, 1);
		udp_hello(w, addr, port, &f);
		return;
	case HB_PING:
		HBD_STAT_ADD(w->st, frames_ping, 1);
		break;
	case HB_ECHO:
		HBD_STAT_ADD(w->st, frames_echo, 1);
		break;
	case HB_DATA:
		HBD_STAT_ADD(w->st, frames_data, 1);
		break;
	case HB_BYE:
		HBD_STAT_ADD(w->st, frames_bye, 1);
		break;
	case HB_ACK: /* of a downlink */
		break;
	case HB_PATH_RESPONSE:
		if (f.version == HB_VERSION_2)
			break;
		/* version 1 has no path validation */
		HBD_STAT_ADD(w->st, frames_other, 1);
		return;
	default:
		HBD_STAT_ADD(w->st, frames_other, 1);
		return;
	}
	if (f.version == HB_VERSION_2) {
		if (hbd_udp_v2_session(w, addr, port, &f, &v))
			return; /* never answered */
		key = v.key;
		to = v.addr;
		to_port = v.port;
	} else if (w->d->cfg->require_udp_mac) {
		HBD_STAT_ADD(w->st, udp_v1_refused, 1);
		return;
	} else {
		rc = hbd_sess_touch(&w->d->sessions, f.token, addr, port, (uint32_t)w->now_ms, &v);
		if (rc == -EBADMSG) {
			HBD_STAT_ADD(w->st, udp_bad_tag, 1);
			return;
		}
		if (rc) {
			HBD_STAT_ADD(w->st, unknown_session, 1);
			return; /* never answered */
		}
		to = addr;
		to_port = port;
	}
	if (v.rebound) {
		hb_dbg("udp: session of device %" PRIu64 " moved to a new address", v.device_id);
		rebind(w, f.token, v.idx);
	}
	switch (f.type) {
	case HB_PING:
		/* from a source not yet validated: a heartbeat, but the answer waits for the
		 * path (an unanswered PING is what a device sees of a NAT change anyway) */
		if (v.elsewhere)
			break;
		HBD_STAT_ADD(w->st, pings_user, 1);
		hbd_udp_send(w, to, to_port, HB_PONG, f.seq, f.token, f.payload, f.len, key);
		break;
	case HB_ECHO:
		if (!v.elsewhere)
			hbd_udp_send(w, to, to_port, HB_ECHO, f.seq, f.token, f.payload, f.len,
				     key);
		break;
	case HB_DATA: {
		struct hbd_ack a = { .token = f.token, .seq = f.seq, .udp = 1 };
		struct timespec now;
		uint8_t rk[16];

		hbd_key_u64(v.device_id, rk);
		if (!hbd_keytab_take(&w->d->data_rl, rk, hb_mono_us())) {
			/* not ACKed: the device sends it again later */
			HBD_STAT_ADD(w->st, data_rate_limited, 1);
			break;
		}
		clock_gettime(CLOCK_REALTIME, &now);
		if (hbd_sink_add(&w->sink, v.device_id, true, f.seq, &now, f.payload, f.len, &a))
			HBD_STAT_ADD(w->st, errors, 1);
		break;
	}
	case HB_BYE:
		hbd_worker_msg(w, v.owner, HBD_OP_MSG_KILL_UDP, v.idx, v.gen, HBD_NO_BYE);
		break;
	case HB_ACK:
		/* the downlink is pending at the session's owner, which may be another worker */
		hbd_worker_msg_res(w, v.owner, HBD_OP_MSG_DOWN_ACK, v.idx, v.gen, 0, f.seq);
		break;
	}
}

static void give_back_ux(struct hbd_worker *w, uint16_t bid)
{
	io_uring_buf_ring_add(w->ux_br, w->ux_mem + (size_t)bid * HBD_UDP_BUF_SIZE,
			      HBD_UDP_BUF_SIZE, bid, io_uring_buf_ring_mask(w->ux_count),
			      (int)w->ux_ret++);
}

void hbd_udp_on_recv(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	bool more = cqe->flags & IORING_CQE_F_MORE;

	if (!more)
		w->udp_armed = false;
	if (cqe->flags & IORING_CQE_F_BUFFER) {
		uint16_t bid = (uint16_t)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
		uint8_t *buf = w->ux_mem + (size_t)bid * HBD_UDP_BUF_SIZE;

		if (cqe->res > 0 && !w->draining) {
			HBD_KERNEL_WROTE(buf, cqe->res);
			struct io_uring_recvmsg_out *o =
				io_uring_recvmsg_validate(buf, cqe->res, &w->udp_msg);

			if (!o || (o->flags & MSG_TRUNC) || o->namelen > w->udp_msg.msg_namelen) {
				HBD_STAT_ADD(w->st, frames_bad, 1);
			} else {
				udp_datagram(w, io_uring_recvmsg_name(o), o->namelen,
					     io_uring_recvmsg_payload(o, &w->udp_msg),
					     io_uring_recvmsg_payload_length(o, cqe->res,
									     &w->udp_msg));
			}
		}
		give_back_ux(w, bid);
	}
	if (cqe->res < 0 && cqe->res != -ENOBUFS && cqe->res != -ECANCELED) {
		hb_warn("udp: worker %u: recvmsg: %s", w->id, strerror(-cqe->res));
		HBD_STAT_ADD(w->st, errors, 1);
		if (!more)
			w->udp_retry = true; /* at the next tick */
	}
}

/* The key a session's frames are tagged with (NULL: version 1, none). */
static const uint8_t *sess_key(const struct hbd_sess *s)
{
	return s->version == HB_VERSION_2 ? s->key : NULL;
}

/* Ends a session this worker owns: BYE (unless reason is HBD_NO_BYE), map entry and table
 * entry removed, device released.
 */
void hbd_udp_kill(struct hbd_worker *w, uint32_t idx, uint16_t gen, uint8_t reason)
{
	struct hbd_daemon *d = w->d;
	struct hbd_sess s;

	if (hbd_sess_get(&d->sessions, idx, gen, true, &s) || s.owner != w->id)
		return;
	if (reason != HBD_NO_BYE) {
		struct hb_bye b = { .reason = htobe16(reason) };

		hbd_udp_send(w, s.addr, s.port, HB_BYE, 0, s.token, &b, sizeof(b), sess_key(&s));
	}
	if (d->kern.offload) {
		int rc = hbd_maps_sess_delete(&d->kern.maps, s.token);

		if (rc)
			hb_warn("sessions delete: %s", strerror(-rc));
	}
	hbd_devices_release(d->devices, s.device_id, hbd_loc(1, w->id, gen, idx));
	hb_wheel_del(&w->udp_wheel, idx);
	hbd_sess_release(&d->sessions, idx);
	HBD_STAT_SUB(w->st, udp_active, 1);
	if (reason == HB_BYE_REVOKED)
		HBD_STAT_ADD(w->st, revoked, 1);
	hbd_presence(w, hbd_presence_end(reason == HBD_NO_BYE ? 0 : reason), s.device_id,
		     hbd_loc(1, w->id, gen, idx), NULL, 0);
	hbd_down_gone(w, hbd_loc(1, w->id, gen, idx));
	hb_dbg("udp: session %u of device %" PRIu64 " ended (reason %u)", idx, s.device_id, reason);
}

int hbd_udp_send_down(struct hbd_worker *w, uint32_t idx, uint16_t gen, uint16_t seq,
		      const void *payload, uint16_t len)
{
	struct hbd_sess s;

	if (hbd_sess_get(&w->d->sessions, idx, gen, false, &s) || s.owner != w->id)
		return -ENOENT;
	return hbd_udp_send(w, s.addr, s.port, HB_DOWN, seq, s.token, payload, len, sess_key(&s));
}

void hbd_udp_ack(struct hbd_worker *w, const struct hbd_ack *a, bool ok)
{
	struct hbd_sess s;

	if (!ok || hbd_sess_lookup(&w->d->sessions, a->token, &s))
		return; /* not ACKed: the device sends the DATA again */
	hbd_udp_send(w, s.addr, s.port, HB_ACK, a->seq, a->token, NULL, 0, sess_key(&s));
	HBD_STAT_ADD(w->st, data_acked, 1);
}

/* The later of last (worker clock ms) and the kernel's last heartbeat of the session: its
 * stamp in seen[k] (a memory read), or with k 0 the sessions entry (a syscall).
 */
static uint32_t kernel_last_seen(struct hbd_worker *w, uint64_t token, uint32_t k, uint32_t last)
{
	struct hbd_daemon *d = w->d;
	uint64_t ns;

	if (k) {
		ns = hbd_seen_get(&d->kern.maps, k);
	} else {
		HBD_STAT_ADD(w->st, expiry_lookups, 1);
		if (hbd_maps_sess_last_seen(&d->kern.maps, token, &ns))
			return last;
	}
	return hbd_seen_later(d, ns, last);
}

/* Same scheme as TCP: only sessions whose deadline came due are looked at. */
void hbd_udp_expire(struct hbd_worker *w)
{
	struct hbd_daemon *d = w->d;
	struct hbd_sessions *t = &d->sessions;
	uint32_t n;

	if (hbd_handing_off(w))
		return; /* the sessions are being (or have been) handed to the successor */

	do {
		n = hb_wheel_due(&w->udp_wheel, w->now_ms, w->due, HBD_DUE_BATCH);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t idx = w->due[i], last = hbd_sess_last_seen(t, idx), silent;
			struct hbd_sess *s = &t->s[idx];
			uint32_t k = hbd_seen_udp(d, idx);

			if (d->kern.offload)
				last = kernel_last_seen(w, s->token, k, last);
			silent = hbd_silence(w, last);
			if (silent >= d->lim.timeout_ms && d->kern.offload && k) {
				/* sessions is the record: a stamp can lag it after an adoption */
				last = kernel_last_seen(w, s->token, 0, last);
				silent = hbd_silence(w, last);
			}
			if (silent >= d->lim.timeout_ms) {
				HBD_STAT_ADD(w->st, expired_udp, 1);
				hbd_udp_kill(w, idx, s->gen, HB_BYE_EXPIRED);
			} else {
				hb_wheel_add(&w->udp_wheel, idx,
					     w->now_ms - silent + d->lim.timeout_ms);
			}
		}
	} while (n == HBD_DUE_BATCH);
}

/* BYE(SHUTDOWN) to every session this worker owns: they are all on its wheel. */
void hbd_udp_drain(struct hbd_worker *w)
{
	struct hbd_sessions *t = &w->d->sessions;
	uint32_t n;

	do {
		n = hb_wheel_due(&w->udp_wheel, UINT64_MAX / 2, w->due, HBD_DUE_BATCH);
		for (uint32_t i = 0; i < n; i++)
			hbd_udp_kill(w, w->due[i], t->s[w->due[i]].gen, HB_BYE_SHUTDOWN);
	} while (n == HBD_DUE_BATCH);
}
