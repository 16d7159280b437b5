/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What an MQTT connection keeps beside its struct hbd_conn (mqtt_sess.c): keepalive, whether
 * it subscribed to its downlink, and its Will, which an abnormal end records in the sink. Core
 * state: tcp_conn.c reads it when a connection closes, mqtt.c fills it.
 */
#ifndef HBD_MQTT_SESS_H
#define HBD_MQTT_SESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hbd_sink;
struct hbd_ack;

struct hbd_mqtt_sess {
	uint8_t *will; /* the Will message (malloc'd), NULL if none */
	uint16_t will_len;
	uint16_t keepalive; /* seconds, from CONNECT; 0: the transport's liveness */
	bool subscribed; /* to devices/<id>/down: downlinks go out as PUBLISH QoS 1 */
	bool has_will;
};

/* One per slot of a worker (n slots), zeroed. */
struct hbd_mqtt_sess *hbd_mqtt_sess_alloc(uint32_t n);
void hbd_mqtt_sess_free(struct hbd_mqtt_sess *tab, uint32_t n);
/* A slot taken by a new connection, or one whose Will is spent: nothing kept. */
void hbd_mqtt_sess_reset(struct hbd_mqtt_sess *s);
/* Keeps a copy of the Will message: 0 or -ENOMEM. */
int hbd_mqtt_sess_set_will(struct hbd_mqtt_sess *s, const uint8_t *msg, uint16_t len);
/* Silence after which the connection is expired: 1.5 keepalives (MQTT-3.1.2-24). */
static inline uint64_t hbd_mqtt_timeout_ms(const struct hbd_mqtt_sess *s)
{
	return (uint64_t)s->keepalive * 1500;
}
/* The session ended abnormally: its Will, if it has one, goes into the sink as a record of
 * topic devices/<id>/up/will (no one is acknowledged for it), and is spent. 1 if a record was
 * written, 0 if there was none, -errno if the sink refused it.
 */
int hbd_mqtt_sess_fire_will(struct hbd_mqtt_sess *s, struct hbd_sink *sink, uint64_t device,
			    const struct hbd_ack *ack);

#endif
