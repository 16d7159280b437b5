// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* MQTT 3.1.1 codec: fixed header, remaining length, the bodies of the packets hbeat uses. */
#include "mqtt.h"

#include <string.h>

int hb_mqtt_varint_decode(const uint8_t *p, size_t n, uint32_t *v, size_t *used)
{
	uint32_t x = 0;

	for (size_t i = 0; i < 4; i++) {
		if (i >= n)
			return HB_MQTT_MORE;
		x |= (uint32_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			*v = x;
			*used = i + 1;
			return HB_MQTT_OK;
		}
	}
	return HB_MQTT_E_VARINT;
}

size_t hb_mqtt_varint_encode(uint8_t *p, size_t cap, uint32_t v)
{
	size_t i = 0;

	if (v > HB_MQTT_VARINT_MAX)
		return 0;
	do {
		uint8_t b = v & 0x7f;

		v >>= 7;
		if (i == cap)
			return 0;
		p[i++] = b | (v ? 0x80 : 0);
	} while (v);
	return i;
}

/* The fixed-header flags each type requires (3.1.1, 2.2.2); PUBLISH's are checked apart. */
static int flags_ok(uint8_t type, uint8_t flags)
{
	switch (type) {
	case HB_MQTT_PUBLISH:
		return (flags >> 1 & 3) != 3;
	case HB_MQTT_PUBREL:
	case HB_MQTT_SUBSCRIBE:
	case HB_MQTT_UNSUBSCRIBE:
		return flags == 2;
	default:
		return flags == 0;
	}
}

int hb_mqtt_decode(const void *buf, size_t n, uint32_t max_len, struct hb_mqtt_pkt *p)
{
	const uint8_t *b = buf;
	size_t used;
	uint32_t len;
	int rc;

	if (n < 1)
		return HB_MQTT_MORE;
	p->type = b[0] >> 4;
	p->flags = b[0] & 0x0f;
	if (p->type == 0 || p->type == 15)
		return HB_MQTT_E_TYPE;
	if (!flags_ok(p->type, p->flags))
		return p->type == HB_MQTT_PUBLISH ? HB_MQTT_E_QOS : HB_MQTT_E_FLAGS;
	rc = hb_mqtt_varint_decode(b + 1, n - 1, &len, &used);
	if (rc)
		return rc;
	if (len > max_len)
		return HB_MQTT_E_TOO_LARGE;
	p->len = len;
	p->size = 1 + used + len;
	if (n < p->size)
		return HB_MQTT_MORE;
	p->body = b + 1 + used;
	return HB_MQTT_OK;
}

/* A reader over one packet body: every get fails once the body is exhausted. */
struct rd {
	const uint8_t *p;
	size_t n, off;
	int err;
};

static uint8_t get8(struct rd *r)
{
	if (r->off + 1 > r->n) {
		r->err = HB_MQTT_E_LEN;
		return 0;
	}
	return r->p[r->off++];
}

static uint16_t get16(struct rd *r)
{
	uint16_t hi = get8(r);

	return (uint16_t)(hi << 8 | get8(r));
}

static struct hb_mqtt_str get_bin(struct rd *r)
{
	struct hb_mqtt_str s = { NULL, 0 };
	uint16_t len = get16(r);

	if (r->err)
		return s;
	if (r->off + len > r->n) {
		r->err = HB_MQTT_E_LEN;
		return s;
	}
	s.p = r->p + r->off;
	s.len = len;
	r->off += len;
	return s;
}

static struct hb_mqtt_str get_str(struct rd *r)
{
	struct hb_mqtt_str s = get_bin(r);

	if (!r->err && !hb_mqtt_utf8_ok(s.p, s.len))
		r->err = HB_MQTT_E_UTF8;
	return s;
}

static int rd_end(const struct rd *r)
{
	if (r->err)
		return r->err;
	return r->off == r->n ? HB_MQTT_OK : HB_MQTT_E_LEN;
}

