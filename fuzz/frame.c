// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Fuzz target "frame": the userspace codec against a reference written again from
 * docs/PROTOCOL.md over raw bytes, plus re-encoding and the device state machine.
 */
#include <string.h>

#include "hbclient.h"
#include "proto.h"
#include "targets.h"

/* Payload length rule per type, from the protocol document (not from hb_payload_len_ok). */
static int ref_len_ok(uint8_t type, uint16_t len)
{
	static const int fixed[] = { -1, 56, 16, 8, 8, -2, -3, 0, 2, 2, -3 /* DOWN */, 8, 8, 0 };

	if (type == 0 || type > 13)
		return 0;
	if (type == 1) /* HELLO: 56 bytes, or 64 bound to a server */
		return len == 56 || len == 64;
	if (type == 2) /* WELCOME: 16 bytes, 20 with server flags, 28 in version 2 */
		return len == 16 || len == 20 || len == 28;
	if (fixed[type] >= 0)
		return len == fixed[type];
	if (fixed[type] == -2) /* ECHO */
		return len <= 1024;
	return len >= 1 && len <= 1024; /* DATA, DOWN */
}

/* v2: version 2 is allowed (UDP) */
static int ref_hdr(const uint8_t *b, uint16_t *len, int v2)
{
	if ((b[0] << 8 | b[1]) != 0x4842)
		return HB_DECODE_BAD_MAGIC;
	if (b[2] != 1 && !(v2 && b[2] == 2))
		return HB_DECODE_BAD_VERSION;
	if (b[3] == 0 || b[3] > 13) /* 13: BEAT, the last type */
		return HB_DECODE_BAD_TYPE;
	*len = (uint16_t)(b[4] << 8 | b[5]);
	if (*len > 1024)
		return HB_DECODE_TOO_LARGE;
	return ref_len_ok(b[3], *len) ? HB_DECODE_OK : HB_DECODE_BAD_LEN;
}

static int ref_stream(const uint8_t *b, size_t n, size_t *size)
{
	uint16_t len = 0;
	int rc;

	if (n < 8)
		return HB_DECODE_MORE;
	rc = ref_hdr(b, &len, 0);
	if (rc)
		return rc;
	*size = 8u + len;
	return n < *size ? HB_DECODE_MORE : HB_DECODE_OK;
}

static int ref_dgram(const uint8_t *b, size_t n, size_t *size)
{
	uint16_t len = 0;
	int rc;

	if (n < 8)
		return HB_DECODE_BAD_LEN;
	rc = ref_hdr(b, &len, 1);
	if (rc)
		return rc;
	if (n < 16)
		return HB_DECODE_BAD_LEN;
	*size = 16u + len; /* a version 2 tag (8 bytes) follows, not counted */
	return n == *size + (b[2] == 2 ? 8u : 0u) ? HB_DECODE_OK : HB_DECODE_BAD_LEN;
}

/* A decoded frame must be exactly what the bytes say, and encode back to the same bytes. */
static void check_frame(const uint8_t *b, const struct hb_frame *f, enum hb_transport t,
			size_t size)
{
	uint8_t out[HB_MAX_FRAME];
	size_t hdr = t == HB_UDP ? 16 : 8;

	HBF_CHECK(f->size == size, "size %zu, reference %zu", f->size, size);
	HBF_CHECK(f->type == b[3] && f->seq == (b[6] << 8 | b[7]) && f->len == size - hdr,
		  "type/seq/len differ from the bytes");
	HBF_CHECK(f->payload == b + hdr, "payload does not point into the buffer after the header");
	HBF_CHECK(t == HB_TCP ? f->token == 0 : f->token == hb_get_be64(b + 8), "token");
	HBF_CHECK(hb_encode(out, sizeof(out), t, f->type, f->seq, f->token, f->payload, f->len) ==
			  size,
		  "re-encoding a decoded frame");
	out[2] = f->version; /* a version 2 frame is the same bytes with its version (and tag) */
	HBF_CHECK(!memcmp(out, b, size), "re-encoding a decoded frame gives other bytes");
}

/* A client mid-session: PINGs, a DATA and an ECHO outstanding. */
static void client_init(struct hbc *c, enum hb_transport t)
{
	static const uint8_t secret[16];
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	struct hb_welcome w = { 0 };
	struct hbc_ev ev;

	hbc_init(c, 7, t);
	hbc_hello(c, buf, sizeof(buf), secret, sizeof(secret), 1000);
	hb_put_be64(&w.token, 0x0123456789abcdefull);
	hb_encode(buf, sizeof(buf), t, HB_WELCOME, 0, 0x0123456789abcdefull, &w, sizeof(w));
	if (t == HB_UDP)
		hb_decode_dgram(buf, hb_frame_size(t, sizeof(w)), &f);
	else
		hb_decode_stream(buf, hb_frame_size(t, sizeof(w)), &f);
	hbc_input(c, &f, 0, &ev);
	for (int i = 0; i < 3; i++)
		hbc_ping(c, buf, sizeof(buf), 100, NULL);
	hbc_data(c, buf, sizeof(buf), "x", 1, NULL);
	hbc_echo(c, buf, sizeof(buf), "y", 1, NULL);
}

static void client_feed(struct hbc *c, const struct hb_frame *f)
{
	struct hbc_ev ev;
	enum hbc_event e = hbc_input(c, f, 1000, &ev);

	HBF_CHECK(hbc_pings_outstanding(c) <= HBC_PING_WINDOW &&
			  hbc_data_outstanding(c) <= HBC_REQ_WINDOW &&
			  hbc_echo_outstanding(c) <= HBC_REQ_WINDOW,
		  "outstanding counts beyond the windows");
	if (e == HBC_EV_ECHO)
		HBF_CHECK(ev.payload == f->payload && ev.len == f->len, "ECHO event payload");
	if (e == HBC_EV_PONG)
		HBF_CHECK(ev.rtt_ns <= 1000, "PONG with a timestamp from the future accepted");
}

int hbf_frame(const uint8_t *data, size_t n)
{
	struct hbc tcp, udp;
	struct hb_frame f;
	size_t off = 0, size = 0;
	int rc, ref;

	/* the whole input as one datagram */
	rc = hb_decode_dgram(data, n, &f);
	ref = ref_dgram(data, n, &size);
	HBF_CHECK(rc == ref, "datagram of %zu bytes: %s, reference %s", n, hb_decode_str(rc),
		  hb_decode_str(ref));
	client_init(&udp, HB_UDP);
	if (rc == HB_DECODE_OK) {
		check_frame(data, &f, HB_UDP, size);
		client_feed(&udp, &f);
	}

	/* the whole input as a TCP stream, frame by frame */
	client_init(&tcp, HB_TCP);
	for (;;) {
		rc = hb_decode_stream(data + off, n - off, &f);
		ref = ref_stream(data + off, n - off, &size);
		HBF_CHECK(rc == ref, "stream at %zu: %s, reference %s", off, hb_decode_str(rc),
			  hb_decode_str(ref));
		if (rc != HB_DECODE_OK)
			break;
		check_frame(data + off, &f, HB_TCP, size);
		client_feed(&tcp, &f);
		off += f.size;
	}
	return 0;
}
