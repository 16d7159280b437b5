// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* JSON written through jansson (user/common/json_out.h): the sink's DATA lines byte for byte
 * as the hand-written format had them, the helpers' edge cases, the daemon counters' keys.
 * No kernel needed. */
#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "json_out.h"
#include "pins.h"
#include "sink.h"
#include "stats.h"

/* The DATA line as sink.c wrote it before jansson: a copy of that code, kept here as the
 * reference the new output must match byte for byte. */
static size_t old_sink_format(char *out, size_t cap, uint64_t device, bool udp, uint16_t seq,
			      const struct timespec *ts, const void *payload, size_t len)
{
	char b64[(HB_MAX_PAYLOAD + 2) / 3 * 4 + 1];
	struct tm tm;
	int n;

	if (len > HB_MAX_PAYLOAD || !gmtime_r(&ts->tv_sec, &tm))
		return 0;
	EVP_EncodeBlock((unsigned char *)b64, payload, (int)len);
	n = snprintf(out, cap,
		     "{\"device\":%" PRIu64 ",\"transport\":\"%s\",\"seq\":%u,"
		     "\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"payload\":\"%s\"}\n",
		     device, udp ? "udp" : "tcp", seq, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
		     tm.tm_hour, tm.tm_min, tm.tm_sec, ts->tv_nsec / 1000000, b64);
	return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

static void sink_lines_match_the_old_format(void **state)
{
	static const uint64_t devices[] = {
		0, 1, 42, INT64_MAX, (uint64_t)INT64_MAX + 1, UINT64_MAX
	};
	static const uint16_t seqs[] = { 0, 1, 255, 65535 };
	static const struct timespec times[] = {
		{ 0, 0 }, /* the epoch */
		{ 1700000000, 123456789 }, /* ms cut, not rounded */
		{ 1700000000, 999999999 }, /* .999 */
		{ 1700000000, 1000000 }, /* .001 */
		{ 1709164800, 500000000 }, /* 2024-02-29 */
		{ 253402300799, 999000000 }, /* 9999-12-31T23:59:59.999Z */
	};
	static const size_t lens[] = { 0, 1, 2, 3, 16, HB_MAX_PAYLOAD - 1, HB_MAX_PAYLOAD };
	char a[HBD_SINK_LINE_MAX], b[HBD_SINK_LINE_MAX];
	uint8_t payload[HB_MAX_PAYLOAD];
	unsigned checked = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 37 + 11); /* every byte value, '"' and '\\' among them */
	for (size_t d = 0; d < sizeof(devices) / sizeof(devices[0]); d++)
		for (size_t s = 0; s < sizeof(seqs) / sizeof(seqs[0]); s++)
			for (size_t t = 0; t < sizeof(times) / sizeof(times[0]); t++)
				for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
					for (int udp = 0; udp < 2; udp++) {
						size_t na, nb;

						memset(a, 0x55, sizeof(a));
						memset(b, 0x55, sizeof(b));
						na = old_sink_format(a, sizeof(a), devices[d], udp,
								     seqs[s], &times[t], payload,
								     lens[l]);
						nb = hbd_sink_format(b, sizeof(b), devices[d], udp,
								     seqs[s], &times[t], payload,
								     lens[l]);
						assert_true(na > 0);
						assert_int_equal(nb, na);
						assert_memory_equal(b, a, na + 1); /* and its NUL */
						checked++;
					}
	assert_int_equal(checked, 6 * 4 * 6 * 7 * 2);
}

/* Buffers too small by one byte, and payloads too large, are refused as before. */
static void sink_line_limits_match_the_old_format(void **state)
{
	struct timespec ts = { 1700000000, 123456789 };
	uint8_t payload[HB_MAX_PAYLOAD + 1];
	char a[HBD_SINK_LINE_MAX], b[HBD_SINK_LINE_MAX];
	size_t n;

	(void)state;
	memset(payload, 0xab, sizeof(payload));
	n = old_sink_format(a, sizeof(a), UINT64_MAX, true, 65535, &ts, payload, HB_MAX_PAYLOAD);
	assert_true(n > 0 && n < sizeof(a));
	/* the line and its NUL fit exactly; one byte less is refused by both */
	assert_int_equal(hbd_sink_format(b, n + 1, UINT64_MAX, true, 65535, &ts, payload,
					 HB_MAX_PAYLOAD),
			 n);
	assert_memory_equal(a, b, n + 1);
	assert_int_equal(old_sink_format(a, n, UINT64_MAX, true, 65535, &ts, payload,
					 HB_MAX_PAYLOAD),
			 0);
	assert_int_equal(hbd_sink_format(b, n, UINT64_MAX, true, 65535, &ts, payload,
					 HB_MAX_PAYLOAD),
			 0);
	for (size_t cap = 1; cap < 40; cap++)
		assert_int_equal(hbd_sink_format(b, cap, 1, false, 1, &ts, "x", 1), 0);
	assert_int_equal(hbd_sink_format(b, sizeof(b), 1, true, 1, &ts, payload,
					 HB_MAX_PAYLOAD + 1),
			 0);
	/* and the line is JSON a parser reads back, device id and all */
	n = hbd_sink_format(b, sizeof(b), 123456789012345ull, false, 9, &ts, "hi", 2);
	json_t *doc = json_loadb(b, n, 0, NULL);
	assert_non_null(doc);
	assert_int_equal(json_integer_value(json_object_get(doc, "device")), 123456789012345ll);
	assert_string_equal(json_string_value(json_object_get(doc, "payload")), "aGk=");
	json_decref(doc);
}

