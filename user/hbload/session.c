// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Client sessions, whatever the transport: admission, HELLO, the end of a session, retries
 * and backoff, the BYE, and what each wheel wakeup means.
 *
 * Session lifecycle (hbl_client.ls): WAIT -> (admission) CONNECTING -> HELLO -> AUTHED, and
 * from any of them to CLOSING (TCP) and back to WAIT after a backoff, or to DONE. Each client
 * has at most one wheel entry, whose meaning depends on ls: WAIT = backoff over, HELLO = the
 * WELCOME deadline, AUTHED = next heartbeat (or, after our BYE, the deadline for the server to
 * close).
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "hbload.h"
#include "log.h"

static void inflight_done(struct hbl_ring *r, uint32_t l)
{
	if (r->cl[l].flags & HBL_F_INFLIGHT) {
		r->cl[l].flags &= ~HBL_F_INFLIGHT;
		r->inflight--;
	}
}

/* Moves a client to a new lifecycle state, keeping the gauges and the in-flight count right. */
void hbl_set_ls(struct hbl_ring *r, uint32_t l, enum hbl_lstate ls)
{
	struct hbl_client *c = &r->cl[l];

	if (c->ls == HBL_LS_AUTHED && ls != HBL_LS_AUTHED)
		HBL_ST_ADD(&r->st, authed_now, -1);
	if (ls == HBL_LS_AUTHED && c->ls != HBL_LS_AUTHED)
		HBL_INC(r, authed_now);
	if (ls != HBL_LS_CONNECTING && ls != HBL_LS_HELLO)
		inflight_done(r, l);
	if (ls == HBL_LS_DONE)
		hbl_wheel_del(&r->wheel, l);
	c->ls = (uint8_t)ls;
}

/* Queues a client for admission (at most once). */
void hbl_admit(struct hbl_ring *r, uint32_t l)
{
	struct hbl_client *c = &r->cl[l];

	c->ls = HBL_LS_WAIT;
	hbl_wheel_del(&r->wheel, l);
	if (c->flags & HBL_F_QUEUED)
		return;
	c->flags |= HBL_F_QUEUED;
	r->queue[(r->qhead + r->qlen++) % r->n] = l;
}

/* Clears the protocol state of a session that ended; PINGs it still had outstanding can no
 * longer be answered (their PONG would arrive on a closed connection or for a dead token):
 * counted, so a storm's or an expiry's share of "lost" is visible.
 */
static void forget_session(struct hbl_ring *r, struct hbl_client *c)
{
	HBL_ST_ADD(&r->st, lost_closed, hbc_pings_outstanding(&c->c));
	hbc_reset(&c->c);
}

static void retry_later(struct hbl_ring *r, uint32_t l, uint64_t now, uint64_t delay_ns)
{
	if (r->phase != HBL_PH_RUN) {
		hbl_set_ls(r, l, HBL_LS_DONE);
		return;
	}
	hbl_set_ls(r, l, HBL_LS_WAIT);
	/* at least one tick ahead, so the wheel pass that woke us does not see it again */
	hbl_wheel_set(&r->wheel, l, now + (delay_ns > 1000000 ? delay_ns : 1000000));
}

static void retry_backoff(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	uint32_t ms = hbc_backoff_ms(&r->cl[l].c, &r->cfg->backoff, (uint32_t)hbl_rand(&r->rng));

	retry_later(r, l, now, (uint64_t)ms * 1000000);
}

/* The session (and for TCP the connection) is over; failed: it never got authenticated. */
void hbl_session_lost(struct hbl_ring *r, uint32_t l, uint64_t now, int failed)
{
	struct hbl_client *c = &r->cl[l];

	if (failed && (c->flags & HBL_F_STORM))
		HBL_INC(r, storm_failures);
	if (!hbl_is_tcp(r)) {
		hbl_tokmap_del(&r->tm, c->c.token);
		if (c->ls == HBL_LS_HELLO)
			hbl_udp_release(r, l, now, 0);
	}
	forget_session(r, c);
	/* a silent client would only be expired again: it stays away */
	if (c->ls == HBL_LS_DONE || (c->flags & HBL_F_SILENT && c->flags & HBL_F_EVER))
		hbl_set_ls(r, l, HBL_LS_DONE);
	else
		retry_backoff(r, l, now);
}

/* TCP: the slot is closed; act on what the close was for. */
void hbl_closed(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	uint64_t w = r->cfg->storm_window_ns;

	switch (c->after) {
	case HBL_AFTER_DONE:
		forget_session(r, c);
		hbl_set_ls(r, l, HBL_LS_DONE);
		break;
	case HBL_AFTER_STORM:
		forget_session(r, c);
		c->c.attempt = 0;
		retry_later(r, l, now, w ? hbl_rand(&r->rng) % w : 0);
		break;
	default:
		hbl_session_lost(r, l, now, c->after == HBL_AFTER_FAILED);
		break;
	}
}

