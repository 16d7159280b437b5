// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Downlinks: a DOWN frame from the server is taken (counted) and ACKed with its seq, as the
 * device library does, so an application's `hbctl send` to a simulated device is delivered.
 *
 * The ACK goes out at once when it can. A TCP connection has one send in flight at a time
 * (that keeps frames whole, tcp.c), and a ring may be out of send buffers: then the ACK waits
 * in the ring's FIFO and goes with the first loop pass that finds the connection free. An ACK
 * whose session ended meanwhile is not sent (counted as dropped): the server has already told
 * the application that the session closed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hbload.h"

#define ACKQ_MIN 64
#define ACKQ_PASS 4096 /* waiting ACKs looked at per loop pass */

void hbl_downs_free(struct hbl_ring *r)
{
	free(r->acks);
	r->acks = NULL;
	r->ack_head = r->ack_len = r->ack_cap = 0;
}

/* Appends to the FIFO, doubling it (in order, from index 0) when full. -ENOMEM if it cannot. */
static int push(struct hbl_ring *r, const struct hbl_ack *a)
{
	if (r->ack_len == r->ack_cap) {
		uint32_t cap = r->ack_cap ? 2 * r->ack_cap : ACKQ_MIN;
		struct hbl_ack *v = malloc((size_t)cap * sizeof(*v));

		if (!v || cap < r->ack_cap) {
			free(v);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < r->ack_len; i++)
			v[i] = r->acks[(r->ack_head + i) % r->ack_cap];
		free(r->acks);
		r->acks = v;
		r->ack_cap = cap;
		r->ack_head = 0;
	}
	r->acks[(r->ack_head + r->ack_len++) % r->ack_cap] = *a;
	return 0;
}

/* Sends the ACK now: 0, -EBUSY (a TCP send in flight), -ENOBUFS (no send buffer) or
 * -ENOTCONN (the session is over).
 */
static int send_ack(struct hbl_ring *r, uint32_t l, uint16_t seq)
{
	struct hbl_client *c = &r->cl[l];
	int id, n;

	if (c->ls != HBL_LS_AUTHED || c->c.state != HBC_AUTHED)
		return -ENOTCONN;
	if (hbl_is_tcp(r) && (c->flags & HBL_F_SENDING))
		return -EBUSY;
	id = hbl_sbuf_get(&r->sb);
	if (id < 0)
		return -ENOBUFS;
	n = hbc_ack(&c->c, hbl_sbuf(&r->sb, id), HBL_SBUF_SIZE, seq);
	if (n < 0) {
		hbl_sbuf_put(&r->sb, id);
		return -ENOTCONN;
	}
	hbl_send(r, l, id, (unsigned)n);
	HBL_INC(r, downs_acked);
	return 0;
}

/* A DOWN with this seq arrived for client l. */
void hbl_down(struct hbl_ring *r, uint32_t l, uint16_t seq)
{
	struct hbl_ack a = { .l = l, .gen = r->cl[l].gen, .seq = seq };
	int rc;

	HBL_INC(r, downs_received);
	/* behind any ACK already waiting (it may be this client's): they leave in order */
	rc = r->ack_len ? -EBUSY : send_ack(r, l, seq);
	if (rc == -EBUSY || rc == -ENOBUFS)
		rc = push(r, &a);
	if (rc == -ENOMEM)
		HBL_INC(r, errors);
	if (rc)
		HBL_INC(r, downs_dropped);
}

/* One pass over the waiting ACKs (bounded): each goes out, waits on, or is dropped. */
void hbl_downs_run(struct hbl_ring *r)
{
	uint32_t n = r->ack_len < ACKQ_PASS ? r->ack_len : ACKQ_PASS;

	for (uint32_t i = 0; i < n; i++) {
		struct hbl_ack a = r->acks[r->ack_head];
		int rc;

		r->ack_head = (r->ack_head + 1) % r->ack_cap;
		r->ack_len--;
		rc = a.gen == r->cl[a.l].gen ? send_ack(r, a.l, a.seq) : -ENOTCONN;
		/* the slot it leaves is free: pushing back cannot fail */
		if (rc == -EBUSY || rc == -ENOBUFS)
			push(r, &a);
		else if (rc)
			HBL_INC(r, downs_dropped);
	}
}
