// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP wire I/O on a ring: one connection per client in the client's own fixed-file slot.
 *
 * Connection lifecycle: SOCKET (direct, into slot l) -> SO_LINGER {1,0} -> TCP_NODELAY ->
 * IP_BIND_ADDRESS_NO_PORT + BIND (source address, if --source) -> CONNECT, one linked chain
 * with a link timeout, submitted together; only failures and the CONNECT post CQEs
 * (IOSQE_CQE_SKIP_SUCCESS). A failed step's CQE is the last of its chain: the kernel skips the
 * CQEs of the cancelled rest.
 * Then a multishot recv on the slot (provided buffers) and the HELLO. Closing cancels the recv
 * (and a send in flight) and closes the slot; SO_LINGER {1,0} turns the close into an RST, so
 * no TIME_WAIT stays behind on either side to collide with the next run's source ports
 * (field notes).
 * c->gen changes with every connection: CQEs of an older connection are recognised and only
 * give back their buffers.
 *
 * This file only submits and reassembles; it never decides what happens to a session. The
 * completions are read above it (dispatch.c), which tells the session layer what they mean.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include "hbload.h"
#include "log.h"
#include "uring_sock.h"

/* read by the kernel when the setsockopt runs, after submit: static storage */
static const struct linger linger_rst = { .l_onoff = 1, .l_linger = 0 };
static const int one = 1;

