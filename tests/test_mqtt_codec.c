// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* MQTT codec: remaining-length varints, fixed headers, every packet body hbeat reads or writes
 * (round trips and the malformed forms the standard names), UTF-8, device topics and the
 * derived password (against a vector computed independently, with Python's hmac).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "lib/ht_assert.h"
#include "mqtt.h"

static void test_varint(void **state)
{
	/* clang-format off */
	static const struct { uint32_t v; uint8_t b[4]; size_t n; } cases[] = {
		{ 0, { 0x00 }, 1 },
		{ 127, { 0x7f }, 1 },
		{ 128, { 0x80, 0x01 }, 2 },
		{ 16383, { 0xff, 0x7f }, 2 },
		{ 16384, { 0x80, 0x80, 0x01 }, 3 },
		{ 2097151, { 0xff, 0xff, 0x7f }, 3 },
		{ 2097152, { 0x80, 0x80, 0x80, 0x01 }, 4 },
		{ 268435455, { 0xff, 0xff, 0xff, 0x7f }, 4 },
	};
	/* clang-format on */
	static const uint8_t five[] = { 0xff, 0xff, 0xff, 0xff, 0x7f };
	uint8_t buf[8];
	uint32_t v;
	size_t used;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		HT_EQ(hb_mqtt_varint_encode(buf, sizeof(buf), cases[i].v), cases[i].n,
		      "bytes encoding %u", cases[i].v);
		HT_TRUE(!memcmp(buf, cases[i].b, cases[i].n), "the bytes of %u", cases[i].v);
		HT_EQ(hb_mqtt_varint_decode(cases[i].b, cases[i].n, &v, &used), HB_MQTT_OK,
		      "decoding %u", cases[i].v);
		HT_EQ(v, cases[i].v, "decoded value");
		HT_EQ(used, cases[i].n, "decoded bytes");
		/* one byte short is a partial varint */
		HT_EQ(hb_mqtt_varint_decode(cases[i].b, cases[i].n - 1, &v, &used), HB_MQTT_MORE,
		      "%u without its last byte", cases[i].v);
	}
	HT_EQ(hb_mqtt_varint_encode(buf, sizeof(buf), HB_MQTT_VARINT_MAX + 1), 0,
	      "above the 4-byte maximum");
	HT_EQ(hb_mqtt_varint_encode(buf, 1, 128), 0, "no room for the second byte");
	HT_EQ(hb_mqtt_varint_decode(five, sizeof(five), &v, &used), HB_MQTT_E_VARINT,
	      "a fifth length byte");
	/* judged at the fourth byte, before a fifth arrives */
	HT_EQ(hb_mqtt_varint_decode(five, 4, &v, &used), HB_MQTT_E_VARINT,
	      "four bytes with continuation");
}

