// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Chunk pools: slabs allocated on demand, a free list per class threaded through the chunks. */
#include "chunk.h"

#include <errno.h>
#include <stdlib.h>

/* Under ASan a free chunk is poisoned whole, so a write past the end of a chunk into a free
 * neighbour (which malloc'd slabs would otherwise hide) is reported; no-ops without ASan.
 */
#if defined(__SANITIZE_ADDRESS__)
#define HBD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HBD_ASAN 1
#endif
#endif
#ifdef HBD_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static const uint32_t class_size[HBD_CK_CLASSES] = { 64, 256, 2048 };

int hbd_chunks_init(struct hbd_chunks *p, size_t max_bytes)
{
	p->used = 0;
	for (int k = 0; k < HBD_CK_CLASSES; k++) {
		struct hbd_chunk_pool *c = &p->pool[k];
		uint32_t per_slab = HBD_CK_SLAB / class_size[k];

		c->size = class_size[k];
		c->shift = 0;
		while ((1u << c->shift) < per_slab)
			c->shift++;
		c->max_slabs = (uint32_t)((max_bytes + HBD_CK_SLAB - 1) / HBD_CK_SLAB);
		c->nslabs = 0;
		c->free_head = HBD_NONE;
		c->slabs = c->max_slabs ? calloc(c->max_slabs, sizeof(*c->slabs)) : NULL;
		if (!c->slabs) {
			hbd_chunks_free(p);
			return c->max_slabs ? -ENOMEM : -EINVAL;
		}
	}
	return 0;
}

void hbd_chunks_free(struct hbd_chunks *p)
{
	for (int k = 0; k < HBD_CK_CLASSES; k++) {
		struct hbd_chunk_pool *c = &p->pool[k];

		if (!c->slabs)
			continue;
		for (uint32_t i = 0; i < c->nslabs; i++) {
			UNPOISON(c->slabs[i], (size_t)c->size << c->shift);
			free(c->slabs[i]);
		}
		free(c->slabs);
		c->slabs = NULL;
	}
}

static int grow(struct hbd_chunks *p, int k)
{
	struct hbd_chunk_pool *c = &p->pool[k];
	uint32_t n = 1u << c->shift, base = c->nslabs << c->shift;
	uint8_t *slab;

	if (c->nslabs == c->max_slabs)
		return -ENOSPC;
	slab = malloc((size_t)n * c->size);
	if (!slab)
		return -ENOMEM;
	c->slabs[c->nslabs++] = slab;
	for (uint32_t i = n; i-- > 0;) {
		((struct hbd_chunk *)(slab + (size_t)i * c->size))->next = c->free_head;
		c->free_head = ((uint32_t)k << HBD_CK_SHIFT) | (base + i);
	}
	POISON(slab, (size_t)n * c->size);
	return 0;
}

uint32_t hbd_chunk_alloc(struct hbd_chunks *p, size_t need)
{
	struct hbd_chunk_pool *c;
	struct hbd_chunk *ck;
	uint32_t idx;
	int k = 0;

	while (k < HBD_CK_CLASSES && class_size[k] - sizeof(struct hbd_chunk) < need)
		k++;
	if (k == HBD_CK_CLASSES)
		return HBD_NONE;
	c = &p->pool[k];
	if (c->free_head == HBD_NONE && grow(p, k))
		return HBD_NONE;
	idx = c->free_head;
	ck = hbd_chunk(p, idx);
	UNPOISON(ck, c->size);
	c->free_head = ck->next;
	ck->next = HBD_NONE;
	ck->len = ck->off = 0;
	p->used++;
	return idx;
}

void hbd_chunk_put(struct hbd_chunks *p, uint32_t idx)
{
	struct hbd_chunk_pool *c = &p->pool[idx >> HBD_CK_SHIFT];
	struct hbd_chunk *ck = hbd_chunk(p, idx);

	ck->next = c->free_head;
	c->free_head = idx;
	p->used--;
	POISON(ck, c->size);
}
