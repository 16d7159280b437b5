/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Measurement windows: spans of scheduled heartbeat time whose PINGs, PONGs and RTTs are
 * counted apart from the rest of the run (the steady phase, each step of a rate ramp).
 *
 * A PING belongs to the window that holds its scheduled time, and so does its PONG (the PONG
 * echoes that time), so an answer that arrives after the window closed still counts for the
 * window its PING was meant for, and a window's pongs never exceed its pings. The main thread
 * defines every window before the run can reach it and publishes the count last; rings only
 * read the definitions.
 */
#ifndef HBL_WINDOW_H
#define HBL_WINDOW_H

#include <stdint.h>
#include <stdio.h>

#include "hist.h"

#define HBL_MAX_STEPS 32
#define HBL_MAX_WINDOWS (1 + HBL_MAX_STEPS) /* the steady window, then the steps */

struct hbl_window_def {
	uint64_t from_ns, to_ns; /* scheduled times in [from_ns, to_ns), CLOCK_MONOTONIC */
	double rate; /* heartbeats per second wanted in the window */
};

struct hbl_windows {
	struct hbl_window_def def[HBL_MAX_WINDOWS];
	uint32_t n; /* published with release after def[0..n) are written */
};

/* One ring's counts for one window; single writer (the ring). */
struct hbl_wstats {
	uint64_t pings, pongs;
	uint64_t beats; /* --beat: heartbeats with no answer frame (not in pings, no RTT) */
	struct hb_hist rtt;
};

/* Heartbeats the window sent: PINGs and BEATs. */
static inline uint64_t hbl_wstats_sent(const struct hbl_wstats *s)
{
	return s->pings + s->beats;
}

/* Index of the window holding scheduled time t, or -1. */
static inline int hbl_window_of(const struct hbl_windows *w, uint64_t t)
{
	uint32_t n = __atomic_load_n(&w->n, __ATOMIC_ACQUIRE);

	for (uint32_t i = 0; i < n; i++)
		if (t >= w->def[i].from_ns && t < w->def[i].to_ns)
			return (int)i;
	return -1;
}

void hbl_wstats_init(struct hbl_wstats *s, unsigned n);
/* Adds src into dst (src may be written concurrently by its ring). */
void hbl_wstats_merge(struct hbl_wstats *dst, const struct hbl_wstats *src);

/* p-th percentile of a window's RTTs in us, counting PINGs still unanswered as slower than
 * any answer (so a server that stops answering cannot look fast). UINT64_MAX if the
 * unanswered alone exceed the (100 - p)% tail.
 */
uint64_t hbl_wstats_percentile(const struct hbl_wstats *s, double p);

/* A rate step whose window holds fewer than 90% of the PINGs its rate asks for: the load
 * generator could not send it (saturated), so the step says nothing about the server. */
int hbl_step_short(const struct hbl_window_def *d, const struct hbl_wstats *s);

/* Writes the nonzero buckets of h as "low_us high_us count" lines under a "# name" header,
 * for plotting (docs/BENCHMARKS.md). Returns 0 or -errno.
 */
int hbl_hist_dump(FILE *f, const char *name, const struct hb_hist *h);

#endif
