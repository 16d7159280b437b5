// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Downlink through NATS: a request on hbeat.down.<device> (payload = the message), the reply
 * {"device","status","rtt_us","node"} once the device ACKed it, or with the status that says
 * why not (offline, timeout, closed, busy, failed, too_large).
 *
 * Routing: every node subscribes hbeat.down.* once, without a queue group, and gets every
 * request; the node whose device table holds the device delivers it, the others drop it after
 * one hash lookup. One subscription a node instead of one a device: the server's interest
 * graph stays at a handful of entries instead of growing by a subject per connected device,
 * and a device that moves needs no unsubscribe/subscribe race between two nodes. A request for
 * a device no node holds is answered "offline" by the node presence last saw it on if that one
 * is alive (it knows it has it no more), else by the live node first in name order; and only
 * after OFFLINE_GRACE_MS and a second look, so that a device that connected elsewhere a moment
 * ago (its presence entry not yet seen here) gets its answer from its node, not "offline" from
 * this one, which the requester would take as the first answer.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet_impl.h"
#include "json_out.h"
#include "log.h"
#include "worker.h"

#define OFFLINE_GRACE_MS 250

static void respond(struct hbd_fleet *f, const char *reply, uint64_t device, const char *status,
		    uint32_t rtt_us)
{
	char buf[256];
	int n;

	if (!reply || !*reply)
		return;
	n = hb_json_line(buf, sizeof(buf),
			 json_pack("{s:o,s:s,s:o,s:s}", "device", hb_json_u64(device), "status",
				   status, "rtt_us", hb_json_u64(rtt_us), "node", f->node));
	if (n > 0 && natsConnection_Publish(f->nc, reply, buf, n - 1) == NATS_OK) {
		pthread_mutex_lock(&f->lock);
		f->count.down_replied++;
		pthread_mutex_unlock(&f->lock);
	}
}

/* Whether this node answers "offline" for a device it does not hold. */
static bool answers_offline(struct hbd_fleet *f, uint64_t device)
{
	struct fleet_seen *s;
	bool mine;

	pthread_mutex_lock(&f->lock);
	s = fleet_map_get(&f->seen, device);
	if (s && s->online && s->node < f->nnodes) {
		const struct fleet_node *nd = &f->nodes[s->node];

		mine = s->node == f->me || !(nd->live || nd->live_before);
		if (s->node == f->me || nd->live || nd->live_before) {
			pthread_mutex_unlock(&f->lock);
			return mine;
		}
	}
	mine = true;
	for (unsigned i = 0; i < f->nnodes; i++)
		if (i != f->me && f->nodes[i].live && strcmp(f->nodes[i].name, f->node) < 0)
			mine = false;
	pthread_mutex_unlock(&f->lock);
	return mine;
}

/* An "offline" answer, given after the grace if it still holds (fleet_down_tick). */
static void later(struct hbd_fleet *f, const char *reply, uint64_t device)
{
	struct fleet_offline *o;

	if (!reply || !*reply)
		return;
	pthread_mutex_lock(&f->lock);
	if (f->noffline < FLEET_DOWN_MAX) {
		o = &f->offline[(f->offline_head + f->noffline) % FLEET_DOWN_MAX];
		o->reply = strdup(reply);
		o->device = device;
		o->due_ms = fleet_now_ms() + OFFLINE_GRACE_MS;
		if (o->reply)
			f->noffline++;
	}
	pthread_mutex_unlock(&f->lock);
	/* the fleet thread sleeps without a timeout while nothing is due: it wakes for this one */
	hbd_events_ring(&f->d->fleet.q);
}

int fleet_down_wait_ms(struct hbd_fleet *f)
{
	uint64_t now = fleet_now_ms(), due = 0;

	pthread_mutex_lock(&f->lock);
	if (f->noffline)
		due = f->offline[f->offline_head].due_ms; /* the oldest: due first */
	pthread_mutex_unlock(&f->lock);
	if (!due)
		return -1;
	return due > now ? (int)(due - now) : 0;
}

void fleet_down_tick(struct hbd_fleet *f)
{
	uint64_t now = fleet_now_ms();

	for (;;) {
		struct fleet_offline o = { 0 };

		pthread_mutex_lock(&f->lock);
		if (f->noffline && f->offline[f->offline_head].due_ms <= now) {
			o = f->offline[f->offline_head];
			f->offline[f->offline_head].reply = NULL;
			f->offline_head = (f->offline_head + 1) % FLEET_DOWN_MAX;
			f->noffline--;
		}
		pthread_mutex_unlock(&f->lock);
		if (!o.reply)
			return;
		if (!hbd_devices_loc(f->d->devices, o.device) && answers_offline(f, o.device))
			respond(f, o.reply, o.device, "offline", 0);
		free(o.reply);
	}
}

