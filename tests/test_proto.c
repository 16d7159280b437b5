// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Frame codec: encode/decode round trips, every malformed-header case, stream framing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <endian.h>
#include <cmocka.h>

#include "lib/ht_assert.h"
#include "lib/sip_vectors.h"
#include "proto.h"
#include "sesskey.h"
#include "siphash.h"

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
		{ "version 3", HB_MAGIC, 3, HB_PING, 8, HB_DECODE_BAD_VERSION },
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

/* Version 2: the tag rides after the payload, the stream (TCP) knows no version 2, and a tag
 * that does not match the key or the bytes is told apart. */
static void test_v2_frames(void **state)
{
	uint8_t key[16] = { 1, 2, 3 }, other[16] = { 1, 2, 4 }, buf[64];
	uint64_t ts = htobe64(77);
	struct hb_frame f;
	size_t n = hb_encode_v2(buf, sizeof(buf), HB_PING, 9, 0x1122, &ts, 8, key);

	HT_EQ(n, HB_PING_V2_BYTES, "a version 2 PING's size");
	HT_EQ(hb_decode_dgram(buf, n, &f), HB_DECODE_OK, "decode of the v2 PING");
	HT_EQ(f.version, HB_VERSION_2, "its version");
	HT_EQ(f.size, 24, "frame size without the tag");
	HT_EQ(f.token, 0x1122, "token");
	HT_TRUE(hb_frame_tag_ok(key, f.raw, f.size), "the tag under its key");
	HT_TRUE(!hb_frame_tag_ok(other, f.raw, f.size), "no tag under another key");
	buf[20] ^= 1;
	HT_TRUE(!hb_frame_tag_ok(key, f.raw, f.size), "no tag over a changed timestamp");
	HT_EQ(hb_decode_dgram(buf, n - 8, &f), HB_DECODE_BAD_LEN, "v2 without its tag");
	HT_EQ(hb_decode_stream(buf, n, &f), HB_DECODE_BAD_VERSION, "v2 over a stream");
	HT_EQ(hb_encode_v2(buf, 31, HB_PING, 9, 0x1122, &ts, 8, key), 0, "a buffer too small");
	(void)state;
}

/* The userspace SipHash-2-4 against the paper's reference vectors. */
static void test_siphash_vectors(void **state)
{
	uint8_t key[16], msg[64];

	for (int i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	for (int i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	for (int i = 0; i < 64; i++)
		HT_EQ(hb_siphash24(key, msg, (size_t)i), ht_sip_vectors[i],
		      "SipHash-2-4 of the %d-byte reference message", i);
	(void)state;
}

/* HKDF-SHA256 against RFC 5869's test case 1 (and its one-block form: the session key). */
static void test_hkdf_rfc5869(void **state)
{
	static const uint8_t okm[42] = {
		0x3c, 0xb2, 0x5f, 0x25, 0xfa, 0xac, 0xd5, 0x7a, 0x90, 0x43, 0x4f, 0x64, 0xd0, 0x36,
		0x2f, 0x2a, 0x2d, 0x2d, 0x0a, 0x90, 0xcf, 0x1a, 0x5a, 0x4c, 0x5d, 0xb0, 0x2d, 0x56,
		0xec, 0xc4, 0xc5, 0xbf, 0x34, 0x00, 0x72, 0x08, 0xd5, 0xb8, 0x87, 0x18, 0x58, 0x65,
	};
	uint8_t ikm[22], salt[13], info[10], out[42];

	memset(ikm, 0x0b, sizeof(ikm));
	for (int i = 0; i < 13; i++)
		salt[i] = (uint8_t)i;
	for (int i = 0; i < 10; i++)
		info[i] = (uint8_t)(0xf0 + i);
	HT_EQ(hb_hkdf_sha256(salt, sizeof(salt), ikm, sizeof(ikm), info, sizeof(info), out,
			     sizeof(out)),
	      0, "HKDF-SHA256");
	assert_memory_equal(out, okm, sizeof(okm));
	(void)state;
}

/* The session key is HKDF-SHA256 in two halves: the device's (PRK, while it signs its HELLO)
 * and the WELCOME's (server nonce, token): together, the RFC's one call. */
static void test_session_key_is_hkdf(void **state)
{
	const uint8_t secret[16] = "0123456789abcdef", nonce[8] = { 9, 8, 7, 6, 5, 4, 3, 2 };
	uint8_t prk[32], key[16], want[16], salt[sizeof(HB_SESSION_LABEL) - 1 + 24], info[16];
	struct hb_hello_bound h = { .device_id = htobe64(7), .ts_ms = htobe64(123456) };

	memset(h.nonce, 0xa5, sizeof(h.nonce));
	HT_EQ(hb_session_prk(secret, sizeof(secret), &h, prk), 0, "PRK");
	HT_EQ(hb_session_key(prk, nonce, 0x0102030405060708ULL, key), 0, "session key");
	memcpy(salt, HB_SESSION_LABEL, sizeof(HB_SESSION_LABEL) - 1);
	memcpy(salt + sizeof(HB_SESSION_LABEL) - 1, &h, 24);
	memcpy(info, nonce, 8);
	for (int i = 0; i < 8; i++)
		info[8 + i] = (uint8_t)(i + 1);
	HT_EQ(hb_hkdf_sha256(salt, sizeof(salt), secret, sizeof(secret), info, sizeof(info), want,
			     sizeof(want)),
	      0, "HKDF in one call");
	assert_memory_equal(key, want, sizeof(key));
	(void)state;
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
		cmocka_unit_test(test_v2_frames),
		cmocka_unit_test(test_siphash_vectors),
		cmocka_unit_test(test_hkdf_rfc5869),
		cmocka_unit_test(test_session_key_is_hkdf),
	};

	return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
