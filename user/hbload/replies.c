// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* What a client does with each frame the server sends: WELCOME opens the session and starts
 * the heartbeat schedule (none in keepalive mode without DATA or ECHO), PONG/ACK/ECHO are
 * counted and measured, a DOWN is ACKed, BYE and ERROR end it.
 */
#include <string.h>

#include "hbload.h"

void hbl_session_open(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];

	if (!hbl_is_tcp(r)) {
		hbl_udp_release(r, l, now, 0);
		if (hbl_tokmap_put(&r->tm, c->c.token, l))
			HBL_INC(r, errors);
	}
	hbl_set_ls(r, l, HBL_LS_AUTHED);
	HBL_INC(r, authed);
	c->unanswered = 0;
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
	if (hbl_keepalive(r, c) && !(c->flags & HBL_F_KA_SEEN)) {
		c->flags |= HBL_F_KA_SEEN;
		HBL_INC(r, keepalive_devices);
	}
	if (r->phase >= HBL_PH_BYE) {
		hbl_send_bye(r, l, now);
		return;
	}
	if (!hbl_beats(r, c) || r->phase != HBL_PH_RUN) {
		hbl_wheel_del(&r->wheel, l);
		return;
	}
	/* first beat uniformly spread over one interval */
	c->last_ns = now;
	c->beat_ns = now + hbl_rand(&r->rng) % hbl_interval_ns(r);
	hbl_wheel_set(&r->wheel, l, c->beat_ns);
}

void hbl_count_pong(struct hbl_ring *r, uint64_t ts, uint64_t rtt_ns, int measured)
{
	int w = hbl_window_of(&r->sh->win, ts);

	HBL_INC(r, pongs);
	/* the echoed timestamp is the scheduled time: --warmup leaves early ones out */
	if (measured && ts >= __atomic_load_n(&r->sh->measure_from_ns, __ATOMIC_RELAXED))
		hb_hist_add(&r->rtt, rtt_ns / 1000);
	if (w >= 0) {
		if (measured)
			hb_hist_add(&r->win[w].rtt, rtt_ns / 1000);
		__atomic_store_n(&r->win[w].pongs, r->win[w].pongs + 1, __ATOMIC_RELEASE);
	}
}

/* One frame for client l, received at now (TCP: from its connection; UDP: matched by token). */
void hbl_frame(struct hbl_ring *r, uint32_t l, const struct hb_frame *f, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	uint8_t want[HBL_MAX_PAYLOAD];
	struct hbc_ev ev;

	switch (hbc_input(&c->c, f, now, &ev)) {
	case HBC_EV_WELCOME:
		hbl_session_open(r, l, now);
		break;
	case HBC_EV_PONG:
		c->unanswered = 0;
		hbl_count_pong(r, ev.ts, ev.rtt_ns, 1);
		break;
	case HBC_EV_ACK:
		c->unanswered = 0;
		HBL_INC(r, data_acked);
		break;
	case HBC_EV_ECHO:
		c->unanswered = 0;
		if (ev.len == r->cfg->o.payload &&
		    (hbl_pattern(want, ev.len, c->c.device_id, ev.seq),
		     !memcmp(want, ev.payload, ev.len)))
			HBL_INC(r, echo_ok);
		else
			HBL_INC(r, echo_bad);
		break;
	case HBC_EV_DOWN:
		c->unanswered = 0;
		hbl_down(r, l, ev.seq);
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
		hbl_end_session(r, l, now,
				c->ls == HBL_LS_AUTHED ? HBL_AFTER_RETRY : HBL_AFTER_FAILED);
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
