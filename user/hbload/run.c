// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The main thread of a run: starts one thread per ring, decides the phases (setup, heartbeat,
 * drain, BYE, exit) from the rings' counters, prints progress, collects the results.
 * Every wait here is bounded by a deadline; the rings follow the phase within 50 ms.
 */
#include "run.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

#define TICK_NS 20000000ULL /* main thread poll period */
#define INIT_WAIT_NS 10000000000ULL /* rings must be set up within 10 s */
#define UNREACHABLE_FAILS 8 /* failures, with no success at all, that mean "unreachable" */

static volatile sig_atomic_t stop_requests;

static void on_signal(int sig)
{
	(void)sig;
	stop_requests++;
}

void hbl_stats_sum(struct hbl_ring *rings, unsigned n, struct hbl_stats *tot)
{
	uint64_t *t = (uint64_t *)tot;

	memset(tot, 0, sizeof(*tot));
	for (unsigned i = 0; i < n; i++) {
		const uint64_t *s = (const uint64_t *)&rings[i].st;

		for (size_t k = 0; k < offsetof(struct hbl_stats, last_first_auth_ns) / 8; k++)
			t[k] += __atomic_load_n(&s[k], __ATOMIC_RELAXED);
		/* the two timestamps: the latest ring decides */
		if (HBL_ST_GET(&rings[i].st, last_first_auth_ns) > tot->last_first_auth_ns)
			tot->last_first_auth_ns = HBL_ST_GET(&rings[i].st, last_first_auth_ns);
		if (HBL_ST_GET(&rings[i].st, storm_done_ns) > tot->storm_done_ns)
			tot->storm_done_ns = HBL_ST_GET(&rings[i].st, storm_done_ns);
	}
}

static void set_phase(struct hbl_shared *sh, int ph)
{
	__atomic_store_n(&sh->phase, ph, __ATOMIC_RELEASE);
}

static uint64_t s2ns(double s)
{
	return (uint64_t)(s * 1e9);
}

/* One line a second: p99 of the RTTs measured in that second (the difference of two merged
 * snapshots) and p99 of the whole run so far; the rest are totals or rates.
 */
static void progress(const struct hbl_cfg *cfg, struct hbl_ring *rings, const struct hbl_stats *t,
		     const struct hbl_stats *prev, double dt, uint64_t now)
{
	static struct hb_hist cur, last, delta;

	hb_hist_init(&cur);
	for (unsigned i = 0; i < cfg->rings; i++)
		hb_hist_merge(&cur, &rings[i].rtt);
	delta = cur;
	for (unsigned i = 0; i < HB_HIST_BUCKETS; i++)
		delta.b[i] = cur.b[i] >= last.b[i] ? cur.b[i] - last.b[i] : 0;
	last = cur;
	hb_info("%6.1fs  connected %llu/%u  sessions %llu  pings %.0f/s  pongs %.0f/s  "
		"p99 %.3f ms (so far %.3f)  outstanding %lld  failures %llu",
		(double)(now - cfg->t0_ns) / 1e9, (unsigned long long)t->connected, cfg->o.clients,
		(unsigned long long)t->authed_now, (double)(t->pings - prev->pings) / dt,
		(double)(t->pongs - prev->pongs) / dt,
		(double)hb_hist_percentile(&delta, 99) / 1000.0,
		(double)hb_hist_percentile(&cur, 99) / 1000.0, (long long)(t->pings - t->pongs),
		(unsigned long long)(t->connect_failed + t->auth_failed + t->timeouts));
}

/* Splits the clients over the rings and starts one thread per ring. */
static int start_rings(struct hbl_cfg *cfg, struct hbl_shared *sh, struct hbl_ring *rings)
{
	uint32_t per_inflight = cfg->o.inflight / cfg->rings;

	for (unsigned i = 0; i < cfg->rings; i++) {
		struct hbl_ring *r = &rings[i];

		r->id = i;
		r->cfg = cfg;
		r->sh = sh;
		/* client l of ring i is client l * rings + i of the run */
		r->n = cfg->o.clients / cfg->rings + (i < cfg->o.clients % cfg->rings);
		r->nsock = cfg->o.udp_sockets < r->n ? cfg->o.udp_sockets : r->n;
		r->inflight_max = per_inflight ? per_inflight : 1;
		r->connect_ts.tv_sec = (long long)(cfg->connect_timeout_ns / 1000000000ULL);
		r->connect_ts.tv_nsec = (long long)(cfg->connect_timeout_ns % 1000000000ULL);
		r->init_rc = 1; /* pending */
		if (pthread_create(&r->thread, NULL, hbl_ring_main, r)) {
			hb_err("cannot start ring thread %u: %s", i, strerror(errno));
			return -1;
		}
		r->started = 1;
	}
	return 0;
}