bool hb_mqtt_utf8_ok(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t c = p[i];
		uint32_t cp, min;
		size_t k;

		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xe0) == 0xc0) {
			k = 1, cp = c & 0x1f, min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			k = 2, cp = c & 0x0f, min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			k = 3, cp = c & 0x07, min = 0x10000;
		} else {
			return false;
		}
		for (size_t j = 1; j <= k; j++) {
			if (i + j >= n || (p[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i + j] & 0x3f);
		}
		/* overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8 */
		if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
			return false;
		i += k + 1;
	}
	return true;
}

bool hb_mqtt_str_eq(struct hb_mqtt_str a, const char *s)
{
	size_t n = strlen(s);

	return a.len == n && (!n || !memcmp(a.p, s, n));
}

int hb_mqtt_parse_connect(const struct hb_mqtt_pkt *p, struct hb_mqtt_connect *c)
{
	struct rd r = { p->body, p->len, 0, 0 };
	struct hb_mqtt_str name;
	uint8_t fl;

	memset(c, 0, sizeof(*c));
	if (p->type != HB_MQTT_CONNECT)
		return HB_MQTT_E_TYPE;
	name = get_bin(&r);
	c->level = get8(&r);
	if (r.err)
		return r.err;
	if (!hb_mqtt_str_eq(name, "MQTT"))
		return HB_MQTT_E_PROTO_NAME;
	if (c->level != HB_MQTT_LEVEL_311)
		return HB_MQTT_E_LEVEL;
	fl = get8(&r);
	c->keepalive = get16(&r);
	if (r.err)
		return r.err;
	c->clean_session = fl & 0x02;
	c->will = fl & 0x04;
	c->will_qos = fl >> 3 & 3;
	c->will_retain = fl & 0x20;
	c->has_pass = fl & 0x40;
	c->has_user = fl & 0x80;
	/* MQTT-3.1.2-3, -13, -15, -22: reserved bit, Will fields without a Will, password
	 * without a user name
	 */
	if ((fl & 0x01) || (!c->will && (c->will_qos || c->will_retain)) ||
	    (c->has_pass && !c->has_user))
		return HB_MQTT_E_CONNECT_FLAGS;
	if (c->will_qos == 3)
		return HB_MQTT_E_QOS;
	c->client_id = get_str(&r);
	if (c->will) {
		c->will_topic = get_str(&r);
		c->will_msg = get_bin(&r);
		if (!r.err && !c->will_topic.len)
			return HB_MQTT_E_TOPIC;
	}
	if (c->has_user)
		c->user = get_str(&r);
	if (c->has_pass)
		c->pass = get_bin(&r);
	return rd_end(&r);
}

int hb_mqtt_parse_connack(const struct hb_mqtt_pkt *p, bool *session_present, uint8_t *rc)
{
	struct rd r = { p->body, p->len, 0, 0 };
	uint8_t ack;

	if (p->type != HB_MQTT_CONNACK)
		return HB_MQTT_E_TYPE;
	ack = get8(&r);
	*rc = get8(&r);
	if (!r.err && (ack & 0xfe))
		return HB_MQTT_E_FLAGS;
	*session_present = ack & 1;
	return rd_end(&r);
}

/* A PUBLISH topic names one topic: no wildcards (MQTT-3.3.2-2), not empty. */
static bool topic_name_ok(struct hb_mqtt_str t)
{
	return t.len && !memchr(t.p, '+', t.len) && !memchr(t.p, '#', t.len);
}

