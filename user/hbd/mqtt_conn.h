/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* MQTT connections (mqtt.c): in the tcp_*.c order of tcp.h, between tcp_frames.c, which hands
 * it a CF_MQTT connection's bytes, acknowledgements and downlinks, and tcp_open.c.
 */
#ifndef HBD_MQTT_CONN_H
#define HBD_MQTT_CONN_H

#include <stddef.h>
#include <stdint.h>

struct hbd_worker;

/* Received bytes of an MQTT connection: packets gathered (c->partial holds an incomplete one)
 * and handled; a malformed or forbidden one closes the connection. */
void hbd_mqtt_input(struct hbd_worker *w, uint32_t slot, const uint8_t *p, size_t n);
/* A PUBLISH's sink write completed: its PUBACK (nothing for QoS 0, packet_id 0). */
void hbd_mqtt_ack(struct hbd_worker *w, uint32_t slot, uint16_t packet_id);
/* A downlink as PUBLISH QoS 1 on devices/<id>/down with packet id seq (its PUBACK reports
 * delivery): 0, -ENOENT (the device did not subscribe) or -ENOMEM. */
int hbd_mqtt_send_down(struct hbd_worker *w, uint32_t slot, uint16_t seq, const void *payload,
		       uint16_t len);

#endif