static void test_fixed_header(void **state)
{
	/* clang-format off */
	static const struct { const char *what; uint8_t b[6]; size_t n; int rc; } cases[] = {
		{ "PINGREQ", { 0xc0, 0x00 }, 2, HB_MQTT_OK },
		{ "PINGREQ with a flag", { 0xc1, 0x00 }, 2, HB_MQTT_E_FLAGS },
		{ "type 0", { 0x00, 0x00 }, 2, HB_MQTT_E_TYPE },
		{ "type 15", { 0xf0, 0x00 }, 2, HB_MQTT_E_TYPE },
		{ "CONNECT with a flag", { 0x18, 0x00 }, 2, HB_MQTT_E_FLAGS },
		{ "SUBSCRIBE flags 0", { 0x80, 0x00 }, 2, HB_MQTT_E_FLAGS },
		{ "SUBSCRIBE flags 2", { 0x82, 0x00 }, 2, HB_MQTT_OK },
		{ "PUBLISH QoS 3", { 0x36, 0x00 }, 2, HB_MQTT_E_QOS },
		{ "PUBLISH QoS 2 retain dup", { 0x3d, 0x00 }, 2, HB_MQTT_OK },
		{ "5-byte remaining length", { 0x30, 0xff, 0xff, 0xff, 0xff, 0x7f }, 6,
		  HB_MQTT_E_VARINT },
		{ "partial header", { 0x30 }, 1, HB_MQTT_MORE },
		{ "partial varint", { 0x30, 0x80 }, 2, HB_MQTT_MORE },
		{ "partial body", { 0x30, 0x03, 0x00 }, 3, HB_MQTT_MORE },
		{ "too large", { 0x30, 0x80, 0x08 }, 3, HB_MQTT_E_TOO_LARGE },
		{ "empty", { 0 }, 0, HB_MQTT_MORE },
	};
	/* clang-format on */
	struct hb_mqtt_pkt p;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		HT_EQ(hb_mqtt_decode(cases[i].b, cases[i].n, 1000, &p), cases[i].rc, "%s",
		      cases[i].what);
	/* two packets coalesced: the first is framed alone */
	static const uint8_t two[] = { 0xc0, 0x00, 0xe0, 0x00 };

	HT_EQ(hb_mqtt_decode(two, sizeof(two), 0, &p), HB_MQTT_OK, "coalesced packets");
	HT_EQ(p.size, 2, "size of the first");
	HT_EQ(p.type, HB_MQTT_PINGREQ, "type of the first");
	HT_EQ(hb_mqtt_parse_empty(&p), HB_MQTT_OK, "PINGREQ body");
}

static struct hb_mqtt_pkt frame(const uint8_t *b, size_t n)
{
	struct hb_mqtt_pkt p;

	HT_EQ(hb_mqtt_decode(b, n, HB_MQTT_VARINT_MAX, &p), HB_MQTT_OK, "framing a packet");
	HT_EQ(p.size, n, "the packet is the whole buffer");
	return p;
}

static void test_connect_roundtrip(void **state)
{
	struct hb_mqtt_connect c = {
		.clean_session = true,
		.will = true,
		.will_qos = 1,
		.will_retain = true,
		.has_user = true,
		.has_pass = true,
		.keepalive = 30,
		.client_id = hb_mqtt_cstr("dev-7", 5),
		.will_topic = hb_mqtt_cstr("devices/7/up/will", 17),
		.will_msg = hb_mqtt_cstr("gone\0x", 6),
		.user = hb_mqtt_cstr("7", 1),
		.pass = hb_mqtt_cstr("secret", 6),
	};
	struct hb_mqtt_connect d;
	uint8_t buf[256];
	size_t n = hb_mqtt_encode_connect(buf, sizeof(buf), &c);
	struct hb_mqtt_pkt p;

	HT_GT(n, 0, "CONNECT encoded");
	HT_EQ(buf[0], 0x10, "CONNECT's first byte");
	/* the variable header is fixed by the standard: "MQTT", level 4, flags, keepalive */
	static const uint8_t vh[] = { 0, 4, 'M', 'Q', 'T', 'T', 4, 0xee, 0, 30 };
	HT_TRUE(!memcmp(buf + 2, vh, sizeof(vh)), "CONNECT variable header");
	p = frame(buf, n);
	HT_EQ(hb_mqtt_parse_connect(&p, &d), HB_MQTT_OK, "CONNECT parsed");
	HT_EQ(d.keepalive, 30, "keepalive");
	HT_TRUE(d.will && d.will_retain && d.will_qos == 1 && d.clean_session, "flags");
	HT_TRUE(hb_mqtt_str_eq(d.client_id, "dev-7"), "client id");
	HT_TRUE(hb_mqtt_str_eq(d.will_topic, "devices/7/up/will"), "will topic");
	HT_TRUE(d.will_msg.len == 6 && !memcmp(d.will_msg.p, "gone\0x", 6), "will message");
	HT_TRUE(hb_mqtt_str_eq(d.user, "7") && hb_mqtt_str_eq(d.pass, "secret"), "credentials");

	/* an empty client id and no credentials are fine for the codec */
	struct hb_mqtt_connect e = { .keepalive = 0 };

	n = hb_mqtt_encode_connect(buf, sizeof(buf), &e);
	p = frame(buf, n);
	HT_EQ(hb_mqtt_parse_connect(&p, &d), HB_MQTT_OK, "minimal CONNECT");
	HT_EQ(n, 14, "minimal CONNECT size");
	HT_EQ(hb_mqtt_encode_connect(buf, 13, &e), 0, "CONNECT does not fit");
}

