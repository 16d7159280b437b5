// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* UDP wire I/O on a ring: sessions share a pool of connected sockets and are told apart by the
 * session token every frame carries.
 *
 * Why a pool and not a socket per client: a UDP session is its token plus the source address
 * and port it was admitted from (docs/PROTOCOL.md), so many sessions can share one socket, and
 * a socket per client would cost a receive queue and a port per client for nothing. The pool
 * (--udp-sockets per ring, direct descriptors like TCP) still spreads sessions over many source
 * ports, as a fleet behind NATs would look. The one thing a shared socket cannot tell apart is
 * a WELCOME (it carries no device id): so each socket has at most one HELLO outstanding, and a
 * WELCOME belongs to that socket's pending client. After a HELLO times out its socket rests for
 * another timeout before taking a new HELLO, so a late WELCOME cannot be taken for someone
 * else's.
 *
 * Like tcp.c, this file submits, keeps the pool and matches datagrams to clients; what a
 * completion means for a session is decided above it (dispatch.c).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "hbload.h"
#include "log.h"
#include "uring_sock.h"

int hbl_udp_init(struct hbl_ring *r)
{
	r->us = calloc(r->nsock, sizeof(*r->us));
	r->ufree = malloc(r->nsock * sizeof(*r->ufree));
	r->ublocked = malloc(r->nsock * sizeof(*r->ublocked));
	if (!r->us || !r->ufree || !r->ublocked)
		return -ENOMEM;
	for (uint32_t s = 0; s < r->nsock; s++)
		r->us[s].pending = HBL_NIL;
	return hbl_tokmap_init(&r->tm, r->n);
}

void hbl_udp_free(struct hbl_ring *r)
{
	free(r->us);
	free(r->ufree);
	free(r->ublocked);
	r->us = NULL;
	r->ufree = r->ublocked = NULL;
	hbl_tokmap_free(&r->tm);
}

void hbl_udp_client_init(struct hbl_ring *r, uint32_t l)
{
	if (r->cfg->o.proto == HB_UDP && r->cfg->o.udp_version == HB_VERSION_2)
		hbc_use_v2(&r->cl[l].c);
}

/* Pool socket s: SOCKET (direct, slot s) -> BIND (source) -> CONNECT (server), linked. */
void hbl_udp_open_sockets(struct hbl_ring *r)
{
	const struct hbl_cfg *cfg = r->cfg;

	for (uint32_t s = 0; s < r->nsock; s++) {
		struct io_uring_sqe *sqe;

		hbl_sq_reserve(r, 3);
		sqe = hbl_sqe(r);
		io_uring_prep_socket_direct(sqe, cfg->family, SOCK_DGRAM, IPPROTO_UDP, s, 0);
		sqe->flags |= IOSQE_IO_LINK | IOSQE_CQE_SKIP_SUCCESS;
		sqe->user_data = hbl_ud(HBL_OP_USOCK_STEP, 0, 0, s);
		if (cfg->nsrc) {
			uint64_t gs = (uint64_t)s * cfg->rings + r->id;

			sqe = hbl_sqe(r);
			hb_prep_bind(sqe, (int)s,
				     (const struct sockaddr *)&cfg->src[gs % cfg->nsrc],
				     cfg->src_len);
			sqe->flags |= IOSQE_IO_LINK | IOSQE_FIXED_FILE | IOSQE_CQE_SKIP_SUCCESS;
			sqe->user_data = hbl_ud(HBL_OP_USOCK_STEP, 0, 0, s);
		}
		sqe = hbl_sqe(r);
		io_uring_prep_connect(sqe, (int)s, (const struct sockaddr *)&cfg->server,
				      cfg->server_len);
		sqe->flags |= IOSQE_FIXED_FILE;
		sqe->user_data = hbl_ud(HBL_OP_USOCK_CONNECT, 0, 0, s);
	}
}