/* Ends a TCP session by closing its connection; what follows (after) happens when the close
 * completes (hbl_closed). A client already closing only learns that it is done.
 */
void hbl_tcp_close(struct hbl_ring *r, uint32_t l, enum hbl_after_close after)
{
	struct hbl_client *c = &r->cl[l];

	if (c->ls == HBL_LS_CLOSING) {
		if (after == HBL_AFTER_DONE)
			c->after = HBL_AFTER_DONE;
		return;
	}
	c->after = (uint8_t)after;
	hbl_set_ls(r, l, HBL_LS_CLOSING);
	hbl_wheel_del(&r->wheel, l);
	if (!(c->flags & HBL_F_OPEN)) {
		hbl_closed(r, l, hb_mono_ns());
		return;
	}
	hbl_tcp_submit_close(r, l);
}

/* Ends a session from our side: TCP closes the slot (the rest happens when the close
 * completes), UDP just forgets it.
 */
void hbl_end_session(struct hbl_ring *r, uint32_t l, uint64_t now, enum hbl_after_close after)
{
	if (hbl_is_tcp(r)) {
		hbl_tcp_close(r, l, after);
		return;
	}
	if (after == HBL_AFTER_DONE) {
		hbl_tokmap_del(&r->tm, r->cl[l].c.token);
		if (r->cl[l].ls == HBL_LS_HELLO)
			hbl_udp_release(r, l, now, 0);
		forget_session(r, &r->cl[l]);
		hbl_set_ls(r, l, HBL_LS_DONE);
		return;
	}
	hbl_session_lost(r, l, now, after == HBL_AFTER_FAILED);
}

/* The HELLO of client l into buf; its length or a negative errno (-ENOENT: the device is not
 * in the key store, said once per ring).
 */
static int build_hello(struct hbl_ring *r, uint32_t l, uint8_t *buf, size_t cap)
{
	struct hbl_client *c = &r->cl[l];
	uint8_t secret[HB_SECRET_MAX];
	int slen, n;

	slen = hb_keystore_secret(r->cfg->ks, c->c.device_id, secret);
	if (slen == -ENOENT && !r->warned_key++)
		hb_err("device %llu is not in the key store: its clients cannot authenticate",
		       (unsigned long long)c->c.device_id);
	if (slen < 0)
		return slen;
	n = hbc_hello(&c->c, buf, cap, secret, (size_t)slen, hb_realtime_ms());
	memset(secret, 0, sizeof(secret));
	return n;
}

/* UDP: the HELLO goes out through a free pool socket. -ENOBUFS: no send buffer right now. */
static int udp_hello(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	int id = hbl_sbuf_get(&r->sb), n;

	if (id < 0)
		return -ENOBUFS;
	hbl_udp_claim(r, l);
	n = build_hello(r, l, hbl_sbuf(&r->sb, id), HBL_SBUF_SIZE);
	if (n < 0) {
		hbl_sbuf_put(&r->sb, id);
		hbl_udp_release(r, l, now, 0);
		HBL_INC(r, errors);
		hbl_set_ls(r, l, HBL_LS_DONE);
		return 0;
	}
	hbl_udp_send(r, l, id, (unsigned)n);
	hbl_set_ls(r, l, HBL_LS_HELLO);
	hbl_wheel_set(&r->wheel, l, now + r->cfg->hello_timeout_ns);
	return 0;
}

/* TCP: the connect chain completed (res: its result). Connected: arm the recv, send HELLO. */
void hbl_tcp_connect_done(struct hbl_ring *r, uint32_t l, int res, uint64_t now)
{
	int id, n;

	if (res < 0) {
		hbl_count_errno(r, res);
		HBL_INC(r, connect_failed);
		hbl_tcp_close(r, l, HBL_AFTER_FAILED);
		return;
	}
	hbl_tcp_arm_recv(r, l);
	id = hbl_sbuf_get(&r->sb);
	if (id < 0)
		n = -ENOBUFS;
	else if (hbl_is_mqtt(r))
		n = hbl_mqtt_connect(r, l, hbl_sbuf(&r->sb, id), HBL_SBUF_SIZE);
	else
		n = build_hello(r, l, hbl_sbuf(&r->sb, id), HBL_SBUF_SIZE);
	if (n < 0) {
		if (id >= 0)
			hbl_sbuf_put(&r->sb, id);
		HBL_INC(r, errors);
		hbl_tcp_close(r, l, n == -ENOENT ? HBL_AFTER_DONE : HBL_AFTER_FAILED);
		return;
	}
	hbl_tcp_send(r, l, id, (unsigned)n);
	hbl_set_ls(r, l, HBL_LS_HELLO);
	hbl_wheel_set(&r->wheel, l, now + r->cfg->hello_timeout_ns);
}

