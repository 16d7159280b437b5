// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Fuzz target "reasm": hbd's TCP reassembly must deliver exactly the frames a one-shot decode
 * of the same byte stream finds, however the stream is cut into receives, stop where that
 * decode stops, and give every chunk back.
 *
 * Input: byte 0 = number of cut sizes k (mod 16), byte 1 = frame after which the connection
 * "closes" (0xff: never), byte 2 = payload limit selector, then k cut sizes, then the stream.
 */
#include <errno.h>
#include <string.h>

#include "chunk.h"
#include "proto.h"
#include "reasm.h"
#include "targets.h"

#define MAX_FRAMES 4096

struct ref_frame {
	size_t off; /* where it starts in the stream */
	struct hb_frame f;
};

struct run {
	const uint8_t *stream;
	const struct ref_frame *ref;
	size_t nref, got;
	unsigned stop_after;
	struct hbd_chunks *ck;
	uint32_t *partial;
};

static bool on_frame(void *ctx, const struct hb_frame *f)
{
	struct run *r = ctx;
	const struct ref_frame *want;

	HBF_CHECK(r->got < r->nref, "frame %zu delivered; the one-shot decode found %zu", r->got,
		  r->nref);
	want = &r->ref[r->got];
	HBF_CHECK(f->type == want->f.type && f->seq == want->f.seq && f->len == want->f.len &&
			  f->size == want->f.size,
		  "frame %zu: header differs from the one-shot decode", r->got);
	HBF_CHECK(!memcmp(f->payload, r->stream + want->off + sizeof(struct hb_hdr), f->len),
		  "frame %zu: payload differs from the stream", r->got);
	r->got++;
	if (r->got == r->stop_after) {
		/* what conn_close does: the partial chunk goes with the connection */
		hbd_reasm_drop(r->ck, r->partial);
		return false;
	}
	return true;
}

int hbf_reasm(const uint8_t *data, size_t n)
{
	static struct ref_frame ref[MAX_FRAMES];
	struct hbd_chunks ck;
	uint32_t partial = HBD_NONE;
	uint8_t cuts[16];
	size_t k, off = 0, pos = 0, nref = 0;
	uint16_t max_payload;
	int ref_rc, rc = 0;
	enum hb_decode bad = HB_DECODE_OK;
	struct run r;

	if (n < 3)
		return 0;
	k = data[0] % 16;
	r.stop_after = data[1] == 0xff ? 0 : data[1];
	max_payload = data[2] >= 0x80 ? HB_MAX_PAYLOAD : (uint16_t)(data[2] * 8);
	data += 3, n -= 3;
	if (n < k)
		return 0;
	memcpy(cuts, data, k);
	data += k, n -= k;

	/* the reference: one decode pass over the whole stream, with the same payload limit */
	for (;;) {
		struct hb_frame f;

		ref_rc = hb_decode_stream(data + off, n - off, &f);
		if (ref_rc >= 0 && n - off >= sizeof(struct hb_hdr) && f.len > max_payload &&
		    hb_payload_capped(f.type))
			ref_rc = HB_DECODE_TOO_LARGE;
		if (ref_rc != HB_DECODE_OK || nref == MAX_FRAMES)
			break;
		ref[nref].off = off;
		ref[nref++].f = f;
		off += f.size;
	}
	if (nref == MAX_FRAMES)
		return 0; /* not interesting, and the reference stopped early */

	HBF_CHECK(!hbd_chunks_init(&ck, 1 << 20), "chunk pool");
	r = (struct run){ data, ref, nref, 0, r.stop_after, &ck, &partial };
	for (size_t i = 0; pos < n; i++) {
		size_t piece = k ? (size_t)cuts[i % k] + 1 : n;

		if (piece > n - pos)
			piece = n - pos;
		rc = hbd_reasm_feed(&ck, &partial, max_payload, data + pos, piece, on_frame, &r,
				    &bad);
		pos += piece;
		if (rc || (r.stop_after && r.got == r.stop_after))
			break;
	}
	if (r.stop_after && r.got == r.stop_after) {
		HBF_CHECK(rc == 0 && partial == HBD_NONE, "stopped feed kept a chunk");
	} else if (rc) {
		HBF_CHECK(rc == -EBADMSG && (int)bad == ref_rc,
			  "reassembly failed with %d (%s), the one-shot decode with %s", rc,
			  hb_decode_str(bad), hb_decode_str(ref_rc));
		HBF_CHECK(r.got == nref, "error after %zu frames, the one-shot decode after %zu",
			  r.got, nref);
	} else {
		HBF_CHECK(ref_rc == HB_DECODE_MORE,
			  "reassembly took every byte, the one-shot decode "
			  "stopped with %s",
			  hb_decode_str(ref_rc));
		HBF_CHECK(r.got == nref, "%zu frames, the one-shot decode %zu", r.got, nref);
		HBF_CHECK((partial != HBD_NONE) == (off < n),
			  "partial frame kept: %d, bytes left %zu", partial != HBD_NONE, n - off);
	}
	hbd_reasm_drop(&ck, &partial);
	HBF_CHECK(ck.used == 0, "%u chunks not given back", ck.used);
	hbd_chunks_free(&ck);
	return 0;
}