static void test_connect_malformed(void **state)
{
	/* clang-format off */
	static const struct { const char *what; uint8_t b[40]; size_t n; int rc; } cases[] = {
		{ "MQTT 5.0", { 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 5, 2, 0, 10, 0, 1, 'a' }, 15,
		  HB_MQTT_E_LEVEL },
		{ "MQTT 3.1", { 0x10, 15, 0, 6, 'M', 'Q', 'I', 's', 'd', 'p', 3, 2, 0, 10, 0, 1,
		  'a' }, 17, HB_MQTT_E_PROTO_NAME },
		{ "level 3 with name MQTT", { 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 3, 2, 0, 10, 0, 1,
		  'a' }, 15, HB_MQTT_E_LEVEL },
		{ "reserved flag", { 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 3, 0, 10, 0, 1, 'a' },
		  15, HB_MQTT_E_CONNECT_FLAGS },
		{ "password without user", { 0x10, 16, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x42, 0, 10, 0,
		  1, 'a', 0, 1, 'p' }, 18, HB_MQTT_E_CONNECT_FLAGS },
		{ "will QoS without will", { 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x0a, 0, 10, 0,
		  1, 'a' }, 15, HB_MQTT_E_CONNECT_FLAGS },
		{ "will QoS 3", { 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x1e, 0, 10, 0, 1, 'a' },
		  15, HB_MQTT_E_QOS },
		{ "trailing byte", { 0x10, 14, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 10, 0, 1, 'a',
		  'b' }, 16, HB_MQTT_E_LEN },
		{ "client id past the end", { 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 10, 0, 2,
		  'a' }, 15, HB_MQTT_E_LEN },
		{ "no keepalive", { 0x10, 8, 0, 4, 'M', 'Q', 'T', 'T', 4, 2 }, 10, HB_MQTT_E_LEN },
		{ "client id with NUL", { 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 10, 0, 1, 0 },
		  15, HB_MQTT_E_UTF8 },
		{ "client id bad UTF-8", { 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 10, 0, 1,
		  0xc3 }, 15, HB_MQTT_E_UTF8 },
		{ "user flag, no user", { 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x82, 0, 10, 0, 1,
		  'a' }, 15, HB_MQTT_E_LEN },
		{ "empty will topic", { 0x10, 17, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x06, 0, 10, 0, 1,
		  'a', 0, 0, 0, 0 }, 19, HB_MQTT_E_TOPIC },
	};
	/* clang-format on */
	struct hb_mqtt_connect c;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct hb_mqtt_pkt p = frame(cases[i].b, cases[i].n);

		HT_EQ(hb_mqtt_parse_connect(&p, &c), cases[i].rc, "%s", cases[i].what);
	}
}

