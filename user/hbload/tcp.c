// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP clients on a ring: one connection per client in the client's own fixed-file slot.
 *
 * Connection lifecycle: SOCKET (direct, into slot l) -> SO_LINGER {1,0} -> TCP_NODELAY ->
 * IP_BIND_ADDRESS_NO_PORT + BIND (source address, if --source) -> CONNECT, one linked chain with a link timeout,
 * submitted together; only failures and the CONNECT post CQEs (IOSQE_CQE_SKIP_SUCCESS). A
 * failed step's CQE is the last of its chain: the kernel skips the CQEs of the cancelled rest.
 * Then a multishot recv on the slot (provided buffers) and the HELLO. Closing cancels the recv
 * (and a send in flight) and closes the slot; SO_LINGER {1,0} turns the close into an RST, so
 * no TIME_WAIT stays behind on either side to collide with the next run's source ports
 * (field notes).
 * c->gen changes with every connection: CQEs of an older connection are recognised and only
 * give back their buffers.
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

		/* the port is picked at connect time, against the full 4-tuple: bind no longer
		 * searches the address's bind hash for a port no other socket holds (a profile of
		 * 500k clients connecting had io_bind at 4.8% of all samples, nearly all of it in
		 * that search)
		 */
		sqe = hbl_sqe(r);
		hb_prep_setsockopt(sqe, (int)l, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
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

static void arm_recv(struct hbl_ring *r, uint32_t l)
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
	io_uring_prep_send(sqe, (int)l, hbl_sbuf(r, buf), len, MSG_WAITALL | MSG_NOSIGNAL);
	sqe->flags |= IOSQE_FIXED_FILE;
	sqe->user_data = hbl_ud(HBL_OP_TCP_SEND, (uint16_t)buf, r->cl[l].gen, l);
	r->cl[l].flags |= HBL_F_SENDING;
	r->cl[l].sock = (uint16_t)buf; /* TCP: the send in flight, for a cancel on close */
	return 0;
}

