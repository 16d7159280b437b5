// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The run's summary: one JSON line (the interface scripts and tests read) or text for people.
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
 *   storm {dropped, back, seconds (-1: not all back), failures}.
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
#include <stdio.h>

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

static void window_json(FILE *f, const struct hbl_result *res, uint32_t i)
{
	const struct hbl_window_def *d = &res->def[i];
	const struct hbl_wstats *w = &res->win[i];
	double secs = (double)(d->to_ns - d->from_ns) / 1e9;

	fprintf(f,
		"\"rate\":%.0f,\"hb_per_s\":%.1f,\"seconds\":%.3f,\"pings\":%llu,\"pongs\":%llu,"
		"\"lost\":%llu,\"rtt_us\":{\"p50\":%lld,\"p99\":%lld,\"p999\":%lld,\"max\":%llu}",
		d->rate, secs > 0 ? (double)w->pings / secs : 0.0, secs, (ull)w->pings,
		(ull)w->pongs, (ull)(w->pings > w->pongs ? w->pings - w->pongs : 0), pct(w, 50),
		pct(w, 99), pct(w, 99.9), (ull)w->rtt.max);
}

static void windows_json(FILE *f, const struct hbl_cfg *cfg, const struct hbl_result *res)
{
	double ceiling = 0, breaks = -1;

	if (!res->nwin)
		return;
	fprintf(f, ",\"steady\":{\"from_s\":%.3f,",
		(double)(res->def[0].from_ns - cfg->t0_ns) / 1e9 - res->setup_s);
	window_json(f, res, 0);
	fputc('}', f);
	if (!cfg->o.nsteps)
		return;
	fprintf(f, ",\"steps\":[");
	for (uint32_t i = 1; i <= res->steps_run; i++) {
		int ok = step_ok(cfg, &res->def[i], &res->win[i]);

		fprintf(f, "%s{", i > 1 ? "," : "");
		window_json(f, res, i);
		fprintf(f, ",\"ok\":%s}", ok ? "true" : "false");
		if (ok && breaks < 0)
			ceiling = res->def[i].rate;
		else if (!ok && breaks < 0)
			breaks = res->def[i].rate;
	}
	fprintf(f, "],\"ramp_stopped\":%s,\"ceiling_hb_per_s\":%.0f,\"breaks_at_hb_per_s\":%.0f",
		res->ramp_stopped ? "true" : "false", ceiling, breaks);
}

int hbl_report_hist(const struct hbl_cfg *cfg, const struct hbl_result *res)
{
	FILE *f = fopen(cfg->o.hist, "w");
	char name[16];
	int rc = 0;

	if (!f)
		return -errno;
	for (uint32_t i = 0; i < res->nwin && i <= res->steps_run && !rc; i++)
		rc = hbl_hist_dump(f, hbl_window_name(res, i, name, sizeof(name)), &res->win[i].rtt);
	if (fclose(f) && !rc)
		rc = -errno;
	return rc;
}

void hbl_report_json(FILE *f, const struct hbl_cfg *cfg, const struct hbl_result *res)
{
	const struct hbl_stats *t = &res->tot;
	const struct hb_hist *h = &res->rtt;

	fprintf(f,
		"{\"proto\":\"%s\",\"clients\":%u,\"threads\":%u,\"interval_s\":%g,"
		"\"duration_s\":%.3f,\"setup_s\":%.3f,\"setup_complete\":%s,"
		"\"connected\":%llu,\"connected_end\":%llu,\"pings\":%llu,\"pongs\":%llu,"
		"\"lost\":%llu,\"lost_closed\":%llu,",
		cfg->o.proto == HB_TCP ? "tcp" : "udp", cfg->o.clients, res->rings,
		cfg->o.interval_s, res->duration_s, res->setup_s,
		res->setup_complete ? "true" : "false", (ull)t->connected,
		(ull)res->connected_end, (ull)t->pings, (ull)t->pongs, lost(t),
		(ull)t->lost_closed);
	fprintf(f,
		"\"rtt_us\":{\"p50\":%llu,\"p99\":%llu,\"p999\":%llu,\"max\":%llu,\"min\":%llu,"
		"\"mean\":%.1f,\"count\":%llu},",
		(ull)hb_hist_percentile(h, 50), (ull)hb_hist_percentile(h, 99),
		(ull)hb_hist_percentile(h, 99.9), (ull)h->max, (ull)(h->count ? h->min : 0),
		hb_hist_mean(h), (ull)h->count);
	fprintf(f, "\"lag_us\":{\"p50\":%llu,\"p99\":%llu,\"max\":%llu},",
		(ull)hb_hist_percentile(&res->lag, 50), (ull)hb_hist_percentile(&res->lag, 99),
		(ull)res->lag.max);
	fprintf(f,
		"\"auth_failed\":%llu,\"connect_failed\":%llu,\"timeouts\":%llu,"
		"\"data_sent\":%llu,\"data_acked\":%llu,\"echo_sent\":%llu,\"echo_ok\":%llu,"
		"\"echo_bad\":%llu,\"expired\":%llu,\"reconnects\":%llu,\"server_closed\":%llu,"
		"\"server_errors\":%llu,\"stray\":%llu,\"errors\":%llu,\"send_stalls\":%llu,"
		"\"beats_skipped\":%llu,",
		(ull)t->auth_failed, (ull)t->connect_failed, (ull)t->timeouts, (ull)t->data_sent,
		(ull)t->data_acked, (ull)t->echo_sent, (ull)t->echo_ok, (ull)t->echo_bad,
		(ull)t->expired, (ull)t->reconnects, (ull)t->server_closed, (ull)t->server_error,
		(ull)t->stray, (ull)t->errors, (ull)t->send_stalls, (ull)t->beats_skipped);
	fprintf(f, "\"errno\":{\"addrnotavail\":%llu,\"connrefused\":%llu,\"timeout\":%llu,"
		   "\"other\":%llu}",
		(ull)t->err_addrnotavail, (ull)t->err_connrefused, (ull)t->err_timeout,
		(ull)t->err_other);
	if (cfg->o.storm_at_s >= 0)
		fprintf(f, ",\"storm\":{\"dropped\":%llu,\"back\":%llu,\"seconds\":%.3f,"
			   "\"failures\":%llu}",
			(ull)t->storm_dropped, (ull)t->storm_back, res->storm_s,
			(ull)t->storm_failures);
	windows_json(f, cfg, res);
	fprintf(f, "}\n");
	fflush(f);
}

