// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* DATA to the HBEAT_DATA stream: a worker's sink batch, each line published asynchronously on
 * hbeat.data.<device>, answered to the worker once JetStream acknowledged every line.
 *
 * The window: a worker has one batch in flight (sink.h double-buffers) and every line of it is
 * published at once, without waiting; the acknowledgements come back on libnats' thread. So a
 * batch costs one round trip to the stream's leader, however many frames it holds, and the next
 * batch fills meanwhile. A publish that fails, or is not acknowledged within --nats-timeout,
 * fails the whole batch: none of its frames is ACKed (the same as a failed write of the file
 * sink: a TCP connection is closed with ERROR(INTERNAL), so its device reconnects and sends
 * them again; a UDP device resends on its own). Lines of a failed batch that did reach the
 * stream are there twice once resent; nothing ACKed is ever missing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet_impl.h"
#include "log.h"
#include "worker.h"

#define DATA_MAX_PENDING 65536 /* per worker: publishes in flight */

struct data_ctx {
	struct hbd_fleet *f;
	unsigned worker;
};

static void complete(struct hbd_fleet *f, unsigned worker, bool failed)
{
	fleet_msg(f, worker, hbd_ud(HBD_OP_SINK_FLEET, 0, 0, 0), failed ? -EIO : 0);
}

static void data_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	struct data_ctx *c = closure;
	struct hbd_fleet *f = c->f;
	struct fleet_batch *b = &f->batch[c->worker];
	bool done, failed;

	pthread_mutex_lock(&f->lock);
	if (!pa || pae) {
		b->failed = true;
		f->count.data_failed++;
	} else {
		f->count.data_published++;
	}
	done = b->busy && --b->outstanding == 0;
	failed = b->failed;
	if (done)
		b->busy = false;
	pthread_mutex_unlock(&f->lock);
	natsMsg_Destroy(msg);
	if (done)
		complete(f, c->worker, failed);
}

int fleet_data_init(struct hbd_fleet *f)
{
	unsigned n = f->d->plan.workers;
	struct data_ctx *ctx = calloc(n, sizeof(*ctx));

	if (!ctx)
		return -ENOMEM;
	/* the contexts are made once connected (fleet_admin.c); the closures live until free */
	for (unsigned i = 0; i < n; i++) {
		ctx[i] = (struct data_ctx){ .f = f, .worker = i };
		f->batch[i].js = NULL;
	}
	f->data_ctx = ctx;
	return 0;
}

int fleet_data_connect(struct hbd_fleet *f)
{
	struct data_ctx *ctx = f->data_ctx;

	for (unsigned i = 0; i < f->d->plan.workers; i++) {
		jsOptions o;

		if (f->batch[i].js)
			continue;
		jsOptions_Init(&o);
		o.PublishAsync.MaxPending = DATA_MAX_PENDING;
		o.PublishAsync.AckHandler = data_ack;
		o.PublishAsync.AckHandlerClosure = &ctx[i];
		o.Wait = (int64_t)(f->cfg->timeout_s * 1000);
		if (natsConnection_JetStream(&f->batch[i].js, f->nc, &o) != NATS_OK)
			return -ENOMEM;
	}
	return 0;
}

void fleet_data_free(struct hbd_fleet *f)
{
	for (unsigned i = 0; f->batch && i < f->d->plan.workers; i++) {
		if (f->batch[i].js)
			jsCtx_Destroy(f->batch[i].js);
		f->batch[i].js = NULL;
	}
	free(f->data_ctx);
	f->data_ctx = NULL;
}

