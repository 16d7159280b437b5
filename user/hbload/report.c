// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The run's summary: one JSON line (the interface scripts and tests read; written by jansson)
 * or text for people.
 *
 * JSON fields (numbers unless said otherwise):
 *   proto ("tcp"|"udp"), clients, threads, interval_s, duration_s (heartbeating time after
 *   setup), setup_s, setup_complete (bool), connected (clients that authenticated at least
 *   once), connected_end (sessions open when heartbeating ended), pings, pongs, lost (PINGs
 *   without PONG after the drain), lost_closed (those of them whose session ended before the
 *   answer could come: a storm, an expiry, the end of the run), rtt_us {p50, p99, p999, max, min, mean, count: the RTTs
 *   behind them, all PONGs unless --warmup}, lag_us {p50, p99, max: how late hbload sent
 *   each PING after its scheduled time, already part of the RTT}, auth_failed,
 *   connect_failed, timeouts, data_sent, data_acked, echo_sent, echo_ok, echo_bad, expired
 *   (sessions the server ended with BYE(EXPIRED)),
 *   reconnects, server_closed, server_errors, stray, errors, send_stalls, beats_skipped,
 *   errno {addrnotavail, connrefused, timeout, other}, and with --storm-at:
 *   storm {dropped, back, seconds (-1: not all back), failures}; keepalive_devices (devices
 *   that had a session in keepalive mode, sending no PINGs), downs_received, downs_acked,
 *   downs_dropped (downlinks from the server, ACKed, not ACKed as the session ended first),
 *   rehellos (UDP sessions given up after --udp-rehello-after unanswered PINGs, each followed
 *   by a new HELLO; a WELCOME after one also counts in reconnects); beats (BEATs sent, --beat;
 *   each window has its own beats beside pings);
 *   uring {recv_rearmed (multishot receives that ended on a live connection and were armed
 *   again), recv_nobufs, recv_cancelled (of them: no free receive buffer, a cancel not ours),
 *   cq_overflow (loop passes that found completions in the kernel's overflow list),
 *   cq_dropped (passes told the kernel had dropped completions: clients may hang)}.
 * Measurement windows (window.h; PINGs by scheduled time, their PONGs with them):
 *   steady {from_s (after setup), seconds, rate (wanted), hb_per_s (sent), pings, pongs, lost,
 *   rtt_us {p50, p99, p999, max}}; with --steps: steps [{rate, hb_per_s, pings, pongs, lost,
 *   rtt_us {...}, ok}] for the steps measured, ramp_stopped (bool), ceiling_hb_per_s (rate of
 *   the last step that passed before the first that failed; 0 if the first failed) and
 *   breaks_at_hb_per_s (the first failed step's rate, -1 if none failed). In windows an
 *   unanswered PING counts as slower than every answer: a percentile that falls among them is
 *   -1. A step passes if its p99 is within --step-stop-p99 (any p99 if that is 0).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "json_out.h"
#include "log.h"
#include "run.h"

typedef unsigned long long ull;

static ull lost(const struct hbl_stats *t)
{
	return t->pings > t->pongs ? t->pings - t->pongs : 0;
}

static long long pct(const struct hbl_wstats *w, double p)
{
	uint64_t v = hbl_wstats_percentile(w, p);

	return v == UINT64_MAX ? -1 : (long long)v;
}

static int step_ok(const struct hbl_cfg *cfg, const struct hbl_window_def *d,
		   const struct hbl_wstats *w)
{
	long long p99 = pct(w, 99);

	if (hbl_step_short(d, w))
		return 0; /* the step's rate was not reached: nothing to say about it */
	if (cfg->o.step_stop_ms <= 0)
		return p99 >= 0;
	return p99 >= 0 && p99 <= (long long)(cfg->o.step_stop_ms * 1000);
}

/* A real rounded to decimals places, as the summary has always printed it (%.Nf: a 2.000 now
 * reads 2.0); whole numbers (decimals 0) are integers. Not finite (never expected) is null. */
static json_t *num(double v, int decimals)
{
	double scale = decimals == 3 ? 1e3 : decimals == 1 ? 1e1 : 1;

	if (!isfinite(v))
		return json_null();
	if (!decimals)
		return json_integer((json_int_t)llround(v));
	return json_real(round(v * scale) / scale);
}

/* A real as %g printed it: a whole number without ".0" (interval_s 1, not 1.0). */
static json_t *num_g(double v)
{
	if (isfinite(v) && v == trunc(v) && fabs(v) < 9007199254740992.0) /* 2^53 */
		return json_integer((json_int_t)v);
	return isfinite(v) ? json_real(v) : json_null();
}

/* The members of a measurement window, added to o. -ENOMEM if one could not be. */
static int window_json(json_t *o, const struct hbl_result *res, uint32_t i)
{
	const struct hbl_window_def *d = &res->def[i];
	const struct hbl_wstats *w = &res->win[i];
	double secs = (double)(d->to_ns - d->from_ns) / 1e9;
	json_t *m = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:{s:I,s:I,s:I,s:o}}", "rate",
			      num(d->rate, 0), "hb_per_s",
			      num(secs > 0 ? (double)hbl_wstats_sent(w) / secs : 0.0, 1), "seconds",
			      num(secs, 3), "pings", hb_json_u64(w->pings), "beats",
			      hb_json_u64(w->beats), "pongs", hb_json_u64(w->pongs), "lost",
			      hb_json_u64(w->pings > w->pongs ? w->pings - w->pongs : 0), "rtt_us",
			      "p50", (json_int_t)pct(w, 50), "p99", (json_int_t)pct(w, 99), "p999",
			      (json_int_t)pct(w, 99.9), "max", hb_json_u64(w->rtt.max));
	int rc = m && !json_object_update(o, m) ? 0 : -ENOMEM;

	json_decref(m);
	return rc;
}

