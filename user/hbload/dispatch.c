// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* What each completion means: a ring's CQEs, read by the event loop (ring.c), are turned here
 * into wire bookkeeping (through tcp.c, udp.c, uring.c) and into session events (session.c,
 * replies.c).
 *
 * Why here and not in the transports: a completion is where the wire tells the session
 * something (connected, a frame arrived, the server closed). Reading completions above both
 * layers lets the transports stay below the sessions and never call up into them, with direct
 * calls only (no callback table on the per-heartbeat path). The buffer lifecycles are in
 * uring.c (receive) and sbuf.h (send); both are given back whatever the CQE's generation.
 */
#include <errno.h>

#include "hbload.h"

/* The bytes of one receive: every whole frame goes to the session, a partial one waits for
 * the next receive (tcp.c keeps it).
 */
static void tcp_frames(struct hbl_ring *r, uint32_t l, const uint8_t *data, size_t n, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	uint16_t gen = c->gen;
	struct hbl_tcp_rx rx;
	struct hb_frame f;
	int rc;

	if (hbl_is_mqtt(r)) {
		hbl_mqtt_bytes(r, l, data, n, now);
		return;
	}
	rc = hbl_tcp_rx_begin(r, l, data, n, &rx);
	while (!rc && (rc = hbl_tcp_rx_next(r, l, &rx, &f)) > 0) {
		hbl_frame(r, l, &f, now);
		/* the frame may have ended the connection: the rest of the bytes are moot */
		if (c->gen != gen || (c->ls != HBL_LS_HELLO && c->ls != HBL_LS_AUTHED))
			return;
		rc = 0;
	}
	if (rc < 0) {
		/* a carry overflow, a malformed stream or no memory for the carry: start over */
		HBL_INC(r, errors);
		hbl_tcp_close(r, l, HBL_AFTER_FAILED);
	}
}

/* The receive of a live connection failed or hit EOF. */
static void server_ended(struct hbl_ring *r, uint32_t l, int res)
{
	struct hbl_client *c = &r->cl[l];

	/* EOF or reset: the server ended the connection; after a BYE (ours or its own) that is
	 * the expected end, not a failure
	 */
	if (c->c.state != HBC_CLOSED) {
		HBL_INC(r, server_closed);
		if (res < 0)
			hbl_count_errno(r, res);
	}
	hbl_tcp_close(r, l, c->ls == HBL_LS_HELLO ? HBL_AFTER_FAILED : HBL_AFTER_RETRY);
}

static void tcp_recv(struct hbl_ring *r, uint32_t l, const struct io_uring_cqe *cqe, uint64_t now)
{
	struct hbl_client *c = &r->cl[l];
	int live = c->ls == HBL_LS_HELLO || c->ls == HBL_LS_AUTHED;

	if (cqe->res > 0) {
		unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;

		tcp_frames(r, l, hbl_rbuf(r, bid), (size_t)cqe->res, now);
		live = c->ls == HBL_LS_HELLO || c->ls == HBL_LS_AUTHED;
	} else if (live && (cqe->res == -ENOBUFS || cqe->res == -ECANCELED)) {
		/* the connection is fine, only its receive ended: every receive buffer was lent
		 * out (they come back before the next wait), or a cancel that was not ours (we
		 * cancel only on a close, and a closing client is not live)
		 */
		if (cqe->res == -ENOBUFS)
			HBL_INC(r, recv_nobufs);
		else
			HBL_INC(r, recv_cancelled);
	} else {
		if (live)
			server_ended(r, l, cqe->res);
		return;
	}
	/* multishot stops on its own now and then (a full CQ, no buffer): a live client whose
	 * receive ended and is not armed again would never hear from the server again
	 */
	if (live && !(cqe->flags & IORING_CQE_F_MORE)) {
		HBL_INC(r, recv_rearmed);
		hbl_tcp_arm_recv(r, l);
	}
}