void fleet_data_publish(struct hbd_fleet *f, unsigned worker)
{
	struct hbd_worker *w = f->d->workers[worker];
	struct fleet_batch *fb = &f->batch[worker];
	struct hbd_sink_batch *b = w ? hbd_sink_inflight(&w->sink) : NULL;
	jsPubOptions po;
	uint32_t start = 0, n;
	bool done = false, failed;

	if (!b)
		return;
	n = b->nacks;
	if (!__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE) || !fb->js || !n) {
		pthread_mutex_lock(&f->lock);
		f->count.data_failed += n;
		pthread_mutex_unlock(&f->lock);
		complete(f, worker, n > 0);
		return;
	}
	/* No MaxWait: libnats 3.4 would make a "timeout" message for every publish at its
	 * deadline, answered or not (fleet_presence.c says more); the batch has one deadline of
	 * its own instead. */
	jsPubOptions_Init(&po);
	pthread_mutex_lock(&f->lock);
	fb->outstanding = n;
	fb->failed = false;
	fb->busy = true;
	fb->deadline_ms = fleet_now_ms() + (uint64_t)(f->cfg->timeout_s * 1000);
	pthread_mutex_unlock(&f->lock);
	for (uint32_t i = 0; i < n; i++) {
		const struct hbd_ack *a = &b->acks[i];
		uint32_t end = a->end;
		char subj[48];
		natsStatus s;

		snprintf(subj, sizeof(subj), FLEET_SUBJ_DATA "%" PRIu64, a->device);
		/* the line without its newline: a message is one record */
		s = js_PublishAsync(fb->js, subj, b->buf + start, (int)(end - start - 1), &po);
		start = end;
		if (s == NATS_OK)
			__atomic_store_n(&fb->js_used, true, __ATOMIC_RELEASE);
		if (s != NATS_OK) {
			pthread_mutex_lock(&f->lock);
			fb->failed = true;
			f->count.data_failed++;
			done = --fb->outstanding == 0;
			if (done)
				fb->busy = false;
			failed = true;
			pthread_mutex_unlock(&f->lock);
			/* nothing of this batch may be ACKed now: skip the rest */
			if (!done) {
				uint32_t rest = n - i - 1;

				pthread_mutex_lock(&f->lock);
				f->count.data_failed += rest;
				fb->outstanding -= rest;
				done = fb->outstanding == 0;
				if (done)
					fb->busy = false;
				pthread_mutex_unlock(&f->lock);
			}
			if (done)
				complete(f, worker, failed);
			return;
		}
	}
}

int fleet_data_wait_ms(struct hbd_fleet *f)
{
	uint64_t now = fleet_now_ms(), due = UINT64_MAX;

	pthread_mutex_lock(&f->lock);
	for (unsigned k = 0; f->batch && k < f->d->plan.workers; k++)
		if (f->batch[k].busy && f->batch[k].deadline_ms < due)
			due = f->batch[k].deadline_ms;
	pthread_mutex_unlock(&f->lock);
	if (due == UINT64_MAX)
		return -1;
	return due > now ? (int)(due - now < INT32_MAX ? due - now : INT32_MAX) : 0;
}

void fleet_data_expire(struct hbd_fleet *f)
{
	uint64_t now = fleet_now_ms();

	for (unsigned k = 0; f->batch && k < f->d->plan.workers; k++) {
		struct fleet_batch *fb = &f->batch[k];
		natsMsgList back = { 0 };
		bool due, done = false;
		uint32_t n;

		pthread_mutex_lock(&f->lock);
		due = fb->busy && now >= fb->deadline_ms;
		pthread_mutex_unlock(&f->lock);
		/* an acknowledgement after this is dropped by libnats: each publish is counted once,
		 * here or in data_ack */
		if (!due || !fb->js ||
		    fleet_take_pending(&back, fb->js,
				       __atomic_load_n(&fb->js_used, __ATOMIC_ACQUIRE)) != NATS_OK)
			continue;
		n = back.Count > 0 ? (uint32_t)back.Count : 0;
		natsMsgList_Destroy(&back);
		pthread_mutex_lock(&f->lock);
		if (fb->busy) {
			n = n < fb->outstanding ? n : fb->outstanding;
			f->count.data_failed += n;
			fb->failed = true;
			fb->outstanding -= n;
			done = !fb->outstanding;
			if (done)
				fb->busy = false;
		}
		pthread_mutex_unlock(&f->lock);
		if (done)
			complete(f, k, true);
	}
}
