// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Sans-IO device protocol core: frame builders, reply matching and reconnect backoff. */
#include "hbclient.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include <openssl/crypto.h>

#include "auth.h"
#include "sesskey.h"

_Static_assert(sizeof(struct hbc) == 96, "keep the per-device state small: 500k of them");

/* Frames of a version 2 device before there is a session key (its HELLO, the ERROR refusing
 * it) are tagged under this all-zero key: framing stays uniform, and the HELLO's own MAC is
 * what proves anything. */
static const uint8_t no_key[HB_SESSION_KEY_LEN];

void hbc_init(struct hbc *c, uint64_t device_id, enum hb_transport t)
{
	memset(c, 0, sizeof(*c));
	c->device_id = device_id;
	c->transport = (uint8_t)t;
	c->version = HB_VERSION;
}

int hbc_use_v2(struct hbc *c)
{
	if (c->transport != HB_UDP)
		return -EINVAL;
	c->version = HB_VERSION_2;
	return 0;
}

void hbc_reset(struct hbc *c)
{
	c->token = 0;
	c->ping_out = 0;
	c->data_out = 0;
	c->echo_out = 0;
	c->state = HBC_IDLE;
	c->last_ts = 0;
	OPENSSL_cleanse(c->key, sizeof(c->key));
}

static const uint8_t *frame_key(const struct hbc *c)
{
	return c->state == HBC_AUTHED ? c->key : no_key;
}

static size_t encode(const struct hbc *c, void *buf, size_t cap, uint8_t type, uint16_t seq,
		     const void *payload, uint16_t len)
{
	if (c->version == HB_VERSION_2)
		return hb_encode_v2(buf, cap, type, seq, c->token, payload, len, frame_key(c));
	return hb_encode(buf, cap, (enum hb_transport)c->transport, type, seq, c->token, payload,
			 len);
}

/* Encodes a frame with the next seq and slides the windows by one: every frame sent takes a
 * seq, so window bit d always means "sent d frames before the newest".
 */
static int emit(struct hbc *c, void *buf, size_t cap, uint8_t type, const void *payload,
		uint16_t len, uint16_t *seq)
{
	size_t n = encode(c, buf, cap, type, c->seq, payload, len);

	if (!n)
		return hb_payload_len_ok(type, len) ? -ENOSPC : -EINVAL;
	if (seq)
		*seq = c->seq;
	c->seq++;
	c->ping_out <<= 1;
	c->data_out <<= 1;
	c->echo_out <<= 1;
	return (int)n;
}

int hbc_hello(struct hbc *c, void *buf, size_t cap, const uint8_t *secret, size_t slen,
	      uint64_t unix_ms)
{
	return hbc_hello_to(c, buf, cap, secret, slen, unix_ms, 0);
}

int hbc_hello_to(struct hbc *c, void *buf, size_t cap, const uint8_t *secret, size_t slen,
		 uint64_t unix_ms, uint64_t server_id)
{
	struct hb_hello_bound b;
	struct hb_hello h;
	int n;

	if (cap < hb_frame_size((enum hb_transport)c->transport, sizeof(b)) + HB_TAG_LEN)
		return -ENOSPC;
	hbc_reset(c);
	if (server_id || c->version == HB_VERSION_2) {
		if (hb_hello_bound_sign(&b, c->device_id, unix_ms, server_id, secret, slen))
			return -EIO;
		/* the device's half of the session key, while the secret is at hand */
		if (c->version == HB_VERSION_2 && hb_session_prk(secret, slen, &b, c->key))
			return -EIO;
		n = emit(c, buf, cap, HB_HELLO, &b, sizeof(b), NULL);
	} else {
		if (hb_hello_sign(&h, c->device_id, unix_ms, secret, slen))
			return -EIO;
		n = emit(c, buf, cap, HB_HELLO, &h, sizeof(h), NULL);
	}
	if (n > 0)
		c->state = HBC_HELLO_SENT;
	return n;
}

