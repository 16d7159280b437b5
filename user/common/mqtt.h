/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* MQTT 3.1.1 codec: the packets a device endpoint and a load generator exchange.
 *
 * Sans-IO and allocation-free, like proto.h: decode works on the caller's buffer and points
 * into it; encode writes one whole packet and returns its size. The decoder is the one hbd
 * reads devices with, so it is strict: a packet is judged in two steps, its fixed header
 * (hb_mqtt_decode: type, flags, remaining length, the packet's extent) and then its body
 * (hb_mqtt_parse_*), which must consume the remaining length exactly. Everything the standard
 * calls malformed is refused; the caller closes the connection for it (MQTT has no error
 * reply outside CONNACK).
 *
 * Credentials (mqtt_cred.c): the password a device presents is derived from its hbeat secret
 * and names its own expiry, see hb_mqtt_password().
 */
#ifndef HB_MQTT_H
#define HB_MQTT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Control packet types (the fixed header's high nibble). */
enum hb_mqtt_type {
	HB_MQTT_CONNECT = 1,
	HB_MQTT_CONNACK = 2,
	HB_MQTT_PUBLISH = 3,
	HB_MQTT_PUBACK = 4,
	HB_MQTT_PUBREC = 5,
	HB_MQTT_PUBREL = 6,
	HB_MQTT_PUBCOMP = 7,
	HB_MQTT_SUBSCRIBE = 8,
	HB_MQTT_SUBACK = 9,
	HB_MQTT_UNSUBSCRIBE = 10,
	HB_MQTT_UNSUBACK = 11,
	HB_MQTT_PINGREQ = 12,
	HB_MQTT_PINGRESP = 13,
	HB_MQTT_DISCONNECT = 14,
};

/* CONNACK return codes (3.1.1, 3.2.2.3). */
enum hb_mqtt_connack_rc {
	HB_MQTT_CONNACK_OK = 0,
	HB_MQTT_CONNACK_PROTOCOL = 1, /* unacceptable protocol version */
	HB_MQTT_CONNACK_ID = 2, /* identifier rejected */
	HB_MQTT_CONNACK_UNAVAILABLE = 3,
	HB_MQTT_CONNACK_BAD_AUTH = 4, /* bad user name or password */
	HB_MQTT_CONNACK_NOT_AUTHORIZED = 5,
};

#define HB_MQTT_SUBACK_FAIL 0x80
#define HB_MQTT_LEVEL_311 4
#define HB_MQTT_VARINT_MAX 268435455u /* four bytes of seven bits */
/* PINGREQ and PINGRESP are these two bytes, always */
#define HB_MQTT_PINGREQ_B0 0xc0
#define HB_MQTT_PINGRESP_B0 0xd0

/* Outcome of a decode or parse. Negative values are malformed (or refused) input. */
enum hb_mqtt_rc {
	HB_MQTT_OK = 0,
	HB_MQTT_MORE = 1, /* a partial packet: read more bytes and call again */
	HB_MQTT_E_TYPE = -1, /* reserved packet type 0 or 15 */
	HB_MQTT_E_FLAGS = -2, /* fixed-header flags not the ones the type requires */
	HB_MQTT_E_VARINT = -3, /* remaining length longer than 4 bytes */
	HB_MQTT_E_TOO_LARGE = -4, /* remaining length above the caller's limit */
	HB_MQTT_E_LEN = -5, /* the body is shorter or longer than its fields */
	HB_MQTT_E_PROTO_NAME = -6, /* CONNECT's protocol name is not "MQTT" */
	HB_MQTT_E_LEVEL = -7, /* CONNECT's protocol level is not 4 (3.1.1): CONNACK 0x01 */
	HB_MQTT_E_CONNECT_FLAGS = -8, /* reserved bit, Will or password flags inconsistent */
	HB_MQTT_E_UTF8 = -9, /* a string is not well-formed UTF-8 or holds U+0000 */
	HB_MQTT_E_TOPIC = -10, /* empty topic, wildcards in a PUBLISH topic */
	HB_MQTT_E_QOS = -11, /* QoS 3 */
	HB_MQTT_E_PACKET_ID = -12, /* packet identifier 0 where one is required */
};

/* A packet framed by its fixed header; body points into the caller's buffer. */
struct hb_mqtt_pkt {
	uint8_t type; /* enum hb_mqtt_type */
	uint8_t flags; /* the fixed header's low nibble */
	uint32_t len; /* remaining length: bytes of body */
	const uint8_t *body;
	size_t size; /* bytes the whole packet occupies */
};

/* A length-prefixed string or binary field (not NUL-terminated). */
struct hb_mqtt_str {
	const uint8_t *p;
	uint16_t len;
};

struct hb_mqtt_connect {
	uint8_t level;
	bool clean_session;
	bool will, will_retain;
	uint8_t will_qos;
	bool has_user, has_pass;
	uint16_t keepalive; /* seconds; 0: no keepalive */
	struct hb_mqtt_str client_id, will_topic, will_msg, user, pass;
};

struct hb_mqtt_publish {
	uint8_t qos;
	bool dup, retain;
	uint16_t packet_id; /* QoS > 0 only */
	struct hb_mqtt_str topic;
	const uint8_t *payload;
	size_t payload_len;
};

#define HB_MQTT_MAX_FILTERS 8 /* topic filters one SUBSCRIBE may carry here */
struct hb_mqtt_subscribe {
	uint16_t packet_id;
	unsigned n;
	struct hb_mqtt_str filter[HB_MQTT_MAX_FILTERS];
	uint8_t qos[HB_MQTT_MAX_FILTERS];
};

/* Remaining-length varint. decode: HB_MQTT_OK with *v and *used set, HB_MQTT_MORE, or
 * HB_MQTT_E_VARINT when a fourth byte still has its continuation bit. encode: bytes written
 * (1..4), 0 if v > HB_MQTT_VARINT_MAX or cap is too small.
 */
int hb_mqtt_varint_decode(const uint8_t *p, size_t n, uint32_t *v, size_t *used);
size_t hb_mqtt_varint_encode(uint8_t *p, size_t cap, uint32_t v);

/* Frames the packet at the front of buf: fixed-header flags checked for the type, remaining
 * length at most max_len (judged as soon as it is readable). HB_MQTT_MORE until the whole
 * packet is in buf.
 */
int hb_mqtt_decode(const void *buf, size_t n, uint32_t max_len, struct hb_mqtt_pkt *p);

/* Bodies. Each checks that the packet has the type, and that the fields fill it exactly. */
int hb_mqtt_parse_connect(const struct hb_mqtt_pkt *p, struct hb_mqtt_connect *c);
int hb_mqtt_parse_connack(const struct hb_mqtt_pkt *p, bool *session_present, uint8_t *rc);
int hb_mqtt_parse_publish(const struct hb_mqtt_pkt *p, struct hb_mqtt_publish *m);
/* PUBACK, PUBREC, PUBREL, PUBCOMP, UNSUBACK: a packet identifier and nothing else */
int hb_mqtt_parse_ack(const struct hb_mqtt_pkt *p, uint16_t *packet_id);
/* More filters than HB_MQTT_MAX_FILTERS: HB_MQTT_E_LEN */
int hb_mqtt_parse_subscribe(const struct hb_mqtt_pkt *p, struct hb_mqtt_subscribe *s);
int hb_mqtt_parse_suback(const struct hb_mqtt_pkt *p, uint16_t *packet_id, uint8_t *codes,
			 unsigned cap, unsigned *n);
/* PINGREQ, PINGRESP, DISCONNECT: empty bodies */
int hb_mqtt_parse_empty(const struct hb_mqtt_pkt *p);

/* Encoders: size of the packet written, 0 if it does not fit in cap or a field is invalid. */
size_t hb_mqtt_encode_connect(void *buf, size_t cap, const struct hb_mqtt_connect *c);
size_t hb_mqtt_encode_connack(void *buf, size_t cap, bool session_present, uint8_t rc);
size_t hb_mqtt_encode_publish(void *buf, size_t cap, const struct hb_mqtt_publish *m);
/* type: HB_MQTT_PUBACK, PUBREC, PUBREL, PUBCOMP or UNSUBACK */
size_t hb_mqtt_encode_ack(void *buf, size_t cap, uint8_t type, uint16_t packet_id);
size_t hb_mqtt_encode_subscribe(void *buf, size_t cap, uint16_t packet_id, const char *filter,
				uint8_t qos);
size_t hb_mqtt_encode_suback(void *buf, size_t cap, uint16_t packet_id, const uint8_t *codes,
			     unsigned n);
/* type: HB_MQTT_PINGREQ, PINGRESP or DISCONNECT */
size_t hb_mqtt_encode_empty(void *buf, size_t cap, uint8_t type);

/* A field as a C string constant, for building packets. */
static inline struct hb_mqtt_str hb_mqtt_cstr(const char *s, size_t len)
{
	return (struct hb_mqtt_str){ (const uint8_t *)s, (uint16_t)len };
}
bool hb_mqtt_str_eq(struct hb_mqtt_str a, const char *s);

/* 1 if the string is well-formed UTF-8 without U+0000 (MQTT-1.5.3-1, -2). */
bool hb_mqtt_utf8_ok(const uint8_t *p, size_t n);

const char *hb_mqtt_rc_str(int rc);
const char *hb_mqtt_type_str(uint8_t type);

/* Topics of a device (the interface outside checks rely on): devices/<id>/up, .../down. */
#define HB_MQTT_TOPIC_MAX 48
size_t hb_mqtt_topic(char *out, size_t cap, uint64_t device_id, const char *leaf);
/* The device id of a topic devices/<id>/<leaf>[/...] whose leaf is the given one: 0 if the
 * topic is not of that shape (ids are decimal, no sign, no leading zero). *rest (optional)
 * points after the leaf: "" or "/sub/...".
 */
uint64_t hb_mqtt_topic_device(struct hb_mqtt_str t, const char *leaf, struct hb_mqtt_str *rest);
/* The decimal device id in a user name: 0 unless it is a whole canonical decimal > 0. */
uint64_t hb_mqtt_user_device(struct hb_mqtt_str u);

/* Credentials. A password is "hb1.<expiry>.<64 hex>": expiry is the last Unix day (UTC,
 * days since 1970-01-01) it is valid on, the hex is HMAC-SHA256(device secret,
 * HB_MQTT_PW_LABEL || 0 || realm || 0 || be32 expiry || be64 device id). The secret never
 * leaves the HMAC; the realm (the server's name) keeps a password from being accepted by
 * another server; the expiry bounds how long a captured one works.
 */
#define HB_MQTT_DEFAULT_REALM "hbeat"
#define HB_MQTT_DEFAULT_DAYS 30 /* hbctl's and hbload's validity, hbd's longest accepted */
#define HB_MQTT_PW_LABEL "hbeat-mqtt-password-v1"
#define HB_MQTT_PW_LEN (4 + 10 + 1 + 64) /* "hb1." + day (at most 10 digits) + "." + hex */
#define HB_MQTT_REALM_MAX 128
int hb_mqtt_password(const uint8_t *secret, size_t slen, const char *realm, uint64_t device_id,
		     uint32_t expiry_day, char out[HB_MQTT_PW_LEN + 1]);

enum hb_mqtt_pw {
	HB_MQTT_PW_OK = 0,
	HB_MQTT_PW_FORMAT = 1, /* not hb1.<day>.<hex> */
	HB_MQTT_PW_EXPIRED = 2, /* its expiry day is before today */
	HB_MQTT_PW_TOO_LONG = 3, /* its expiry is more than max_days ahead */
	HB_MQTT_PW_MAC = 4, /* the MAC does not match (constant-time compare) */
};
/* Checks a presented password against the device's secret for this realm, today = Unix day. */
int hb_mqtt_password_check(const uint8_t *secret, size_t slen, const char *realm,
			   uint64_t device_id, struct hb_mqtt_str pw, uint32_t today,
			   uint32_t max_days);
const char *hb_mqtt_pw_str(int rc);

#endif
