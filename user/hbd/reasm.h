/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* TCP frame reassembly: a connection's received bytes in, complete frames out. */
#ifndef HBD_REASM_H
#define HBD_REASM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chunk.h"
#include "proto.h"

/* Called for each complete frame. f->payload points into the receive buffer or into the
 * partial-frame chunk and is valid only during the call. The callback may end the connection
 * and free *partial itself (setting it to HBD_NONE); it returns false when the connection no
 * longer takes input, which stops the feed.
 */
typedef bool (*hbd_reasm_fn)(void *ctx, const struct hb_frame *f);

/* Feeds n bytes to the decoder. A frame split across calls is gathered in a chunk that exists
 * only while it is incomplete (*partial, HBD_NONE when there is none); complete frames are
 * handed to fn straight from p. A header is judged as soon as its 8 bytes are there, so an
 * oversized length is refused without waiting for its payload; payloads above max_payload
 * (<= HB_MAX_PAYLOAD) are refused as HB_DECODE_TOO_LARGE.
 *
 * Returns 0 when every byte was consumed or fn stopped the feed, -EBADMSG for a malformed frame
 * (*bad says what the decoder found: a negative enum hb_decode), or -ENOMEM (no chunk for an
 * incomplete frame). On an error *partial is left as it was for the caller to free with the
 * connection.
 */
int hbd_reasm_feed(struct hbd_chunks *ck, uint32_t *partial, uint16_t max_payload, const uint8_t *p,
		   size_t n, hbd_reasm_fn fn, void *ctx, enum hb_decode *bad);

/* Frees an incomplete frame, if any. */
void hbd_reasm_drop(struct hbd_chunks *ck, uint32_t *partial);

#endif
