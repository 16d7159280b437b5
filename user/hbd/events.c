// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Worker -> control thread event queue: a mutex-guarded ring and an eventfd doorbell. */
#include "events.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

int hbd_events_init(struct hbd_events *q, uint32_t cap)
{
	memset(q, 0, sizeof(*q));
	q->efd = -1;
	q->ring = calloc(cap, sizeof(*q->ring));
	if (!q->ring)
		return -ENOMEM;
	q->cap = cap;
	q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (q->efd < 0) {
		int rc = -errno;

		free(q->ring);
		q->ring = NULL;
		return rc;
	}
	pthread_mutex_init(&q->lock, NULL);
	return 0;
}

void hbd_events_free(struct hbd_events *q)
{
	if (!q->ring)
		return;
	free(q->ring);
	q->ring = NULL;
	close(q->efd);
	pthread_mutex_destroy(&q->lock);
}

void hbd_events_push(struct hbd_events *q, const struct hbd_event *ev)
{
	bool ring_bell;

	if (!q->ring)
		return;
	pthread_mutex_lock(&q->lock);
	if (q->count == q->cap) {
		q->dropped++;
		pthread_mutex_unlock(&q->lock);
		return;
	}
	q->ring[(q->head + q->count) % q->cap] = *ev;
	q->queued++;
	/* one doorbell per batch: the control thread drains everything once it wakes */
	ring_bell = q->count++ == 0;
	pthread_mutex_unlock(&q->lock);
	if (ring_bell)
		hbd_events_ring(q);
}

uint32_t hbd_events_take(struct hbd_events *q, struct hbd_event *out, uint32_t max,
			 uint64_t *dropped)
{
	uint64_t v;
	uint32_t n = 0;

	if (!q->ring)
		return 0;
	if (read(q->efd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing was rung; look anyway */
	}
	pthread_mutex_lock(&q->lock);
	while (n < max && q->count) {
		out[n++] = q->ring[q->head];
		q->head = (q->head + 1) % q->cap;
		q->count--;
	}
	*dropped = q->dropped;
	q->dropped = 0;
	if (q->count)
		hbd_events_ring(q); /* more than max were queued: rung for the next round */
	pthread_mutex_unlock(&q->lock);
	return n;
}

uint64_t hbd_events_mark(struct hbd_events *q)
{
	uint64_t mark;

	if (!q->ring)
		return 0;
	pthread_mutex_lock(&q->lock);
	mark = q->queued;
	pthread_mutex_unlock(&q->lock);
	return mark;
}

const char *hbd_ev_kind_str(enum hbd_ev_kind k)
{
	switch (k) {
	case HBD_EV_ONLINE:
		return "online";
	case HBD_EV_OFFLINE:
		return "offline";
	case HBD_EV_EXPIRED:
		return "expired";
	case HBD_EV_REVOKED:
		return "revoked";
	case HBD_EV_SUPERSEDED:
		return "superseded";
	case HBD_EV_SHUTDOWN:
		return "shutdown";
	case HBD_EV_DOWN_RESULT:
		return "down_result";
	}
	return "?";
}

const char *hbd_down_status_str(enum hbd_down_status s)
{
	switch (s) {
	case HBD_DOWN_DELIVERED:
		return "delivered";
	case HBD_DOWN_OFFLINE:
		return "offline";
	case HBD_DOWN_TIMEOUT:
		return "timeout";
	case HBD_DOWN_CLOSED:
		return "closed";
	case HBD_DOWN_BUSY:
		return "busy";
	case HBD_DOWN_FAILED:
		return "failed";
	}
	return "?";
}
