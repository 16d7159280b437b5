/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Events from the workers to the control thread: presence changes and downlink outcomes. */
#ifndef HBD_EVENTS_H
#define HBD_EVENTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "hbeat_abi.h"

enum hbd_ev_kind {
	HBD_EV_ONLINE = 1, /* a session was admitted (WELCOME sent) */
	HBD_EV_OFFLINE, /* the device said BYE, or its connection ended */
	HBD_EV_EXPIRED, /* silent for the timeout */
	HBD_EV_REVOKED, /* its key was revoked */
	HBD_EV_SUPERSEDED, /* a newer session of the same device replaced it: still online */
	HBD_EV_SHUTDOWN, /* the daemon is draining */
	HBD_EV_DOWN_RESULT, /* outcome of a downlink request: status, for (client, req) */
};

/* Outcome of a downlink request. */
enum hbd_down_status {
	HBD_DOWN_DELIVERED = 0, /* the device ACKed it */
	HBD_DOWN_OFFLINE, /* no live session */
	HBD_DOWN_TIMEOUT, /* no ACK in time */
	HBD_DOWN_CLOSED, /* the session ended before the ACK */
	HBD_DOWN_BUSY, /* too many downlinks in flight on that worker */
	HBD_DOWN_FAILED, /* could not be sent (out of buffers) */
};

struct hbd_event {
	uint8_t kind; /* enum hbd_ev_kind */
	uint8_t udp;
	uint8_t status; /* DOWN_RESULT: enum hbd_down_status */
	uint8_t pad;
	uint32_t client; /* DOWN_RESULT: control-socket client (id and generation) */
	uint32_t req; /* DOWN_RESULT: that client's request number */
	uint32_t rtt_us; /* DOWN_RESULT, delivered: DOWN sent -> ACK received */
	uint64_t device;
	uint64_t session; /* an id for the session (its location), to pair online/offline */
	uint64_t ts_ms; /* Unix time */
	uint16_t seq; /* DOWN_RESULT: the DOWN frame's seq */
	char peer[HB_PEER_STR]; /* ONLINE over UDP: the device's address; "" if unknown */
};

/* A bounded multi-producer queue read by the control thread, which an eventfd wakes. Presence
 * events are queued only while someone subscribes (so an unwatched fleet costs nothing);
 * downlink results always. When full, events are counted as dropped.
 */
struct hbd_events {
	pthread_mutex_t lock;
	struct hbd_event *ring;
	uint32_t cap, head, count;
	uint64_t dropped;
	/* positions: events ever queued (under the lock), and ever handled by the reader
	 * (atomic; hbd_events_done), so that someone can tell when everything queued before a
	 * moment has been handled */
	uint64_t queued, handled;
	int efd; /* eventfd: readable while events are queued */
	int subscribers; /* atomic */
};

int hbd_events_init(struct hbd_events *q, uint32_t cap);
void hbd_events_free(struct hbd_events *q);
void hbd_events_push(struct hbd_events *q, const struct hbd_event *ev);
/* Moves up to max events out; returns how many. *dropped takes the drop count (and resets it). */
uint32_t hbd_events_take(struct hbd_events *q, struct hbd_event *out, uint32_t max,
			 uint64_t *dropped);

/* The queue's position now: every event queued before this call is handled once
 * hbd_events_passed answers true for it. */
uint64_t hbd_events_mark(struct hbd_events *q);
/* The reader has handled N more of the events it took. */
static inline void hbd_events_done(struct hbd_events *q, uint32_t n)
{
	__atomic_add_fetch(&q->handled, n, __ATOMIC_RELEASE);
}
static inline bool hbd_events_passed(struct hbd_events *q, uint64_t mark)
{
	return __atomic_load_n(&q->handled, __ATOMIC_ACQUIRE) >= mark;
}

/* Wakes the queue's reader without an event: it has something else to look at. */
static inline void hbd_events_ring(struct hbd_events *q)
{
	uint64_t one = 1;

	if (write(q->efd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is saturated, which still reads as ready */
	}
}

static inline bool hbd_events_watched(struct hbd_events *q)
{
	return __atomic_load_n(&q->subscribers, __ATOMIC_RELAXED) > 0;
}

const char *hbd_ev_kind_str(enum hbd_ev_kind k);
const char *hbd_down_status_str(enum hbd_down_status s);

#endif
