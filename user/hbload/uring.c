// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A ring's io_uring plumbing: SQEs (one at a time or reserved for a linked chain), the
 * provided receive-buffer ring, and the counting of failed completions by errno.
 *
 * Receive-buffer lifecycle: a buffer belongs to the kernel while it is in the provided-buffer
 * ring; a recv CQE lends one to us (IORING_CQE_F_BUFFER, id in the upper bits of its flags);
 * the completion's handler reads it (a partial TCP frame is copied into the client's carry)
 * and gives it back with hbl_rbuf_return, whatever the CQE's generation. Returns are made
 * visible to the kernel in one advance before the ring next waits (ring.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hbload.h"
#include "log.h"

/* An SQE, submitting what is queued first if the SQ ring is full. */
struct io_uring_sqe *hbl_sqe(struct hbl_ring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	unsigned tries = 0;

	while (!sqe) {
		int rc = io_uring_submit(&r->ring);

		sqe = io_uring_get_sqe(&r->ring);
		/* cannot happen while per-iteration work stays bounded (HBL_CQ_ENTRIES); if it
		 * does, fail loudly rather than spin forever
		 */
		if (!sqe && ++tries == 1000000) {
			hb_err("ring %u: submission queue stuck (%s)", r->id, strerror(-rc));
			abort();
		}
	}
	return sqe;
}

/* Makes room for n SQEs in a row: a link chain split across two submits would run in parts. */
void hbl_sq_reserve(struct hbl_ring *r, unsigned n)
{
	if (io_uring_sq_space_left(&r->ring) < n)
		io_uring_submit(&r->ring);
}

uint8_t *hbl_rbuf(struct hbl_ring *r, unsigned bid)
{
	return r->rbufs + (size_t)bid * HBL_RBUF_SIZE;
}

void hbl_rbuf_return(struct hbl_ring *r, unsigned bid)
{
	io_uring_buf_ring_add(r->br, hbl_rbuf(r, bid), HBL_RBUF_SIZE, (unsigned short)bid,
			      io_uring_buf_ring_mask(HBL_RBUF_COUNT), (int)r->rbuf_returns++);
}

/* The provided-buffer ring (group 0) with every receive buffer in it. */
int hbl_rbufs_setup(struct hbl_ring *r)
{
	struct io_uring_buf_reg reg = { 0 };
	int rc;

	r->br_bytes = HBL_RBUF_COUNT * sizeof(struct io_uring_buf);
	r->br = mmap(NULL, r->br_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	if (r->br == MAP_FAILED) {
		r->br = NULL;
		return -errno;
	}
	r->rbufs = malloc((size_t)HBL_RBUF_COUNT * HBL_RBUF_SIZE);
	if (!r->rbufs)
		return -ENOMEM;
	reg.ring_addr = (unsigned long)r->br;
	reg.ring_entries = HBL_RBUF_COUNT;
	reg.bgid = 0;
	rc = io_uring_register_buf_ring(&r->ring, &reg, 0);
	if (rc)
		return rc;
	io_uring_buf_ring_init(r->br);
	for (unsigned i = 0; i < HBL_RBUF_COUNT; i++)
		hbl_rbuf_return(r, i);
	io_uring_buf_ring_advance(r->br, (int)r->rbuf_returns);
	r->rbuf_returns = 0;
	return 0;
}

/* After the ring has been exited: the kernel no longer holds any of the buffers. */
void hbl_rbufs_free(struct hbl_ring *r)
{
	if (r->br)
		munmap(r->br, r->br_bytes);
	r->br = NULL;
	free(r->rbufs);
	r->rbufs = NULL;
}

/* Counts a failed completion under the errno kinds the summary reports. */
void hbl_count_errno(struct hbl_ring *r, int res)
{
	switch (-res) {
	case ECANCELED:
		break; /* a consequence of another failure, counted there */
	case EADDRNOTAVAIL:
	case EADDRINUSE:
		HBL_INC(r, err_addrnotavail);
		break;
	case ECONNREFUSED:
		HBL_INC(r, err_connrefused);
		break;
	case ETIME:
	case ETIMEDOUT:
		HBL_INC(r, err_timeout);
		break;
	default:
		hb_dbg("ring %u: %s", r->id, strerror(-res));
		HBL_INC(r, err_other);
		break;
	}
}
