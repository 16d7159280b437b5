// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Fuzz target "mqtt": the MQTT codec hbd reads devices with. The input is a byte stream of
 * packets: each framing is checked against a reference varint reader written again from the
 * standard, each body parse must stay inside its packet, and what parses must encode back to
 * the same body. The password checker gets the PUBLISH payloads.
 */
#include <string.h>

#include "mqtt.h"
#include "targets.h"

/* Remaining length as the standard describes it: -1 more bytes needed, -2 too long. */
static long ref_varint(const uint8_t *p, size_t n, size_t *used)
{
	long v = 0, mult = 1;

	for (size_t i = 0;; i++) {
		if (i == 4)
			return -2;
		if (i >= n)
			return -1;
		v += (p[i] & 127) * mult;
		mult *= 128;
		if (!(p[i] & 128)) {
			*used = i + 1;
			return v;
		}
	}
}

static bool inside(const struct hb_mqtt_pkt *p, struct hb_mqtt_str s)
{
	return !s.len || (s.p >= p->body && s.p + s.len <= p->body + p->len);
}

/* The body an encoder wrote (after its fixed header) equals the packet's. */
static void same_body(const struct hb_mqtt_pkt *p, const uint8_t *out, size_t n, const char *what)
{
	struct hb_mqtt_pkt q;

	HBF_CHECK(n > 0, "%s: a parsed packet does not encode", what);
	HBF_CHECK(hb_mqtt_decode(out, n, HB_MQTT_VARINT_MAX, &q) == HB_MQTT_OK && q.size == n,
		  "%s: the encoding does not frame", what);
	HBF_CHECK(q.type == p->type && q.len == p->len && !memcmp(q.body, p->body, p->len),
		  "%s: re-encoded body differs", what);
}

static void check_body(const struct hb_mqtt_pkt *p)
{
	static uint8_t out[300000];
	struct hb_mqtt_connect c;
	struct hb_mqtt_publish m;
	struct hb_mqtt_subscribe s;
	uint8_t codes[16], rc;
	unsigned nc;
	uint16_t pid;
	bool sp;

	switch (p->type) {
	case HB_MQTT_CONNECT:
		if (hb_mqtt_parse_connect(p, &c))
			return;
		HBF_CHECK(inside(p, c.client_id) && inside(p, c.will_topic) &&
				  inside(p, c.will_msg) && inside(p, c.user) && inside(p, c.pass),
			  "CONNECT field outside its packet");
		HBF_CHECK(hb_mqtt_utf8_ok(c.client_id.p, c.client_id.len) &&
				  hb_mqtt_utf8_ok(c.user.p, c.user.len),
			  "CONNECT string that is not UTF-8 accepted");
		same_body(p, out, hb_mqtt_encode_connect(out, sizeof(out), &c), "CONNECT");
		(void)hb_mqtt_user_device(c.user);
		break;
	case HB_MQTT_PUBLISH:
		if (hb_mqtt_parse_publish(p, &m))
			return;
		HBF_CHECK(inside(p, m.topic) && m.payload >= p->body &&
				  m.payload + m.payload_len == p->body + p->len,
			  "PUBLISH fields outside its packet");
		HBF_CHECK(!memchr(m.topic.p, '#', m.topic.len) &&
				  !memchr(m.topic.p, '+', m.topic.len),
			  "wildcard in a PUBLISH topic accepted");
		same_body(p, out, hb_mqtt_encode_publish(out, sizeof(out), &m), "PUBLISH");
		{
			struct hb_mqtt_str rest;
			uint64_t id = hb_mqtt_topic_device(m.topic, "up", &rest);

			HBF_CHECK(!id || (rest.p + rest.len == m.topic.p + m.topic.len),
				  "topic rest is not the topic's end");
		}
		(void)hb_mqtt_password_check((const uint8_t *)"0123456789abcdef", 16, "r", 1,
					     hb_mqtt_cstr((const char *)m.payload,
							  m.payload_len > 200 ? 200
									      : m.payload_len),
					     20000, 30);
		break;
	case HB_MQTT_SUBSCRIBE:
		if (hb_mqtt_parse_subscribe(p, &s))
			return;
		HBF_CHECK(s.n >= 1 && s.n <= HB_MQTT_MAX_FILTERS && s.packet_id,
			  "SUBSCRIBE filter count or packet id");
		for (unsigned i = 0; i < s.n; i++)
			HBF_CHECK(inside(p, s.filter[i]) && s.qos[i] <= 2, "SUBSCRIBE filter");
		break;
	case HB_MQTT_SUBACK:
		if (!hb_mqtt_parse_suback(p, &pid, codes, sizeof(codes), &nc))
			same_body(p, out, hb_mqtt_encode_suback(out, sizeof(out), pid, codes, nc),
				  "SUBACK");
		break;
	case HB_MQTT_CONNACK:
		if (!hb_mqtt_parse_connack(p, &sp, &rc))
			same_body(p, out, hb_mqtt_encode_connack(out, sizeof(out), sp, rc),
				  "CONNACK");
		break;
	case HB_MQTT_PUBACK:
	case HB_MQTT_PUBREC:
	case HB_MQTT_PUBREL:
	case HB_MQTT_PUBCOMP:
	case HB_MQTT_UNSUBACK:
		if (!hb_mqtt_parse_ack(p, &pid))
			same_body(p, out, hb_mqtt_encode_ack(out, sizeof(out), p->type, pid),
				  "ack");
		break;
	default:
		if (!hb_mqtt_parse_empty(p))
			HBF_CHECK(p->len == 0, "an empty packet with a body");
		break;
	}
}

int hbf_mqtt(const uint8_t *data, size_t n)
{
	size_t off = 0;

	while (off < n) {
		struct hb_mqtt_pkt p;
		const uint8_t *b = data + off;
		size_t left = n - off, used = 0;
		int rc = hb_mqtt_decode(b, left, 4096, &p);
		long ref = ref_varint(b + 1, left - 1, &used);
		uint8_t type = b[0] >> 4;

		if (type == 0 || type == 15) {
			HBF_CHECK(rc == HB_MQTT_E_TYPE, "reserved type %u: %s", type,
				  hb_mqtt_rc_str(rc));
			break;
		}
		if (rc == HB_MQTT_E_FLAGS || rc == HB_MQTT_E_QOS)
			break;
		if (ref == -2) {
			HBF_CHECK(rc == HB_MQTT_E_VARINT, "5-byte length: %s", hb_mqtt_rc_str(rc));
			break;
		}
		if (ref == -1 || (ref <= 4096 && (size_t)ref + 1 + used > left)) {
			HBF_CHECK(rc == HB_MQTT_MORE, "partial packet: %s", hb_mqtt_rc_str(rc));
			break;
		}
		if (ref > 4096) {
			HBF_CHECK(rc == HB_MQTT_E_TOO_LARGE, "length %ld: %s", ref,
				  hb_mqtt_rc_str(rc));
			break;
		}
		HBF_CHECK(rc == HB_MQTT_OK && p.len == (uint32_t)ref &&
				  p.size == 1 + used + p.len && p.body == b + 1 + used,
			  "packet at %zu framed wrong: %s", off, hb_mqtt_rc_str(rc));
		check_body(&p);
		off += p.size;
	}
	return 0;
}
