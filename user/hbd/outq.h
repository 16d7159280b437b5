/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A TCP connection's output queue: encoded frames in a list of chunks (chunk.h), sent in order.
 *
 * The queue only stores and reports: what to do with a connection whose queue is over its cap
 * or out of chunks (close it) is the caller's decision. Frames never straddle chunks, and
 * appending to the chunk a send is reading from is safe: the kernel only reads the range it was
 * given.
 */
#ifndef HBD_OUTQ_H
#define HBD_OUTQ_H

#include <stddef.h>
#include <stdint.h>

#include "chunk.h"

/* Appends one frame to the queue at *head (HBD_NONE: empty). Returns 0; -ENOBUFS if the
 * unsent bytes would then exceed cap (*queued says how many are unsent; nothing was queued);
 * -ENOMEM if no chunk was left.
 */
int hbd_outq_push(struct hbd_chunks *ck, uint32_t *head, size_t cap, uint8_t type, uint16_t seq,
		  const void *payload, uint16_t len, size_t *queued);

/* The same for bytes already encoded (an MQTT packet), at most a large chunk's worth. */
int hbd_outq_push_raw(struct hbd_chunks *ck, uint32_t *head, size_t cap, const void *bytes,
		      size_t n, size_t *queued);

/* The unsent bytes of the head chunk (the queue is not empty): what the next send takes. */
static inline const uint8_t *hbd_outq_peek(const struct hbd_chunks *ck, uint32_t head,
					   uint32_t *len)
{
	struct hbd_chunk *k = hbd_chunk(ck, head);

	*len = (uint32_t)(k->len - k->off);
	return k->data + k->off;
}

/* n bytes of the head chunk went out (n <= what hbd_outq_peek() gave); a chunk all sent is
 * freed and the next one becomes the head.
 */
void hbd_outq_sent(struct hbd_chunks *ck, uint32_t *head, uint32_t n);

/* Frees whatever is queued. */
void hbd_outq_drop(struct hbd_chunks *ck, uint32_t *head);

#endif