int hb_mqtt_parse_publish(const struct hb_mqtt_pkt *p, struct hb_mqtt_publish *m)
{
	struct rd r = { p->body, p->len, 0, 0 };

	memset(m, 0, sizeof(*m));
	if (p->type != HB_MQTT_PUBLISH)
		return HB_MQTT_E_TYPE;
	m->retain = p->flags & 1;
	m->qos = p->flags >> 1 & 3;
	m->dup = p->flags & 8;
	if (m->qos == 3)
		return HB_MQTT_E_QOS;
	/* MQTT-3.3.1-2: DUP is 0 on QoS 0 */
	if (!m->qos && m->dup)
		return HB_MQTT_E_FLAGS;
	m->topic = get_str(&r);
	if (m->qos)
		m->packet_id = get16(&r);
	if (r.err)
		return r.err;
	if (!topic_name_ok(m->topic))
		return HB_MQTT_E_TOPIC;
	if (m->qos && !m->packet_id)
		return HB_MQTT_E_PACKET_ID;
	m->payload = r.p + r.off;
	m->payload_len = r.n - r.off;
	return HB_MQTT_OK;
}

int hb_mqtt_parse_ack(const struct hb_mqtt_pkt *p, uint16_t *packet_id)
{
	struct rd r = { p->body, p->len, 0, 0 };

	switch (p->type) {
	case HB_MQTT_PUBACK:
	case HB_MQTT_PUBREC:
	case HB_MQTT_PUBREL:
	case HB_MQTT_PUBCOMP:
	case HB_MQTT_UNSUBACK:
		break;
	default:
		return HB_MQTT_E_TYPE;
	}
	*packet_id = get16(&r);
	if (!r.err && !*packet_id)
		return HB_MQTT_E_PACKET_ID;
	return rd_end(&r);
}

int hb_mqtt_parse_subscribe(const struct hb_mqtt_pkt *p, struct hb_mqtt_subscribe *s)
{
	struct rd r = { p->body, p->len, 0, 0 };

	memset(s, 0, sizeof(*s));
	if (p->type != HB_MQTT_SUBSCRIBE)
		return HB_MQTT_E_TYPE;
	s->packet_id = get16(&r);
	if (r.err)
		return r.err;
	if (!s->packet_id)
		return HB_MQTT_E_PACKET_ID;
	/* MQTT-3.8.3-3: at least one filter */
	do {
		struct hb_mqtt_str f = get_str(&r);
		uint8_t q = get8(&r);

		if (r.err)
			return r.err;
		if (!f.len)
			return HB_MQTT_E_TOPIC;
		/* MQTT-3.8.3-4: the requested QoS byte's upper bits are reserved */
		if (q > 2)
			return HB_MQTT_E_QOS;
		if (s->n == HB_MQTT_MAX_FILTERS)
			return HB_MQTT_E_LEN;
		s->filter[s->n] = f;
		s->qos[s->n++] = q;
	} while (r.off < r.n);
	return rd_end(&r);
}

int hb_mqtt_parse_suback(const struct hb_mqtt_pkt *p, uint16_t *packet_id, uint8_t *codes,
			 unsigned cap, unsigned *n)
{
	struct rd r = { p->body, p->len, 0, 0 };

	if (p->type != HB_MQTT_SUBACK)
		return HB_MQTT_E_TYPE;
	*packet_id = get16(&r);
	*n = 0;
	if (r.err)
		return r.err;
	if (r.off == r.n)
		return HB_MQTT_E_LEN;
	while (r.off < r.n) {
		uint8_t c = get8(&r);

		if (c > 2 && c != HB_MQTT_SUBACK_FAIL)
			return HB_MQTT_E_FLAGS;
		if (*n == cap)
			return HB_MQTT_E_LEN;
		codes[(*n)++] = c;
	}
	return rd_end(&r);
}

int hb_mqtt_parse_empty(const struct hb_mqtt_pkt *p)
{
	if (p->type != HB_MQTT_PINGREQ && p->type != HB_MQTT_PINGRESP &&
	    p->type != HB_MQTT_DISCONNECT)
		return HB_MQTT_E_TYPE;
	return p->len ? HB_MQTT_E_LEN : HB_MQTT_OK;
}

