// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Client sessions, whatever the transport: HELLO, replies, the heartbeat schedule, retries,
 * the reconnect storm and the end-of-run BYE.
 *
 * Session lifecycle (hbl_client.ls): WAIT -> (admission) CONNECTING -> HELLO -> AUTHED, and
 * from any of them to CLOSING (TCP) and back to WAIT after a backoff, or to DONE. Each client
 * has at most one wheel entry, whose meaning depends on ls: WAIT = backoff over, HELLO = the
 * WELCOME deadline, AUTHED = next heartbeat (or, after our BYE, the deadline for the server to
 * close).
 *
 * Heartbeat schedule (coordinated omission): beat_ns follows a fixed schedule, first beat
 * uniform in [WELCOME, WELCOME + interval), then interval * (1 +- jitter) apart, computed from
 * the previous scheduled time and never from when a send actually happened. The PING carries
 * beat_ns, so RTT = arrival - scheduled time: a late hbload loop or a slow server both show.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "hbload.h"
#include "log.h"

static int is_tcp(const struct hbl_ring *r)
{
	return r->cfg->o.proto == HB_TCP;
}

static int phase(const struct hbl_ring *r)
{
	return r->phase;
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

void hbl_retry_later(struct hbl_ring *r, uint32_t l, uint64_t now, uint64_t delay_ns)
{
	if (phase(r) != HBL_PH_RUN) {
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
	if (!is_tcp(r)) {
		hbl_tokmap_del(&r->tm, c->c.token);
		if (c->ls == HBL_LS_HELLO)
			hbl_udp_release(r, l, now, 0);
	}
	hbc_reset(&c->c);
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
	if (is_tcp(r)) {
		hbl_tcp_close(r, l, after);
		return;
	}
	if (after == HBL_AFTER_DONE) {
		hbl_tokmap_del(&r->tm, r->cl[l].c.token);
		if (r->cl[l].ls == HBL_LS_HELLO)
			hbl_udp_release(r, l, now, 0);
		hbl_set_ls(r, l, HBL_LS_DONE);
		return;
	}
	hbl_session_lost(r, l, now, after == HBL_AFTER_FAILED);
}

void hbl_start(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	HBL_INC(r, attempts);
	r->cl[l].gen++;
	if (is_tcp(r)) {
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

/* DATA/ECHO payload: a pattern derived from (device, seq), so an ECHO is checked without
 * keeping a copy of what was sent.
 */
static void pattern(uint8_t *p, unsigned len, uint64_t dev, uint16_t seq)
{
	uint64_t x = dev * 0x9e3779b97f4a7c15ULL ^ seq;

	for (unsigned i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

static uint64_t next_beat(struct hbl_ring *r, uint64_t b)
{
	double j = r->cfg->o.jitter;
	double u = (double)(hbl_rand(r) >> 11) * 0x1.0p-53; /* [0, 1) */
	double d = (double)r->cfg->interval_ns * (1.0 + j * (2.0 * u - 1.0));

	return b + (d < 1e6 ? 1000000 : (uint64_t)d);
}

static int flush(struct hbl_ring *r, uint32_t l, int id, unsigned len)
{
	return is_tcp(r) ? hbl_tcp_send(r, l, id, len) : hbl_udp_send(r, l, id, len);
}

/* Which frames heartbeat number n carries: always a PING, DATA/ECHO every N heartbeats. */
static unsigned beat_frames(const struct hbl_opts *o, uint32_t n, uint8_t kinds[3])
{
	unsigned k = 0;

	kinds[k++] = HB_PING;
	if (o->data_every && n % o->data_every == 0)
		kinds[k++] = HB_DATA;
	if (o->echo_every && n % o->echo_every == 0)
		kinds[k++] = HB_ECHO;
	return k;
}

static uint64_t now_ns(void)
{
	return hbl_now();
}

/* Builds one frame of a heartbeat at p; returns its size or a negative errno. */
static int build(struct hbl_ring *r, struct hbl_client *c, uint8_t kind, uint8_t *p, size_t cap)
{
	const struct hbl_opts *o = &r->cfg->o;
	uint8_t pay[HBL_MAX_PAYLOAD];
	int n;

	if (kind == HB_PING) {
		n = hbc_ping(&c->c, p, cap, c->beat_ns, NULL);
		if (n > 0) {
			HBL_INC(r, pings);
			/* our own lateness: already inside the RTT, reported apart so a reader can
			 * tell a slow hbload from a slow server
			 */
			if (c->beat_ns >= __atomic_load_n(&r->sh->measure_from_ns, __ATOMIC_RELAXED))
				hb_hist_add(&r->lag, (now_ns() - c->beat_ns) / 1000);
		}
		return n;
	}
	/* the pattern is keyed by the seq the frame is about to get */
	pattern(pay, o->payload, c->c.device_id, c->c.seq);
	if (kind == HB_DATA) {
		n = hbc_data(&c->c, p, cap, pay, (uint16_t)o->payload, NULL);
		if (n > 0)
			HBL_INC(r, data_sent);
	} else {
		n = hbc_echo(&c->c, p, cap, pay, (uint16_t)o->payload, NULL);
		if (n > 0)
			HBL_INC(r, echo_sent);
	}
	return n;
}

/* Sends every heartbeat due (up to HBL_MAX_CATCHUP), each stamped with its scheduled time.
 * TCP packs them (and their DATA/ECHO) into one send, which keeps one send in flight per
 * connection and frames whole; UDP sends one datagram per frame. Without a free send buffer
 * the client retries in a millisecond: its PINGs keep their scheduled timestamps, so the delay
 * shows in the RTT instead of vanishing.
 */
static void beat(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	const struct hbl_opts *o = &r->cfg->o;
	uint64_t run_end = __atomic_load_n(&r->sh->run_end_ns, __ATOMIC_RELAXED);
	int tcp = is_tcp(r), id = -1, k = 0, stalled = 0;
	unsigned len = 0;

	if (tcp && (c->flags & HBL_F_SENDING)) {
		stalled = 1;
		goto out;
	}
	for (; c->beat_ns <= now && c->beat_ns < run_end && k < HBL_MAX_CATCHUP; k++) {
		uint8_t kinds[3];
		unsigned nk = beat_frames(o, c->beats + 1, kinds), size = 0;

		for (unsigned i = 0; i < nk; i++)
			size += (unsigned)hb_frame_size((enum hb_transport)o->proto,
							kinds[i] == HB_PING ? 8 : (uint16_t)o->payload);
		if (tcp && id < 0 && (id = hbl_sbuf_get(r)) < 0) {
			stalled = 1;
			break;
		}
		if (tcp && len + size > HBL_SBUF_SIZE)
			break; /* the rest goes out with the next send */
		if (!tcp && r->nsfree < nk) {
			stalled = 1;
			break;
		}
		c->beats++;
		for (unsigned i = 0; i < nk; i++) {
			int n;

			if (!tcp) {
				id = hbl_sbuf_get(r);
				len = 0;
			}
			n = build(r, c, kinds[i], hbl_sbuf(r, id) + len, HBL_SBUF_SIZE - len);
			if (n > 0)
				len += (unsigned)n;
			else
				HBL_INC(r, errors);
			if (!tcp) {
				if (len)
					flush(r, l, id, len);
				else
					hbl_sbuf_put(r, id);
				id = -1;
			}
		}
		c->beat_ns = next_beat(r, c->beat_ns);
	}
	if (id >= 0) {
		if (len)
			flush(r, l, id, len);
		else
			hbl_sbuf_put(r, id);
	}
	/* after a stall longer than the catch-up allows, the missed beats are skipped, counted */
	while (!stalled && k >= HBL_MAX_CATCHUP && c->beat_ns <= now) {
		HBL_INC(r, beats_skipped);
		c->beat_ns = next_beat(r, c->beat_ns);
	}
out:
	if (stalled) {
		HBL_INC(r, send_stalls);
		hbl_wheel_set(&r->wheel, l, now + 1000000);
	} else if (c->beat_ns < run_end) {
		hbl_wheel_set(&r->wheel, l, c->beat_ns > now ? c->beat_ns : now + 1000000);
	}
}

/* Our BYE at the end of the run. TCP then waits (bounded) for the server to close. */
static void send_bye(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	int id, n;

	if (is_tcp(r) && (c->flags & HBL_F_SENDING)) {
		hbl_wheel_set(&r->wheel, l, now + 1000000);
		return;
	}
	id = hbl_sbuf_get(r);
	if (id < 0) {
		hbl_wheel_set(&r->wheel, l, now + 1000000);
		return;
	}
	n = hbc_bye(&c->c, hbl_sbuf(r, id), HBL_SBUF_SIZE, HB_BYE_NORMAL);
	if (n < 0) {
		hbl_sbuf_put(r, id);
		hbl_end_session(r, l, now, HBL_AFTER_DONE);
		return;
	}
	HBL_INC(r, bye_sent);
	flush(r, l, id, (unsigned)n);
	if (is_tcp(r))
		hbl_wheel_set(&r->wheel, l, now + HBL_BYE_WAIT_NS);
	else
		hbl_end_session(r, l, now, HBL_AFTER_DONE);
}

void hbl_wake(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];

	switch (c->ls) {
	case HBL_LS_WAIT:
		if (phase(r) == HBL_PH_RUN)
			hbl_admit(r, l);
		else
			hbl_set_ls(r, l, HBL_LS_DONE);
		break;
	case HBL_LS_HELLO:
		HBL_INC(r, timeouts);
		if (is_tcp(r)) {
			hbl_end_session(r, l, now, HBL_AFTER_FAILED);
		} else {
			hbl_udp_release(r, l, now, 1);
			hbl_session_lost(r, l, now, 1);
		}
		break;
	case HBL_LS_AUTHED:
		if (phase(r) >= HBL_PH_BYE) {
			if (c->c.state == HBC_CLOSED) /* BYE sent, the server did not close in time */
				hbl_end_session(r, l, now, HBL_AFTER_DONE);
			else
				send_bye(r, l, now);
		} else if (phase(r) == HBL_PH_RUN && !(c->flags & HBL_F_SILENT)) {
			beat(r, l, now);
		}
		break;
	default:
		break;
	}
}

static void on_welcome(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];

	if (!is_tcp(r)) {
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
	if (phase(r) >= HBL_PH_BYE) {
		send_bye(r, l, now);
		return;
	}
	if (c->flags & HBL_F_SILENT || phase(r) != HBL_PH_RUN) {
		hbl_wheel_del(&r->wheel, l);
		return;
	}
	/* first beat uniformly spread over one interval */
	c->beat_ns = now + hbl_rand(r) % (r->cfg->interval_ns ? r->cfg->interval_ns : 1);
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
	case HBC_EV_PONG:
		HBL_INC(r, pongs);
		/* the echoed timestamp is the scheduled time: --warmup leaves early ones out */
		if (ev.ts >= __atomic_load_n(&r->sh->measure_from_ns, __ATOMIC_RELAXED))
			hb_hist_add(&r->rtt, ev.rtt_ns / 1000);
		break;
	case HBC_EV_ACK:
		HBL_INC(r, data_acked);
		break;
	case HBC_EV_ECHO:
		if (ev.len == r->cfg->o.payload &&
		    (pattern(want, ev.len, c->c.device_id, ev.seq), !memcmp(want, ev.payload, ev.len)))
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

static void sweep_bye(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];

	switch (c->ls) {
	case HBL_LS_AUTHED:
		if (c->c.state != HBC_CLOSED) /* not already said */
			send_bye(r, l, now);
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
		else
			sweep_storm(r, l);
	}
	r->sweep_pos = end;
	if (end < r->n)
		return;
	if (r->sweep == HBL_SWEEP_STORM && r->st.storm_back == r->st.storm_dropped)
		HBL_ST_SET(&r->st, storm_done_ns, now); /* nothing dropped, or all back already */
	r->sweep = HBL_SWEEP_NONE;
}

/* TCP: the slot is closed; act on what the close was for. */
void hbl_closed(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	uint64_t w = r->cfg->storm_window_ns;

	switch (c->after) {
	case HBL_AFTER_DONE:
		hbc_reset(&c->c);
		hbl_set_ls(r, l, HBL_LS_DONE);
		break;
	case HBL_AFTER_STORM:
		hbc_reset(&c->c);
		c->c.attempt = 0;
		hbl_retry_later(r, l, now, w ? hbl_rand(r) % w : 0);
		break;
	default:
		hbl_session_lost(r, l, now, c->after == HBL_AFTER_FAILED);
		break;
	}
}