void hbl_tcp_connect(struct hbl_ring *r, uint32_t l)
{
	const struct hbl_cfg *cfg = r->cfg;
	struct hbl_client *c = &r->cl[l];
	struct io_uring_sqe *sqe;
	const unsigned chain = IOSQE_IO_LINK | IOSQE_FIXED_FILE;

	hbl_sq_reserve(r, 7);
	sqe = hbl_sqe(r);
	io_uring_prep_socket_direct(sqe, cfg->family, SOCK_STREAM, IPPROTO_TCP, l, 0);
	sqe->flags |= IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS;
	sqe->user_data = hbl_ud(HBL_OP_TCP_STEP, 0, c->gen, l);

	sqe = hbl_sqe(r);
	hb_prep_setsockopt(sqe, (int)l, SOL_SOCKET, SO_LINGER, &linger_rst, sizeof(linger_rst));
	sqe->flags |= chain | IOSQE_CQE_SKIP_SUCCESS;
	sqe->user_data = hbl_ud(HBL_OP_TCP_STEP, 0, c->gen, l);

	/* heartbeats are tiny and latency is what we measure: no Nagle delay */
	sqe = hbl_sqe(r);
	hb_prep_setsockopt(sqe, (int)l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	sqe->flags |= chain | IOSQE_CQE_SKIP_SUCCESS;
	sqe->user_data = hbl_ud(HBL_OP_TCP_STEP, 0, c->gen, l);

	if (cfg->nsrc) {
		const struct sockaddr_storage *src = &cfg->src[hbl_global_index(r, l) % cfg->nsrc];

		/* the port is picked at connect time, against the full 4-tuple: bind does not
		 * search the address's bind hash for a port no other socket holds, a search that
		 * grows with the number of clients and showed up in profiles of large runs
		 */
		sqe = hbl_sqe(r);
		hb_prep_setsockopt(sqe, (int)l, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
				   sizeof(one));
		sqe->flags |= chain | IOSQE_CQE_SKIP_SUCCESS;
		sqe->user_data = hbl_ud(HBL_OP_TCP_STEP, 0, c->gen, l);

		sqe = hbl_sqe(r);
		hb_prep_bind(sqe, (int)l, (const struct sockaddr *)src, cfg->src_len);
		sqe->flags |= chain | IOSQE_CQE_SKIP_SUCCESS;
		sqe->user_data = hbl_ud(HBL_OP_TCP_STEP, 0, c->gen, l);
	}

	sqe = hbl_sqe(r);
	io_uring_prep_connect(sqe, (int)l, (const struct sockaddr *)&cfg->server, cfg->server_len);
	sqe->flags |= chain;
	sqe->user_data = hbl_ud(HBL_OP_TCP_CONNECT, 0, c->gen, l);

	sqe = hbl_sqe(r);
	io_uring_prep_link_timeout(sqe, &r->connect_ts, 0);
	sqe->user_data = hbl_ud(HBL_OP_TCP_TIMEOUT, 0, c->gen, l);

	c->flags |= HBL_F_OPEN;
	HBL_INC(r, open);
}

void hbl_tcp_arm_recv(struct hbl_ring *r, uint32_t l)
{
	struct io_uring_sqe *sqe = hbl_sqe(r);

	io_uring_prep_recv_multishot(sqe, (int)l, NULL, 0, 0);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
	sqe->buf_group = 0;
	sqe->user_data = hbl_ud(HBL_OP_TCP_RECV, 0, r->cl[l].gen, l);
}

int hbl_tcp_send(struct hbl_ring *r, uint32_t l, int buf, unsigned len)
{
	struct io_uring_sqe *sqe = hbl_sqe(r);

	/* MSG_WAITALL: io_uring retries a short send itself, so a frame never goes out in part
	 * with another send overtaking the rest
	 */
	io_uring_prep_send(sqe, (int)l, hbl_sbuf(&r->sb, buf), len, MSG_WAITALL | MSG_NOSIGNAL);
	sqe->flags |= IOSQE_FIXED_FILE;
	sqe->user_data = hbl_ud(HBL_OP_TCP_SEND, (uint16_t)buf, r->cl[l].gen, l);
	r->cl[l].flags |= HBL_F_SENDING;
	r->cl[l].sock = (uint16_t)buf; /* TCP: the send in flight, for a cancel on close */
	return 0;
}

void hbl_tcp_submit_close(struct hbl_ring *r, uint32_t l)
{
	struct hbl_client *c = &r->cl[l];
	struct io_uring_sqe *sqe;

	/* cancel by exact user_data: the kernel finds it by hash. Cancelling by fixed fd would
	 * scan every request armed on the ring, once per close: quadratic in a storm or at the
	 * end of a run, when every client closes at once.
	 * Hard links: the close runs even when there was nothing left to cancel.
	 */
	hbl_sq_reserve(r, 3);
	sqe = hbl_sqe(r);
	io_uring_prep_cancel64(sqe, hbl_ud(HBL_OP_TCP_RECV, 0, c->gen, l), 0);
	sqe->flags |= IOSQE_IO_HARDLINK | IOSQE_CQE_SKIP_SUCCESS;
	sqe->user_data = hbl_ud(HBL_OP_IGNORE, 0, c->gen, l);
	if (c->flags & HBL_F_SENDING) {
		/* a send stuck on a full socket buffer would keep the socket alive */
		sqe = hbl_sqe(r);
		io_uring_prep_cancel64(sqe, hbl_ud(HBL_OP_TCP_SEND, c->sock, c->gen, l), 0);
		sqe->flags |= IOSQE_IO_HARDLINK | IOSQE_CQE_SKIP_SUCCESS;
		sqe->user_data = hbl_ud(HBL_OP_IGNORE, 0, c->gen, l);
	}
	sqe = hbl_sqe(r);
	io_uring_prep_close_direct(sqe, l);
	sqe->user_data = hbl_ud(HBL_OP_TCP_CLOSE, 0, c->gen, l);
}

void hbl_tcp_close_done(struct hbl_ring *r, uint32_t l)
{
	struct hbl_client *c = &r->cl[l];

	c->flags &= ~(HBL_F_OPEN | HBL_F_SENDING);
	HBL_ST_ADD(&r->st, open, -1);
	free(c->carry);
	c->carry = NULL;
	c->carry_len = 0;
}

/* A partial frame waits in c->carry (allocated only while one is pending) for the bytes of
 * the next receive; whole frames are decoded straight from the receive buffer.
 */
int hbl_tcp_rx_begin(struct hbl_ring *r, uint32_t l, const uint8_t *data, size_t n,
		     struct hbl_tcp_rx *rx)
{
	struct hbl_client *c = &r->cl[l];

	rx->p = data;
	rx->avail = n;
	rx->off = 0;
	if (!c->carry_len)
		return 0;
	if (c->carry_len + n > HBL_CARRY_CAP)
		return -EMSGSIZE;
	memcpy(c->carry + c->carry_len, data, n);
	c->carry_len = (uint16_t)(c->carry_len + n);
	rx->p = c->carry;
	rx->avail = c->carry_len;
	return 0;
}

int hbl_tcp_rx_keep_rest(struct hbl_client *c, const struct hbl_tcp_rx *rx)
{
	/* the rest is a partial frame or packet (or nothing): keep it for the next receive */
	if (rx->off == rx->avail) {
		c->carry_len = 0;
		return 0;
	}
	if (!c->carry) {
		c->carry = malloc(HBL_CARRY_CAP);
		if (!c->carry)
			return -ENOMEM;
	}
	memmove(c->carry, rx->p + rx->off, rx->avail - rx->off);
	c->carry_len = (uint16_t)(rx->avail - rx->off);
	return 0;
}

int hbl_tcp_rx_next(struct hbl_ring *r, uint32_t l, struct hbl_tcp_rx *rx, struct hb_frame *f)
{
	struct hbl_client *c = &r->cl[l];

	if (rx->off < rx->avail) {
		int rc = hb_decode_stream(rx->p + rx->off, rx->avail - rx->off, f);

		if (rc < 0) {
			/* the stream cannot be resynchronised: the caller starts over */
			hb_dbg("device %llu: bad frame from server: %s",
			       (unsigned long long)c->c.device_id, hb_decode_str(rc));
			return -EBADMSG;
		}
		if (rc != HB_DECODE_MORE) {
			rx->off += f->size;
			return 1;
		}
	}
	return hbl_tcp_rx_keep_rest(c, rx);
}
