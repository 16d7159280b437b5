// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* UDP sends: one io_uring sendmsg a datagram, its frame in a chunk until the CQE. */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "log.h"
#include "udp.h"
#include "udp_tx.h"
#include "worker.h"

/* What a datagram send keeps alive until its CQE: the msghdr, iovec, address and frame. */
struct udp_tx {
	struct msghdr msg;
	struct iovec iov;
	struct sockaddr_in6 to;
};

_Static_assert(sizeof(struct udp_tx) + 56 <= 256 - sizeof(struct hbd_chunk),
	       "a WELCOME/PONG/ACK/BYE datagram fits a medium chunk");

/* The socket's own address form for a session address (v4-mapped when the socket is IPv4). */
static socklen_t to_sockaddr(const struct hbd_worker *w, const uint8_t addr[16], uint16_t port,
			     struct sockaddr_in6 *out)
{
	memset(out, 0, sizeof(*out));
	if (w->d->family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)out;

		s4->sin_family = AF_INET;
		s4->sin_port = port;
		memcpy(&s4->sin_addr, addr + 12, 4);
		return sizeof(*s4);
	}
	out->sin6_family = AF_INET6;
	out->sin6_port = port;
	memcpy(&out->sin6_addr, addr, 16);
	return sizeof(*out);
}

int hbd_udp_send(struct hbd_worker *w, const uint8_t addr[16], uint16_t port, uint8_t type,
		 uint16_t seq, uint64_t token, const void *payload, uint16_t len,
		 const uint8_t *key)
{
	size_t need = sizeof(struct udp_tx) + hb_frame_size(HB_UDP, len) + HB_TAG_LEN;
	uint32_t idx = hbd_chunk_alloc(&w->chunks, need);
	struct io_uring_sqe *sqe;
	struct udp_tx *tx;
	struct hbd_chunk *k;
	uint8_t *frame;
	size_t n;

	if (idx == HBD_NONE) {
		HBD_STAT_ADD(w->st, errors, 1);
		return -ENOMEM;
	}
	k = hbd_chunk(&w->chunks, idx);
	tx = (struct udp_tx *)k->data;
	frame = k->data + sizeof(*tx);
	n = key ? hb_encode_v2(frame, hbd_chunk_cap(&w->chunks, idx) - sizeof(*tx), type, seq,
			       token, payload, len, key)
		: hb_encode(frame, hbd_chunk_cap(&w->chunks, idx) - sizeof(*tx), HB_UDP, type, seq,
			    token, payload, len);
	sqe = hbd_sqe(w);
	if (!n || !sqe) {
		hbd_chunk_put(&w->chunks, idx);
		HBD_STAT_ADD(w->st, errors, 1);
		return -ENOMEM;
	}
	tx->iov.iov_base = frame;
	tx->iov.iov_len = n;
	memset(&tx->msg, 0, sizeof(tx->msg));
	tx->msg.msg_name = &tx->to;
	tx->msg.msg_namelen = to_sockaddr(w, addr, port, &tx->to);
	tx->msg.msg_iov = &tx->iov;
	tx->msg.msg_iovlen = 1;
	io_uring_prep_sendmsg(sqe, w->ufd, &tx->msg, 0);
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_UDP_SEND, idx, 0, 0));
	w->udp_inflight++;
	return 0;
}

void hbd_udp_on_send(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	hbd_chunk_put(&w->chunks, hbd_ud_index(cqe->user_data));
	w->udp_inflight--;
	if (cqe->res < 0) {
		HBD_STAT_ADD(w->st, errors, 1);
		hb_dbg("udp: worker %u: sendmsg: %s", w->id, strerror(-cqe->res));
	}
}