void hbl_tcp_close(struct hbl_ring *r, uint32_t l, enum hbl_after_close after)
{
	struct hbl_client *c = &r->cl[l];
	struct io_uring_sqe *sqe;

	if (c->ls == HBL_LS_CLOSING) {
		if (after == HBL_AFTER_DONE)
			c->after = HBL_AFTER_DONE;
		return;
	}
	c->after = (uint8_t)after;
	hbl_set_ls(r, l, HBL_LS_CLOSING);
	hbl_wheel_del(&r->wheel, l);
	if (!(c->flags & HBL_F_OPEN)) {
		hbl_closed(r, l, hbl_now());
		return;
	}
	/* cancel by exact user_data: the kernel finds it by hash. Cancelling by fixed fd would
	 * scan every request armed on the ring, once per close: quadratic in a storm or at the
	 * end of a run (measured: 61% of the CPU in io_cancel_req_match at 12,500 per ring).
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

/* Frames the bytes of one receive; a partial frame waits in c->carry for the next. */
static void parse(struct hbl_ring *r, uint32_t l, const uint8_t *data, size_t n, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	uint16_t gen = c->gen;
	const uint8_t *p = data;
	size_t avail = n, off = 0;

	if (c->carry_len) {
		if (c->carry_len + n > HBL_CARRY_CAP) {
			HBL_INC(r, errors);
			hbl_tcp_close(r, l, HBL_AFTER_FAILED);
			return;
		}
		memcpy(c->carry + c->carry_len, data, n);
		c->carry_len = (uint16_t)(c->carry_len + n);
		p = c->carry;
		avail = c->carry_len;
	}
	while (off < avail) {
		struct hb_frame f;
		int rc = hb_decode_stream(p + off, avail - off, &f);

		if (rc == HB_DECODE_MORE)
			break;
		if (rc < 0) {
			/* the stream cannot be resynchronised: start over */
			hb_dbg("device %llu: bad frame from server: %s",
			       (unsigned long long)c->c.device_id, hb_decode_str(rc));
			HBL_INC(r, errors);
			hbl_tcp_close(r, l, HBL_AFTER_FAILED);
			return;
		}
		hbl_frame(r, l, &f, now);
		off += f.size;
		/* the frame may have ended the connection: the rest of the bytes are moot */
		if (c->gen != gen || (c->ls != HBL_LS_HELLO && c->ls != HBL_LS_AUTHED))
			return;
	}
	if (off == avail) {
		c->carry_len = 0;
		return;
	}
	if (!c->carry) {
		c->carry = malloc(HBL_CARRY_CAP);
		if (!c->carry) {
			HBL_INC(r, errors);
			hbl_tcp_close(r, l, HBL_AFTER_FAILED);
			return;
		}
	}
	memmove(c->carry, p + off, avail - off);
	c->carry_len = (uint16_t)(avail - off);
}

static void on_connect(struct hbl_ring *r, uint32_t l, int res, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	int id, n;

	if (res < 0) {
		hbl_count_errno(r, res);
		HBL_INC(r, connect_failed);
		hbl_tcp_close(r, l, HBL_AFTER_FAILED);
		return;
	}
	arm_recv(r, l);
	id = hbl_sbuf_get(r);
	n = id < 0 ? -ENOBUFS : hbl_build_hello(r, l, hbl_sbuf(r, id), HBL_SBUF_SIZE);
	if (n < 0) {
		if (id >= 0)
			hbl_sbuf_put(r, id);
		if (n == -ENOENT && !r->warned_key++)
			hb_err("device %llu is not in the key store: its clients cannot authenticate",
			       (unsigned long long)c->c.device_id);
		HBL_INC(r, errors);
		hbl_tcp_close(r, l, n == -ENOENT ? HBL_AFTER_DONE : HBL_AFTER_FAILED);
		return;
	}
	hbl_tcp_send(r, l, id, (unsigned)n);
	hbl_set_ls(r, l, HBL_LS_HELLO);
	hbl_wheel_set(&r->wheel, l, now + r->cfg->hello_timeout_ns);
}

static void on_recv(struct hbl_ring *r, uint32_t l, const struct io_uring_cqe *cqe, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	int live = c->ls == HBL_LS_HELLO || c->ls == HBL_LS_AUTHED;

	if (cqe->res > 0) {
		parse(r, l, hbl_rbuf(r, cqe->flags >> IORING_CQE_BUFFER_SHIFT), (size_t)cqe->res, now);
		live = c->ls == HBL_LS_HELLO || c->ls == HBL_LS_AUTHED;
		/* multishot stops on its own now and then (e.g. CQ overflow): re-arm it */
		if (live && !(cqe->flags & IORING_CQE_F_MORE))
			arm_recv(r, l);
		return;
	}
	if (!live || cqe->res == -ECANCELED)
		return;
	if (cqe->res == -ENOBUFS) {
		/* every receive buffer is lent out; they come back before the next wait */
		arm_recv(r, l);
		return;
	}
	/* EOF or reset: the server ended the connection; after a BYE (ours or its own) that is
	 * the expected end, not a failure
	 */
	if (c->c.state != HBC_CLOSED) {
		HBL_INC(r, server_closed);
		if (cqe->res < 0)
			hbl_count_errno(r, cqe->res);
	}
	hbl_tcp_close(r, l, c->ls == HBL_LS_HELLO ? HBL_AFTER_FAILED : HBL_AFTER_RETRY);
}

void hbl_tcp_cqe(struct hbl_ring *r, const struct io_uring_cqe *cqe, uint64_t now)
{
	uint64_t ud = cqe->user_data;
	uint32_t l = hbl_ud_idx(ud);
	struct hbl_client *c = &r->cl[l];
	int fresh = hbl_ud_gen(ud) == c->gen;

	switch (hbl_ud_op(ud)) {
	case HBL_OP_TCP_STEP:
		/* a step only posts a CQE when it fails, and then the kernel posts none for the
		 * rest of the chain (a failed IOSQE_CQE_SKIP_SUCCESS link suppresses them): this
		 * CQE is the attempt's last word
		 */
		if (cqe->res < 0 && fresh && c->ls == HBL_LS_CONNECTING)
			on_connect(r, l, cqe->res, now);
		break;
	case HBL_OP_TCP_TIMEOUT:
		if (cqe->res == -ETIME)
			HBL_INC(r, err_timeout);
		break;
	case HBL_OP_TCP_CONNECT:
		if (fresh && c->ls == HBL_LS_CONNECTING)
			on_connect(r, l, cqe->res, now);
		break;
	case HBL_OP_TCP_RECV:
		if (fresh)
			on_recv(r, l, cqe, now);
		if (cqe->flags & IORING_CQE_F_BUFFER)
			hbl_rbuf_return(r, cqe->flags >> IORING_CQE_BUFFER_SHIFT);
		break;
	case HBL_OP_TCP_SEND:
		hbl_sbuf_put(r, hbl_ud_buf(ud));
		if (!fresh)
			break;
		c->flags &= ~HBL_F_SENDING;
		if (cqe->res < 0 && cqe->res != -ECANCELED &&
		    (c->ls == HBL_LS_HELLO || c->ls == HBL_LS_AUTHED)) {
			hbl_count_errno(r, cqe->res);
			HBL_INC(r, server_closed);
			hbl_tcp_close(r, l, c->ls == HBL_LS_HELLO ? HBL_AFTER_FAILED : HBL_AFTER_RETRY);
		}
		break;
	case HBL_OP_TCP_CLOSE:
		if (!fresh || c->ls != HBL_LS_CLOSING)
			break;
		c->flags &= ~(HBL_F_OPEN | HBL_F_SENDING);
		HBL_ST_ADD(&r->st, open, -1);
		free(c->carry);
		c->carry = NULL;
		c->carry_len = 0;
		hbl_closed(r, l, now);
		break;
	default:
		break;
	}
}