static int wait_rings_ready(struct hbl_cfg *cfg, struct hbl_ring *rings)
{
	uint64_t deadline = hbl_now() + INIT_WAIT_NS;

	for (unsigned i = 0; i < cfg->rings; i++) {
		int rc;

		while ((rc = __atomic_load_n(&rings[i].init_rc, __ATOMIC_ACQUIRE)) == 1) {
			if (hbl_now() > deadline) {
				hb_err("ring %u did not finish its setup in time", i);
				return -1;
			}
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
		}
		if (rc) {
			hb_err("ring %u: %s", i, rings[i].init_err);
			return -1;
		}
	}
	return 0;
}

static void join_rings(struct hbl_cfg *cfg, struct hbl_shared *sh, struct hbl_ring *rings)
{
	set_phase(sh, HBL_PH_EXIT);
	for (unsigned i = 0; i < cfg->rings; i++)
		if (rings[i].started)
			pthread_join(rings[i].thread, NULL);
}

/* Main-thread view of where the run is. */
struct timeline {
	uint64_t setup_done; /* 0 until setup is over */
	uint64_t run_end, drain_end, bye_end;
	uint64_t storm_at;
};

/* Setup ends when every client authenticated (or was refused), at the setup timeout, or as
 * soon as it is clear that the server cannot be reached at all.
 */
static void check_setup(struct hbl_cfg *cfg, struct hbl_shared *sh, const struct hbl_stats *t,
			uint64_t now, struct timeline *tl, struct hbl_result *res)
{
	const struct hbl_opts *o = &cfg->o;
	uint64_t fails = t->connect_failed + t->timeouts + t->auth_failed;
	uint64_t need = o->clients < UNREACHABLE_FAILS ? o->clients : UNREACHABLE_FAILS;
	int udp_dead = o->proto == HB_UDP && t->usock_failed && !t->usock_ready &&
		       t->usock_failed >= (o->clients < o->udp_sockets ? o->clients : o->udp_sockets);

	if (t->connected + t->auth_failed >= o->clients && t->connected) {
		tl->setup_done = t->last_first_auth_ns;
		res->setup_complete = 1;
	} else if (!t->connected && (fails >= need || udp_dead)) {
		res->unreachable = 1;
		tl->setup_done = now;
	} else if (now - cfg->t0_ns >= s2ns(o->setup_timeout_s)) {
		hb_warn("setup timeout: %llu of %u clients authenticated after %.1f s",
			(unsigned long long)t->connected, o->clients, o->setup_timeout_s);
		tl->setup_done = now;
	} else {
		return;
	}
	if (!t->connected)
		res->unreachable = 1;
	res->setup_s = (double)(tl->setup_done - cfg->t0_ns) / 1e9;
	tl->run_end = res->unreachable ? now : tl->setup_done + s2ns(o->duration_s);
	__atomic_store_n(&sh->run_end_ns, tl->run_end, __ATOMIC_RELAXED);
	if (o->warmup_s >= 0)
		__atomic_store_n(&sh->measure_from_ns, tl->setup_done + s2ns(o->warmup_s),
				 __ATOMIC_RELAXED);
	if (o->storm_at_s >= 0 && !res->unreachable) {
		tl->storm_at = tl->setup_done + s2ns(o->storm_at_s);
		res->storm = tl->storm_at < tl->run_end;
		__atomic_store_n(&sh->storm_at_ns, tl->storm_at, __ATOMIC_RELAXED);
	}
}

static int outstanding(const struct hbl_stats *t)
{
	return t->pings != t->pongs || t->data_sent != t->data_acked ||
	       t->echo_sent != t->echo_ok + t->echo_bad;
}

