/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Ring plumbing: SQEs for a worker's ring, and MSG_RING from one ring to another (a worker's
 * or the control thread's). Below the data plane: it calls nothing of it, except that a
 * message a worker addresses to itself is handed to that worker's own dispatch (w->dispatch)
 * at once, as if it had come through the ring.
 */
#ifndef HBD_RING_H
#define HBD_RING_H

#include <liburing.h>
#include <stdint.h>

#include "ud.h"

struct hbd_worker;
struct hbd_daemon;

/* An SQE, submitting what is queued if the SQ is full. NULL only if the kernel refuses the
 * submission (the caller then gives up on that operation and says so).
 */
struct io_uring_sqe *hbd_sqe(struct hbd_worker *w);

/* Asks another worker's ring (or this one) to run op on (index, gen). */
void hbd_worker_msg(struct hbd_worker *w, unsigned target, enum hbd_op op, uint32_t index,
		    uint16_t gen, uint8_t aux);
/* The same with a 32-bit value for the target (the CQE's res). */
void hbd_worker_msg_res(struct hbd_worker *w, unsigned target, enum hbd_op op, uint32_t index,
			uint16_t gen, uint8_t aux, int32_t res);

/* Control thread: queues a MSG_RING to worker target's ring (its CQE carries ud and res);
 * hbd_ctl_flush() submits what is queued.
 */
void hbd_ctl_msg(struct hbd_daemon *d, unsigned target, uint64_t ud, int res);
void hbd_ctl_flush(struct hbd_daemon *d);

#endif
