// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Downlink requests: routing to the owning worker, DOWN frames, ACK matching, deadlines. */
#include "downlink.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "worker.h"

void hbd_down_init(struct hbd_downlink *dl)
{
	memset(dl, 0, sizeof(*dl));
	dl->seq = 1; /* 0 is never a seq: an MQTT downlink's packet id is its seq */
	pthread_mutex_init(&dl->lock, NULL);
}

void hbd_down_free(struct hbd_downlink *dl)
{
	struct hbd_down_req *r = dl->head;

	while (r) {
		struct hbd_down_req *next = r->next;

		free(r);
		r = next;
	}
	dl->head = dl->tail = NULL;
	free(dl->pending);
	dl->pending = NULL;
	pthread_mutex_destroy(&dl->lock);
}

static void report(struct hbd_daemon *d, uint32_t client, uint32_t req, uint64_t device,
		   enum hbd_down_status st, uint16_t seq, uint64_t rtt_ns)
{
	struct hbd_event ev = {
		.kind = HBD_EV_DOWN_RESULT,
		.status = (uint8_t)st,
		.client = client,
		.req = req,
		.device = device,
		.seq = seq,
		.rtt_us = (uint32_t)(rtt_ns / 1000 > UINT32_MAX ? UINT32_MAX : rtt_ns / 1000),
		.ts_ms = hb_realtime_ms(),
	};

	hbd_events_push(client == HBD_DOWN_FLEET ? &d->fleet.q : &d->ctl.events, &ev);
}

/* The outcome of a request that never became a DOWN frame. */
static void refuse(struct hbd_daemon *d, const struct hbd_down_req *r, enum hbd_down_status st)
{
	report(d, r->client, r->req, r->device, st, 0, 0);
}

int hbd_down_enqueue(struct hbd_daemon *d, struct hbd_down_req *r)
{
	uint64_t loc = hbd_devices_loc(d->devices, r->device);
	struct hbd_downlink *dl;
	unsigned target;

	if (!loc || (target = hbd_loc_worker(loc)) >= d->plan.workers || !d->workers[target]) {
		refuse(d, r, HBD_DOWN_OFFLINE);
		free(r);
		return -1;
	}
	r->loc = loc;
	r->next = NULL;
	dl = &d->workers[target]->down;
	pthread_mutex_lock(&dl->lock);
	if (dl->tail)
		dl->tail->next = r;
	else
		dl->head = r;
	dl->tail = r;
	pthread_mutex_unlock(&dl->lock);
	return (int)target;
}

void hbd_down_submit(struct hbd_daemon *d, struct hbd_down_req *r)
{
	int target = hbd_down_enqueue(d, r);

	if (target >= 0)
		hbd_ctl_msg(d, (unsigned)target, hbd_ud(HBD_OP_MSG_INBOX, 0, 0, 0), 0);
}

static struct hbd_down_pending *pending_slot(struct hbd_downlink *dl)
{
	if (!dl->pending) {
		dl->pending = calloc(HBD_DOWN_PENDING_MAX, sizeof(*dl->pending));
		if (!dl->pending)
			return NULL;
	}
	if (dl->npending == HBD_DOWN_PENDING_MAX)
		return NULL;
	for (uint32_t i = 0; i < HBD_DOWN_PENDING_MAX; i++)
		if (!dl->pending[i].loc)
			return &dl->pending[i];
	return NULL;
}

struct hbd_down_req *hbd_down_take(struct hbd_downlink *dl)
{
	struct hbd_down_req *r;

	/* unlocked peek: a request pushed right after is announced by its own MSG_RING */
	if (!__atomic_load_n(&dl->head, __ATOMIC_RELAXED))
		return NULL;
	pthread_mutex_lock(&dl->lock);
	r = dl->head;
	dl->head = dl->tail = NULL;
	pthread_mutex_unlock(&dl->lock);
	return r;
}

struct hbd_down_pending *hbd_down_reserve(struct hbd_worker *w, const struct hbd_down_req *r)
{
	struct hbd_down_pending *p = pending_slot(&w->down);

	if (!p) {
		HBD_STAT_ADD(w->st, down_failed, 1);
		refuse(w->d, r, HBD_DOWN_BUSY);
	}
	return p;
}

void hbd_down_sent(struct hbd_worker *w, const struct hbd_down_req *r, struct hbd_down_pending *p,
		   int rc)
{
	struct hbd_downlink *dl = &w->down;

	if (rc) {
		HBD_STAT_ADD(w->st, down_failed, 1);
		refuse(w->d, r, rc == -ENOENT ? HBD_DOWN_OFFLINE : HBD_DOWN_FAILED);
		return;
	}
	HBD_STAT_ADD(w->st, down_sent, 1);
	*p = (struct hbd_down_pending){
		.loc = r->loc,
		.device = r->device,
		.sent_ns = hb_mono_ns(),
		.deadline_ms = w->now_ms + r->timeout_ms,
		.client = r->client,
		.req = r->req,
		.seq = dl->seq++,
	};
	if (!dl->seq)
		dl->seq = 1;
	dl->npending++;
}

static void finish(struct hbd_worker *w, struct hbd_down_pending *p, enum hbd_down_status st)
{
	uint64_t rtt = st == HBD_DOWN_DELIVERED ? hb_mono_ns() - p->sent_ns : 0;

	if (st == HBD_DOWN_DELIVERED) {
		HBD_STAT_ADD(w->st, down_acked, 1);
		hbd_timing_add(&w->t_down, rtt / 1000);
	} else {
		HBD_STAT_ADD(w->st, down_failed, 1);
	}
	report(w->d, p->client, p->req, p->device, st, p->seq, rtt);
	p->loc = 0;
	w->down.npending--;
}

void hbd_down_acked(struct hbd_worker *w, uint64_t loc, uint16_t seq)
{
	struct hbd_downlink *dl = &w->down;

	for (uint32_t i = 0; dl->npending && i < HBD_DOWN_PENDING_MAX; i++) {
		struct hbd_down_pending *p = &dl->pending[i];

		if (p->loc == loc && p->seq == seq) {
			finish(w, p, HBD_DOWN_DELIVERED);
			return;
		}
	}
	hb_dbg("worker %u: ACK seq %u matches no downlink in flight", w->id, seq);
}

void hbd_down_gone(struct hbd_worker *w, uint64_t loc)
{
	struct hbd_downlink *dl = &w->down;

	for (uint32_t i = 0; dl->npending && i < HBD_DOWN_PENDING_MAX; i++)
		if (dl->pending[i].loc == loc)
			finish(w, &dl->pending[i], HBD_DOWN_CLOSED);
}

void hbd_down_tick(struct hbd_worker *w)
{
	struct hbd_downlink *dl = &w->down;

	for (uint32_t i = 0; dl->npending && i < HBD_DOWN_PENDING_MAX; i++) {
		struct hbd_down_pending *p = &dl->pending[i];

		if (p->loc && p->deadline_ms <= w->now_ms)
			finish(w, p, HBD_DOWN_TIMEOUT);
	}
}
