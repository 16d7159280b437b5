// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Frame codec: encode/decode round trips, every malformed-header case, stream framing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <cmocka.h>

#include "lib/ht_assert.h"
#include "proto.h"

static void put_hdr(uint8_t *b, uint16_t magic, uint8_t ver, uint8_t type, uint16_t len,
		    uint16_t seq)
{
	struct hb_hdr h = { htons(magic), ver, type, htons(len), htons(seq) };

	memcpy(b, &h, sizeof(h));
}

static void test_ping_roundtrip_tcp(void **state)
{
	uint8_t buf[64], ts[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct hb_frame f;
	size_t n = hb_encode(buf, sizeof(buf), HB_TCP, HB_PING, 0xbeef, 0, ts, sizeof(ts));

	assert_int_equal(n, HB_PING_TCP_BYTES);
	assert_int_equal(hb_decode_stream(buf, n, &f), HB_DECODE_OK);
	assert_int_equal(f.type, HB_PING);
	assert_int_equal(f.seq, 0xbeef);
	assert_int_equal(f.len, 8);
	assert_int_equal(f.size, 16);
	assert_memory_equal(f.payload, ts, 8);
	/* the wire bytes are fixed by the protocol, not by this implementation */
	const uint8_t want[] = { 0x48, 0x42, 1, 3, 0, 8, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8 };
	assert_memory_equal(buf, want, sizeof(want));
}

static void test_ping_roundtrip_udp(void **state)
{
	uint8_t buf[64], ts[8] = { 9, 9, 9, 9, 9, 9, 9, 9 };
	struct hb_frame f;
	size_t n = hb_encode(buf, sizeof(buf), HB_UDP, HB_PING, 7, 0x0102030405060708ull, ts, 8);

	assert_int_equal(n, HB_PING_UDP_BYTES);
	assert_int_equal(hb_decode_dgram(buf, n, &f), HB_DECODE_OK);
	HT_TRUE(f.token == 0x0102030405060708ull, "token of the decoded datagram");
	assert_int_equal(buf[8], 0x01);
	assert_int_equal(buf[15], 0x08);
	assert_memory_equal(f.payload, ts, 8);
	/* a datagram must be exactly one frame */
	assert_int_equal(hb_decode_dgram(buf, n + 1, &f), HB_DECODE_BAD_LEN);
	assert_int_equal(hb_decode_dgram(buf, n - 1, &f), HB_DECODE_BAD_LEN);
	assert_int_equal(hb_decode_dgram(buf, 3, &f), HB_DECODE_BAD_LEN);
}

struct bad_case {
	const char *what;
	uint16_t magic;
	uint8_t ver, type;
	uint16_t len;
	int want;
};

static void test_malformed_headers(void **state)
{
	static const struct bad_case cases[] = {
		{ "bad magic", 0x4843, 1, HB_PING, 8, HB_DECODE_BAD_MAGIC },
		{ "zero magic", 0, 1, HB_PING, 8, HB_DECODE_BAD_MAGIC },
		{ "version 0", HB_MAGIC, 0, HB_PING, 8, HB_DECODE_BAD_VERSION },
		{ "version 2", HB_MAGIC, 2, HB_PING, 8, HB_DECODE_BAD_VERSION },
		{ "type 0", HB_MAGIC, 1, 0, 0, HB_DECODE_BAD_TYPE },
		{ "type past max", HB_MAGIC, 1, HB_TYPE_MAX + 1, 0, HB_DECODE_BAD_TYPE },
		{ "type 255", HB_MAGIC, 1, 255, 0, HB_DECODE_BAD_TYPE },
		{ "oversized DATA", HB_MAGIC, 1, HB_DATA, HB_MAX_PAYLOAD + 1, HB_DECODE_TOO_LARGE },
		{ "length 65535", HB_MAGIC, 1, HB_ECHO, 65535, HB_DECODE_TOO_LARGE },
		{ "short PING", HB_MAGIC, 1, HB_PING, 7, HB_DECODE_BAD_LEN },
		{ "long PING", HB_MAGIC, 1, HB_PING, 9, HB_DECODE_BAD_LEN },
		{ "empty DATA", HB_MAGIC, 1, HB_DATA, 0, HB_DECODE_BAD_LEN },
		{ "ACK with payload", HB_MAGIC, 1, HB_ACK, 1, HB_DECODE_BAD_LEN },
		{ "short HELLO", HB_MAGIC, 1, HB_HELLO, 55, HB_DECODE_BAD_LEN },
	};
	uint8_t buf[HB_MAX_FRAME + 16] = { 0 };
	struct hb_frame f;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct bad_case *c = &cases[i];

		put_hdr(buf, c->magic, c->ver, c->type, c->len, 1);
		/* judged from the header alone: no need to wait for the payload */
		int rc = hb_decode_stream(buf, sizeof(struct hb_hdr), &f);
		if (rc != c->want)
			fail_msg("%s: stream decode gave %d (%s), want %d", c->what, rc,
				 hb_decode_str(rc), c->want);
		rc = hb_decode_dgram(buf,
				     hb_frame_size(HB_UDP, c->len > HB_MAX_PAYLOAD ? 0 : c->len),
				     &f);
		if (rc != c->want)
			fail_msg("%s: datagram decode gave %d, want %d", c->what, rc, c->want);
	}
}

