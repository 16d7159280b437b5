/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* UDP sessions of one worker (udp.c): the worker loop and the upgrade handoff call these. */
#ifndef HBD_UDP_H
#define HBD_UDP_H

#include <stdbool.h>
#include <stdint.h>

struct hbd_worker;
struct hbd_ack;
struct hbd_sess;
struct io_uring_cqe;

/* Arms the multishot recvmsg: 0 or -EBUSY (no SQE). */
int hbd_udp_arm(struct hbd_worker *w);
void hbd_udp_on_recv(struct hbd_worker *w, struct io_uring_cqe *cqe);
void hbd_udp_on_send(struct hbd_worker *w, struct io_uring_cqe *cqe);
void hbd_udp_kill(struct hbd_worker *w, uint32_t idx, uint16_t gen, uint8_t reason);
void hbd_udp_ack(struct hbd_worker *w, const struct hbd_ack *a, bool ok);
void hbd_udp_expire(struct hbd_worker *w);
void hbd_udp_drain(struct hbd_worker *w);
/* The kernel's copy of a session that moved to a new address (NAT rebinding; s is the table's
 * copy, taken after the move): replaces the entry only if it is still there (-ENOENT if the
 * session ended meanwhile). */
int hbd_udp_rebind_entry(struct hbd_worker *w, const struct hbd_sess *s, uint32_t idx);
/* Sends a DOWN datagram to an ACTIVE session this worker owns: 0, -ENOENT or -ENOMEM. */
int hbd_udp_send_down(struct hbd_worker *w, uint32_t idx, uint16_t gen, uint16_t seq,
		      const void *payload, uint16_t len);

#endif