/* steady {...} and, with --steps, steps [...], ramp_stopped, ceiling_hb_per_s and
 * breaks_at_hb_per_s, added to doc. */
static int windows_json(json_t *doc, const struct hbl_cfg *cfg, const struct hbl_result *res)
{
	double ceiling = 0, breaks = -1;
	json_t *steady, *steps;

	if (!res->nwin)
		return 0;
	steady = json_pack("{s:o}", "from_s",
			   num((double)(res->def[0].from_ns - cfg->t0_ns) / 1e9 - res->setup_s, 3));
	if (!steady || window_json(steady, res, 0) || json_object_set_new(doc, "steady", steady))
		return -ENOMEM;
	if (!cfg->o.nsteps)
		return 0;
	steps = json_array();
	if (json_object_set_new(doc, "steps", steps))
		return -ENOMEM;
	for (uint32_t i = 1; i <= res->steps_run; i++) {
		int ok = step_ok(cfg, &res->def[i], &res->win[i]);
		json_t *step = json_object();

		if (!step || window_json(step, res, i) ||
		    json_object_set_new(step, "ok", json_boolean(ok)) ||
		    json_array_append_new(steps, step))
			return -ENOMEM;
		if (ok && breaks < 0)
			ceiling = res->def[i].rate;
		else if (!ok && breaks < 0)
			breaks = res->def[i].rate;
	}
	if (json_object_set_new(doc, "ramp_stopped", json_boolean(res->ramp_stopped)) ||
	    json_object_set_new(doc, "ceiling_hb_per_s", num(ceiling, 0)) ||
	    json_object_set_new(doc, "breaks_at_hb_per_s", num(breaks, 0)))
		return -ENOMEM;
	return 0;
}

int hbl_report_hist(const struct hbl_cfg *cfg, const struct hbl_result *res)
{
	FILE *f = fopen(cfg->o.hist, "w");
	char name[16];
	int rc = 0;

	if (!f)
		return -errno;
	for (uint32_t i = 0; i < res->nwin && i <= res->steps_run && !rc; i++)
		rc = hbl_hist_dump(f, hbl_window_name(res, i, name, sizeof(name)),
				   &res->win[i].rtt);
	if (fclose(f) && !rc)
		rc = -errno;
	return rc;
}