static void test_publish(void **state)
{
	struct hb_mqtt_publish m = {
		.qos = 1,
		.retain = true,
		.packet_id = 0x1234,
		.topic = hb_mqtt_cstr("devices/9/up/temp", 17),
		.payload = (const uint8_t *)"21.5",
		.payload_len = 4,
	}, d;
	uint8_t buf[128];
	size_t n = hb_mqtt_encode_publish(buf, sizeof(buf), &m);
	struct hb_mqtt_pkt p = frame(buf, n);

	HT_EQ(buf[0], 0x33, "PUBLISH QoS 1 retain");
	HT_EQ(hb_mqtt_parse_publish(&p, &d), HB_MQTT_OK, "PUBLISH parsed");
	HT_EQ(d.qos, 1, "qos");
	HT_EQ(d.packet_id, 0x1234, "packet id");
	HT_TRUE(d.retain && !d.dup, "flags");
	HT_TRUE(hb_mqtt_str_eq(d.topic, "devices/9/up/temp"), "topic");
	HT_TRUE(d.payload_len == 4 && !memcmp(d.payload, "21.5", 4), "payload");

	/* QoS 0 has no packet id, and an empty payload is allowed */
	m.qos = 0;
	m.payload_len = 0;
	n = hb_mqtt_encode_publish(buf, sizeof(buf), &m);
	HT_EQ(n, 2 + 2 + 17, "QoS 0 PUBLISH size");
	p = frame(buf, n);
	HT_EQ(hb_mqtt_parse_publish(&p, &d), HB_MQTT_OK, "QoS 0 parsed");
	HT_EQ(d.payload_len, 0, "empty payload");

	m.qos = 1;
	m.packet_id = 0;
	HT_EQ(hb_mqtt_encode_publish(buf, sizeof(buf), &m), 0, "QoS 1 needs a packet id");
	m.packet_id = 1;
	m.topic = hb_mqtt_cstr("devices/+/up", 12);
	HT_EQ(hb_mqtt_encode_publish(buf, sizeof(buf), &m), 0, "no wildcard in a topic name");

	/* clang-format off */
	static const struct { const char *what; uint8_t b[16]; size_t n; int rc; } bad[] = {
		{ "QoS 1 packet id 0", { 0x32, 5, 0, 1, 't', 0, 0 }, 7, HB_MQTT_E_PACKET_ID },
		{ "wildcard #", { 0x30, 3, 0, 1, '#' }, 5, HB_MQTT_E_TOPIC },
		{ "empty topic", { 0x30, 2, 0, 0 }, 4, HB_MQTT_E_TOPIC },
		{ "DUP on QoS 0", { 0x38, 3, 0, 1, 't' }, 5, HB_MQTT_E_FLAGS },
		{ "topic past the end", { 0x30, 3, 0, 5, 't' }, 5, HB_MQTT_E_LEN },
		{ "no packet id", { 0x32, 3, 0, 1, 't' }, 5, HB_MQTT_E_LEN },
		{ "topic bad UTF-8", { 0x30, 4, 0, 2, 0xed, 0xa0 }, 6, HB_MQTT_E_UTF8 },
	};
	/* clang-format on */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = frame(bad[i].b, bad[i].n);
		HT_EQ(hb_mqtt_parse_publish(&p, &d), bad[i].rc, "%s", bad[i].what);
	}
}

