// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* What an MQTT client (--proto mqtt) does with the server's packets: CONNACK opens the session
 * as WELCOME does, PINGRESP is a PONG, PUBACK an ACK; a downlink PUBLISH is acknowledged.
 * Called from dispatch.c with the bytes of one receive; calls replies.c and session.c below.
 */
#include <errno.h>

#include "hbload.h"
#include "log.h"
#include "mqtt.h"

static void on_connack(struct hbl_ring *r, uint32_t l, const struct hb_mqtt_pkt *p, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	bool sp;
	uint8_t rc;

	if (hb_mqtt_parse_connack(p, &sp, &rc) || c->c.state != HBC_HELLO_SENT) {
		HBL_INC(r, errors);
		hbl_end_session(r, l, now, HBL_AFTER_FAILED);
		return;
	}
	if (rc != HB_MQTT_CONNACK_OK) {
		hb_dbg("device %llu: CONNACK %u", (unsigned long long)c->c.device_id, rc);
		HBL_INC(r, auth_failed);
		if (c->flags & HBL_F_STORM)
			HBL_INC(r, storm_failures);
		c->c.state = HBC_CLOSED;
		hbl_end_session(r, l, now, HBL_AFTER_DONE);
		return;
	}
	c->c.state = HBC_AUTHED;
	hbl_session_open(r, l, now);
}

/* A downlink: QoS 1 is acknowledged at once when the connection has no send in flight (the
 * server sends it again otherwise); QoS 2 is not something a device of hbeat's asks for.
 */
static void on_publish(struct hbl_ring *r, uint32_t l, const struct hb_mqtt_pkt *p)
{
	struct hbl_client *c = &r->cl[l];
	struct hb_mqtt_publish m;
	int id, n;

	if (hb_mqtt_parse_publish(p, &m) || m.qos > 1) {
		HBL_INC(r, errors);
		return;
	}
	if (!m.qos || (c->flags & HBL_F_SENDING))
		return;
	id = hbl_sbuf_get(&r->sb);
	if (id < 0)
		return;
	n = hbl_mqtt_puback(c, hbl_sbuf(&r->sb, id), HBL_SBUF_SIZE, m.packet_id);
	if (n < 0) {
		hbl_sbuf_put(&r->sb, id);
		return;
	}
	hbl_tcp_send(r, l, id, (unsigned)n);
}

static void packet(struct hbl_ring *r, uint32_t l, const struct hb_mqtt_pkt *p, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	uint16_t pid;
	uint64_t ts;

	switch (p->type) {
	case HB_MQTT_CONNACK:
		on_connack(r, l, p, now);
		break;
	case HB_MQTT_PINGRESP:
		if (hb_mqtt_parse_empty(p) || c->c.state != HBC_AUTHED) {
			HBL_INC(r, errors);
			break;
		}
		ts = hbl_mqtt_pong(c);
		if (!ts)
			HBL_INC(r, stray);
		else
			hbl_count_pong(r, ts, ts == UINT64_MAX ? 0 : now - ts, ts != UINT64_MAX);
		break;
	case HB_MQTT_PUBACK:
		if (hb_mqtt_parse_ack(p, &pid))
			HBL_INC(r, errors);
		else
			HBL_INC(r, data_acked);
		break;
	case HB_MQTT_PUBLISH:
		on_publish(r, l, p);
		break;
	case HB_MQTT_SUBACK:
		break;
	default:
		HBL_INC(r, errors);
		break;
	}
}

void hbl_mqtt_bytes(struct hbl_ring *r, uint32_t l, const uint8_t *data, size_t n, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	uint16_t gen = c->gen;
	struct hbl_tcp_rx rx;
	struct hb_mqtt_pkt p;
	int rc = hbl_tcp_rx_begin(r, l, data, n, &rx);

	while (!rc && (rc = hbl_mqtt_rx_next(r, l, &rx, &p)) > 0) {
		packet(r, l, &p, now);
		if (c->gen != gen || (c->ls != HBL_LS_HELLO && c->ls != HBL_LS_AUTHED))
			return;
		rc = 0;
	}
	if (rc < 0) {
		HBL_INC(r, errors);
		hbl_tcp_close(r, l, HBL_AFTER_FAILED);
	}
}
