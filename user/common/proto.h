/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Frame codec for wire protocol v1 (layouts in hbeat_abi.h, prose in docs/PROTOCOL.md). */
#ifndef HB_PROTO_H
#define HB_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "hbeat_abi.h"

enum hb_transport { HB_TCP = 0, HB_UDP = 1 };

/* Outcome of decoding the front of a buffer. Negative values are malformed input. */
enum hb_decode {
	HB_DECODE_OK = 0,
	HB_DECODE_MORE = 1, /* TCP: a partial frame; read more bytes and call again */
	HB_DECODE_BAD_MAGIC = -1,
	HB_DECODE_BAD_VERSION = -2,
	HB_DECODE_BAD_TYPE = -3,
	HB_DECODE_TOO_LARGE = -4, /* declared length above HB_MAX_PAYLOAD */
	HB_DECODE_BAD_LEN = -5, /* length not valid for the type, or datagram size mismatch */
};

/* A decoded frame. payload points into the caller's buffer; nothing is copied. */
struct hb_frame {
	uint8_t version; /* HB_VERSION, or HB_VERSION_2 (UDP only: a tag follows the payload) */
	uint8_t type;
	uint16_t seq;
	uint16_t len; /* payload bytes */
	uint64_t token; /* UDP only (host order); 0 on TCP */
	const uint8_t *payload;
	const uint8_t *raw; /* UDP: the datagram's first byte (what a version 2 tag covers) */
	size_t size; /* bytes the frame occupies in the buffer (a version 2 tag not counted) */
};

/* Decodes one frame from the start of a TCP byte stream. Returns HB_DECODE_MORE while the
 * buffer holds only part of a frame; a header is judged as soon as its 8 bytes are there, so
 * an oversized length is refused without waiting for its payload.
 */
int hb_decode_stream(const void *buf, size_t n, struct hb_frame *f);

/* Decodes a UDP datagram, which must hold exactly one frame (header, token, payload, and in
 * version 2 the tag: f->size is the frame's size without it, the tag is at buf + f->size). The
 * tag itself is not checked here: that needs the session key (sesskey.h). */
int hb_decode_dgram(const void *buf, size_t n, struct hb_frame *f);

/* Human-readable name for an enum hb_decode value or an enum hb_type. */
const char *hb_decode_str(int rc);
const char *hb_type_str(uint8_t type);

/* Encodes a frame into buf. Returns its size, or 0 if it does not fit in cap or the payload
 * length is not valid for the type.
 */
size_t hb_encode(void *buf, size_t cap, enum hb_transport t, uint8_t type, uint16_t seq,
		 uint64_t token, const void *payload, uint16_t len);

/* A version 2 UDP frame: header, token, payload and the tag under key (16 bytes). Returns its
 * size (hb_frame_size + HB_TAG_LEN) or 0 as hb_encode does. */
size_t hb_encode_v2(void *buf, size_t cap, uint8_t type, uint16_t seq, uint64_t token,
		    const void *payload, uint16_t len, const uint8_t *key);

/* Size of a frame of this transport and payload length. */
static inline size_t hb_frame_size(enum hb_transport t, uint16_t len)
{
	return sizeof(struct hb_hdr) + (t == HB_UDP ? HB_TOKEN_LEN : 0) + len;
}

/* Big-endian 64-bit helpers (glibc has htobe64; named for the wire). */
uint64_t hb_get_be64(const void *p);
void hb_put_be64(void *p, uint64_t v);

#endif