static void test_subscribe_and_acks(void **state)
{
	uint8_t buf[128], codes[4];
	struct hb_mqtt_subscribe s;
	struct hb_mqtt_pkt p;
	unsigned nc;
	uint16_t pid;
	bool sp;
	uint8_t rc;
	size_t n = hb_mqtt_encode_subscribe(buf, sizeof(buf), 7, "devices/5/down", 1);

	HT_EQ(buf[0], 0x82, "SUBSCRIBE first byte");
	p = frame(buf, n);
	HT_EQ(hb_mqtt_parse_subscribe(&p, &s), HB_MQTT_OK, "SUBSCRIBE parsed");
	HT_TRUE(s.n == 1 && s.packet_id == 7 && s.qos[0] == 1, "its fields");
	HT_TRUE(hb_mqtt_str_eq(s.filter[0], "devices/5/down"), "its filter");

	/* clang-format off */
	static const struct { const char *what; uint8_t b[16]; size_t n; int rc; } bad[] = {
		{ "no filter", { 0x82, 2, 0, 1 }, 4, HB_MQTT_E_LEN },
		{ "packet id 0", { 0x82, 6, 0, 0, 0, 1, 't', 1 }, 8, HB_MQTT_E_PACKET_ID },
		{ "requested QoS 3", { 0x82, 6, 0, 1, 0, 1, 't', 3 }, 8, HB_MQTT_E_QOS },
		{ "no QoS byte", { 0x82, 5, 0, 1, 0, 1, 't' }, 7, HB_MQTT_E_LEN },
		{ "empty filter", { 0x82, 5, 0, 1, 0, 0, 0 }, 7, HB_MQTT_E_TOPIC },
	};
	/* clang-format on */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = frame(bad[i].b, bad[i].n);
		HT_EQ(hb_mqtt_parse_subscribe(&p, &s), bad[i].rc, "%s", bad[i].what);
	}

	codes[0] = HB_MQTT_SUBACK_FAIL;
	n = hb_mqtt_encode_suback(buf, sizeof(buf), 7, codes, 1);
	static const uint8_t suback[] = { 0x90, 3, 0, 7, 0x80 };
	HT_TRUE(n == sizeof(suback) && !memcmp(buf, suback, n), "SUBACK bytes");
	p = frame(buf, n);
	HT_EQ(hb_mqtt_parse_suback(&p, &pid, codes, 4, &nc), HB_MQTT_OK, "SUBACK parsed");
	HT_TRUE(pid == 7 && nc == 1 && codes[0] == 0x80, "SUBACK fields");

	n = hb_mqtt_encode_connack(buf, sizeof(buf), false, HB_MQTT_CONNACK_NOT_AUTHORIZED);
	static const uint8_t connack[] = { 0x20, 2, 0, 5 };
	HT_TRUE(n == 4 && !memcmp(buf, connack, 4), "CONNACK 5 bytes");
	p = frame(buf, n);
	HT_EQ(hb_mqtt_parse_connack(&p, &sp, &rc), HB_MQTT_OK, "CONNACK parsed");
	HT_TRUE(!sp && rc == 5, "CONNACK fields");

	n = hb_mqtt_encode_ack(buf, sizeof(buf), HB_MQTT_PUBACK, 0xabcd);
	static const uint8_t puback[] = { 0x40, 2, 0xab, 0xcd };
	HT_TRUE(n == 4 && !memcmp(buf, puback, 4), "PUBACK bytes");
	p = frame(buf, n);
	HT_EQ(hb_mqtt_parse_ack(&p, &pid), HB_MQTT_OK, "PUBACK parsed");
	HT_EQ(pid, 0xabcd, "PUBACK packet id");
	HT_EQ(hb_mqtt_encode_ack(buf, sizeof(buf), HB_MQTT_PUBREL, 1), 4, "PUBREL");
	HT_EQ(buf[0], 0x62, "PUBREL carries flags 2");

	static const uint8_t ping[] = { 0xc0, 0 }, pong[] = { 0xd0, 0 }, disc[] = { 0xe0, 0 };
	HT_EQ(hb_mqtt_encode_empty(buf, 2, HB_MQTT_PINGREQ), 2, "PINGREQ");
	HT_TRUE(!memcmp(buf, ping, 2), "PINGREQ bytes");
	HT_EQ(hb_mqtt_encode_empty(buf, 2, HB_MQTT_PINGRESP), 2, "PINGRESP");
	HT_TRUE(!memcmp(buf, pong, 2), "PINGRESP bytes");
	HT_EQ(hb_mqtt_encode_empty(buf, 2, HB_MQTT_DISCONNECT), 2, "DISCONNECT");
	HT_TRUE(!memcmp(buf, disc, 2), "DISCONNECT bytes");
	HT_EQ(hb_mqtt_encode_empty(buf, 1, HB_MQTT_PINGREQ), 0, "PINGREQ does not fit");
	HT_EQ(hb_mqtt_encode_empty(buf, 2, HB_MQTT_PUBLISH), 0, "PUBLISH is not empty");

	static const uint8_t ping_body[] = { 0xc0, 1, 0 };
	p = frame(ping_body, sizeof(ping_body));
	HT_EQ(hb_mqtt_parse_empty(&p), HB_MQTT_E_LEN, "PINGREQ with a body");
	static const uint8_t puback0[] = { 0x40, 2, 0, 0 };
	p = frame(puback0, sizeof(puback0));
	HT_EQ(hb_mqtt_parse_ack(&p, &pid), HB_MQTT_E_PACKET_ID, "PUBACK of packet id 0");
}