void hbl_report_json(FILE *f, const struct hbl_cfg *cfg, const struct hbl_result *res)
{
	const struct hbl_stats *t = &res->tot;
	const struct hb_hist *h = &res->rtt;
	json_t *doc;

#define U(v) hb_json_u64(v)
	doc = json_pack("{s:s,s:I,s:I,s:o,s:o,s:o,s:b,s:o,s:o,s:o,s:o,s:o,s:o,"
			"s:{s:o,s:o,s:o,s:o,s:o,s:o,s:o},s:{s:o,s:o,s:o},"
			"s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,"
			"s:{s:o,s:o,s:o,s:o}}",
			"proto",
			cfg->o.mqtt		 ? "mqtt"
			: cfg->o.proto == HB_TCP ? "tcp"
						 : "udp",
			"clients", (json_int_t)cfg->o.clients, "threads", (json_int_t)res->rings,
			"interval_s", num_g(cfg->o.interval_s), "duration_s",
			num(res->duration_s, 3), "setup_s", num(res->setup_s, 3), "setup_complete",
			res->setup_complete, "connected", U(t->connected), "connected_end",
			U(res->connected_end), "pings", U(t->pings), "pongs", U(t->pongs), "lost",
			U(lost(t)), "lost_closed", U(t->lost_closed), "rtt_us", "p50",
			U(hb_hist_percentile(h, 50)), "p99", U(hb_hist_percentile(h, 99)), "p999",
			U(hb_hist_percentile(h, 99.9)), "max", U(h->max), "min",
			U(h->count ? h->min : 0), "mean", num(hb_hist_mean(h), 1), "count",
			U(h->count), "lag_us", "p50", U(hb_hist_percentile(&res->lag, 50)), "p99",
			U(hb_hist_percentile(&res->lag, 99)), "max", U(res->lag.max), "auth_failed",
			U(t->auth_failed), "connect_failed", U(t->connect_failed), "timeouts",
			U(t->timeouts), "data_sent", U(t->data_sent), "data_acked",
			U(t->data_acked), "echo_sent", U(t->echo_sent), "echo_ok", U(t->echo_ok),
			"echo_bad", U(t->echo_bad), "expired", U(t->expired), "reconnects",
			U(t->reconnects), "server_closed", U(t->server_closed), "server_errors",
			U(t->server_error), "stray", U(t->stray), "errors", U(t->errors),
			"send_stalls", U(t->send_stalls), "beats_skipped", U(t->beats_skipped),
			"errno", "addrnotavail", U(t->err_addrnotavail), "connrefused",
			U(t->err_connrefused), "timeout", U(t->err_timeout), "other",
			U(t->err_other));
	if (doc && cfg->o.storm_at_s >= 0 &&
	    json_object_set_new(doc, "storm",
				json_pack("{s:o,s:o,s:o,s:o}", "dropped", U(t->storm_dropped),
					  "back", U(t->storm_back), "seconds", num(res->storm_s, 3),
					  "failures", U(t->storm_failures)))) {
		json_decref(doc);
		doc = NULL;
	}
	/* keepalive mode and downlinks */
	if (doc && (json_object_set_new(doc, "keepalive_devices", U(t->keepalive_devices)) ||
		    json_object_set_new(doc, "downs_received", U(t->downs_received)) ||
		    json_object_set_new(doc, "downs_acked", U(t->downs_acked)) ||
		    json_object_set_new(doc, "downs_dropped", U(t->downs_dropped)) ||
		    json_object_set_new(doc, "rehellos", U(t->rehellos)) ||
		    json_object_set_new(doc, "beats", U(t->beats)))) {
		json_decref(doc);
		doc = NULL;
	}
	/* the ring plumbing: what went wrong below the sessions, and was or was not recovered */
	if (doc &&
	    json_object_set_new(doc, "uring",
				json_pack("{s:o,s:o,s:o,s:o,s:o}", "recv_rearmed",
					  U(t->recv_rearmed), "recv_nobufs", U(t->recv_nobufs),
					  "recv_cancelled", U(t->recv_cancelled), "cq_overflow",
					  U(t->cq_overflow), "cq_dropped", U(t->cq_dropped)))) {
		json_decref(doc);
		doc = NULL;
	}
#undef U
	if (doc && windows_json(doc, cfg, res)) {
		json_decref(doc);
		doc = NULL;
	}
	if (hb_json_print(f, doc))
		hb_err("writing the JSON summary failed (out of memory?)");
	fflush(f);
}

