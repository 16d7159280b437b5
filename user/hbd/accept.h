/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* TCP accepts of one worker (accept.c): the worker loop and the upgrade handoff call these. */
#ifndef HBD_ACCEPT_H
#define HBD_ACCEPT_H

struct hbd_worker;
struct io_uring_cqe;

void hbd_accept_init(struct hbd_worker *w);
/* Arms accepts up to HBD_ACCEPTS as the rate allows; called every loop iteration. 0 or
 * -EBUSY (no SQE).
 */
int hbd_accept_fill(struct hbd_worker *w);
void hbd_accept_on_cqe(struct hbd_worker *w, struct io_uring_cqe *cqe);
/* Cancels the accepts in flight and arms no more (drain, handoff). */
void hbd_accept_stop(struct hbd_worker *w);
void hbd_accept_tick(struct hbd_worker *w);

#endif
