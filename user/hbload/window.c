// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Measurement windows: merging, tail percentiles with the unanswered counted, histogram dumps. */
#include "window.h"

#include <errno.h>
#include <math.h>

void hbl_wstats_init(struct hbl_wstats *s, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		s[i].pings = s[i].pongs = s[i].beats = 0;
		hb_hist_init(&s[i].rtt);
	}
}

void hbl_wstats_merge(struct hbl_wstats *dst, const struct hbl_wstats *src)
{
	/* pongs before pings: a concurrent reader must never see more answers than questions */
	dst->pongs += __atomic_load_n(&src->pongs, __ATOMIC_ACQUIRE);
	dst->pings += __atomic_load_n(&src->pings, __ATOMIC_ACQUIRE);
	dst->beats += __atomic_load_n(&src->beats, __ATOMIC_ACQUIRE);
	hb_hist_merge(&dst->rtt, &src->rtt);
}

int hbl_step_short(const struct hbl_window_def *d, const struct hbl_wstats *s)
{
	double secs = (double)(d->to_ns - d->from_ns) / 1e9;

	return d->rate > 0 && secs > 0 && (double)hbl_wstats_sent(s) < 0.9 * d->rate * secs;
}

uint64_t hbl_wstats_percentile(const struct hbl_wstats *s, double p)
{
	uint64_t missing = s->pings > s->pongs ? s->pings - s->pongs : 0;
	uint64_t total = s->pongs + missing, rank, seen = 0;

	if (!total)
		return 0;
	rank = (uint64_t)ceil(p / 100.0 * (double)total);
	if (rank < 1)
		rank = 1;
	if (rank > s->rtt.count)
		return UINT64_MAX; /* the rank falls among the unanswered */
	for (unsigned i = 0; i < HB_HIST_BUCKETS; i++) {
		seen += s->rtt.b[i];
		if (seen >= rank) {
			uint64_t v = hb_hist_bucket_high(i);

			return v > s->rtt.max ? s->rtt.max : v;
		}
	}
	return s->rtt.max;
}

int hbl_hist_dump(FILE *f, const char *name, const struct hb_hist *h)
{
	fprintf(f, "# %s: low_us high_us count\n", name);
	for (unsigned i = 0; i < HB_HIST_BUCKETS; i++) {
		uint64_t hi = hb_hist_bucket_high(i);

		if (!h->b[i])
			continue;
		/* the overflow bucket has no upper bound: the largest value seen is one */
		fprintf(f, "%llu %llu %llu\n", (unsigned long long)hb_hist_bucket_low(i),
			(unsigned long long)(hi > h->max ? h->max : hi),
			(unsigned long long)h->b[i]);
	}
	fprintf(f, "\n\n"); /* gnuplot: a new data block per window */
	return ferror(f) ? -EIO : 0;
}
