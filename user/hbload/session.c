// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Client sessions, whatever the transport: admission, HELLO, replies, retries and backoff.
 *
 * Session lifecycle (hbl_client.ls): WAIT -> (admission) CONNECTING -> HELLO -> AUTHED, and
 * from any of them to CLOSING (TCP) and back to WAIT after a backoff, or to DONE. Each client
 * has at most one wheel entry, whose meaning depends on ls: WAIT = backoff over, HELLO = the
 * WELCOME deadline, AUTHED = next heartbeat (or, after our BYE, the deadline for the server to
 * close).
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "hbload.h"
#include "log.h"


/* Moves a client to a new lifecycle state, keeping the gauges and the in-flight count right. */
void hbl_set_ls(struct hbl_ring *r, uint32_t l, enum hbl_lstate ls)
{
	struct hbl_client *c = &r->cl[l];

	if (c->ls == HBL_LS_AUTHED && ls != HBL_LS_AUTHED)
		HBL_ST_ADD(&r->st, authed_now, -1);
	if (ls == HBL_LS_AUTHED && c->ls != HBL_LS_AUTHED)
		HBL_INC(r, authed_now);
	if (ls != HBL_LS_CONNECTING && ls != HBL_LS_HELLO)
		hbl_inflight_done(r, l);
	if (ls == HBL_LS_DONE)
		hbl_wheel_del(&r->wheel, l);
	c->ls = (uint8_t)ls;
}

void hbl_count_errno(struct hbl_ring *r, int res)
{
	switch (-res) {
	case ECANCELED:
		break; /* a consequence of another failure, counted there */
	case EADDRNOTAVAIL:
	case EADDRINUSE:
		HBL_INC(r, err_addrnotavail);
		break;
	case ECONNREFUSED:
		HBL_INC(r, err_connrefused);
		break;
	case ETIME:
	case ETIMEDOUT:
		HBL_INC(r, err_timeout);
		break;
	default:
		hb_dbg("ring %u: %s", r->id, strerror(-res));
		HBL_INC(r, err_other);
		break;
	}
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

void hbl_retry_later(struct hbl_ring *r, uint32_t l, uint64_t now, uint64_t delay_ns)
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
	uint32_t ms = hbc_backoff_ms(&r->cl[l].c, &r->cfg->backoff, (uint32_t)hbl_rand(r));

	hbl_retry_later(r, l, now, (uint64_t)ms * 1000000);
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

void hbl_start(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	HBL_INC(r, attempts);
	r->cl[l].gen++;
	if (hbl_is_tcp(r)) {
		hbl_set_ls(r, l, HBL_LS_CONNECTING);
		hbl_tcp_connect(r, l);
		return;
	}
	hbl_set_ls(r, l, HBL_LS_CONNECTING);
	if (hbl_udp_hello(r, l, now)) {
		/* no send buffer right now: try again in a millisecond */
		HBL_INC(r, send_stalls);
		hbl_retry_later(r, l, now, 1000000);
	}
}

int hbl_build_hello(struct hbl_ring *r, uint32_t l, uint8_t *buf, size_t cap)
{
	struct hbl_client *c = &r->cl[l];
	uint8_t secret[HB_SECRET_MAX];
	struct timespec ts;
	int slen, n;

	slen = hb_keystore_secret(r->cfg->ks, c->c.device_id, secret);
	if (slen < 0)
		return slen;
	clock_gettime(CLOCK_REALTIME, &ts);
	n = hbc_hello(&c->c, buf, cap, secret, (size_t)slen,
		      (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
	memset(secret, 0, sizeof(secret));
	return n;
}

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
			if (c->c.state == HBC_CLOSED) /* BYE sent, the server did not close in time */
				hbl_end_session(r, l, now, HBL_AFTER_DONE);
			else
				hbl_send_bye(r, l, now);
		} else if (r->phase == HBL_PH_RUN && !(c->flags & HBL_F_SILENT)) {
			hbl_beat(r, l, now);
		}
		break;
	default:
		break;
	}
}