static void start(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	HBL_INC(r, attempts);
	r->cl[l].gen++;
	if (hbl_is_tcp(r)) {
		hbl_set_ls(r, l, HBL_LS_CONNECTING);
		hbl_tcp_connect(r, l);
		return;
	}
	hbl_set_ls(r, l, HBL_LS_CONNECTING);
	if (udp_hello(r, l, now)) {
		/* no send buffer right now: try again in a millisecond */
		HBL_INC(r, send_stalls);
		retry_later(r, l, now, 1000000);
	}
}

/* Starts queued sessions within the in-flight bound and the connect rate. */
void hbl_admit_run(struct hbl_ring *r, uint64_t now)
{
	double rate = r->cfg->o.connect_rate / r->cfg->rings;

	if (r->phase != HBL_PH_RUN)
		return;
	if (rate > 0) {
		r->tokens += (double)(now - r->tokens_ns) * 1e-9 * rate;
		/* a burst of at most 10 ms worth, and never less than one connect */
		if (r->tokens > rate / 100 + 1)
			r->tokens = rate / 100 + 1;
		r->tokens_ns = now;
	}
	while (r->qlen && r->inflight < r->inflight_max && (rate <= 0 || r->tokens >= 1)) {
		uint32_t l;

		if (r->cfg->o.proto == HB_UDP && !r->nufree)
			break;
		l = r->queue[r->qhead];
		r->qhead = (r->qhead + 1) % r->n;
		r->qlen--;
		r->cl[l].flags &= ~HBL_F_QUEUED;
		if (r->cl[l].ls != HBL_LS_WAIT)
			continue;
		r->cl[l].flags |= HBL_F_INFLIGHT;
		r->inflight++;
		start(r, l, now);
		r->tokens -= 1;
	}
}

/* Our BYE at the end of the run. TCP then waits (bounded) for the server to close. */
void hbl_send_bye(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	int id, n;

	if (hbl_is_tcp(r) && (c->flags & HBL_F_SENDING)) {
		hbl_wheel_set(&r->wheel, l, now + 1000000);
		return;
	}
	id = hbl_sbuf_get(&r->sb);
	if (id < 0) {
		hbl_wheel_set(&r->wheel, l, now + 1000000);
		return;
	}
	if (hbl_is_mqtt(r))
		n = hbl_mqtt_disconnect(c, hbl_sbuf(&r->sb, id), HBL_SBUF_SIZE);
	else
		n = hbc_bye(&c->c, hbl_sbuf(&r->sb, id), HBL_SBUF_SIZE, HB_BYE_NORMAL);
	if (n < 0) {
		hbl_sbuf_put(&r->sb, id);
		hbl_end_session(r, l, now, HBL_AFTER_DONE);
		return;
	}
	HBL_INC(r, bye_sent);
	hbl_send(r, l, id, (unsigned)n);
	if (hbl_is_tcp(r))
		hbl_wheel_set(&r->wheel, l, now + HBL_BYE_WAIT_NS);
	else
		hbl_end_session(r, l, now, HBL_AFTER_DONE);
}

/* UDP has no connection to break when the server goes away: a server that restarted, or a
 * balancer that moved the device to a node that never saw its token, simply stays silent. A
 * device whose last --udp-rehello-after PINGs all went unanswered (checked when the next one is
 * due, so the newest had a whole interval for its PONG) gives the session up and, after the
 * backoff, sends a new HELLO, as the device library does after silence. One lost PONG never
 * does it: the next PING's PONG clears the count. Its PINGs still outstanding count as
 * lost_closed, and no PING goes out while the new HELLO waits, so nothing of the wait is
 * measured as RTT.
 */
static int rehello_due(const struct hbl_ring *r, const struct hbl_client *c)
{
	uint32_t k = r->cfg->o.udp_rehello_after;

	return !hbl_is_tcp(r) && k && c->unanswered >= k && !hbl_keepalive(r, c);
}

/* The client's wheel entry is due: what that means depends on where it is (see the top). */
void hbl_wake(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];

	switch (c->ls) {
	case HBL_LS_WAIT:
		if (r->phase == HBL_PH_RUN)
			hbl_admit(r, l);
		else
			hbl_set_ls(r, l, HBL_LS_DONE);
		break;
	case HBL_LS_HELLO:
		HBL_INC(r, timeouts);
		if (hbl_is_tcp(r)) {
			hbl_end_session(r, l, now, HBL_AFTER_FAILED);
		} else {
			hbl_udp_release(r, l, now, 1);
			hbl_session_lost(r, l, now, 1);
		}
		break;
	case HBL_LS_AUTHED:
		if (r->phase >= HBL_PH_BYE) {
			if (c->c.state ==
			    HBC_CLOSED) /* BYE sent, the server did not close in time */
				hbl_end_session(r, l, now, HBL_AFTER_DONE);
			else
				hbl_send_bye(r, l, now);
		} else if (r->phase == HBL_PH_RUN && !(c->flags & HBL_F_SILENT)) {
			if (rehello_due(r, c)) {
				HBL_INC(r, rehellos);
				hbl_session_lost(r, l, now, 0);
			} else {
				hbl_beat(r, l, now);
			}
		}
		break;
	default:
		break;
	}
}
