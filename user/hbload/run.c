// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The main thread of a run: starts one thread per ring, decides the phases (setup, heartbeat,
 * drain, BYE, exit) from the rings' counters, prints progress, collects the results.
 * Every wait here is bounded by a deadline; the rings follow the phase within 50 ms.
 */
#include "run.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"

#define TICK_NS 20000000ULL /* main thread poll period */
#define INIT_WAIT_NS 10000000000ULL /* rings must be set up within 10 s */
#define UNREACHABLE_FAILS 8 /* failures, with no success at all, that mean "unreachable" */
#define STEP_EVAL_NS 1000000000ULL /* a step is judged this long after its window closed */

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
	uint64_t deadline = hb_mono_ns() + INIT_WAIT_NS;

	for (unsigned i = 0; i < cfg->rings; i++) {
		int rc;

		while ((rc = __atomic_load_n(&rings[i].init_rc, __ATOMIC_ACQUIRE)) == 1) {
			if (hb_mono_ns() > deadline) {
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
	int storm_told, storm_done_told;
	uint64_t steps_base; /* step k runs from steps_base + k * step_s */
	uint32_t next_step, next_eval; /* next step to start, to judge */
	int ramp_done; /* the clients are back at --interval */
	uint8_t started[HBL_MAX_WINDOWS], ended[HBL_MAX_WINDOWS];
	FILE *events;
};

/* One event line: seconds since the start of the run, the event, its arguments. */
static void event(const struct hbl_cfg *cfg, struct timeline *tl, uint64_t now, const char *fmt,
		  ...)
{
	va_list ap;

	if (!tl->events)
		return;
	fprintf(tl->events, "%.3f ", (double)(now - cfg->t0_ns) / 1e9);
	va_start(ap, fmt);
	vfprintf(tl->events, fmt, ap);
	va_end(ap);
	fputc('\n', tl->events);
	fflush(tl->events); /* a reader (a CPU sampler) acts on each line as it comes */
}

const char *hbl_window_name(const struct hbl_result *res, uint32_t i, char *buf, size_t len)
{
	(void)res;
	if (i == 0)
		return "steady";
	snprintf(buf, len, "step%u", i);
	return buf;
}

static uint64_t rate_interval_ns(const struct hbl_cfg *cfg, double rate)
{
	double beating = (double)(cfg->o.clients - cfg->o.silent);

	return (uint64_t)(beating / rate * 1e9);
}

/* Once setup is over: the steady window and the steps, all before any ring can reach them.
 * The run lasts until the later of --duration and the end of the ramp.
 */
static void define_windows(const struct hbl_cfg *cfg, struct hbl_shared *sh, struct timeline *tl,
			   struct hbl_result *res)
{
	const struct hbl_opts *o = &cfg->o;
	struct hbl_windows *w = &sh->win;
	uint64_t from = tl->setup_done + (o->warmup_s > 0 ? s2ns(o->warmup_s) : 0);
	uint64_t to =
		o->steady_s >= 0 ? from + s2ns(o->steady_s) : tl->setup_done + s2ns(o->duration_s);
	uint32_t n = 0;

	w->def[n++] = (struct hbl_window_def){ from, to > from ? to : from,
					       (double)(o->clients - o->silent) / o->interval_s };
	tl->steps_base = tl->setup_done + s2ns(o->steps_at_s >= 0 ? o->steps_at_s : o->duration_s);
	for (uint32_t k = 0; k < o->nsteps; k++) {
		uint64_t start = tl->steps_base + k * s2ns(o->step_s);

		w->def[n++] = (struct hbl_window_def){ start + s2ns(o->step_settle_s),
						       start + s2ns(o->step_s), o->steps[k] };
	}
	if (o->nsteps && tl->steps_base + o->nsteps * s2ns(o->step_s) > tl->run_end)
		tl->run_end = tl->steps_base + o->nsteps * s2ns(o->step_s);
	memcpy(res->def, w->def, sizeof(res->def));
	res->nwin = n;
	__atomic_store_n(&w->n, n, __ATOMIC_RELEASE);
}

static void merge_window(struct hbl_ring *rings, unsigned nrings, uint32_t i,
			 struct hbl_wstats *out)
{
	hbl_wstats_init(out, 1);
	for (unsigned r = 0; r < nrings; r++)
		hbl_wstats_merge(out, &rings[r].win[i]);
}

/* Window events, step starts (a new interval for every ring), and the judgement of each step
 * but the last: a step whose p99 (unanswered PINGs counting as slow) exceeds --step-stop-p99
 * ends the ramp. The clients go back to --interval and the run goes on (a storm may follow);
 * later steps are neither run nor reported.
 */
static void windows_tick(const struct hbl_cfg *cfg, struct hbl_shared *sh, struct hbl_ring *rings,
			 uint64_t now, struct timeline *tl, struct hbl_result *res)
{
	const struct hbl_opts *o = &cfg->o;
	char name[16];

	for (uint32_t i = 0; i < res->nwin; i++) {
		const struct hbl_window_def *d = &res->def[i];

		if (i > 0 && res->ramp_stopped && i > (uint32_t)res->ramp_stopped)
			continue;
		if (!tl->started[i] && now >= d->from_ns && d->from_ns < tl->run_end) {
			tl->started[i] = 1;
			event(cfg, tl, now, "window_start %s %.0f",
			      hbl_window_name(res, i, name, 16), d->rate);
		}
		if (tl->started[i] && !tl->ended[i] && now >= d->to_ns) {
			tl->ended[i] = 1;
			event(cfg, tl, now, "window_end %s", hbl_window_name(res, i, name, 16));
		}
	}
	/* judge before starting the next step: a step that starts in the same tick as a failing
	 * judgement would otherwise run */
	while (!res->ramp_stopped && tl->next_eval + 1 < o->nsteps &&
	       tl->next_eval < tl->next_step &&
	       now >= res->def[1 + tl->next_eval].to_ns + STEP_EVAL_NS) {
		struct hbl_wstats ws;
		uint64_t p99;

		merge_window(rings, cfg->rings, 1 + tl->next_eval, &ws);
		p99 = hbl_wstats_percentile(&ws, 99);
		tl->next_eval++;
		if (o->step_stop_ms > 0 && hbl_step_short(&res->def[tl->next_eval], &ws)) {
			hb_info("step %u (%.0f/s): only %.0f/s sent (hbload saturated?): ramp stopped",
				tl->next_eval, o->steps[tl->next_eval - 1],
				(double)hbl_wstats_sent(&ws) * 1e9 /
					(double)(res->def[tl->next_eval].to_ns -
						 res->def[tl->next_eval].from_ns));
			res->ramp_stopped = tl->next_eval;
			tl->next_step = o->nsteps;
			break;
		}
		if (o->step_stop_ms > 0 && p99 > (uint64_t)(o->step_stop_ms * 1000)) {
			hb_info("step %u (%.0f/s): p99 %s %.1f ms: ramp stopped", tl->next_eval,
				o->steps[tl->next_eval - 1], p99 == UINT64_MAX ? ">" : "",
				p99 == UINT64_MAX ? o->step_stop_ms : (double)p99 / 1000);
			res->ramp_stopped = tl->next_eval; /* steps after it are not reported */
			tl->next_step = o->nsteps;
			break;
		}
	}
	if (tl->next_step < o->nsteps && now < tl->run_end &&
	    now >= tl->steps_base + tl->next_step * s2ns(o->step_s)) {
		__atomic_store_n(&sh->interval_ns, rate_interval_ns(cfg, o->steps[tl->next_step]),
				 __ATOMIC_RELAXED);
		__atomic_fetch_add(&sh->rate_gen, 1, __ATOMIC_RELEASE);
		event(cfg, tl, now, "step %u %.0f", tl->next_step + 1, o->steps[tl->next_step]);
		tl->next_step++;
	}
	/* after the last step (or a failed one) the clients return to --interval, so whatever
	 * follows (a storm) runs at the base rate
	 */
	if (o->nsteps && !tl->ramp_done && now < tl->run_end &&
	    (res->ramp_stopped || now >= tl->steps_base + o->nsteps * s2ns(o->step_s))) {
		tl->ramp_done = 1;
		__atomic_store_n(&sh->interval_ns, cfg->interval_ns, __ATOMIC_RELAXED);
		__atomic_fetch_add(&sh->rate_gen, 1, __ATOMIC_RELEASE);
		event(cfg, tl, now, "ramp_end %u",
		      res->ramp_stopped ? (unsigned)res->ramp_stopped : o->nsteps);
	}
}

/* Setup ends when every client authenticated (or was refused), at the setup timeout, or as
 * soon as it is clear that the server cannot be reached at all.
 */
static void check_setup(struct hbl_cfg *cfg, struct hbl_shared *sh, const struct hbl_stats *t,
			uint64_t now, struct timeline *tl, struct hbl_result *res)
{
	const struct hbl_opts *o = &cfg->o;
	uint64_t fails = t->connect_failed + t->timeouts + t->auth_failed;
	uint64_t need = o->clients < UNREACHABLE_FAILS ? o->clients : UNREACHABLE_FAILS;
	int udp_dead =
		o->proto == HB_UDP && t->usock_failed && !t->usock_ready &&
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
	if (!res->unreachable)
		define_windows(cfg, sh, tl, res);
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

/* Replies still to come. PINGs of sessions that ended (lost_closed) can never be answered:
 * waiting for them would hold the drain for all of --drain, long enough for the server to
 * expire every device that is done heartbeating.
 */
static int outstanding(const struct hbl_stats *t)
{
	return t->pings > t->pongs + t->lost_closed || t->data_sent != t->data_acked ||
	       t->echo_sent != t->echo_ok + t->echo_bad;
}

int hbl_run(struct hbl_cfg *cfg, struct hbl_result *res)
{
	struct hbl_shared sh = { .phase = HBL_PH_RUN,
				 .run_end_ns = UINT64_MAX,
				 .storm_at_ns = UINT64_MAX,
				 /* with --warmup nothing counts until setup is over */
				 .measure_from_ns = cfg->o.warmup_s >= 0 ? UINT64_MAX : 0,
				 .interval_ns = cfg->interval_ns };
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

	if (cfg->o.events && !(tl.events = fopen(cfg->o.events, "a"))) {
		hb_err("--events %s: %s", cfg->o.events, strerror(errno));
		free(rings);
		return -1;
	}
	cfg->t0_ns = hb_mono_ns();
	if (start_rings(cfg, &sh, rings) || wait_rings_ready(cfg, rings)) {
		join_rings(cfg, &sh, rings);
		if (tl.events)
			fclose(tl.events);
		free(rings);
		return -1;
	}
	memset(&prev, 0, sizeof(prev));
	last_progress = cfg->t0_ns;
	while (ph != HBL_PH_EXIT) {
		uint64_t now;

		nanosleep(&(struct timespec){ .tv_nsec = TICK_NS }, NULL);
		now = hb_mono_ns();
		hbl_stats_sum(rings, cfg->rings, &t);
		/* first Ctrl-C/SIGTERM: finish gracefully now; second: leave at once */
		if (stop_requests > handled_stops) {
			handled_stops = stop_requests;
			if (handled_stops > 1 || ph >= HBL_PH_BYE)
				break; /* leave at once: join_rings below sets HBL_PH_EXIT */
			if (!tl.setup_done) {
				tl.setup_done = now;
				res->setup_s = (double)(now - cfg->t0_ns) / 1e9;
			}
			tl.run_end = now;
			__atomic_store_n(&sh.run_end_ns, now, __ATOMIC_RELAXED);
		}
		if (ph == HBL_PH_RUN && !tl.setup_done) {
			check_setup(cfg, &sh, &t, now, &tl, res);
			if (tl.setup_done)
				event(cfg, &tl, now, "setup_done %.3f %llu", res->setup_s,
				      (unsigned long long)t.connected);
		}
		if (ph <= HBL_PH_DRAIN && tl.setup_done && !res->unreachable) {
			windows_tick(cfg, &sh, rings, now, &tl, res);
			if (res->storm && !tl.storm_told && now >= tl.storm_at) {
				tl.storm_told = 1;
				event(cfg, &tl, now, "storm");
			}
			if (tl.storm_told && !tl.storm_done_told &&
			    t.storm_done_ns >= tl.storm_at && t.storm_back == t.storm_dropped) {
				tl.storm_done_told = 1;
				event(cfg, &tl, now, "storm_done %.3f",
				      (double)(t.storm_done_ns - tl.storm_at) / 1e9);
			}
		}
		if (ph == HBL_PH_RUN) {
			if (tl.setup_done && now >= tl.run_end) {
				event(cfg, &tl, now, "run_end");
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
	if (tl.events)
		fclose(tl.events);

	for (uint32_t i = 0; i < res->nwin; i++) {
		merge_window(rings, cfg->rings, i, &res->win[i]);
		if (i && res->def[i].to_ns <= tl.run_end &&
		    (!res->ramp_stopped || i <= (uint32_t)res->ramp_stopped))
			res->steps_run = i;
	}
	hbl_stats_sum(rings, cfg->rings, &res->tot);
	hb_hist_init(&res->rtt);
	hb_hist_init(&res->lag);
	for (unsigned i = 0; i < cfg->rings; i++) {
		hb_hist_merge(&res->rtt, &rings[i].rtt);
		hb_hist_merge(&res->lag, &rings[i].lag);
	}
	if (!tl.setup_done) {
		res->setup_s = (double)(hb_mono_ns() - cfg->t0_ns) / 1e9;
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