static void test_stream_partial_and_coalesced(void **state)
{
	uint8_t buf[256], data[5] = "hello";
	struct hb_frame f;
	size_t n1, n2, off = 0;
	uint64_t ts = 42;

	n1 = hb_encode(buf, sizeof(buf), HB_TCP, HB_DATA, 1, 0, data, sizeof(data));
	n2 = hb_encode(buf + n1, sizeof(buf) - n1, HB_TCP, HB_PING, 2, 0, &ts, sizeof(ts));
	assert_int_not_equal(n1, 0);
	assert_int_not_equal(n2, 0);
	/* every strict prefix of the first frame asks for more */
	for (size_t k = 0; k < n1; k++)
		assert_int_equal(hb_decode_stream(buf, k, &f), HB_DECODE_MORE);
	/* two frames in one buffer come out one after the other */
	assert_int_equal(hb_decode_stream(buf, n1 + n2, &f), HB_DECODE_OK);
	assert_int_equal(f.type, HB_DATA);
	assert_memory_equal(f.payload, "hello", 5);
	off += f.size;
	assert_int_equal(hb_decode_stream(buf + off, n1 + n2 - off, &f), HB_DECODE_OK);
	assert_int_equal(f.type, HB_PING);
	assert_int_equal(f.seq, 2);
	off += f.size;
	assert_int_equal(off, n1 + n2);
}

static void test_encode_refuses_invalid(void **state)
{
	uint8_t buf[32], big[HB_MAX_PAYLOAD + 1] = { 0 };

	/* too small a buffer */
	assert_int_equal(hb_encode(buf, 15, HB_TCP, HB_PING, 0, 0, big, 8), 0);
	/* a length the type does not allow */
	assert_int_equal(hb_encode(buf, sizeof(buf), HB_TCP, HB_PING, 0, 0, big, 4), 0);
	assert_int_equal(hb_encode(buf, sizeof(buf), HB_TCP, HB_ACK, 0, 0, big, 1), 0);
	uint8_t huge[HB_MAX_FRAME + 8];
	assert_int_equal(hb_encode(huge, sizeof(huge), HB_TCP, HB_DATA, 0, 0, big,
				   HB_MAX_PAYLOAD + 1),
			 0);
	assert_int_equal(hb_encode(huge, sizeof(huge), HB_TCP, HB_DATA, 0, 0, big, HB_MAX_PAYLOAD),
			 8 + HB_MAX_PAYLOAD);
}

static void test_names(void **state)
{
	assert_string_equal(hb_type_str(HB_PONG), "PONG");
	assert_string_equal(hb_type_str(0), "?");
	assert_string_equal(hb_type_str(200), "?");
	assert_string_equal(hb_decode_str(HB_DECODE_TOO_LARGE), "payload length above limit");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ping_roundtrip_tcp),
		cmocka_unit_test(test_ping_roundtrip_udp),
		cmocka_unit_test(test_malformed_headers),
		cmocka_unit_test(test_stream_partial_and_coalesced),
		cmocka_unit_test(test_encode_refuses_invalid),
		cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
