// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Passes over every client of a ring: the reconnect storm, a heartbeat rate change and the
 * end-of-run BYE. A pass visits HBL_SWEEP_BATCH clients per loop iteration, so the completions
 * it causes (closes, cancels, sends) never outrun the CQ.
 */
#include "hbload.h"

void hbl_phase_change(struct hbl_ring *r, int ph, uint64_t now)
{
	(void)now;
	if (ph < HBL_PH_BYE)
		return; /* DRAIN: wake handlers stop beating and admitting by themselves */
	/* BYE replaces a storm sweep still under way: every client gets visited again */
	r->sweep = HBL_SWEEP_BYE;
	r->sweep_pos = 0;
}

/* The reconnect storm: every TCP client with a connection drops it at once (an outage), then
 * comes back at a uniformly random moment of the storm window, as a fleet does.
 */
void hbl_storm(struct hbl_ring *r, uint64_t now)
{
	(void)now;
	r->sweep = HBL_SWEEP_STORM;
	r->sweep_pos = 0;
}

/* A rate step (--steps) changed the interval. Every heartbeating client's wait for its next
 * beat is scaled by new / old interval: waits uniform over the old interval become uniform
 * over the new one, so the new rate holds at once (instead of after the old interval has run
 * out) and without a burst. Silence is capped in sweep_rate(). (Drawing every next beat anew
 * over the new interval leaves devices silent for up to old + new interval, long enough for
 * the server to expire them, rightly; keeping whichever beat comes sooner doubles the rate
 * for the first seconds of each step.) Another sweep under way goes first.
 */
void hbl_rate_change(struct hbl_ring *r)
{
	if (r->sweep != HBL_SWEEP_NONE) {
		r->rate_pending = 1;
		return;
	}
	r->rate_pending = 0;
	r->sweep_from_iv_ns = r->sched_iv_ns ? r->sched_iv_ns : r->cfg->interval_ns;
	r->sweep_to_iv_ns = hbl_interval_ns(r);
	r->sched_iv_ns = r->sweep_to_iv_ns;
	r->sweep = HBL_SWEEP_RATE;
	r->sweep_pos = 0;
}

static void sweep_rate(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];

	if (c->ls != HBL_LS_AUTHED || !hbl_beats(r, c) || r->phase != HBL_PH_RUN)
		return;
	uint64_t wait = c->beat_ns > now ? c->beat_ns - now : 0;

	if (!r->sweep_from_iv_ns || r->sweep_from_iv_ns == r->sweep_to_iv_ns)
		return;
	uint64_t b = now + (uint64_t)((double)wait * (double)r->sweep_to_iv_ns /
				      (double)r->sweep_from_iv_ns);
	/* scaling bounds silence by the longer interval for one change, not across a ramp down
	 * and back up (a wait stretched 1.5x after steps that left it long): a device never goes
	 * quiet for more than 1.2 of the longer interval, below a server's 1.5 (a cap at the
	 * shorter one would pull beats forward into the settle time of every step down) */
	uint64_t iv =
		r->sweep_to_iv_ns > r->sweep_from_iv_ns ? r->sweep_to_iv_ns : r->sweep_from_iv_ns;
	uint64_t cap = c->last_ns + iv + iv / 5;

	/* in keepalive mode the schedule carries DATA/ECHO only: no silence to bound */
	if (b > cap && !hbl_keepalive(r, c))
		b = cap > now ? cap : now;
	c->beat_ns = b;
	hbl_wheel_set(&r->wheel, l, c->beat_ns);
}

static void sweep_bye(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];

	switch (c->ls) {
	case HBL_LS_AUTHED:
		if (c->c.state != HBC_CLOSED) /* not already said */
			hbl_send_bye(r, l, now);
		break;
	case HBL_LS_CONNECTING:
	case HBL_LS_HELLO:
		hbl_end_session(r, l, now, HBL_AFTER_DONE);
		break;
	case HBL_LS_CLOSING:
		c->after = HBL_AFTER_DONE;
		break;
	case HBL_LS_WAIT:
		hbl_set_ls(r, l, HBL_LS_DONE);
		break;
	default:
		break;
	}
}

static int sweep_storm(struct hbl_ring *r, uint32_t l)
{
	struct hbl_client *c = &r->cl[l];

	if (c->flags & HBL_F_SILENT)
		return 0;
	if (c->ls != HBL_LS_AUTHED && c->ls != HBL_LS_HELLO && c->ls != HBL_LS_CONNECTING)
		return 0;
	c->flags |= HBL_F_STORM;
	HBL_INC(r, storm_dropped);
	hbl_tcp_close(r, l, HBL_AFTER_STORM);
	return 1;
}

/* Advances the current sweep by one batch (bounded work per loop iteration). */
void hbl_sweep(struct hbl_ring *r, uint64_t now)
{
	uint32_t end = r->sweep_pos + HBL_SWEEP_BATCH;

	if (end > r->n)
		end = r->n;
	for (uint32_t l = r->sweep_pos; l < end; l++) {
		if (r->sweep == HBL_SWEEP_BYE)
			sweep_bye(r, l, now);
		else if (r->sweep == HBL_SWEEP_RATE)
			sweep_rate(r, l, now);
		else
			sweep_storm(r, l);
	}
	r->sweep_pos = end;
	if (end < r->n)
		return;
	if (r->sweep == HBL_SWEEP_STORM && r->st.storm_back == r->st.storm_dropped)
		HBL_ST_SET(&r->st, storm_done_ns, now); /* nothing dropped, or all back already */
	r->sweep = HBL_SWEEP_NONE;
	if (r->rate_pending && r->phase == HBL_PH_RUN)
		hbl_rate_change(r);
}