int hbc_ping(struct hbc *c, void *buf, size_t cap, uint64_t ts, uint16_t *seq)
{
	struct hb_ping p;
	int n;

	if (c->state != HBC_AUTHED)
		return -ENOTCONN;
	/* version 2: the server answers only a PING newer than the last (its replay window) */
	if (c->version == HB_VERSION_2) {
		if (ts <= c->last_ts)
			ts = c->last_ts + 1;
		c->last_ts = ts;
	}
	hb_put_be64(&p.ts, ts);
	n = emit(c, buf, cap, HB_PING, &p, sizeof(p), seq);
	if (n > 0)
		c->ping_out |= 1;
	return n;
}

int hbc_beat(struct hbc *c, void *buf, size_t cap, uint16_t *seq)
{
	if (c->state != HBC_AUTHED)
		return -ENOTCONN;
	if (c->transport != HB_TCP)
		return -EPROTONOSUPPORT; /* nothing would acknowledge it */
	return emit(c, buf, cap, HB_BEAT, NULL, 0, seq);
}

int hbc_data(struct hbc *c, void *buf, size_t cap, const void *payload, uint16_t len, uint16_t *seq)
{
	int n;

	if (c->state != HBC_AUTHED)
		return -ENOTCONN;
	n = emit(c, buf, cap, HB_DATA, payload, len, seq);
	if (n > 0)
		c->data_out |= 1;
	return n;
}

int hbc_echo(struct hbc *c, void *buf, size_t cap, const void *payload, uint16_t len, uint16_t *seq)
{
	int n;

	if (c->state != HBC_AUTHED)
		return -ENOTCONN;
	n = emit(c, buf, cap, HB_ECHO, payload, len, seq);
	if (n > 0)
		c->echo_out |= 1;
	return n;
}

int hbc_ack(struct hbc *c, void *buf, size_t cap, uint16_t seq)
{
	size_t n;

	if (c->state != HBC_AUTHED)
		return -ENOTCONN;
	n = encode(c, buf, cap, HB_ACK, seq, NULL, 0);
	return n ? (int)n : -ENOSPC;
}

int hbc_path_response(struct hbc *c, void *buf, size_t cap, const uint8_t data[8])
{
	size_t n;

	if (c->state != HBC_AUTHED || c->version != HB_VERSION_2)
		return -ENOTCONN;
	/* the challenge's seq, like an ACK: the device's own sequence does not move */
	n = encode(c, buf, cap, HB_PATH_RESPONSE, 0, data, sizeof(struct hb_path));
	return n ? (int)n : -ENOSPC;
}

int hbc_bye(struct hbc *c, void *buf, size_t cap, uint16_t reason)
{
	struct hb_bye b = { .reason = htons(reason) };
	int n;

	if (c->state != HBC_AUTHED && c->state != HBC_HELLO_SENT)
		return -ENOTCONN;
	n = emit(c, buf, cap, HB_BYE, &b, sizeof(b), NULL);
	if (n > 0)
		c->state = HBC_CLOSED;
	return n;
}

int hbc_decode(const struct hbc *c, const void *buf, size_t n, struct hb_frame *f)
{
	if (c->transport == HB_UDP)
		return hb_decode_dgram(buf, n, f);
	return hb_decode_stream(buf, n, f);
}

/* Clears and reports the window bit for a reply with this seq, if it is outstanding. */
static int take(uint64_t *win, unsigned width, uint16_t newest, uint16_t seq)
{
	uint16_t d = (uint16_t)(newest - seq);

	if (d >= width || !(*win & (1ULL << d)))
		return 0;
	*win &= ~(1ULL << d);
	return 1;
}

static int take32(uint32_t *win, uint16_t newest, uint16_t seq)
{
	uint64_t w = *win;
	int hit = take(&w, HBC_REQ_WINDOW, newest, seq);

	*win = (uint32_t)w;
	return hit;
}

static enum hbc_event on_welcome(struct hbc *c, const struct hb_frame *f)
{
	struct hb_welcome w;
	uint32_t flags = 0;

