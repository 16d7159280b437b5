// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* What a client sends on its own schedule: heartbeats, with their DATA and ECHO.
 *
 * Heartbeat schedule (coordinated omission): beat_ns follows a fixed schedule, first beat
 * uniform in [WELCOME, WELCOME + interval), then interval * (1 +- jitter) apart, computed from
 * the previous scheduled time and never from when a send actually happened. The PING carries
 * beat_ns, so RTT = arrival - scheduled time: a late hbload loop or a slow server both show.
 */
#include <string.h>

#include "clock.h"
#include "hbload.h"

/* DATA/ECHO payload: a pattern derived from (device, seq), so an ECHO is checked without
 * keeping a copy of what was sent.
 */
void hbl_pattern(uint8_t *p, unsigned len, uint64_t dev, uint16_t seq)
{
	uint64_t x = dev * 0x9e3779b97f4a7c15ULL ^ seq;

	for (unsigned i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

/* The interval now: --interval, or the rate step under way (--steps). */
uint64_t hbl_interval_ns(const struct hbl_ring *r)
{
	uint64_t iv = __atomic_load_n(&r->sh->interval_ns, __ATOMIC_RELAXED);

	return iv ? iv : 1;
}

static uint64_t next_beat(struct hbl_ring *r, uint64_t b)
{
	double j = r->cfg->o.jitter;
	double u = (double)(hbl_rand(&r->rng) >> 11) * 0x1.0p-53; /* [0, 1) */
	double d = (double)hbl_interval_ns(r) * (1.0 + j * (2.0 * u - 1.0));

	return b + (d < 1e6 ? 1000000 : (uint64_t)d);
}

/* Sends len bytes of send buffer id on client l's session, over whichever transport it uses. */
int hbl_send(struct hbl_ring *r, uint32_t l, int id, unsigned len)
{
	return hbl_is_tcp(r) ? hbl_tcp_send(r, l, id, len) : hbl_udp_send(r, l, id, len);
}

/* 1 while client c's session is in keepalive mode (a TCP WELCOME with HB_WELCOME_KEEPALIVE)
 * and it leaves the heartbeat to the kernels: the server's probes, answered by this host's
 * kernel, tell the server it is alive. --force-pings keeps the PINGs on. The sockets get no
 * keepalive of their own: their probes would be answered by the server's kernel and reset its
 * idle timer, and what a run in this mode measures is the server's own check.
 */
int hbl_keepalive(const struct hbl_ring *r, const struct hbl_client *c)
{
	return !r->cfg->o.force_pings && hbc_keepalive(&c->c);
}

/* 1 if client c has anything to send on its schedule: not silent, and PINGs, or DATA/ECHO
 * in keepalive mode.
 */
int hbl_beats(const struct hbl_ring *r, const struct hbl_client *c)
{
	const struct hbl_opts *o = &r->cfg->o;

	if (c->flags & HBL_F_SILENT)
		return 0;
	return !hbl_keepalive(r, c) || o->data_every || o->echo_every;
}

/* Which frames heartbeat number n carries: a PING (none in keepalive mode), DATA/ECHO every N
 * heartbeats.
 */
static unsigned beat_frames(const struct hbl_opts *o, uint32_t n, int ping, uint8_t kinds[3])
{
	unsigned k = 0;

	if (ping)
		kinds[k++] = o->beat ? HB_BEAT : HB_PING;
	if (o->data_every && n % o->data_every == 0)
		kinds[k++] = HB_DATA;
	if (o->echo_every && n % o->echo_every == 0)
		kinds[k++] = HB_ECHO;
	return k;
}

/* Builds one frame of a heartbeat at p; returns its size or a negative errno. */
static int build(struct hbl_ring *r, struct hbl_client *c, uint8_t kind, uint8_t *p, size_t cap)
{
	const struct hbl_opts *o = &r->cfg->o;
	uint8_t pay[HBL_MAX_PAYLOAD];
	int n;

	if (kind == HB_BEAT) {
		n = hbc_beat(&c->c, p, cap, NULL);
		if (n > 0) {
			int w = hbl_window_of(&r->sh->win, c->beat_ns);

			HBL_INC(r, beats);
			c->last_ns = c->beat_ns;
			if (w >= 0)
				__atomic_store_n(&r->win[w].beats, r->win[w].beats + 1,
						 __ATOMIC_RELEASE);
		}
		return n;
	}
	if (kind == HB_PING) {
		n = o->mqtt ? hbl_mqtt_ping(c, p, cap, c->beat_ns)
			    : hbc_ping(&c->c, p, cap, c->beat_ns, NULL);
		if (n > 0) {
			int w = hbl_window_of(&r->sh->win, c->beat_ns);

			HBL_INC(r, pings);
			c->last_ns = c->beat_ns;
			if (c->unanswered < UINT8_MAX)
				c->unanswered++;
			if (w >= 0)
				__atomic_store_n(&r->win[w].pings, r->win[w].pings + 1,
						 __ATOMIC_RELEASE);
			/* our own lateness: already inside the RTT, reported apart so a reader can
			 * tell a slow hbload from a slow server
			 */
			if (c->beat_ns >=
			    __atomic_load_n(&r->sh->measure_from_ns, __ATOMIC_RELAXED))
				hb_hist_add(&r->lag, (hb_mono_ns() - c->beat_ns) / 1000);
		}
		return n;
	}
	/* the pattern is keyed by the seq the frame is about to get */
	hbl_pattern(pay, o->payload, c->c.device_id, c->c.seq);
	if (kind == HB_DATA) {
		n = o->mqtt ? hbl_mqtt_publish(r, c, p, cap, pay, o->payload)
			    : hbc_data(&c->c, p, cap, pay, (uint16_t)o->payload, NULL);
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
void hbl_beat(struct hbl_ring *r, uint32_t l, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	const struct hbl_opts *o = &r->cfg->o;
	uint64_t run_end = __atomic_load_n(&r->sh->run_end_ns, __ATOMIC_RELAXED);
	int tcp = hbl_is_tcp(r), id = -1, k = 0, stalled = 0, ping = !hbl_keepalive(r, c);
	unsigned len = 0;

	if (tcp && (c->flags & HBL_F_SENDING)) {
		stalled = 1;
		goto out;
	}
	for (; c->beat_ns <= now && c->beat_ns < run_end && k < HBL_MAX_CATCHUP; k++) {
		uint8_t kinds[3];
		unsigned nk = beat_frames(o, c->beats + 1, ping, kinds), size = 0;

		if (!nk) {
			/* keepalive mode, and no DATA or ECHO on this beat */
			c->beats++;
			c->beat_ns = next_beat(r, c->beat_ns);
			continue;
		}
		for (unsigned i = 0; i < nk; i++)
			size += (unsigned)hb_frame_size((enum hb_transport)o->proto,
							kinds[i] == HB_PING ? 8
							: kinds[i] == HB_BEAT
								? 0
								: (uint16_t)o->payload) +
				(o->mqtt ? HBL_MQTT_OVERHEAD : 0);
		if (tcp && id < 0 && (id = hbl_sbuf_get(&r->sb)) < 0) {
			stalled = 1;
			break;
		}
		if (tcp && len + size > HBL_SBUF_SIZE)
			break; /* the rest goes out with the next send */
		if (!tcp && r->sb.nfree < nk) {
			stalled = 1;
			break;
		}
		c->beats++;
		for (unsigned i = 0; i < nk; i++) {
			int n;

			if (!tcp) {
				id = hbl_sbuf_get(&r->sb);
				len = 0;
			}
			n = build(r, c, kinds[i], hbl_sbuf(&r->sb, id) + len, HBL_SBUF_SIZE - len);
			if (n > 0)
				len += (unsigned)n;
			else
				HBL_INC(r, errors);
			if (!tcp) {
				if (len)
					hbl_send(r, l, id, len);
				else
					hbl_sbuf_put(&r->sb, id);
				id = -1;
			}
		}
		c->beat_ns = next_beat(r, c->beat_ns);
	}
	if (id >= 0) {
		if (len)
			hbl_send(r, l, id, len);
		else
			hbl_sbuf_put(&r->sb, id);
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
