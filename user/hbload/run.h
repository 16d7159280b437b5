/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A whole hbload run: start the rings, move through the phases, collect the results. */
#ifndef HBL_RUN_H
#define HBL_RUN_H

#include "hbload.h"

struct hbl_result {
	struct hbl_stats tot; /* every ring's counters added up (gauges: at the end) */
	struct hb_hist rtt; /* every ring's RTTs, microseconds */
	struct hb_hist lag; /* every ring's send lateness, microseconds */
	uint32_t rings;
	double setup_s; /* until every client authenticated (or the setup timeout) */
	int setup_complete;
	double duration_s; /* heartbeating time after setup */
	uint64_t connected_end; /* sessions open when heartbeating ended */
	int storm; /* a storm was requested and happened */
	double storm_s; /* from the drop until every dropped client was back; -1 if never */
	int unreachable; /* no client ever authenticated */
	/* measurement windows: [0] steady, then the steps (steps_run of them were measured) */
	uint32_t nwin;
	struct hbl_window_def def[HBL_MAX_WINDOWS];
	struct hbl_wstats win[HBL_MAX_WINDOWS];
	uint32_t steps_run; /* steps whose window was measured */
	int ramp_stopped; /* a step failed before the last one: the ramp ended there (its
			   * number, 1-based; 0 if the ramp ran to its end) */
};

/* Runs the load described by cfg. Returns 0 when the run completed (whatever it measured),
 * -1 on a local setup failure (already logged).
 */
int hbl_run(struct hbl_cfg *cfg, struct hbl_result *res);

/* Sums the counters of n rings into tot. */
void hbl_stats_sum(struct hbl_ring *rings, unsigned n, struct hbl_stats *tot);

/* Name of window i of a result ("steady", "step1", ...). */
const char *hbl_window_name(const struct hbl_result *res, uint32_t i, char *buf, size_t len);

/* report.c: the summary on stdout, as one JSON line or as text. */
void hbl_report_json(FILE *f, const struct hbl_cfg *cfg, const struct hbl_result *res);
void hbl_report_text(FILE *f, const struct hbl_cfg *cfg, const struct hbl_result *res);
/* --hist: every measured window's RTT histogram (window.h format). Returns 0 or -errno. */
int hbl_report_hist(const struct hbl_cfg *cfg, const struct hbl_result *res);

#endif