	if (c->state != HBC_HELLO_SENT)
		return HBC_EV_PROTO;
	memcpy(&w, f->payload, sizeof(w));
	if (c->version == HB_VERSION_2) {
		uint8_t key[HB_SESSION_KEY_LEN];
		struct hb_welcome2 w2;

		/* only the 28-byte form brings the server's nonce; its tag proves the server
		 * derived the same key, i.e. holds our secret */
		if (f->version != HB_VERSION_2 || f->len != sizeof(w2))
			return HBC_EV_STRAY;
		memcpy(&w2, f->payload, sizeof(w2));
		if (hb_session_key(c->key, w2.nonce, hb_get_be64(&w2.token), key) ||
		    !hb_frame_tag_ok(key, f->raw, f->size)) {
			OPENSSL_cleanse(key, sizeof(key));
			return HBC_EV_STRAY;
		}
		OPENSSL_cleanse(c->key, sizeof(c->key));
		memcpy(c->key, key, sizeof(key));
		OPENSSL_cleanse(key, sizeof(key));
		memcpy(&flags, &w2.flags, sizeof(flags));
	} else if (f->len == HB_WELCOME_FLAGS_LEN) {
		/* 16 bytes, or 20 with flags: the decoder let only those lengths through */
		memcpy(&flags, f->payload + sizeof(w), sizeof(flags));
	} else if (f->len != sizeof(w)) {
		return HBC_EV_PROTO;
	}
	c->token = hb_get_be64(&w.token);
	c->interval_ms = ntohl(w.interval_ms);
	c->timeout_ms = ntohl(w.timeout_ms);
	c->welcome_flags = (uint8_t)ntohl(flags);
	c->state = HBC_AUTHED;
	c->attempt = 0;
	c->error_code = 0;
	return HBC_EV_WELCOME;
}

static enum hbc_event on_error(struct hbc *c, const struct hb_frame *f, struct hbc_ev *ev)
{
	struct hb_error e;
	int was_hello = c->state == HBC_HELLO_SENT;

	memcpy(&e, f->payload, sizeof(e));
	ev->code = ntohs(e.code);
	c->error_code = ev->code > 255 ? 255 : (uint8_t)ev->code;
	/* the server keeps no session after an ERROR: the caller reconnects from scratch */
	c->state = HBC_CLOSED;
	if (was_hello && ev->code == HB_ERR_AUTH)
		return HBC_EV_AUTH_FAILED;
	return HBC_EV_ERROR;
}

enum hbc_event hbc_input(struct hbc *c, const struct hb_frame *f, uint64_t now, struct hbc_ev *ev)
{
	uint16_t newest = (uint16_t)(c->seq - 1);
	struct hb_bye b;

	memset(ev, 0, sizeof(*ev));
	ev->seq = f->seq;
	if (c->state != HBC_AUTHED && c->state != HBC_HELLO_SENT)
		return HBC_EV_STRAY;
	/* on UDP a session's frames carry its token; the WELCOME (and an ERROR refusing the HELLO)
	 * arrive before we know one
	 */
	if (c->transport == HB_UDP && c->state == HBC_AUTHED && f->token != c->token)
		return HBC_EV_STRAY;
	/* version 2: a session's frames carry its version and the tag under its key; before the
	 * WELCOME only an ERROR refusing the HELLO comes, under no key (on_welcome checks its own) */
	if (c->version == HB_VERSION_2 && f->type != HB_WELCOME &&
	    (f->version != HB_VERSION_2 || !hb_frame_tag_ok(frame_key(c), f->raw, f->size) ||
	     (c->state == HBC_HELLO_SENT && f->type != HB_ERROR)))
		return HBC_EV_STRAY;
	if (c->version != HB_VERSION_2 && f->version != HB_VERSION)
		return HBC_EV_STRAY;

	switch (f->type) {
	case HB_WELCOME:
		return on_welcome(c, f);
	case HB_ERROR:
		return on_error(c, f, ev);
	case HB_BYE:
		memcpy(&b, f->payload, sizeof(b));
		ev->code = ntohs(b.reason);
		c->bye_reason = (uint8_t)ev->code;
		c->state = HBC_CLOSED;
		return HBC_EV_BYE;
	default:
		break;
	}
	if (c->state != HBC_AUTHED)
		return HBC_EV_PROTO;