static void tcp_cqe(struct hbl_ring *r, const struct io_uring_cqe *cqe, uint64_t now)
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
			hbl_tcp_connect_done(r, l, cqe->res, now);
		break;
	case HBL_OP_TCP_TIMEOUT:
		if (cqe->res == -ETIME)
			HBL_INC(r, err_timeout);
		break;
	case HBL_OP_TCP_CONNECT:
		if (fresh && c->ls == HBL_LS_CONNECTING)
			hbl_tcp_connect_done(r, l, cqe->res, now);
		break;
	case HBL_OP_TCP_RECV:
		if (fresh)
			tcp_recv(r, l, cqe, now);
		if (cqe->flags & IORING_CQE_F_BUFFER)
			hbl_rbuf_return(r, cqe->flags >> IORING_CQE_BUFFER_SHIFT);
		break;
	case HBL_OP_TCP_SEND:
		hbl_sbuf_put(&r->sb, hbl_ud_buf(ud));
		if (!fresh)
			break;
		c->flags &= ~HBL_F_SENDING;
		if (cqe->res < 0 && cqe->res != -ECANCELED &&
		    (c->ls == HBL_LS_HELLO || c->ls == HBL_LS_AUTHED)) {
			hbl_count_errno(r, cqe->res);
			HBL_INC(r, server_closed);
			hbl_tcp_close(r, l,
				      c->ls == HBL_LS_HELLO ? HBL_AFTER_FAILED : HBL_AFTER_RETRY);
		}
		break;
	case HBL_OP_TCP_CLOSE:
		if (!fresh || c->ls != HBL_LS_CLOSING)
			break;
		hbl_tcp_close_done(r, l);
		hbl_closed(r, l, now);
		break;
	default:
		break;
	}
}

static void udp_cqe(struct hbl_ring *r, const struct io_uring_cqe *cqe, uint64_t now)
{
	uint64_t ud = cqe->user_data;
	uint32_t i = hbl_ud_idx(ud);

	switch (hbl_ud_op(ud)) {
	case HBL_OP_USOCK_STEP:
		/* a failed step is the chain's only CQE (as for TCP) */
		if (cqe->res < 0)
			hbl_udp_socket_ready(r, i, cqe->res);
		break;
	case HBL_OP_USOCK_CONNECT:
		hbl_udp_socket_ready(r, i, cqe->res);
		break;
	case HBL_OP_USOCK_RECV:
		if (cqe->res > 0 && (cqe->flags & IORING_CQE_F_BUFFER)) {
			const uint8_t *p = hbl_rbuf(r, cqe->flags >> IORING_CQE_BUFFER_SHIFT);
			struct hb_frame f;
			uint32_t l = hbl_udp_match(r, i, p, (size_t)cqe->res, &f);

			if (l != HBL_NIL)
				hbl_frame(r, l, &f, now);
		}
		if (cqe->flags & IORING_CQE_F_BUFFER)
			hbl_rbuf_return(r, cqe->flags >> IORING_CQE_BUFFER_SHIFT);
		if (cqe->res < 0 && cqe->res != -ENOBUFS && cqe->res != -ECANCELED) {
			/* ICMP port unreachable and the like: the pending HELLO failed */
			uint32_t l = r->us[i].pending;

			hbl_count_errno(r, cqe->res);
			if (l != HBL_NIL && r->cl[l].ls == HBL_LS_HELLO) {
				HBL_INC(r, connect_failed);
				hbl_udp_release(r, l, now, 0);
				hbl_session_lost(r, l, now, 1);
			}
		}
		if (!(cqe->flags & IORING_CQE_F_MORE) && cqe->res != -ECANCELED)
			hbl_udp_arm_recv(r, i);
		break;
	case HBL_OP_UDP_SEND:
		hbl_sbuf_put(&r->sb, hbl_ud_buf(ud));
		if (cqe->res < 0) {
			hbl_count_errno(r, cqe->res);
			HBL_INC(r, errors);
		}
		break;
	default:
		break;
	}
}

void hbl_dispatch(struct hbl_ring *r, const struct io_uring_cqe *cqe, uint64_t now)
{
	switch (hbl_ud_op(cqe->user_data)) {
	case HBL_OP_TCP_STEP:
	case HBL_OP_TCP_CONNECT:
	case HBL_OP_TCP_TIMEOUT:
	case HBL_OP_TCP_RECV:
	case HBL_OP_TCP_SEND:
	case HBL_OP_TCP_CLOSE:
		tcp_cqe(r, cqe, now);
		break;
	case HBL_OP_USOCK_STEP:
	case HBL_OP_USOCK_CONNECT:
	case HBL_OP_USOCK_RECV:
	case HBL_OP_UDP_SEND:
		udp_cqe(r, cqe, now);
		break;
	default:
		break;
	}
}