int hbl_run(struct hbl_cfg *cfg, struct hbl_result *res)
{
	struct hbl_shared sh = { .phase = HBL_PH_RUN, .run_end_ns = UINT64_MAX,
				 .storm_at_ns = UINT64_MAX,
				 /* with --warmup nothing counts until setup is over */
				 .measure_from_ns = cfg->o.warmup_s >= 0 ? UINT64_MAX : 0 };
	struct hbl_stats t, prev;
	struct timeline tl = { 0 };
	struct hbl_ring *rings;
	uint64_t last_progress, drain_start = 0;
	int ph = HBL_PH_RUN, handled_stops = 0;
	struct sigaction sa = { .sa_handler = on_signal };

	memset(res, 0, sizeof(*res));
	res->storm_s = -1;
	res->rings = cfg->rings;
	rings = aligned_alloc(64, ((cfg->rings * sizeof(*rings) + 63) / 64) * 64);
	if (!rings)
		return -1;
	memset(rings, 0, cfg->rings * sizeof(*rings));
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	cfg->t0_ns = hbl_now();
	if (start_rings(cfg, &sh, rings) || wait_rings_ready(cfg, rings)) {
		join_rings(cfg, &sh, rings);
		free(rings);
		return -1;
	}
	memset(&prev, 0, sizeof(prev));
	last_progress = cfg->t0_ns;
	while (ph != HBL_PH_EXIT) {
		uint64_t now;

		nanosleep(&(struct timespec){ .tv_nsec = TICK_NS }, NULL);
		now = hbl_now();
		hbl_stats_sum(rings, cfg->rings, &t);
		/* first Ctrl-C/SIGTERM: finish gracefully now; second: leave at once */
		if (stop_requests > handled_stops) {
			handled_stops = stop_requests;
			if (handled_stops > 1 || ph >= HBL_PH_BYE) {
				ph = HBL_PH_EXIT;
				break;
			}
			if (!tl.setup_done) {
				tl.setup_done = now;
				res->setup_s = (double)(now - cfg->t0_ns) / 1e9;
			}
			tl.run_end = now;
			__atomic_store_n(&sh.run_end_ns, now, __ATOMIC_RELAXED);
		}
		if (ph == HBL_PH_RUN) {
			if (!tl.setup_done)
				check_setup(cfg, &sh, &t, now, &tl, res);
			if (tl.setup_done && now >= tl.run_end) {
				ph = HBL_PH_DRAIN;
				drain_start = now;
				res->connected_end = t.authed_now;
				tl.drain_end = now + s2ns(cfg->o.drain_s);
				set_phase(&sh, ph);
			}
		} else if (ph == HBL_PH_DRAIN) {
			if (!outstanding(&t) || now >= tl.drain_end) {
				ph = HBL_PH_BYE;
				tl.bye_end = now + HBL_BYE_WAIT_NS + 500000000ULL;
				set_phase(&sh, ph);
			}
		} else if (ph == HBL_PH_BYE) {
			int tcp_open = cfg->o.proto == HB_TCP && t.open;

			if ((!t.authed_now && !tcp_open) || now >= tl.bye_end)
				ph = HBL_PH_EXIT;
		}
		if (cfg->o.progress && now - last_progress >= 1000000000ULL) {
			progress(cfg, rings, &t, &prev, (double)(now - last_progress) / 1e9, now);
			prev = t;
			last_progress = now;
		}
	}
	join_rings(cfg, &sh, rings);

	hbl_stats_sum(rings, cfg->rings, &res->tot);
	hb_hist_init(&res->rtt);
	hb_hist_init(&res->lag);
	for (unsigned i = 0; i < cfg->rings; i++) {
		hb_hist_merge(&res->rtt, &rings[i].rtt);
		hb_hist_merge(&res->lag, &rings[i].lag);
	}
	if (!tl.setup_done) {
		res->setup_s = (double)(hbl_now() - cfg->t0_ns) / 1e9;
		res->unreachable = !res->tot.connected;
	}
	if (tl.setup_done && drain_start > tl.setup_done)
		res->duration_s = (double)(drain_start - tl.setup_done) / 1e9;
	if (res->storm && res->tot.storm_done_ns >= tl.storm_at &&
	    res->tot.storm_back == res->tot.storm_dropped)
		res->storm_s = (double)(res->tot.storm_done_ns - tl.storm_at) / 1e9;
	free(rings);
	return 0;
}
