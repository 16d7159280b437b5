// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A TCP connection's output queue over chunks: append a frame, take what was sent, drop. */
#include "outq.h"

#include <errno.h>

#include "proto.h"

int hbd_outq_push(struct hbd_chunks *ck, uint32_t *head, size_t cap, uint8_t type, uint16_t seq,
		  const void *payload, uint16_t len, size_t *queued)
{
	size_t need = hb_frame_size(HB_TCP, len), unsent = 0;
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
	if (unsent + need > cap)
		return -ENOBUFS;
	if (!k || hbd_chunk_cap(ck, tail) - k->len < need) {
		idx = hbd_chunk_alloc(ck, need);
		if (idx == HBD_NONE)
			return -ENOMEM;
		if (k)
			k->next = idx;
		else
			*head = idx;
		k = hbd_chunk(ck, idx);
		tail = idx;
	}
	k->len += (uint16_t)hb_encode(k->data + k->len, hbd_chunk_cap(ck, tail) - k->len, HB_TCP,
				      type, seq, 0, payload, len);
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
