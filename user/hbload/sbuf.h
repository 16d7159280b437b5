/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A ring's send buffers: a fixed pool of equal buffers, handed out by id.
 *
 * Lifecycle: one buffer is taken per send SQE and put back when that send's CQE arrives (the
 * id rides in the SQE's user_data), whatever the connection generation by then. A free-id
 * stack makes taking and returning O(1) with no allocation on the heartbeat path; running
 * out is not an error, the caller retries later and counts a stall.
 */
#ifndef HBL_SBUF_H
#define HBL_SBUF_H

#include <stddef.h>
#include <stdint.h>

#define HBL_SBUF_COUNT 4096 /* send buffers per ring (ids fit the 16 bits of user_data) */
#define HBL_SBUF_SIZE 512 /* a TCP heartbeat batch: overdue PINGs (+ DATA/ECHO) that fit */

struct hbl_sbufs {
	uint8_t *mem; /* HBL_SBUF_COUNT buffers of HBL_SBUF_SIZE bytes */
	uint16_t *ids; /* free buffer ids (stack) */
	unsigned nfree;
};

/* Allocates the pool, every buffer free. 0 or -ENOMEM (hbl_sbufs_free cleans up either way). */
int hbl_sbufs_init(struct hbl_sbufs *p);
void hbl_sbufs_free(struct hbl_sbufs *p);

/* A free buffer's id, or -1 if none is free. */
static inline int hbl_sbuf_get(struct hbl_sbufs *p)
{
	return p->nfree ? p->ids[--p->nfree] : -1;
}

static inline uint8_t *hbl_sbuf(struct hbl_sbufs *p, int id)
{
	return p->mem + (size_t)id * HBL_SBUF_SIZE;
}

static inline void hbl_sbuf_put(struct hbl_sbufs *p, int id)
{
	p->ids[p->nfree++] = (uint16_t)id;
}

#endif
