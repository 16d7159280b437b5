/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Latency histograms the daemon keeps for /metrics: fixed buckets, one per worker, no locks. */
#ifndef HBD_TIMING_H
#define HBD_TIMING_H

#include <stdint.h>

/* Upper bounds in microseconds (Prometheus "le" in seconds: these / 1e6). Fixed buckets rather
 * than hist.h's log-linear ones, because the exposition format wants cumulative fixed "le"s.
 */
#define HBD_TIMING_BOUNDS_US                                                                      \
	{                                                                                         \
		50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, \
			1000000, 2500000, 5000000                                                 \
	}
#define HBD_TIMING_N 16

struct hbd_timing {
	uint64_t bucket[HBD_TIMING_N + 1]; /* the last one is +Inf */
	uint64_t sum_us;
	uint64_t count;
};

/* One observation; relaxed atomics so the metrics thread reads without tearing. */
static inline void hbd_timing_add(struct hbd_timing *t, uint64_t us)
{
	static const uint64_t bound[HBD_TIMING_N] = HBD_TIMING_BOUNDS_US;
	unsigned i = 0;

	while (i < HBD_TIMING_N && us > bound[i])
		i++;
	__atomic_fetch_add(&t->bucket[i], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&t->sum_us, us, __ATOMIC_RELAXED);
	__atomic_fetch_add(&t->count, 1, __ATOMIC_RELAXED);
}

#endif
