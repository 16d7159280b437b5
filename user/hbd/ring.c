// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Ring plumbing: a worker's SQEs, and MSG_RING between the workers and from the control thread. */
#include "ring.h"

#include <string.h>

#include "log.h"
#include "worker.h"

struct io_uring_sqe *hbd_sqe(struct hbd_worker *w)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);

	if (!sqe) {
		int rc = io_uring_submit(&w->ring);

		if (rc < 0)
			hb_warn("worker %u: submit: %s", w->id, strerror(-rc));
		sqe = io_uring_get_sqe(&w->ring);
	}
	return sqe;
}

void hbd_worker_msg_res(struct hbd_worker *w, unsigned target, enum hbd_op op, uint32_t index,
			uint16_t gen, uint8_t aux, int32_t res)
{
	struct io_uring_sqe *sqe;

	if (target == w->id) {
		struct io_uring_cqe cqe = { .user_data = hbd_ud(op, index, gen, aux), .res = res };

		w->dispatch(w, &cqe);
		return;
	}
	if (target >= w->d->plan.workers || !(sqe = hbd_sqe(w))) {
		HBD_STAT_ADD(w->st, errors, 1);
		return;
	}
	/* the target ring gets a CQE with this res and user_data; ours only on failure */
	io_uring_prep_msg_ring(sqe, w->d->ring_fds[target], (unsigned)res,
			       hbd_ud(op, index, gen, aux), 0);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_MSG_SENT, target, 0, 0));
}

void hbd_worker_msg(struct hbd_worker *w, unsigned target, enum hbd_op op, uint32_t index,
		    uint16_t gen, uint8_t aux)
{
	hbd_worker_msg_res(w, target, op, index, gen, aux, 0);
}

void hbd_ctl_msg(struct hbd_daemon *d, unsigned target, uint64_t ud, int res)
{
	struct io_uring_sqe *sqe;

	if (!d->ctl.ok || target >= d->plan.workers || d->ring_fds[target] < 0)
		return;
	sqe = io_uring_get_sqe(&d->ctl.ring);
	if (!sqe) {
		hbd_ctl_flush(d);
		sqe = io_uring_get_sqe(&d->ctl.ring);
		if (!sqe)
			return;
	}
	io_uring_prep_msg_ring(sqe, d->ring_fds[target], (unsigned)res, ud, 0);
	/* only failures come back: the control ring's CQ never fills with successes */
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	io_uring_sqe_set_data64(sqe, target);
}

void hbd_ctl_flush(struct hbd_daemon *d)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	int rc;

	if (!d->ctl.ok)
		return;
	rc = io_uring_submit(&d->ctl.ring);
	if (rc < 0)
		hb_warn("control ring submit: %s", strerror(-rc));
	io_uring_for_each_cqe(&d->ctl.ring, head, cqe) {
		hb_warn("message to worker %llu failed: %s", (unsigned long long)cqe->user_data,
			strerror(-cqe->res));
		n++;
	}
	io_uring_cq_advance(&d->ctl.ring, n);
}
