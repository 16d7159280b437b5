// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Frame codec: bounds-checked decode and encode of wire protocol v1 frames. */
#include "proto.h"
#include "sesskey.h"

#include <arpa/inet.h>
#include <endian.h>
#include <string.h>

uint64_t hb_get_be64(const void *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return be64toh(v);
}

void hb_put_be64(void *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
}

/* Checks the fixed header; on success fills version, type, seq and len. Version 2 only where
 * v2 is allowed (UDP). */
static int decode_hdr(const uint8_t *b, struct hb_frame *f, int v2)
{
	struct hb_hdr h;

	memcpy(&h, b, sizeof(h));
	if (ntohs(h.magic) != HB_MAGIC)
		return HB_DECODE_BAD_MAGIC;
	if (h.version != HB_VERSION && !(v2 && h.version == HB_VERSION_2))
		return HB_DECODE_BAD_VERSION;
	f->version = h.version;
	if (h.type == 0 || h.type > HB_TYPE_MAX)
		return HB_DECODE_BAD_TYPE;
	f->type = h.type;
	f->seq = ntohs(h.seq);
	f->len = ntohs(h.len);
	if (f->len > HB_MAX_PAYLOAD)
		return HB_DECODE_TOO_LARGE;
	if (!hb_payload_len_ok(f->type, f->len))
		return HB_DECODE_BAD_LEN;
	return HB_DECODE_OK;
}

int hb_decode_stream(const void *buf, size_t n, struct hb_frame *f)
{
	const uint8_t *b = buf;
	int rc;

	if (n < sizeof(struct hb_hdr))
		return HB_DECODE_MORE;
	rc = decode_hdr(b, f, 0);
	if (rc)
		return rc;
	f->size = sizeof(struct hb_hdr) + f->len;
	if (n < f->size)
		return HB_DECODE_MORE;
	f->token = 0;
	f->raw = b;
	f->payload = b + sizeof(struct hb_hdr);
	return HB_DECODE_OK;
}

int hb_decode_dgram(const void *buf, size_t n, struct hb_frame *f)
{
	const uint8_t *b = buf;
	int rc;

	if (n < sizeof(struct hb_hdr) + HB_TOKEN_LEN) {
		/* judge what is there first: garbage should say so, not "short" */
		if (n >= sizeof(struct hb_hdr) && (rc = decode_hdr(b, f, 1)))
			return rc;
		return HB_DECODE_BAD_LEN;
	}
	rc = decode_hdr(b, f, 1);
	if (rc)
		return rc;
	f->size = hb_frame_size(HB_UDP, f->len);
	if (n != f->size + (f->version == HB_VERSION_2 ? HB_TAG_LEN : 0))
		return HB_DECODE_BAD_LEN;
	f->raw = b;
	f->token = hb_get_be64(b + sizeof(struct hb_hdr));
	f->payload = b + sizeof(struct hb_hdr) + HB_TOKEN_LEN;
	return HB_DECODE_OK;
}

size_t hb_encode(void *buf, size_t cap, enum hb_transport t, uint8_t type, uint16_t seq,
		 uint64_t token, const void *payload, uint16_t len)
{
	size_t size = hb_frame_size(t, len);
	struct hb_hdr h = {
		.magic = htons(HB_MAGIC),
		.version = HB_VERSION,
		.type = type,
		.len = htons(len),
		.seq = htons(seq),
	};
	uint8_t *b = buf;

	if (size > cap || !hb_payload_len_ok(type, len))
		return 0;
	memcpy(b, &h, sizeof(h));
	b += sizeof(h);
	if (t == HB_UDP) {
		hb_put_be64(b, token);
		b += HB_TOKEN_LEN;
	}
	if (len)
		memmove(b, payload, len);
	return size;
}

size_t hb_encode_v2(void *buf, size_t cap, uint8_t type, uint16_t seq, uint64_t token,
		    const void *payload, uint16_t len, const uint8_t *key)
{
	size_t n = cap >= HB_TAG_LEN ? hb_encode(buf, cap - HB_TAG_LEN, HB_UDP, type, seq, token,
						 payload, len)
				     : 0;

	if (!n)
		return 0;
	((uint8_t *)buf)[2] = HB_VERSION_2;
	hb_frame_seal(key, buf, n);
	return n + HB_TAG_LEN;
}

const char *hb_decode_str(int rc)
{
	switch (rc) {
	case HB_DECODE_OK:
		return "ok";
	case HB_DECODE_MORE:
		return "partial frame";
	case HB_DECODE_BAD_MAGIC:
		return "bad magic";
	case HB_DECODE_BAD_VERSION:
		return "unsupported version";
	case HB_DECODE_BAD_TYPE:
		return "unknown frame type";
	case HB_DECODE_TOO_LARGE:
		return "payload length above limit";
	case HB_DECODE_BAD_LEN:
		return "length invalid for frame type";
	default:
		return "unknown decode result";
	}
}

const char *hb_type_str(uint8_t type)
{
	static const char *const names[] = {
		[HB_HELLO] = "HELLO",
		[HB_WELCOME] = "WELCOME",
		[HB_PING] = "PING",
		[HB_PONG] = "PONG",
		[HB_ECHO] = "ECHO",
		[HB_DATA] = "DATA",
		[HB_ACK] = "ACK",
		[HB_BYE] = "BYE",
		[HB_ERROR] = "ERROR",
		[HB_DOWN] = "DOWN",
		[HB_PATH_CHALLENGE] = "PATH_CHALLENGE",
		[HB_PATH_RESPONSE] = "PATH_RESPONSE",
		[HB_BEAT] = "BEAT",
	};

	if (type > HB_TYPE_MAX || !names[type])
		return "?";
	return names[type];
}
