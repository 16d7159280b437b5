// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP accepts: up to HBD_ACCEPTS single-shot accepts in flight per worker, each into a direct
 * descriptor and with its own address buffer, paced by --accept-rate.
 *
 * Single-shot rather than multishot: a multishot accept writes every peer address into one
 * buffer, and the per-source limits need each connection's address when it arrives (not via
 * an extra getsockopt per connection). Pacing falls out too: when the worker's share of the
 * accept rate is spent it simply arms no more accepts, and new connections wait in the kernel's
 * listen queue (and, when that is full, the kernel drops SYNs and clients retransmit) instead
 * of being accepted and thrown away.
 */
#include <errno.h>
#include <string.h>

#include "accept.h"
#include "log.h"
#include "tcp.h"
#include "worker.h"

/* With an MQTT listener, the upper half of the accept buffers accepts on it. */
static bool mqtt_index(const struct hbd_worker *w, unsigned i)
{
	return w->mlfd >= 0 && i >= HBD_ACCEPTS / 2;
}

static void refill(struct hbd_worker *w)
{
	struct hbd_acceptq *a = &w->acc;

	if (!a->per_ms)
		return;
	if (w->now_ms > a->refill_ms) {
		a->tokens += (double)(w->now_ms - a->refill_ms) * a->per_ms;
		if (a->tokens > a->cap)
			a->tokens = a->cap;
	}
	a->refill_ms = w->now_ms;
}

void hbd_accept_init(struct hbd_worker *w)
{
	struct hbd_acceptq *a = &w->acc;
	double rate = w->d->cfg->accept_rate / w->d->plan.workers;

	memset(a, 0, sizeof(*a));
	a->idle = HBD_ACCEPTS == 32 ? UINT32_MAX : (1u << HBD_ACCEPTS) - 1;
	if (rate > 0) {
		a->per_ms = rate / 1000;
		/* a second's worth at once: a fleet reconnecting is not throttled in its first second */
		a->cap = rate > HBD_ACCEPTS ? rate : HBD_ACCEPTS;
		a->tokens = a->cap;
		a->refill_ms = w->now_ms;
	}
}

int hbd_accept_fill(struct hbd_worker *w)
{
	struct hbd_acceptq *a = &w->acc;

	if (a->stopped || a->retry || w->draining)
		return 0;
	refill(w);
	while (a->idle) {
		unsigned i = (unsigned)__builtin_ctz(a->idle);
		struct io_uring_sqe *sqe;

		if (a->per_ms && a->tokens < a->armed + 1) {
			if (!a->paused) {
				a->paused = true;
				HBD_STAT_ADD(w->st, accept_paused, 1);
				hb_dbg("worker %u: --accept-rate reached: accepting paused", w->id);
			}
			return 0;
		}
		/* Each accept in flight may take a slot. With no slot free the kernel would close
		 * the connection (ENFILE); a burst that fills the table for a moment with closing
		 * ones (connections without a HELLO closed for newer ones, tcp_open.c) waits in
		 * the listen queue instead, and accepting goes on as their closes complete. */
		if (w->nconns + a->armed >= w->nslots)
			return 0;
		sqe = hbd_sqe(w);
		if (!sqe)
			return -EBUSY;
		a->len[i] = sizeof(a->addr[i]);
		/* liburing 2.3 stores file_index + 1 without the "- 1" later versions apply for
		 * IORING_FILE_INDEX_ALLOC: pass it pre-decremented (as its multishot helper does)
		 */
		io_uring_prep_accept_direct(sqe, mqtt_index(w, i) ? w->mlfd : w->lfd,
					    (struct sockaddr *)&a->addr[i], &a->len[i], 0,
					    IORING_FILE_INDEX_ALLOC - 1);
		io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_ACCEPT, i, 0, 0));
		a->idle &= ~(1u << i);
		a->armed++;
	}
	a->paused = false;
	return 0;
}

void hbd_accept_stop(struct hbd_worker *w)
{
	struct io_uring_sqe *sqe;

	w->acc.stopped = true;
	if (!w->acc.armed || !(sqe = hbd_sqe(w)))
		return;
	io_uring_prep_cancel_fd(sqe, w->lfd, IORING_ASYNC_CANCEL_ALL);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, 0, 0, 0));
	if (w->mlfd >= 0 && (sqe = hbd_sqe(w))) {
		io_uring_prep_cancel_fd(sqe, w->mlfd, IORING_ASYNC_CANCEL_ALL);
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, 0, 0, 0));
	}
}

void hbd_accept_tick(struct hbd_worker *w)
{
	w->acc.retry = false;
	hbd_accept_fill(w);
}

/* The peer as a 16-byte address, IPv4 v4-mapped (the form the maps and key tables use). */
static void peer16(const struct sockaddr_in6 *sa, socklen_t len, uint8_t out[16])
{
	memset(out, 0, 16);
	if (sa->sin6_family == AF_INET6 && len >= sizeof(*sa)) {
		memcpy(out, &sa->sin6_addr, 16);
	} else if (sa->sin6_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	}
}

void hbd_accept_on_cqe(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	struct hbd_acceptq *a = &w->acc;
	unsigned i = hbd_ud_index(cqe->user_data);
	uint8_t addr[16];

	if (i >= HBD_ACCEPTS)
		return;
	a->idle |= 1u << i;
	a->armed--;
	if (cqe->res < 0) {
		if (cqe->res == -ENFILE) {
			/* the ring's table is full: the kernel closed the connection */
			HBD_STAT_ADD(w->st, full, 1);
			hb_dbg("worker %u: direct descriptor table full, connection refused",
			       w->id);
		} else if (cqe->res != -ECANCELED) {
			hb_warn("worker %u: accept: %s", w->id, strerror(-cqe->res));
			HBD_STAT_ADD(w->st, errors, 1);
			a->retry = true; /* at the next tick, not in a tight loop */
		}
		return;
	}
	if (a->per_ms)
		a->tokens -= 1;
	peer16(&a->addr[i], a->len[i], addr);
	hbd_tcp_open(w, (uint32_t)cqe->res, addr, mqtt_index(w, i));
}