static void test_utf8(void **state)
{
	/* clang-format off */
	static const struct { const char *s; size_t n; bool ok; } cases[] = {
		{ "abc", 3, true },
		{ "\xc3\xa9", 2, true },		/* e acute */
		{ "\xe2\x82\xac", 3, true },		/* euro sign */
		{ "\xf0\x9f\x98\x80", 4, true },	/* U+1F600 */
		{ "a\0b", 3, false },
		{ "\xc0\xaf", 2, false },		/* overlong '/' */
		{ "\xed\xa0\x80", 3, false },		/* a UTF-16 surrogate */
		{ "\xf4\x90\x80\x80", 4, false },	/* above U+10FFFF */
		{ "\xe2\x82", 2, false },		/* cut short */
		{ "\x80", 1, false },			/* a lone continuation byte */
		{ "\xff", 1, false },
	};
	/* clang-format on */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		HT_EQ(hb_mqtt_utf8_ok((const uint8_t *)cases[i].s, cases[i].n), cases[i].ok,
		      "UTF-8 case %zu", i);
}

static void test_topics(void **state)
{
	/* clang-format off */
	static const struct { const char *t; const char *leaf; uint64_t id; const char *rest; }
	cases[] = {
		{ "devices/12/up", "up", 12, "" },
		{ "devices/12/up/a/b", "up", 12, "/a/b" },
		{ "devices/18446744073709551615/down", "down", UINT64_MAX, "" },
		{ "devices/18446744073709551616/up", "up", 0, NULL },
		{ "devices/012/up", "up", 0, NULL },
		{ "devices/0/up", "up", 0, NULL },
		{ "devices/12/upx", "up", 0, NULL },
		{ "devices/12/down", "up", 0, NULL },
		{ "devices//up", "up", 0, NULL },
		{ "devices/12", "up", 0, NULL },
		{ "devices/+1/up", "up", 0, NULL },
		{ "device/12/up", "up", 0, NULL },
	};
	/* clang-format on */
	char buf[HB_MQTT_TOPIC_MAX];
	struct hb_mqtt_str rest;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct hb_mqtt_str t = hb_mqtt_cstr(cases[i].t, strlen(cases[i].t));

		HT_TRUE(hb_mqtt_topic_device(t, cases[i].leaf, &rest) == cases[i].id, "%s",
			cases[i].t);
		if (cases[i].rest)
			HT_TRUE(hb_mqtt_str_eq(rest, cases[i].rest), "the rest of %s", cases[i].t);
	}
	HT_EQ(hb_mqtt_topic(buf, sizeof(buf), UINT64_MAX, "down"), 33, "longest down topic");
	HT_TRUE(!strcmp(buf, "devices/18446744073709551615/down"), "its text");
	HT_EQ(hb_mqtt_topic(buf, 10, 1, "up"), 0, "topic does not fit");
	HT_TRUE(hb_mqtt_user_device(hb_mqtt_cstr("42", 2)) == 42, "user 42");
	HT_TRUE(hb_mqtt_user_device(hb_mqtt_cstr("042", 3)) == 0, "user 042");
	HT_TRUE(hb_mqtt_user_device(hb_mqtt_cstr("4a", 2)) == 0, "user 4a");
	HT_TRUE(hb_mqtt_user_device(hb_mqtt_cstr("", 0)) == 0, "empty user");
}

