/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Log-linear latency histogram in microseconds, mergeable across threads.
 *
 * Values below 2^HB_HIST_SUB_BITS us get a bucket each (exact); above, each power of two is
 * split into 2^(HB_HIST_SUB_BITS-1) equal buckets, so a bucket is at most 1/128 (0.8%) of its
 * value wide. Buckets reach 2^HB_HIST_TOP_BIT us (~67 s); larger values land in the last
 * bucket, while max stays exact. 2,560 buckets: 20 KB a histogram.
 *
 * One thread writes a histogram; others may read it at any time (progress lines) with
 * hb_hist_merge, which loads every counter atomically. Writers store with relaxed atomics too,
 * so a concurrent reader sees each counter whole (never torn), without locked instructions.
 */
#ifndef HB_HIST_H
#define HB_HIST_H

#include <stdint.h>

#define HB_HIST_SUB_BITS 8
#define HB_HIST_TOP_BIT 26
#define HB_HIST_LINEAR (1u << HB_HIST_SUB_BITS)
#define HB_HIST_PER_OCTAVE (1u << (HB_HIST_SUB_BITS - 1))
#define HB_HIST_BUCKETS (HB_HIST_LINEAR + (HB_HIST_TOP_BIT - HB_HIST_SUB_BITS) * HB_HIST_PER_OCTAVE)

struct hb_hist {
	uint64_t count;
	uint64_t sum; /* us, for the mean */
	uint64_t min; /* UINT64_MAX while empty */
	uint64_t max;
	uint64_t b[HB_HIST_BUCKETS];
};

void hb_hist_init(struct hb_hist *h);
/* Records one value in microseconds. Single writer per histogram. */
void hb_hist_add(struct hb_hist *h, uint64_t us);
/* Adds src into dst (dst owned by the caller; src may be written concurrently by its owner). */
void hb_hist_merge(struct hb_hist *dst, const struct hb_hist *src);
/* The value at percentile p (0 < p <= 100): the highest value of the bucket holding the
 * ceil(p% * count)-th smallest sample, clamped to [min, max]; so it never understates and is
 * within one bucket width above the true value. 0 for an empty histogram.
 */
uint64_t hb_hist_percentile(const struct hb_hist *h, double p);
double hb_hist_mean(const struct hb_hist *h);

/* Bucket of a value, and the value range [low, high] a bucket covers. */
unsigned hb_hist_bucket(uint64_t us);
uint64_t hb_hist_bucket_low(unsigned i);
uint64_t hb_hist_bucket_high(unsigned i);

#endif
