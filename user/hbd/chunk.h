/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Per-worker pool of small buffers for output queues, partial frames and datagrams in flight. */
#ifndef HBD_CHUNK_H
#define HBD_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#define HBD_NONE UINT32_MAX

/* Buffer life: a chunk is taken when a connection first has bytes to send (or a frame arrives
 * incomplete, or a datagram is sent) and given back when the kernel has finished with it: after
 * the send CQE that consumed its last byte, when the partial frame completes, or at the UDP send
 * CQE. Slabs never move, so a pointer handed to the kernel stays valid; they are kept until the
 * worker exits, so memory is the high-water mark of bytes in flight, not of clients.
 *
 * Three size classes, because nearly everything in flight is tiny (a PONG is 16 bytes, a
 * WELCOME 24) and a burst of thousands of them in one loop iteration (a reconnect storm) must
 * not cost a 2 KiB buffer each:
 *   small  64 B   TCP replies (several fit), partial headers
 *   medium 256 B  datagrams with their msghdr, mid-size partial frames
 *   large  2 KiB  ECHO replies and partial frames up to the largest frame
 * An index carries its class in the top two bits.
 */
enum { HBD_CK_SMALL, HBD_CK_MEDIUM, HBD_CK_LARGE, HBD_CK_CLASSES };
#define HBD_CK_SHIFT 30
#define HBD_CK_SLAB (64 * 1024) /* bytes per slab, every class */

struct hbd_chunk {
	uint32_t next; /* next chunk of a connection's output queue, or HBD_NONE */
	uint16_t len; /* bytes filled */
	uint16_t off; /* bytes already sent (output) */
	uint8_t data[]; /* hbd_chunk_cap() bytes */
};

struct hbd_chunk_pool {
	uint8_t **slabs;
	uint32_t nslabs, max_slabs;
	uint32_t free_head; /* free list through ->next (class bits included) */
	uint32_t size; /* bytes a chunk, header included */
	uint32_t shift; /* log2 of chunks a slab */
};

struct hbd_chunks {
	struct hbd_chunk_pool pool[HBD_CK_CLASSES];
	uint32_t used;
};

/* Each class may grow to max_bytes (rounded up to whole slabs). */
int hbd_chunks_init(struct hbd_chunks *p, size_t max_bytes);
void hbd_chunks_free(struct hbd_chunks *p);
/* A chunk of the smallest class holding need bytes of data, with len = off = 0 and
 * next = HBD_NONE; HBD_NONE if exhausted or need is above the largest class.
 */
uint32_t hbd_chunk_alloc(struct hbd_chunks *p, size_t need);
void hbd_chunk_put(struct hbd_chunks *p, uint32_t idx);

static inline uint32_t hbd_chunk_cap(const struct hbd_chunks *p, uint32_t idx)
{
	return p->pool[idx >> HBD_CK_SHIFT].size - (uint32_t)sizeof(struct hbd_chunk);
}

static inline struct hbd_chunk *hbd_chunk(const struct hbd_chunks *p, uint32_t idx)
{
	const struct hbd_chunk_pool *c = &p->pool[idx >> HBD_CK_SHIFT];
	uint32_t i = idx & ((1u << HBD_CK_SHIFT) - 1);

	return (struct hbd_chunk *)(c->slabs[i >> c->shift] +
				    (size_t)(i & ((1u << c->shift) - 1)) * c->size);
}

#endif