	switch (f->type) {
	case HB_PONG:
		ev->ts = hb_get_be64(f->payload);
		/* a timestamp from the future is not one of ours */
		if (ev->ts > now || !take(&c->ping_out, HBC_PING_WINDOW, newest, f->seq))
			return HBC_EV_STRAY;
		ev->rtt_ns = now - ev->ts;
		return HBC_EV_PONG;
	case HB_ACK:
		return take32(&c->data_out, newest, f->seq) ? HBC_EV_ACK : HBC_EV_STRAY;
	case HB_ECHO:
		if (!take32(&c->echo_out, newest, f->seq))
			return HBC_EV_STRAY;
		ev->payload = f->payload;
		ev->len = f->len;
		return HBC_EV_ECHO;
	case HB_DOWN:
		/* the server's seq: duplicates are the application's to judge (at-least-once) */
		ev->payload = f->payload;
		ev->len = f->len;
		return HBC_EV_DOWN;
	case HB_PATH_CHALLENGE:
		if (c->version != HB_VERSION_2)
			return HBC_EV_PROTO;
		ev->payload = f->payload;
		ev->len = f->len;
		return HBC_EV_PATH_CHALLENGE;
	default:
		/* HELLO, PING, DATA: client frames the server must never send */
		return HBC_EV_PROTO;
	}
}

uint32_t hbc_backoff_ms(struct hbc *c, const struct hbc_backoff *p, uint32_t rnd)
{
	uint64_t cap = p->base_ms;
	uint64_t span;
	unsigned jit = p->jitter_pct > 100 ? 100 : p->jitter_pct;

	/* doubling stops at max_ms; 32 doublings overflow nothing in 64 bits */
	for (unsigned i = 0; i < c->attempt && cap < p->max_ms; i++)
		cap <<= 1;
	if (cap > p->max_ms)
		cap = p->max_ms;
	if (c->attempt < UINT8_MAX)
		c->attempt++;
	span = cap * jit / 100;
	/* uniform in [cap - span, cap]: (span + 1) * rnd / 2^32 is in [0, span] */
	return (uint32_t)(cap - span + (((span + 1) * rnd) >> 32));
}

int hbc_keepalive(const struct hbc *c)
{
	return c->state == HBC_AUTHED && c->transport == HB_TCP &&
	       (c->welcome_flags & HB_WELCOME_KEEPALIVE);
}

int hbc_wants_pings(const struct hbc *c)
{
	return c->state == HBC_AUTHED && !hbc_keepalive(c);
}

unsigned hbc_pings_outstanding(const struct hbc *c)
{
	return (unsigned)__builtin_popcountll(c->ping_out);
}

unsigned hbc_data_outstanding(const struct hbc *c)
{
	return (unsigned)__builtin_popcount(c->data_out);
}

unsigned hbc_echo_outstanding(const struct hbc *c)
{
	return (unsigned)__builtin_popcount(c->echo_out);
}

const char *hbc_event_str(enum hbc_event e)
{
	static const char *const names[] = {
		[HBC_EV_NONE] = "none",
		[HBC_EV_WELCOME] = "welcome",
		[HBC_EV_PONG] = "pong",
		[HBC_EV_ACK] = "ack",
		[HBC_EV_ECHO] = "echo",
		[HBC_EV_BYE] = "bye",
		[HBC_EV_DOWN] = "downlink",
		[HBC_EV_ERROR] = "error",
		[HBC_EV_AUTH_FAILED] = "auth failed",
		[HBC_EV_STRAY] = "stray",
		[HBC_EV_PROTO] = "protocol violation",
		[HBC_EV_PATH_CHALLENGE] = "path challenge",
	};

	if ((unsigned)e >= sizeof(names) / sizeof(names[0]))
		return "?";
	return names[e];
}