/* A writer into the caller's buffer: the fixed header first (each encoder works out its body
 * length beforehand), then the body; any field past cap spoils the whole packet.
 */
struct wr {
	uint8_t *p;
	size_t cap, off, want;
	int bad;
};

static void put(struct wr *w, const void *src, size_t n)
{
	if (w->bad || w->off + n > w->cap) {
		w->bad = 1;
		return;
	}
	if (n)
		memcpy(w->p + w->off, src, n);
	w->off += n;
}

static void put8(struct wr *w, uint8_t v)
{
	put(w, &v, 1);
}

static void put16(struct wr *w, uint16_t v)
{
	uint8_t b[2] = { (uint8_t)(v >> 8), (uint8_t)v };

	put(w, b, 2);
}

static void put_str(struct wr *w, struct hb_mqtt_str s)
{
	put16(w, s.len);
	put(w, s.p, s.len);
}

static struct wr wr_begin(void *buf, size_t cap, uint8_t b0, size_t body)
{
	struct wr w = { buf, cap, 0, 0, 0 };
	uint8_t len[4];
	size_t n = body <= HB_MQTT_VARINT_MAX ? hb_mqtt_varint_encode(len, 4, (uint32_t)body) : 0;

	w.bad = !n;
	put8(&w, b0);
	put(&w, len, n);
	w.want = w.off + body;
	return w;
}

static size_t wr_end(const struct wr *w)
{
	return !w->bad && w->off == w->want ? w->off : 0;
}

size_t hb_mqtt_encode_connect(void *buf, size_t cap, const struct hb_mqtt_connect *c)
{
	uint8_t fl = (uint8_t)((c->clean_session ? 0x02 : 0) | (c->will ? 0x04 : 0) |
			       (c->will ? (c->will_qos & 3) << 3 : 0) |
			       (c->will && c->will_retain ? 0x20 : 0) | (c->has_pass ? 0x40 : 0) |
			       (c->has_user ? 0x80 : 0));
	size_t body = 10 + 2 + (size_t)c->client_id.len +
		      (c->will ? 4 + (size_t)c->will_topic.len + c->will_msg.len : 0) +
		      (c->has_user ? 2 + (size_t)c->user.len : 0) +
		      (c->has_pass ? 2 + (size_t)c->pass.len : 0);
	struct wr w = wr_begin(buf, cap, HB_MQTT_CONNECT << 4, body);

	put_str(&w, hb_mqtt_cstr("MQTT", 4));
	put8(&w, c->level ? c->level : HB_MQTT_LEVEL_311);
	put8(&w, fl);
	put16(&w, c->keepalive);
	put_str(&w, c->client_id);
	if (c->will) {
		put_str(&w, c->will_topic);
		put_str(&w, c->will_msg);
	}
	if (c->has_user)
		put_str(&w, c->user);
	if (c->has_pass)
		put_str(&w, c->pass);
	return wr_end(&w);
}

size_t hb_mqtt_encode_connack(void *buf, size_t cap, bool session_present, uint8_t rc)
{
	struct wr w = wr_begin(buf, cap, HB_MQTT_CONNACK << 4, 2);

	put8(&w, session_present ? 1 : 0);
	put8(&w, rc);
	return wr_end(&w);
}

size_t hb_mqtt_encode_publish(void *buf, size_t cap, const struct hb_mqtt_publish *m)
{
	uint8_t b0 = (uint8_t)(HB_MQTT_PUBLISH << 4 | (m->qos && m->dup ? 8 : 0) | m->qos << 1 |
			       (m->retain ? 1 : 0));
	struct wr w;

	if (m->qos > 2 || (m->qos && !m->packet_id) || !topic_name_ok(m->topic))
		return 0;
	w = wr_begin(buf, cap, b0, 2 + (size_t)m->topic.len + (m->qos ? 2 : 0) + m->payload_len);
	put_str(&w, m->topic);
	if (m->qos)
		put16(&w, m->packet_id);
	put(&w, m->payload, m->payload_len);
	return wr_end(&w);
}

