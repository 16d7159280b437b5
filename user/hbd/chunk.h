/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Per-worker pool of 2 KiB buffers for output queues, partial frames and datagrams in flight. */
#ifndef HBD_CHUNK_H
#define HBD_CHUNK_H

#include <stdint.h>

#define HBD_NONE UINT32_MAX
#define HBD_CHUNK_SIZE 2048
#define HBD_CHUNK_DATA (HBD_CHUNK_SIZE - 8)
#define HBD_CHUNK_SLAB_SHIFT 5 /* 32 chunks (64 KiB) per slab */
#define HBD_CHUNK_SLAB (1u << HBD_CHUNK_SLAB_SHIFT)

/* Buffer life: a chunk is taken when a connection first has bytes to send (or a frame arrives
 * incomplete, or a datagram is sent) and given back when the kernel has finished with it: after
 * the send CQE that consumed its last byte, when the partial frame completes, or at the UDP send
 * CQE. Slabs never move, so a pointer handed to the kernel stays valid; they are kept until the
 * worker exits, so memory is the high-water mark of bytes in flight, not of clients.
 */
struct hbd_chunk {
	uint32_t next; /* next chunk of a connection's output queue, or HBD_NONE */
	uint16_t len; /* bytes filled */
	uint16_t off; /* bytes already sent (output) */
	uint8_t data[HBD_CHUNK_DATA];
};

struct hbd_chunks {
	struct hbd_chunk **slabs;
	uint32_t nslabs, max_slabs;
	uint32_t free_head; /* free list through ->next */
	uint32_t used;
};

/* A pool that grows up to max_chunks (rounded up to whole slabs). */
int hbd_chunks_init(struct hbd_chunks *p, uint32_t max_chunks);
void hbd_chunks_free(struct hbd_chunks *p);
/* Returns a chunk index with len = off = 0 and next = HBD_NONE, or HBD_NONE if exhausted. */
uint32_t hbd_chunk_alloc(struct hbd_chunks *p);
void hbd_chunk_put(struct hbd_chunks *p, uint32_t idx);

static inline struct hbd_chunk *hbd_chunk(const struct hbd_chunks *p, uint32_t idx)
{
	return &p->slabs[idx >> HBD_CHUNK_SLAB_SHIFT][idx & (HBD_CHUNK_SLAB - 1)];
}

#endif