static void test_password(void **state)
{
	/* computed with Python's hmac over the documented message */
	static const char want[] =
		"hb1.20000.bc9350cff1e4e490c19ca6dffde415e2556c39446d33c59a65d131042701c3ef";
	uint8_t secret[16];
	char pw[HB_MQTT_PW_LEN + 1], bad[sizeof(want)];
	struct hb_mqtt_str s;

	for (int i = 0; i < 16; i++)
		secret[i] = (uint8_t)i;
	HT_EQ(hb_mqtt_password(secret, 16, "hbeat-test", 42, 20000, pw), strlen(want),
	      "password length");
	HT_TRUE(!strcmp(pw, want), "password %s", pw);
	s = hb_mqtt_cstr(pw, strlen(pw));
	HT_EQ(hb_mqtt_password_check(secret, 16, "hbeat-test", 42, s, 20000, 30), HB_MQTT_PW_OK,
	      "valid on its expiry day");
	HT_EQ(hb_mqtt_password_check(secret, 16, "hbeat-test", 42, s, 19970, 30), HB_MQTT_PW_OK,
	      "valid max_days ahead");
	HT_EQ(hb_mqtt_password_check(secret, 16, "hbeat-test", 42, s, 19969, 30),
	      HB_MQTT_PW_TOO_LONG, "valid for longer than allowed");
	HT_EQ(hb_mqtt_password_check(secret, 16, "hbeat-test", 42, s, 20001, 30),
	      HB_MQTT_PW_EXPIRED, "the day after its expiry");
	HT_EQ(hb_mqtt_password_check(secret, 16, "other", 42, s, 20000, 30), HB_MQTT_PW_MAC,
	      "another realm");
	HT_EQ(hb_mqtt_password_check(secret, 16, "hbeat-test", 43, s, 20000, 30), HB_MQTT_PW_MAC,
	      "another device");
	secret[0] ^= 1;
	HT_EQ(hb_mqtt_password_check(secret, 16, "hbeat-test", 42, s, 20000, 30), HB_MQTT_PW_MAC,
	      "another secret");
	secret[0] ^= 1;
	/* a later expiry day in the text does not carry the MAC of the earlier one */
	memcpy(bad, want, sizeof(want));
	bad[8] = '1';
	HT_EQ(hb_mqtt_password_check(secret, 16, "hbeat-test", 42, hb_mqtt_cstr(bad, strlen(bad)),
				     20000, 30),
	      HB_MQTT_PW_MAC, "expiry changed in the text");
	/* clang-format off */
	static const char *const malformed[] = {
		"", "hb1", "hb1.", "hb1.20000", "hb1.20000.", "hb2.20000.bc93",
		"hb1.020000.bc9350cff1e4e490c19ca6dffde415e2556c39446d33c59a65d131042701c3ef",
		"hb1.20000.BC9350CFF1E4E490C19CA6DFFDE415E2556C39446D33C59A65D131042701C3EF",
		"hb1.20000.bc9350cff1e4e490c19ca6dffde415e2556c39446d33c59a65d131042701c3e",
		"hb1.20000.bc9350cff1e4e490c19ca6dffde415e2556c39446d33c59a65d131042701c3eff",
		"hb1.99999999999.bc9350cff1e4e490c19ca6dffde415e2556c39446d33c59a65d131042701c3ef",
		"hb1.-1.bc9350cff1e4e490c19ca6dffde415e2556c39446d33c59a65d131042701c3ef",
	};
	/* clang-format on */
	for (size_t i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++)
		HT_EQ(hb_mqtt_password_check(secret, 16, "hbeat-test", 42,
					     hb_mqtt_cstr(malformed[i], strlen(malformed[i])),
					     20000, 30),
		      HB_MQTT_PW_FORMAT, "malformed password '%s'", malformed[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_varint),
		cmocka_unit_test(test_fixed_header),
		cmocka_unit_test(test_connect_roundtrip),
		cmocka_unit_test(test_connect_malformed),
		cmocka_unit_test(test_publish),
		cmocka_unit_test(test_subscribe_and_acks),
		cmocka_unit_test(test_utf8),
		cmocka_unit_test(test_topics),
		cmocka_unit_test(test_password),
	};

	return cmocka_run_group_tests_name("mqtt_codec", tests, NULL, NULL);
}
