// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Chunk pool: slabs allocated on demand, a free list threaded through the chunks. */
#include "chunk.h"

#include <errno.h>
#include <stdlib.h>

_Static_assert(sizeof(struct hbd_chunk) == HBD_CHUNK_SIZE, "chunk layout");

int hbd_chunks_init(struct hbd_chunks *p, uint32_t max_chunks)
{
	p->max_slabs = (max_chunks + HBD_CHUNK_SLAB - 1) / HBD_CHUNK_SLAB;
	if (!p->max_slabs)
		return -EINVAL;
	p->slabs = calloc(p->max_slabs, sizeof(*p->slabs));
	if (!p->slabs)
		return -ENOMEM;
	p->nslabs = 0;
	p->free_head = HBD_NONE;
	p->used = 0;
	return 0;
}

void hbd_chunks_free(struct hbd_chunks *p)
{
	if (!p->slabs)
		return;
	for (uint32_t i = 0; i < p->nslabs; i++)
		free(p->slabs[i]);
	free(p->slabs);
	p->slabs = NULL;
}

static int grow(struct hbd_chunks *p)
{
	struct hbd_chunk *slab;
	uint32_t base = p->nslabs << HBD_CHUNK_SLAB_SHIFT;

	if (p->nslabs == p->max_slabs)
		return -ENOSPC;
	slab = malloc(sizeof(*slab) * HBD_CHUNK_SLAB);
	if (!slab)
		return -ENOMEM;
	p->slabs[p->nslabs++] = slab;
	for (uint32_t i = HBD_CHUNK_SLAB; i-- > 0;) {
		slab[i].next = p->free_head;
		p->free_head = base + i;
	}
	return 0;
}

uint32_t hbd_chunk_alloc(struct hbd_chunks *p)
{
	struct hbd_chunk *c;
	uint32_t idx;

	if (p->free_head == HBD_NONE && grow(p))
		return HBD_NONE;
	idx = p->free_head;
	c = hbd_chunk(p, idx);
	p->free_head = c->next;
	c->next = HBD_NONE;
	c->len = c->off = 0;
	p->used++;
	return idx;
}

void hbd_chunk_put(struct hbd_chunks *p, uint32_t idx)
{
	struct hbd_chunk *c = hbd_chunk(p, idx);

	c->next = p->free_head;
	p->free_head = idx;
	p->used--;
}
