/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Downlink: application messages to connected devices, from the control socket to the worker
 * that owns the device's session, and the device's ACK back to the application.
 *
 * Life of a request:
 *   control thread: device -> current session location (device table); none: OFFLINE at once.
 *     The request goes into the owning worker's inbox and a MSG_RING wakes that worker.
 *   owning worker: the session still the same (slot/index and gen)? DOWN frame with the
 *     worker's next downlink seq, and a pending entry (location, seq, deadline). Else OFFLINE.
 *   the device's ACK(seq) on that session: DELIVERED with the round-trip time. A UDP ACK that
 *     another worker received is forwarded to the owner by MSG_RING (seq in the CQE's res).
 *   the session ends first: CLOSED; the deadline passes: TIMEOUT.
 * Every outcome goes back to the control thread as an HBD_EV_DOWN_RESULT event. hbd does not
 * resend: a DOWN is sent once per request, and only an ACK says it arrived.
 */
#ifndef HBD_DOWNLINK_H
#define HBD_DOWNLINK_H

#include <pthread.h>
#include <stdint.h>

#include "events.h"

struct hbd_worker;
struct hbd_daemon;

struct hbd_down_req {
	struct hbd_down_req *next;
	uint64_t device;
	uint64_t loc; /* the session it was addressed to (device table at request time) */
	uint32_t client, req; /* whom to tell the outcome */
	uint32_t timeout_ms;
	uint16_t len;
	uint8_t payload[HB_MAX_PAYLOAD];
};

struct hbd_down_pending {
	uint64_t loc; /* 0: free entry */
	uint64_t device;
	uint64_t sent_ns;
	uint64_t deadline_ms; /* worker clock */
	uint32_t client, req;
	uint16_t seq;
};

#define HBD_DOWN_PENDING_MAX 1024 /* per worker */

struct hbd_downlink {
	pthread_mutex_t lock; /* the inbox: control thread pushes, the worker takes */
	struct hbd_down_req *head, *tail;
	struct hbd_down_pending *pending; /* allocated on first use */
	uint32_t npending;
	uint16_t seq; /* next downlink seq of this worker */
};

void hbd_down_init(struct hbd_downlink *dl);
void hbd_down_free(struct hbd_downlink *dl);

/* The client of a request from NATS (fleet_down.c): its outcome goes to the fleet thread's
 * queue, not the control socket's. */
#define HBD_DOWN_FLEET 0xffffffffu

/* Control thread: routes a request (owned by the callee from here on) to the device's worker. */
void hbd_down_submit(struct hbd_daemon *d, struct hbd_down_req *r);
/* The same without the wake-up: queues r in its worker's inbox and returns that worker, whom
 * the caller wakes (HBD_OP_MSG_INBOX) from its own ring; or answers OFFLINE and returns -1. */
int hbd_down_enqueue(struct hbd_daemon *d, struct hbd_down_req *r);

/* Worker, on the MSG_RING wake-up and at every tick: the requests its inbox holds (a list
 * through ->next, the caller's to free), NULL if none. For each, hbd_down_reserve() a pending
 * entry (NULL: too many in flight, the request is answered BUSY), the DOWN frame goes out on
 * the session's transport with the worker's next seq (dl->seq), then hbd_down_sent() with what
 * the transport returned (0, -ENOENT: not that session any more, -ENOMEM).
 */
struct hbd_down_req *hbd_down_take(struct hbd_downlink *dl);
struct hbd_down_pending *hbd_down_reserve(struct hbd_worker *w, const struct hbd_down_req *r);
void hbd_down_sent(struct hbd_worker *w, const struct hbd_down_req *r, struct hbd_down_pending *p,
		   int rc);
/* Worker: the device ACKed seq on session loc (this worker's). */
void hbd_down_acked(struct hbd_worker *w, uint64_t loc, uint16_t seq);
/* Worker: session loc ended; its pending downlinks are CLOSED. */
void hbd_down_gone(struct hbd_worker *w, uint64_t loc);
/* Worker tick: deadlines (after the inbox). */
void hbd_down_tick(struct hbd_worker *w);

#endif
