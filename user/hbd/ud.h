/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* io_uring user_data encoding shared by every hbd operation. */
#ifndef HBD_UD_H
#define HBD_UD_H

#include <stdint.h>

/* user_data is 64 bits, bit-packed so a CQE says what it completes without a lookup table:
 *
 *   63      56 55            40 39      32 31                            0
 *  +----------+----------------+----------+-------------------------------+
 *  |    op    |      gen       |   aux    |            index              |
 *  +----------+----------------+----------+-------------------------------+
 *
 *  op     enum hbd_op
 *  gen    generation of the connection slot or session index the op was issued for. Slots and
 *         session indexes are reused; a CQE whose gen differs from the slot's current gen
 *         belongs to an earlier occupant and is ignored (after releasing what it carries).
 *  aux    op-specific byte (a BYE reason in a cross-ring kill message)
 *  index  direct-descriptor slot (TCP), session index (UDP), or buffer chunk index
 */
enum hbd_op {
	HBD_OP_NONE = 0,
	HBD_OP_ACCEPT, /* multishot accept into direct descriptors */
	HBD_OP_COOKIE, /* getsockopt(SO_COOKIE) via IORING_OP_URING_CMD; index = slot */
	HBD_OP_SOCKHASH, /* a regular fd of an authenticated connection, for the sockhash */
	HBD_OP_RECV, /* multishot recv on a connection; index = slot */
	HBD_OP_SEND, /* send of a connection's output; index = slot */
	HBD_OP_CANCEL, /* cancel of a connection's recv (only failures post a CQE) */
	HBD_OP_CLOSE, /* close of a direct descriptor; index = slot */
	HBD_OP_UDP_RECV, /* multishot recvmsg on the worker's UDP socket */
	HBD_OP_UDP_SEND, /* one datagram; index = chunk holding msghdr and frame */
	HBD_OP_SINK_WRITE, /* JSON-lines batch write */
	HBD_OP_SINK_SYNC, /* fdatasync after a batch (--sink-fsync) */
	HBD_OP_MSG_SENT, /* our MSG_RING to another ring failed (success CQEs are skipped) */
	HBD_OP_MSG_WAKE, /* incoming: the control thread wants the loop to look at the stop flag */
	HBD_OP_MSG_KILL_TCP, /* incoming: close slot index/gen with BYE(aux) */
	HBD_OP_MSG_KILL_UDP, /* incoming: end session index/gen with BYE(aux) */
	HBD_OP_TICK, /* the loop's tick timeout */
	HBD_OP_MSG_INBOX, /* incoming: downlink requests wait in this worker's inbox */
	HBD_OP_MSG_DOWN_ACK, /* incoming: a device ACKed DOWN res on session index/gen (UDP) */
	HBD_OP_FD_INSTALL, /* upgrade: a direct descriptor made a regular fd; index = batch slot */
	HBD_OP_HO_RECV, /* upgrade: recvmsg of a batch of handed-over connections */
	HBD_OP_HO_UPDATE, /* upgrade: their fds registered as direct descriptors */
	HBD_OP_POLL, /* keepalive mode: multishot poll of a connection; index = slot */
	HBD_OP_SINK_FLEET, /* incoming: the fleet thread published the sink batch (res 0) or not */
};

static inline uint64_t hbd_ud(enum hbd_op op, uint32_t index, uint16_t gen, uint8_t aux)
{
	return ((uint64_t)op << 56) | ((uint64_t)gen << 40) | ((uint64_t)aux << 32) | index;
}

static inline enum hbd_op hbd_ud_op(uint64_t ud)
{
	return (enum hbd_op)(ud >> 56);
}

static inline uint16_t hbd_ud_gen(uint64_t ud)
{
	return (uint16_t)(ud >> 40);
}

static inline uint8_t hbd_ud_aux(uint64_t ud)
{
	return (uint8_t)(ud >> 32);
}

static inline uint32_t hbd_ud_index(uint64_t ud)
{
	return (uint32_t)ud;
}

#endif
