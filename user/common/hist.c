// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Log-linear microsecond histogram: bucketing, merge and percentiles. */
#include "hist.h"

#include <math.h>
#include <string.h>

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

void hb_hist_init(struct hb_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

unsigned hb_hist_bucket(uint64_t us)
{
	unsigned k, sub;

	if (us < HB_HIST_LINEAR)
		return (unsigned)us;
	k = 63 - (unsigned)__builtin_clzll(us); /* us is in [2^k, 2^(k+1)) */
	if (k >= HB_HIST_TOP_BIT)
		return HB_HIST_BUCKETS - 1;
	sub = (unsigned)(us >> (k - (HB_HIST_SUB_BITS - 1))) & (HB_HIST_PER_OCTAVE - 1);
	return HB_HIST_LINEAR + (k - HB_HIST_SUB_BITS) * HB_HIST_PER_OCTAVE + sub;
}

uint64_t hb_hist_bucket_low(unsigned i)
{
	unsigned k, sub;

	if (i < HB_HIST_LINEAR)
		return i;
	k = HB_HIST_SUB_BITS + (i - HB_HIST_LINEAR) / HB_HIST_PER_OCTAVE;
	sub = (i - HB_HIST_LINEAR) % HB_HIST_PER_OCTAVE;
	return (1ULL << k) + ((uint64_t)sub << (k - (HB_HIST_SUB_BITS - 1)));
}

uint64_t hb_hist_bucket_high(unsigned i)
{
	if (i + 1 >= HB_HIST_BUCKETS)
		return UINT64_MAX; /* the overflow bucket: callers clamp to max */
	return hb_hist_bucket_low(i + 1) - 1;
}

void hb_hist_add(struct hb_hist *h, uint64_t us)
{
	unsigned i = hb_hist_bucket(us);

	/* single writer: plain read-modify-write through relaxed atomics, no lock prefix */
	STORE(h->b[i], h->b[i] + 1);
	STORE(h->sum, h->sum + us);
	if (us < h->min)
		STORE(h->min, us);
	if (us > h->max)
		STORE(h->max, us);
	/* count last, so a reader never sees more samples than bucket contents */
	__atomic_store_n(&h->count, h->count + 1, __ATOMIC_RELEASE);
}

void hb_hist_merge(struct hb_hist *dst, const struct hb_hist *src)
{
	uint64_t n = __atomic_load_n(&src->count, __ATOMIC_ACQUIRE);
	uint64_t mn = LOAD(src->min), mx = LOAD(src->max);

	if (!n)
		return;
	dst->count += n;
	dst->sum += LOAD(src->sum);
	if (mn < dst->min)
		dst->min = mn;
	if (mx > dst->max)
		dst->max = mx;
	for (unsigned i = 0; i < HB_HIST_BUCKETS; i++)
		dst->b[i] += LOAD(src->b[i]);
}

uint64_t hb_hist_percentile(const struct hb_hist *h, double p)
{
	uint64_t total = 0, rank, seen = 0, v;

	/* a concurrent merge may have read buckets slightly ahead of count: rank over buckets */
	for (unsigned i = 0; i < HB_HIST_BUCKETS; i++)
		total += h->b[i];
	if (!total)
		return 0;
	if (p <= 0)
		return h->min;
	if (p > 100)
		p = 100;
	rank = (uint64_t)ceil(p / 100.0 * (double)total);
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < HB_HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			v = hb_hist_bucket_high(i);
			if (v > h->max)
				v = h->max;
			if (v < h->min)
				v = h->min;
			return v;
		}
	}
	return h->max;
}

double hb_hist_mean(const struct hb_hist *h)
{
	return h->count ? (double)h->sum / (double)h->count : 0.0;
}