static void u64_first_member(void **state)
{
	char buf[64];

	(void)state;
	assert_int_equal(hb_json_line_u64_first(buf, sizeof(buf), "id", UINT64_MAX, json_object()),
			 (int)strlen("{\"id\":18446744073709551615}\n"));
	assert_string_equal(buf, "{\"id\":18446744073709551615}\n");
	assert_true(hb_json_line_u64_first(buf, sizeof(buf), "id", 7,
					   json_pack("{s:s}", "k", "a\"b")) > 0);
	assert_string_equal(buf, "{\"id\":7,\"k\":\"a\\\"b\"}\n");
	assert_int_equal(hb_json_line_u64_first(buf, 10, "id", 7, json_pack("{s:s}", "k", "v")),
			 -ENOSPC);
	assert_int_equal(hb_json_line_u64_first(buf, sizeof(buf), "id", 7, NULL), -ENOMEM);
}

static void u64_values(void **state)
{
	uint64_t v;
	json_t *j;

	(void)state;
	j = hb_json_u64(INT64_MAX);
	assert_true(json_is_integer(j));
	assert_int_equal(hb_json_to_u64(j, &v), 0);
	assert_true(v == INT64_MAX);
	json_decref(j);
	j = hb_json_u64(UINT64_MAX);
	assert_string_equal(json_string_value(j), "18446744073709551615");
	assert_int_equal(hb_json_to_u64(j, &v), 0);
	assert_true(v == UINT64_MAX);
	json_decref(j);
	j = json_integer(-1);
	assert_int_equal(hb_json_to_u64(j, &v), -EINVAL);
	json_decref(j);
	j = json_string("12x");
	assert_int_equal(hb_json_to_u64(j, &v), -EINVAL);
	json_decref(j);
	assert_int_equal(hb_json_to_u64(NULL, &v), -EINVAL);
}

/* Bytes that are not UTF-8 still make a valid document: the invalid ones become U+FFFD. */
static void bytes_and_strings(void **state)
{
	static const char evil[] = "q\"b\\c\x01\x1f\xff\xc3(\xe2\x82\xac ok";
	char buf[256];
	json_t *doc;

	(void)state;
	assert_true(hb_json_line(buf, sizeof(buf),
				 json_pack("{s:o,s:o}", "s", hb_json_str(evil), "n",
					   hb_json_str(NULL))) > 0);
	doc = json_loads(buf, 0, NULL);
	assert_non_null(doc);
	assert_string_equal(json_string_value(json_object_get(doc, "s")),
			    "q\"b\\c\x01\x1f\xef\xbf\xbd\xef\xbf\xbd(\xe2\x82\xac ok");
	assert_string_equal(json_string_value(json_object_get(doc, "n")), "");
	json_decref(doc);
}

/* hbd's counters: every ustats field under its ABI name, in ABI order. */
static void stats_keys_in_abi_order(void **state)
{
	struct hb_ustats slots[2], sum;
	char buf[4096];
	const char *key;
	json_t *doc, *v;
	int i = 0;

	(void)state;
	memset(slots, 0, sizeof(slots));
	HBD_STAT_ADD(&slots[0], expiry_lookups, 4);
	HBD_STAT_ADD(&slots[1], expiry_lookups, 5);
	HBD_STAT_SUB(&slots[1], tcp_active, 1); /* a gauge mid-update: 2^64-1 for a moment */
	hb_ustats_sum(slots, 2, &sum);
	assert_true(hbd_stats_json(&sum, buf, sizeof(buf)) > 0);
	doc = json_loads(buf, JSON_DECODE_ANY, NULL);
	assert_non_null(doc);
	json_object_foreach(doc, key, v)
	{
		assert_non_null(hb_ustat_names[i]);
		assert_string_equal(key, hb_ustat_names[i]);
		i++;
	}
	assert_int_equal(i, HB_USTATS_N);
	assert_int_equal(json_integer_value(json_object_get(doc, "expiry_lookups")), 9);
	assert_string_equal(json_string_value(json_object_get(doc, "tcp_active")),
			    "18446744073709551615");
	json_decref(doc);
	assert_int_equal(hbd_stats_json(&sum, buf, 20), -ENOSPC);
}

static void pin_paths(void **state)
{
	char path[32], why[256];
	int fd;

	(void)state;
	assert_int_equal(hb_pin_path(path, sizeof(path), "/sys/fs/bpf/x", "conns"), 0);
	assert_string_equal(path, "/sys/fs/bpf/x/conns");
	assert_int_equal(hb_pin_path(path, 19, "/sys/fs/bpf/x", "conns"), -ENAMETOOLONG);
	fd = hb_pin_open("/nonexistent-hbeat-pins", HB_MAP_KSTATS, why, sizeof(why));
	assert_int_equal(fd, -ENOENT);
	assert_non_null(strstr(why, "/nonexistent-hbeat-pins/kstats: "));
	assert_non_null(strstr(why, "hbctl status"));
	assert_int_equal(hb_pin_open("/nonexistent-hbeat-pins", HB_MAP_KSTATS, NULL, 0), -ENOENT);
	assert_string_equal(hb_kstat_names[0], "xdp_pong");
	assert_null(hb_kstat_names[HB_KSTATS_N]);
	assert_null(hb_ustat_names[HB_USTATS_N]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sink_lines_match_the_old_format),
		cmocka_unit_test(sink_line_limits_match_the_old_format),
		cmocka_unit_test(u64_first_member),
		cmocka_unit_test(u64_values),
		cmocka_unit_test(bytes_and_strings),
		cmocka_unit_test(stats_keys_in_abi_order),
		cmocka_unit_test(pin_paths),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
