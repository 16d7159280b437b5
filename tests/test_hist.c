// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Latency histogram: bucket geometry, percentiles against known distributions, merging. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "lib/ht_assert.h"
#include "hist.h"

/* |got - want| <= want/128 + 1: one bucket width (and the exact range below 256 us) */
static void assert_near(uint64_t got, uint64_t want)
{
	uint64_t tol = want / 128 + 1;

	if (got + tol < want || got > want + tol)
		fail_msg("got %llu, want %llu +- %llu", (unsigned long long)got,
			 (unsigned long long)want, (unsigned long long)tol);
}

static void test_buckets_cover_the_range(void **state)
{
	(void)state;
	/* every bucket's range starts right after the previous one ends */
	for (unsigned i = 1; i < HB_HIST_BUCKETS; i++)
		assert_int_equal(hb_hist_bucket_low(i), hb_hist_bucket_high(i - 1) + 1);
	/* every value maps to the bucket whose range holds it */
	for (uint64_t v = 0; v < (1ULL << 22); v += 1 + v / 300) {
		unsigned i = hb_hist_bucket(v);

		HT_TRUE(hb_hist_bucket_low(i) <= v && v <= hb_hist_bucket_high(i),
			"value %llu in bucket %u [%llu, %llu]", (unsigned long long)v, i,
			(unsigned long long)hb_hist_bucket_low(i),
			(unsigned long long)hb_hist_bucket_high(i));
		/* relative width bound: the whole point of log-linear buckets */
		HT_LE(hb_hist_bucket_high(i) - hb_hist_bucket_low(i), v / 128,
		      "bucket %u of value %llu no wider than 1/128 of it", i,
		      (unsigned long long)v);
	}
	/* below 256 us the resolution is exactly 1 us */
	for (uint64_t v = 0; v < 256; v++)
		assert_int_equal(hb_hist_bucket(v), v);
	/* 60 s still has its own bucket; beyond the top everything shares the last one */
	HT_LT(hb_hist_bucket(60000000), HB_HIST_BUCKETS - 1,
	      "60 s in a bucket of its own, below the last");
	assert_int_equal(hb_hist_bucket(1ULL << 40), HB_HIST_BUCKETS - 1);
}

static void test_empty(void **state)
{
	struct hb_hist h;

	(void)state;
	hb_hist_init(&h);
	assert_int_equal(hb_hist_percentile(&h, 50), 0);
	assert_int_equal(h.count, 0);
}

static void test_uniform_percentiles(void **state)
{
	static struct hb_hist h;

	(void)state;
	hb_hist_init(&h);
	for (uint64_t v = 1; v <= 100000; v++)
		hb_hist_add(&h, v);
	assert_int_equal(h.count, 100000);
	assert_int_equal(h.min, 1);
	assert_int_equal(h.max, 100000);
	assert_near(hb_hist_percentile(&h, 50), 50000);
	assert_near(hb_hist_percentile(&h, 99), 99000);
	assert_near(hb_hist_percentile(&h, 99.9), 99900);
	assert_int_equal(hb_hist_percentile(&h, 100), 100000);
	/* never below the true value: a percentile must not flatter the server */
	HT_GE(hb_hist_percentile(&h, 50), 50000, "p50 never below the true value");
	HT_GE(hb_hist_percentile(&h, 99), 99000, "p99 never below the true value");
	HT_TRUE(hb_hist_mean(&h) > 50000.0 && hb_hist_mean(&h) < 50001.0, "mean %f of 1..100000 us",
		hb_hist_mean(&h));
}

static void test_exact_small_values(void **state)
{
	static struct hb_hist h;

	(void)state;
	hb_hist_init(&h);
	/* 90 samples of 100 us, 9 of 200 us, 1 of 5 s */
	for (int i = 0; i < 90; i++)
		hb_hist_add(&h, 100);
	for (int i = 0; i < 9; i++)
		hb_hist_add(&h, 200);
	hb_hist_add(&h, 5000000);
	assert_int_equal(hb_hist_percentile(&h, 50), 100);
	assert_int_equal(hb_hist_percentile(&h, 90), 100);
	assert_int_equal(hb_hist_percentile(&h, 91), 200);
	assert_int_equal(hb_hist_percentile(&h, 99), 200);
	/* the one outlier is the p99.9 and the max, clamped to the exact max */
	assert_int_equal(hb_hist_percentile(&h, 99.9), 5000000);
	assert_int_equal(h.max, 5000000);
}

static void test_overflow_keeps_exact_max(void **state)
{
	static struct hb_hist h;

	(void)state;
	hb_hist_init(&h);
	hb_hist_add(&h, 3600ULL * 1000000); /* an hour: beyond the top bucket */
	assert_int_equal(hb_hist_percentile(&h, 50), 3600ULL * 1000000);
}

static void test_merge_equals_whole(void **state)
{
	static struct hb_hist a, b, whole, m;
	uint64_t x = 12345;

	(void)state;
	hb_hist_init(&a);
	hb_hist_init(&b);
	hb_hist_init(&whole);
	hb_hist_init(&m);
	/* a skewed pseudo-random distribution split across two "threads" */
	for (int i = 0; i < 200000; i++) {
		uint64_t v;

		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		v = (x >> 33) % 1000;
		v = v * v * v / 100; /* 0 .. ~10 s, heavy tail */
		hb_hist_add(i % 3 ? &a : &b, v);
		hb_hist_add(&whole, v);
	}
	hb_hist_merge(&m, &a);
	hb_hist_merge(&m, &b);
	assert_int_equal(m.count, whole.count);
	assert_int_equal(m.sum, whole.sum);
	assert_int_equal(m.min, whole.min);
	assert_int_equal(m.max, whole.max);
	assert_memory_equal(m.b, whole.b, sizeof(m.b));
	assert_int_equal(hb_hist_percentile(&m, 99), hb_hist_percentile(&whole, 99));
	/* merging an empty histogram changes nothing */
	hb_hist_init(&a);
	hb_hist_merge(&m, &a);
	assert_int_equal(m.count, whole.count);
	assert_int_equal(m.min, whole.min);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buckets_cover_the_range),
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_uniform_percentiles),
		cmocka_unit_test(test_exact_small_values),
		cmocka_unit_test(test_overflow_keeps_exact_max),
		cmocka_unit_test(test_merge_equals_whole),
	};

	return cmocka_run_group_tests_name("hist", tests, NULL, NULL);
}