void hbl_report_text(FILE *f, const struct hbl_cfg *cfg, const struct hbl_result *res)
{
	const struct hbl_stats *t = &res->tot;
	const struct hb_hist *h = &res->rtt;

	fprintf(f, "hbload: %u %s clients, %u threads, interval %g s\n", cfg->o.clients,
		cfg->o.mqtt		 ? "MQTT"
		: cfg->o.proto == HB_TCP ? "TCP"
					 : "UDP",
		res->rings, cfg->o.interval_s);
	fprintf(f, "  setup      %.3f s%s; connected %llu, open at the end %llu\n", res->setup_s,
		res->setup_complete ? "" : " (incomplete)", (ull)t->connected,
		(ull)res->connected_end);
	fprintf(f,
		"  failures   connect %llu, auth %llu, HELLO timeouts %llu "
		"(addrnotavail %llu, refused %llu, timeout %llu, other %llu)\n",
		(ull)t->connect_failed, (ull)t->auth_failed, (ull)t->timeouts,
		(ull)t->err_addrnotavail, (ull)t->err_connrefused, (ull)t->err_timeout,
		(ull)t->err_other);
	fprintf(f,
		"  heartbeat  %.1f s: %llu pings, %llu pongs, %llu lost (%llu on sessions that "
		"ended first)\n",
		res->duration_s, (ull)t->pings, (ull)t->pongs, lost(t), (ull)t->lost_closed);
	fprintf(f,
		"  rtt        p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms "
		"(from the scheduled send time)\n",
		hb_hist_percentile(h, 50) / 1e3, hb_hist_percentile(h, 99) / 1e3,
		hb_hist_percentile(h, 99.9) / 1e3, h->max / 1e3);
	fprintf(f,
		"  send lag   p50 %.3f ms, p99 %.3f ms, max %.3f ms (hbload's own lateness, "
		"included above)\n",
		hb_hist_percentile(&res->lag, 50) / 1e3, hb_hist_percentile(&res->lag, 99) / 1e3,
		res->lag.max / 1e3);
	fprintf(f, "  data       %llu sent, %llu acked; echo %llu sent, %llu ok, %llu bad\n",
		(ull)t->data_sent, (ull)t->data_acked, (ull)t->echo_sent, (ull)t->echo_ok,
		(ull)t->echo_bad);
	fprintf(f,
		"  server     %llu expired, %llu other BYE, %llu closed, %llu ERROR; "
		"%llu reconnects (%llu UDP re-HELLOs after silence)\n",
		(ull)t->expired, (ull)t->server_bye, (ull)t->server_closed, (ull)t->server_error,
		(ull)t->reconnects, (ull)t->rehellos);
	if (t->keepalive_devices || t->downs_received)
		fprintf(f,
			"  keepalive  %llu devices without PINGs; downlinks %llu received, %llu "
			"acked, %llu dropped\n",
			(ull)t->keepalive_devices, (ull)t->downs_received, (ull)t->downs_acked,
			(ull)t->downs_dropped);
	fprintf(f,
		"  local      %llu errors, %llu stray replies, %llu send stalls, "
		"%llu beats skipped\n",
		(ull)t->errors, (ull)t->stray, (ull)t->send_stalls, (ull)t->beats_skipped);
	if (t->recv_rearmed || t->cq_overflow || t->cq_dropped)
		fprintf(f,
			"  uring      %llu receives armed again (%llu without a buffer, %llu "
			"cancelled), %llu passes with CQ overflow, %llu with dropped completions\n",
			(ull)t->recv_rearmed, (ull)t->recv_nobufs, (ull)t->recv_cancelled,
			(ull)t->cq_overflow, (ull)t->cq_dropped);
	if (cfg->o.storm_at_s >= 0)
		fprintf(f, "  storm      %llu dropped, %llu back in %.3f s, %llu failures\n",
			(ull)t->storm_dropped, (ull)t->storm_back, res->storm_s,
			(ull)t->storm_failures);
	for (uint32_t i = 0; i < res->nwin && i <= res->steps_run; i++) {
		const struct hbl_wstats *w = &res->win[i];
		double secs = (double)(res->def[i].to_ns - res->def[i].from_ns) / 1e9;
		char name[16];

		fprintf(f,
			"  %-10s %.0f/s wanted, %.0f/s sent: %llu pings, %llu pongs, %llu beats; "
			"p50 %.3f ms, p99 %.3f ms%s\n",
			hbl_window_name(res, i, name, sizeof(name)), res->def[i].rate,
			secs > 0 ? (double)hbl_wstats_sent(w) / secs : 0.0, (ull)w->pings,
			(ull)w->pongs, (ull)w->beats, pct(w, 50) / 1e3, pct(w, 99) / 1e3,
			i && cfg->o.nsteps ? (step_ok(cfg, &res->def[i], w) ? " ok" : " FAILED")
					   : "");
	}
}