static void on_welcome(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];

	if (!hbl_is_tcp(r)) {
		hbl_udp_release(r, l, now, 0);
		if (hbl_tokmap_put(&r->tm, c->c.token, l))
			HBL_INC(r, errors);
	}
	hbl_set_ls(r, l, HBL_LS_AUTHED);
	HBL_INC(r, authed);
	if (!(c->flags & HBL_F_EVER)) {
		c->flags |= HBL_F_EVER;
		HBL_INC(r, connected);
		HBL_ST_SET(&r->st, last_first_auth_ns, now);
	} else {
		HBL_INC(r, reconnects);
	}
	if (c->flags & HBL_F_STORM) {
		c->flags &= ~HBL_F_STORM;
		HBL_INC(r, storm_back);
		if (r->st.storm_back == r->st.storm_dropped && r->sweep != HBL_SWEEP_STORM)
			HBL_ST_SET(&r->st, storm_done_ns, now);
	}
	if (r->phase >= HBL_PH_BYE) {
		hbl_send_bye(r, l, now);
		return;
	}
	if (c->flags & HBL_F_SILENT || r->phase != HBL_PH_RUN) {
		hbl_wheel_del(&r->wheel, l);
		return;
	}
	/* first beat uniformly spread over one interval */
	c->last_ns = now;
	c->beat_ns = now + hbl_rand(r) % hbl_interval_ns(r);
	hbl_wheel_set(&r->wheel, l, c->beat_ns);
}

void hbl_frame(struct hbl_ring *r, uint32_t l, const struct hb_frame *f, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	uint8_t want[HBL_MAX_PAYLOAD];
	struct hbc_ev ev;

	switch (hbc_input(&c->c, f, now, &ev)) {
	case HBC_EV_WELCOME:
		on_welcome(r, l, now);
		break;
	case HBC_EV_PONG: {
		int w = hbl_window_of(&r->sh->win, ev.ts);

		HBL_INC(r, pongs);
		/* the echoed timestamp is the scheduled time: --warmup leaves early ones out */
		if (ev.ts >= __atomic_load_n(&r->sh->measure_from_ns, __ATOMIC_RELAXED))
			hb_hist_add(&r->rtt, ev.rtt_ns / 1000);
		if (w >= 0) {
			hb_hist_add(&r->win[w].rtt, ev.rtt_ns / 1000);
			__atomic_store_n(&r->win[w].pongs, r->win[w].pongs + 1, __ATOMIC_RELEASE);
		}
		break;
	}
	case HBC_EV_ACK:
		HBL_INC(r, data_acked);
		break;
	case HBC_EV_ECHO:
		if (ev.len == r->cfg->o.payload &&
		    (hbl_pattern(want, ev.len, c->c.device_id, ev.seq),
		     !memcmp(want, ev.payload, ev.len)))
			HBL_INC(r, echo_ok);
		else
			HBL_INC(r, echo_bad);
		break;
	case HBC_EV_BYE:
		if (ev.code == HB_BYE_EXPIRED)
			HBL_INC(r, expired);
		else
			HBL_INC(r, server_bye);
		hbl_end_session(r, l, now, HBL_AFTER_RETRY);
		break;
	case HBC_EV_AUTH_FAILED:
		HBL_INC(r, auth_failed);
		if (c->flags & HBL_F_STORM)
			HBL_INC(r, storm_failures);
		hbl_end_session(r, l, now, HBL_AFTER_DONE);
		break;
	case HBC_EV_ERROR:
		HBL_INC(r, server_error);
		hbl_end_session(r, l, now, c->ls == HBL_LS_AUTHED ? HBL_AFTER_RETRY : HBL_AFTER_FAILED);
		break;
	case HBC_EV_STRAY:
		HBL_INC(r, stray);
		break;
	case HBC_EV_PROTO:
	default:
		HBL_INC(r, errors);
		break;
	}
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
		hbl_retry_later(r, l, now, w ? hbl_rand(r) % w : 0);
		break;
	default:
		hbl_session_lost(r, l, now, c->after == HBL_AFTER_FAILED);
		break;
	}
}