/* A slot for the request's reply subject; -1 if all are taken. */
static int take_slot(struct hbd_fleet *f, const char *reply, uint64_t device, uint32_t *req)
{
	int slot = -1;

	pthread_mutex_lock(&f->lock);
	for (uint32_t i = 0; i < FLEET_DOWN_MAX; i++) {
		uint32_t k = (f->down_next + i) % FLEET_DOWN_MAX;
		struct fleet_down *dn = &f->down[k];

		if (dn->reply)
			continue;
		dn->reply = strdup(reply ? reply : "");
		if (!dn->reply)
			break;
		dn->device = device;
		dn->gen++;
		*req = k | (uint32_t)dn->gen << 16;
		f->down_next = k + 1;
		slot = (int)k;
		break;
	}
	pthread_mutex_unlock(&f->lock);
	return slot;
}

static void on_request(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
	struct hbd_fleet *f = closure;
	struct hbd_daemon *d = f->d;
	const char *subj = natsMsg_GetSubject(msg), *reply = natsMsg_GetReply(msg), *status = NULL;
	int len = natsMsg_GetDataLength(msg), target;
	struct hbd_down_req *r;
	uint64_t device = 0;
	uint32_t req = 0;
	char *end = NULL;

	pthread_mutex_lock(&f->lock);
	f->count.down_in++;
	pthread_mutex_unlock(&f->lock);
	if (subj && strlen(subj) > strlen(FLEET_SUBJ_DOWN))
		device = strtoull(subj + strlen(FLEET_SUBJ_DOWN), &end, 10);
	if (!device || !end || *end) {
		status = "bad_device";
	} else if (!hbd_devices_loc(d->devices, device)) {
		if (answers_offline(f, device))
			later(f, reply, device);
	} else if (len < 1 || len > (int)d->cfg->max_payload) {
		status = "too_large";
	} else if (take_slot(f, reply, device, &req) < 0) {
		status = "busy";
	} else if (!(r = calloc(1, sizeof(*r)))) {
		/* frees the slot and answers "failed" */
		fleet_down_result(f, &(struct hbd_event){ .kind = HBD_EV_DOWN_RESULT,
							  .client = HBD_DOWN_FLEET,
							  .req = req,
							  .device = device,
							  .status = HBD_DOWN_FAILED });
	} else {
		r->device = device;
		r->client = HBD_DOWN_FLEET;
		r->req = req;
		r->timeout_ms = (uint32_t)(f->cfg->down_timeout_s * 1000);
		r->len = (uint16_t)len;
		memcpy(r->payload, natsMsg_GetData(msg), (size_t)len);
		/* an OFFLINE outcome (the session ended meanwhile) comes back as an event */
		target = hbd_down_enqueue(d, r);
		if (target >= 0)
			fleet_msg(f, (unsigned)target, hbd_ud(HBD_OP_MSG_INBOX, 0, 0, 0), 0);
	}
	if (status)
		respond(f, reply, device, status, 0);
	natsMsg_Destroy(msg);
}

int fleet_down_subscribe(struct hbd_fleet *f)
{
	natsStatus s =
		natsConnection_Subscribe(&f->down_sub, f->nc, FLEET_SUBJ_DOWN "*", on_request, f);

	if (s != NATS_OK) {
		hb_warn("fleet: subscribing %s*: %s", FLEET_SUBJ_DOWN, natsStatus_GetText(s));
		f->down_sub = NULL;
		return -EIO;
	}
	return 0;
}

void fleet_down_result(struct hbd_fleet *f, const struct hbd_event *ev)
{
	uint32_t slot = ev->req & 0xffff;
	uint16_t gen = (uint16_t)(ev->req >> 16);
	char *reply = NULL;

	if (ev->client != HBD_DOWN_FLEET || slot >= FLEET_DOWN_MAX)
		return;
	pthread_mutex_lock(&f->lock);
	if (f->down[slot].reply && f->down[slot].gen == gen) {
		reply = f->down[slot].reply;
		f->down[slot].reply = NULL;
	}
	pthread_mutex_unlock(&f->lock);
	if (!reply)
		return;
	respond(f, reply, ev->device, hbd_down_status_str((enum hbd_down_status)ev->status),
		ev->status == HBD_DOWN_DELIVERED ? ev->rtt_us : 0);
	free(reply);
}

void fleet_down_free(struct hbd_fleet *f)
{
	for (uint32_t i = 0; i < FLEET_DOWN_MAX; i++) {
		free(f->down[i].reply);
		f->down[i].reply = NULL;
		free(f->offline[i].reply);
		f->offline[i].reply = NULL;
	}
}
