// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A TCP connection's output queue over chunks: append a frame, take what was sent, drop. */
#include "outq.h"

#include <errno.h>
#include <string.h>

#include "proto.h"

/* Room for need more bytes at the queue's tail: the chunk to write them to, or NULL with *rc. */
static struct hbd_chunk *tail_room(struct hbd_chunks *ck, uint32_t *head, size_t cap, size_t need,
				   size_t *queued, uint32_t *tail_idx, int *rc)
{
	size_t unsent = 0;
	struct hbd_chunk *k = NULL;
	uint32_t tail = *head, idx;

	if (tail != HBD_NONE) {
		for (;;) {
			k = hbd_chunk(ck, tail);
			unsent += (size_t)(k->len - k->off);
			if (k->next == HBD_NONE)
				break;
			tail = k->next;
		}
	}
	*queued = unsent;
	*rc = -ENOBUFS;
	if (unsent + need > cap)
		return NULL;
	if (!k || hbd_chunk_cap(ck, tail) - k->len < need) {
		*rc = -ENOMEM;
		idx = hbd_chunk_alloc(ck, need);
		if (idx == HBD_NONE)
			return NULL;
		if (k)
			k->next = idx;
		else
			*head = idx;
		k = hbd_chunk(ck, idx);
		tail = idx;
	}
	*tail_idx = tail;
	return k;
}

int hbd_outq_push(struct hbd_chunks *ck, uint32_t *head, size_t cap, uint8_t type, uint16_t seq,
		  const void *payload, uint16_t len, size_t *queued)
{
	uint32_t tail;
	int rc;
	struct hbd_chunk *k =
		tail_room(ck, head, cap, hb_frame_size(HB_TCP, len), queued, &tail, &rc);

	if (!k)
		return rc;
	k->len += (uint16_t)hb_encode(k->data + k->len, hbd_chunk_cap(ck, tail) - k->len, HB_TCP,
				      type, seq, 0, payload, len);
	return 0;
}

int hbd_outq_push_raw(struct hbd_chunks *ck, uint32_t *head, size_t cap, const void *bytes,
		      size_t n, size_t *queued)
{
	uint32_t tail;
	int rc;
	struct hbd_chunk *k = tail_room(ck, head, cap, n, queued, &tail, &rc);

	if (!k)
		return rc;
	memcpy(k->data + k->len, bytes, n);
	k->len += (uint16_t)n;
	return 0;
}

void hbd_outq_sent(struct hbd_chunks *ck, uint32_t *head, uint32_t n)
{
	struct hbd_chunk *k = hbd_chunk(ck, *head);

	k->off += (uint16_t)n;
	if (k->off == k->len) {
		uint32_t next = k->next;

		hbd_chunk_put(ck, *head);
		*head = next;
	}
}

void hbd_outq_drop(struct hbd_chunks *ck, uint32_t *head)
{
	while (*head != HBD_NONE) {
		uint32_t next = hbd_chunk(ck, *head)->next;

		hbd_chunk_put(ck, *head);
		*head = next;
	}
}
