// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP frame reassembly over the worker's chunk pool (fuzzed by fuzz/reasm.c against a one-shot
 * decode of the same stream).
 */
#include "reasm.h"

#include <errno.h>
#include <string.h>

/* hb_decode_stream plus the daemon's own payload limit, judged from the header alone. */
static int judge(const uint8_t *b, size_t n, uint16_t max_payload, struct hb_frame *f)
{
	int rc = hb_decode_stream(b, n, f);

	if (rc >= 0 && n >= sizeof(struct hb_hdr) && f->len > max_payload &&
	    hb_payload_capped(f->type))
		return HB_DECODE_TOO_LARGE;
	return rc;
}

void hbd_reasm_drop(struct hbd_chunks *ck, uint32_t *partial)
{
	if (*partial != HBD_NONE) {
		hbd_chunk_put(ck, *partial);
		*partial = HBD_NONE;
	}
}

/* Completes the frame held in *partial from p/n. Returns 1 with the frame in f, 0 if the bytes
 * ran out first, or an error as hbd_reasm_feed() does.
 */
static int complete(struct hbd_chunks *ck, uint32_t *partial, uint16_t max_payload,
		    const uint8_t **p, size_t *n, struct hb_frame *f, enum hb_decode *bad)
{
	struct hbd_chunk *k = hbd_chunk(ck, *partial);

	/* the header first; once it is judged, the frame's size is known. At most three rounds:
	 * header bytes, payload bytes, the complete frame.
	 */
	for (;;) {
		size_t want = sizeof(struct hb_hdr), take;
		int rc;

		if (k->len >= want) {
			rc = judge(k->data, k->len, max_payload, f);
			if (rc < 0) {
				*bad = (enum hb_decode)rc;
				return -EBADMSG;
			}
			if (rc == HB_DECODE_OK)
				return 1;
			want = f->size;
		}
		if (!*n)
			return 0;
		if (want > hbd_chunk_cap(ck, *partial)) {
			/* the header said how big the frame is: move to a chunk that fits */
			uint32_t idx = hbd_chunk_alloc(ck, want);

			if (idx == HBD_NONE)
				return -ENOMEM;
			memcpy(hbd_chunk(ck, idx)->data, k->data, k->len);
			hbd_chunk(ck, idx)->len = k->len;
			hbd_chunk_put(ck, *partial);
			*partial = idx;
			k = hbd_chunk(ck, idx);
		}
		take = want - k->len < *n ? want - k->len : *n;
		memcpy(k->data + k->len, *p, take);
		k->len += (uint16_t)take;
		*p += take;
		*n -= take;
	}
}

int hbd_reasm_feed(struct hbd_chunks *ck, uint32_t *partial, uint16_t max_payload, const uint8_t *p,
		   size_t n, hbd_reasm_fn fn, void *ctx, enum hb_decode *bad)
{
	struct hb_frame f;
	int rc;

	if (*partial != HBD_NONE) {
		rc = complete(ck, partial, max_payload, &p, &n, &f, bad);
		if (rc <= 0)
			return rc;
		if (!fn(ctx, &f))
			return 0;
		/* the frame is fully handled (replies encoded, sink line formatted): drop it */
		hbd_reasm_drop(ck, partial);
	}
	while (n) {
		uint32_t idx;

		rc = judge(p, n, max_payload, &f);
		if (rc == HB_DECODE_OK) {
			if (!fn(ctx, &f))
				return 0;
			p += f.size;
			n -= f.size;
			continue;
		}
		if (rc != HB_DECODE_MORE) {
			*bad = (enum hb_decode)rc;
			return -EBADMSG;
		}
		/* n < one frame; the chunk grows once the header says by how much */
		idx = hbd_chunk_alloc(ck, n >= sizeof(struct hb_hdr) ? f.size : n);
		if (idx == HBD_NONE)
			return -ENOMEM;
		memcpy(hbd_chunk(ck, idx)->data, p, n);
		hbd_chunk(ck, idx)->len = (uint16_t)n;
		*partial = idx;
		return 0;
	}
	return 0;
}
