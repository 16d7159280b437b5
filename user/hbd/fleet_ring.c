// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The bottom of fleet mode: its MSG_RING to the workers and its table of node names, which
 * every other fleet_*.c file uses. */
#include <stdio.h>
#include <string.h>

#include "fleet_impl.h"
#include "log.h"

void fleet_msg(struct hbd_fleet *f, unsigned worker, uint64_t ud, int res)
{
	struct hbd_daemon *d = f->d;
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	unsigned head, n = 0;

	if (worker >= d->plan.workers || d->ring_fds[worker] < 0)
		return;
	pthread_mutex_lock(&f->ring_lock);
	sqe = io_uring_get_sqe(&f->ring);
	if (sqe) {
		io_uring_prep_msg_ring(sqe, d->ring_fds[worker], (unsigned)res, ud, 0);
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		io_uring_sqe_set_data64(sqe, worker);
		io_uring_submit(&f->ring);
	}
	io_uring_for_each_cqe(&f->ring, head, cqe) {
		hb_warn("fleet: message to worker %llu failed: %s",
			(unsigned long long)cqe->user_data, strerror(-cqe->res));
		n++;
	}
	io_uring_cq_advance(&f->ring, n);
	pthread_mutex_unlock(&f->ring_lock);
}

uint16_t fleet_node_idx(struct hbd_fleet *f, const char *name)
{
	for (unsigned i = 0; i < f->nnodes; i++)
		if (!strcmp(f->nodes[i].name, name))
			return (uint16_t)i;
	if (f->nnodes == FLEET_MAX_NODES)
		return 0xffff;
	snprintf(f->nodes[f->nnodes].name, FLEET_NODE_LEN, "%s", name);
	return (uint16_t)f->nnodes++;
}