void hbl_report_text(FILE *f, const struct hbl_cfg *cfg, const struct hbl_result *res)
{
	const struct hbl_stats *t = &res->tot;
	const struct hb_hist *h = &res->rtt;

	fprintf(f, "hbload: %u %s clients, %u threads, interval %g s\n", cfg->o.clients,
		cfg->o.proto == HB_TCP ? "TCP" : "UDP", res->rings, cfg->o.interval_s);
	fprintf(f, "  setup      %.3f s%s; connected %llu, open at the end %llu\n", res->setup_s,
		res->setup_complete ? "" : " (incomplete)", (ull)t->connected,
		(ull)res->connected_end);
	fprintf(f, "  failures   connect %llu, auth %llu, HELLO timeouts %llu "
		   "(addrnotavail %llu, refused %llu, timeout %llu, other %llu)\n",
		(ull)t->connect_failed, (ull)t->auth_failed, (ull)t->timeouts,
		(ull)t->err_addrnotavail, (ull)t->err_connrefused, (ull)t->err_timeout,
		(ull)t->err_other);
	fprintf(f, "  heartbeat  %.1f s: %llu pings, %llu pongs, %llu lost (%llu on sessions that "
		   "ended first)\n",
		res->duration_s, (ull)t->pings, (ull)t->pongs, lost(t), (ull)t->lost_closed);
	fprintf(f, "  rtt        p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms "
		   "(from the scheduled send time)\n",
		hb_hist_percentile(h, 50) / 1e3, hb_hist_percentile(h, 99) / 1e3,
		hb_hist_percentile(h, 99.9) / 1e3, h->max / 1e3);
	fprintf(f, "  send lag   p50 %.3f ms, p99 %.3f ms, max %.3f ms (hbload's own lateness, "
		   "included above)\n",
		hb_hist_percentile(&res->lag, 50) / 1e3, hb_hist_percentile(&res->lag, 99) / 1e3,
		res->lag.max / 1e3);
	fprintf(f, "  data       %llu sent, %llu acked; echo %llu sent, %llu ok, %llu bad\n",
		(ull)t->data_sent, (ull)t->data_acked, (ull)t->echo_sent, (ull)t->echo_ok,
		(ull)t->echo_bad);
	fprintf(f, "  server     %llu expired, %llu other BYE, %llu closed, %llu ERROR; "
		   "%llu reconnects\n",
		(ull)t->expired, (ull)t->server_bye, (ull)t->server_closed, (ull)t->server_error,
		(ull)t->reconnects);
	fprintf(f, "  local      %llu errors, %llu stray replies, %llu send stalls, "
		   "%llu beats skipped\n",
		(ull)t->errors, (ull)t->stray, (ull)t->send_stalls, (ull)t->beats_skipped);
	if (cfg->o.storm_at_s >= 0)
		fprintf(f, "  storm      %llu dropped, %llu back in %.3f s, %llu failures\n",
			(ull)t->storm_dropped, (ull)t->storm_back, res->storm_s,
			(ull)t->storm_failures);
	for (uint32_t i = 0; i < res->nwin && i <= res->steps_run; i++) {
		const struct hbl_wstats *w = &res->win[i];
		double secs = (double)(res->def[i].to_ns - res->def[i].from_ns) / 1e9;
		char name[16];

		fprintf(f, "  %-10s %.0f/s wanted, %.0f/s sent: %llu pings, %llu pongs; p50 %.3f ms, "
			   "p99 %.3f ms%s\n",
			hbl_window_name(res, i, name, sizeof(name)), res->def[i].rate,
			secs > 0 ? (double)w->pings / secs : 0.0, (ull)w->pings, (ull)w->pongs,
			pct(w, 50) / 1e3, pct(w, 99) / 1e3,
			i && cfg->o.nsteps ? (step_ok(cfg, &res->def[i], w) ? " ok" : " FAILED") : "");
	}
}