size_t hb_mqtt_encode_ack(void *buf, size_t cap, uint8_t type, uint16_t packet_id)
{
	struct wr w;

	if (type != HB_MQTT_PUBACK && type != HB_MQTT_PUBREC && type != HB_MQTT_PUBREL &&
	    type != HB_MQTT_PUBCOMP && type != HB_MQTT_UNSUBACK)
		return 0;
	w = wr_begin(buf, cap, (uint8_t)(type << 4 | (type == HB_MQTT_PUBREL ? 2 : 0)), 2);
	put16(&w, packet_id);
	return wr_end(&w);
}

size_t hb_mqtt_encode_subscribe(void *buf, size_t cap, uint16_t packet_id, const char *filter,
				uint8_t qos)
{
	size_t n = strlen(filter);
	struct wr w;

	if (!packet_id || !n || n > UINT16_MAX || qos > 2)
		return 0;
	w = wr_begin(buf, cap, HB_MQTT_SUBSCRIBE << 4 | 2, 2 + 2 + n + 1);
	put16(&w, packet_id);
	put_str(&w, hb_mqtt_cstr(filter, n));
	put8(&w, qos);
	return wr_end(&w);
}

size_t hb_mqtt_encode_suback(void *buf, size_t cap, uint16_t packet_id, const uint8_t *codes,
			     unsigned n)
{
	struct wr w = wr_begin(buf, cap, HB_MQTT_SUBACK << 4, 2 + (size_t)n);

	if (!n)
		return 0;
	put16(&w, packet_id);
	put(&w, codes, n);
	return wr_end(&w);
}

size_t hb_mqtt_encode_empty(void *buf, size_t cap, uint8_t type)
{
	uint8_t *b = buf;

	if (type != HB_MQTT_PINGREQ && type != HB_MQTT_PINGRESP && type != HB_MQTT_DISCONNECT)
		return 0;
	if (cap < 2)
		return 0;
	b[0] = (uint8_t)(type << 4);
	b[1] = 0;
	return 2;
}

const char *hb_mqtt_rc_str(int rc)
{
	switch (rc) {
	case HB_MQTT_OK:
		return "ok";
	case HB_MQTT_MORE:
		return "partial packet";
	case HB_MQTT_E_TYPE:
		return "reserved or unexpected packet type";
	case HB_MQTT_E_FLAGS:
		return "reserved flags";
	case HB_MQTT_E_VARINT:
		return "remaining length longer than 4 bytes";
	case HB_MQTT_E_TOO_LARGE:
		return "packet too large";
	case HB_MQTT_E_LEN:
		return "body length does not match its fields";
	case HB_MQTT_E_PROTO_NAME:
		return "protocol name is not MQTT";
	case HB_MQTT_E_LEVEL:
		return "protocol level is not 4 (MQTT 3.1.1)";
	case HB_MQTT_E_CONNECT_FLAGS:
		return "inconsistent CONNECT flags";
	case HB_MQTT_E_UTF8:
		return "string is not well-formed UTF-8";
	case HB_MQTT_E_TOPIC:
		return "invalid topic";
	case HB_MQTT_E_QOS:
		return "invalid QoS";
	case HB_MQTT_E_PACKET_ID:
		return "packet identifier 0";
	default:
		return "unknown";
	}
}

const char *hb_mqtt_type_str(uint8_t type)
{
	static const char *const names[16] = {
		"reserved", "CONNECT",	"CONNACK",    "PUBLISH",  "PUBACK",	 "PUBREC",
		"PUBREL",   "PUBCOMP",	"SUBSCRIBE",  "SUBACK",	  "UNSUBSCRIBE", "UNSUBACK",
		"PINGREQ",  "PINGRESP", "DISCONNECT", "reserved",
	};

	return names[type & 15];
}
