// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* MQTT on a client's TCP connection (--proto mqtt): the packets a device sends, and the
 * reassembly of the server's packets out of the byte stream.
 *
 * The session reuses struct hbc's fields, as MQTT has no tokens or sequence windows of hbeat's
 * kind: state follows CONNECT (HELLO_SENT), CONNACK 0 (AUTHED), DISCONNECT (CLOSED); ping_out
 * holds one bit per PINGREQ without its PINGRESP (so a lost session counts them as the hbeat
 * protocol's PINGs are counted), token the scheduled time of the oldest of them. PINGRESPs
 * come back in order and carry nothing: only the oldest PINGREQ's time is kept, and an RTT is
 * measured only for a PINGREQ that was alone outstanding when it left.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hbload.h"
#include "log.h"
#include "mqtt.h"

/* What a PINGREQ's RTT is measured from when another PINGREQ was outstanding: none. */
#define NO_TS UINT64_MAX

uint16_t hbl_mqtt_keepalive(const struct hbl_opts *o)
{
	double k = ceil(o->interval_s);

	return k < 1 ? 1 : k > UINT16_MAX ? UINT16_MAX : (uint16_t)k;
}

int hbl_mqtt_connect(struct hbl_ring *r, uint32_t l, uint8_t *buf, size_t cap)
{
	const struct hbl_opts *o = &r->cfg->o;
	struct hbl_client *c = &r->cl[l];
	uint8_t secret[HB_SECRET_MAX];
	char user[24], pw[HB_MQTT_PW_LEN + 1];
	struct hb_mqtt_connect m = { .clean_session = true };
	uint32_t today = (uint32_t)(hb_realtime_ms() / 86400000);
	int slen, n;
	size_t sz;

	slen = hb_keystore_secret(r->cfg->ks, c->c.device_id, secret);
	if (slen == -ENOENT && !r->warned_key++)
		hb_err("device %llu is not in the key store: its clients cannot authenticate",
		       (unsigned long long)c->c.device_id);
	if (slen < 0)
		return slen;
	n = hb_mqtt_password(secret, (size_t)slen, o->mqtt_realm, c->c.device_id,
			     today + o->mqtt_days, pw);
	memset(secret, 0, sizeof(secret));
	if (n < 0)
		return n;
	snprintf(user, sizeof(user), "%llu", (unsigned long long)c->c.device_id);
	m.keepalive = hbl_mqtt_keepalive(o);
	m.client_id = hb_mqtt_cstr(user, strlen(user));
	m.has_user = m.has_pass = true;
	m.user = m.client_id;
	m.pass = hb_mqtt_cstr(pw, (size_t)n);
	sz = hb_mqtt_encode_connect(buf, cap, &m);
	memset(pw, 0, sizeof(pw));
	if (!sz)
		return -ENOSPC;
	c->c.state = HBC_HELLO_SENT;
	return (int)sz;
}

int hbl_mqtt_ping(struct hbl_client *c, uint8_t *buf, size_t cap, uint64_t ts)
{
	size_t n;

	if (c->c.state != HBC_AUTHED)
		return -ENOTCONN;
	n = hb_mqtt_encode_empty(buf, cap, HB_MQTT_PINGREQ);
	if (!n)
		return -ENOSPC;
	if (!c->c.ping_out)
		c->c.token = ts;
	c->c.ping_out = c->c.ping_out << 1 | 1;
	return (int)n;
}

/* The PINGRESP of the oldest outstanding PINGREQ: its scheduled time, NO_TS if it is not
 * known, 0 if nothing was outstanding (a stray).
 */
uint64_t hbl_mqtt_pong(struct hbl_client *c)
{
	uint64_t ts = c->c.token;

	if (!c->c.ping_out)
		return 0;
	/* the oldest is the highest bit set */
	c->c.ping_out &= ~(1ULL << (63 - __builtin_clzll(c->c.ping_out)));
	c->c.token = NO_TS;
	return ts;
}

int hbl_mqtt_publish(struct hbl_ring *r, struct hbl_client *c, uint8_t *buf, size_t cap,
		     const uint8_t *payload, size_t len)
{
	char topic[HB_MQTT_TOPIC_MAX];
	struct hb_mqtt_publish m = { .qos = 1 };
	size_t tl = hb_mqtt_topic(topic, sizeof(topic), c->c.device_id, "up"), n;

	if (c->c.state != HBC_AUTHED)
		return -ENOTCONN;
	/* packet identifiers are never 0 */
	if (!++c->c.seq)
		c->c.seq = 1;
	m.packet_id = c->c.seq;
	m.topic = hb_mqtt_cstr(topic, tl);
	m.payload = payload;
	m.payload_len = len;
	n = hb_mqtt_encode_publish(buf, cap, &m);
	return n ? (int)n : -ENOSPC;
}

int hbl_mqtt_disconnect(struct hbl_client *c, uint8_t *buf, size_t cap)
{
	size_t n;

	if (c->c.state != HBC_AUTHED && c->c.state != HBC_HELLO_SENT)
		return -ENOTCONN;
	n = hb_mqtt_encode_empty(buf, cap, HB_MQTT_DISCONNECT);
	if (!n)
		return -ENOSPC;
	c->c.state = HBC_CLOSED;
	return (int)n;
}

int hbl_mqtt_puback(struct hbl_client *c, uint8_t *buf, size_t cap, uint16_t packet_id)
{
	size_t n = hb_mqtt_encode_ack(buf, cap, HB_MQTT_PUBACK, packet_id);

	return n ? (int)n : -ENOSPC;
}

/* As hbl_tcp_rx_next, for MQTT packets (tcp.c keeps the carry the same way). */
int hbl_mqtt_rx_next(struct hbl_ring *r, uint32_t l, struct hbl_tcp_rx *rx, struct hb_mqtt_pkt *p)
{
	struct hbl_client *c = &r->cl[l];

	if (rx->off < rx->avail) {
		int rc = hb_mqtt_decode(rx->p + rx->off, rx->avail - rx->off, HBL_MQTT_MAX_REMAIN,
					p);

		if (rc < 0) {
			hb_dbg("device %llu: bad MQTT packet from server: %s",
			       (unsigned long long)c->c.device_id, hb_mqtt_rc_str(rc));
			return -EBADMSG;
		}
		if (rc != HB_MQTT_MORE) {
			rx->off += p->size;
			return 1;
		}
	}
	return hbl_tcp_rx_keep_rest(c, rx);
}