void hbl_udp_arm_recv(struct hbl_ring *r, uint32_t s)
{
	struct io_uring_sqe *sqe = hbl_sqe(r);

	io_uring_prep_recv_multishot(sqe, (int)s, NULL, 0, 0);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_BUFFER_SELECT;
	sqe->buf_group = 0;
	sqe->user_data = hbl_ud(HBL_OP_USOCK_RECV, 0, 0, s);
	r->us[s].recv = 1;
}

int hbl_udp_send(struct hbl_ring *r, uint32_t l, int buf, unsigned len)
{
	struct io_uring_sqe *sqe = hbl_sqe(r);

	io_uring_prep_send(sqe, r->cl[l].sock, hbl_sbuf(&r->sb, buf), len, MSG_NOSIGNAL);
	sqe->flags |= IOSQE_FIXED_FILE;
	sqe->user_data = hbl_ud(HBL_OP_UDP_SEND, (uint16_t)buf, r->cl[l].gen, l);
	return 0;
}

/* Takes a free pool socket for client l's HELLO: the socket's WELCOME will be l's. There is one
 * whenever admission let the client start (it checks nufree).
 */
void hbl_udp_claim(struct hbl_ring *r, uint32_t l)
{
	uint32_t s = r->ufree[--r->nufree];

	r->us[s].pending = l;
	r->cl[l].sock = (uint16_t)s;
}

/* Gives back the socket of client l's HELLO (no-op if it has none); after a timeout it rests
 * first, so a late WELCOME cannot be taken for the next client's.
 */
void hbl_udp_release(struct hbl_ring *r, uint32_t l, uint64_t now, int timed_out)
{
	uint32_t s = r->cl[l].sock;
	struct hbl_usock *u = &r->us[s];

	if (u->pending != l)
		return;
	u->pending = HBL_NIL;
	if (timed_out) {
		u->blocked_until = now + r->cfg->hello_timeout_ns;
		r->ublocked[(r->ubhead + r->ublen++) % r->nsock] = s;
	} else {
		r->ufree[r->nufree++] = s;
	}
}

/* Sockets whose rest after a HELLO timeout is over take HELLOs again (FIFO: same timeout). */
void hbl_udp_tick(struct hbl_ring *r, uint64_t now)
{
	while (r->ublen && r->us[r->ublocked[r->ubhead]].blocked_until <= now) {
		r->ufree[r->nufree++] = r->ublocked[r->ubhead];
		r->ubhead = (r->ubhead + 1) % r->nsock;
		r->ublen--;
	}
}

/* Decodes one datagram from socket s and finds its client by token (or, for a WELCOME or an
 * ERROR refusing a HELLO, by the socket's pending HELLO). Returns the client, or HBL_NIL for a
 * malformed or stray datagram (counted).
 */
uint32_t hbl_udp_match(struct hbl_ring *r, uint32_t s, const uint8_t *p, size_t n,
		       struct hb_frame *f)
{
	uint32_t l;
	int rc = hb_decode_dgram(p, n, f);

	if (rc) {
		hb_dbg("bad datagram from server: %s", hb_decode_str(rc));
		HBL_INC(r, errors);
		return HBL_NIL;
	}
	if (f->type == HB_WELCOME || !f->token)
		l = r->us[s].pending;
	else
		l = hbl_tokmap_get(&r->tm, f->token);
	if (l == HBL_NIL || r->cl[l].sock != s) {
		HBL_INC(r, stray);
		return HBL_NIL;
	}
	return l;
}

/* Pool socket s's setup chain completed (res: its result); a ready socket takes HELLOs. */
void hbl_udp_socket_ready(struct hbl_ring *r, uint32_t s, int res)
{
	if (r->us[s].resolved)
		return;
	r->us[s].resolved = 1;
	if (res < 0) {
		hbl_count_errno(r, res);
		HBL_INC(r, connect_failed);
		HBL_INC(r, usock_failed);
		if (!r->warned_sock++)
			hb_err("ring %u: UDP socket setup failed: %s", r->id, strerror(-res));
		return;
	}
	r->us[s].ready = 1;
	r->nsock_ready++;
	HBL_INC(r, usock_ready);
	HBL_INC(r, open);
	hbl_udp_arm_recv(r, s);
	r->ufree[r->nufree++] = s;
}
