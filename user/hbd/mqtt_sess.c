// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* MQTT connection state beside the connection slots: keepalive, subscription, Will. */
#include "mqtt_sess.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mqtt.h"
#include "sink.h"

struct hbd_mqtt_sess *hbd_mqtt_sess_alloc(uint32_t n)
{
	return calloc(n ? n : 1, sizeof(struct hbd_mqtt_sess));
}

void hbd_mqtt_sess_free(struct hbd_mqtt_sess *tab, uint32_t n)
{
	if (!tab)
		return;
	for (uint32_t i = 0; i < n; i++)
		free(tab[i].will);
	free(tab);
}

void hbd_mqtt_sess_reset(struct hbd_mqtt_sess *s)
{
	free(s->will);
	memset(s, 0, sizeof(*s));
}

int hbd_mqtt_sess_set_will(struct hbd_mqtt_sess *s, const uint8_t *msg, uint16_t len)
{
	uint8_t *p = malloc(len ? len : 1);

	if (!p)
		return -ENOMEM;
	if (len)
		memcpy(p, msg, len);
	free(s->will);
	s->will = p;
	s->will_len = len;
	s->has_will = true;
	return 0;
}

int hbd_mqtt_sess_fire_will(struct hbd_mqtt_sess *s, struct hbd_sink *sink, uint64_t device,
			    const struct hbd_ack *ack)
{
	char topic[HB_MQTT_TOPIC_MAX];
	size_t tl = hb_mqtt_topic(topic, sizeof(topic), device, "up/will");
	struct timespec now;
	int rc;

	if (!s->has_will)
		return 0;
	clock_gettime(CLOCK_REALTIME, &now);
	rc = hbd_sink_add_topic(sink, device, "mqtt", topic, tl, 0, &now, s->will, s->will_len,
				ack);
	hbd_mqtt_sess_reset(s);
	return rc ? rc : 1;
}
