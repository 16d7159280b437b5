// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Sans-IO device state machine: HELLO bytes, WELCOME, PONG matching and RTT, DATA/ACK and ECHO
 * bookkeeping, BYE/ERROR, UDP tokens and reconnect backoff. No sockets: frames are built with
 * the codec exactly as a server would send them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "lib/ht_assert.h"
#include "auth.h"
#include "hbclient.h"
#include "proto.h"
#include "sesskey.h"
#include <endian.h>

#define DEV 4242
#define TOKEN 0x1122334455667788ULL
#define NOW_MS 1700000000000ULL

struct fixture {
	struct hb_keystore *ks;
	uint8_t secret[HB_SECRET_MAX];
	int slen;
	uint8_t buf[HB_MAX_FRAME];
	uint8_t rx[HB_MAX_FRAME];
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	char path[] = "/tmp/test_hbclient_keys.XXXXXX", err[256];
	int fd = mkstemp(path);
	const char *line = "1-100000 derive 000102030405060708090a0b0c0d0e0f\n";

	HT_GE(fd, 0, "mkstemp of %s", path);
	assert_int_equal(write(fd, line, strlen(line)), (ssize_t)strlen(line));
	close(fd);
	assert_int_equal(hb_keystore_load(path, &fx->ks, err, sizeof(err)), 0);
	unlink(path);
	fx->slen = hb_keystore_secret(fx->ks, DEV, fx->secret);
	HT_GT(fx->slen, 0, "secret of device %d from the derive line", DEV);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	hb_keystore_free(fx->ks);
	free(fx);
	return 0;
}

/* Feeds one server frame (encoded for the client's transport) to the client. */
static enum hbc_event server_says(struct fixture *fx, struct hbc *c, uint8_t type, uint16_t seq,
				  uint64_t token, const void *p, uint16_t len, uint64_t now,
				  struct hbc_ev *ev)
{
	struct hb_frame f;
	size_t n = hb_encode(fx->rx, sizeof(fx->rx), (enum hb_transport)c->transport, type, seq,
			     token, p, len);

	HT_GT(n, 0, "encoded length of the server's frame (type %u)", type);
	assert_int_equal(hbc_decode(c, fx->rx, n, &f), HB_DECODE_OK);
	return hbc_input(c, &f, now, ev);
}

static enum hbc_event welcome(struct fixture *fx, struct hbc *c, uint32_t interval_ms)
{
	struct hb_welcome w;
	struct hbc_ev ev;

	hb_put_be64(&w.token, TOKEN);
	w.interval_ms = htonl(interval_ms);
	w.timeout_ms = htonl(interval_ms * 3 / 2);
	return server_says(fx, c, HB_WELCOME, 0, TOKEN, &w, sizeof(w), 0, &ev);
}

static void authed(struct fixture *fx, struct hbc *c, enum hb_transport t)
{
	hbc_init(c, DEV, t);
	HT_GT(hbc_hello(c, fx->buf, sizeof(fx->buf), fx->secret, (size_t)fx->slen, NOW_MS), 0,
	      "HELLO encoded");
	assert_int_equal(welcome(fx, c, 30000), HBC_EV_WELCOME);
}

static void test_hello_verifies(void **state)
{
	struct fixture *fx = *state;
	struct hbc c;
	struct hb_frame f;
	struct hb_hello h;
	int n;

	hbc_init(&c, DEV, HB_TCP);
	n = hbc_hello(&c, fx->buf, sizeof(fx->buf), fx->secret, (size_t)fx->slen, NOW_MS);
	assert_int_equal(n, 8 + (int)sizeof(struct hb_hello));
	assert_int_equal(c.state, HBC_HELLO_SENT);
	assert_int_equal(hb_decode_stream(fx->buf, (size_t)n, &f), HB_DECODE_OK);
	assert_int_equal(f.type, HB_HELLO);
	memcpy(&h, f.payload, sizeof(h));
	assert_int_equal(hb_get_be64(&h.device_id), DEV);
	assert_int_equal(hb_get_be64(&h.ts_ms), NOW_MS);
	/* the server's own check accepts it ... */
	assert_int_equal(hb_hello_verify(fx->ks, &h, NOW_MS + 1000, 30000), HB_AUTH_OK);
	/* ... outside the clock window it does not, and a flipped bit breaks the MAC */
	assert_int_equal(hb_hello_verify(fx->ks, &h, NOW_MS + 60000, 30000), HB_AUTH_CLOCK);
	h.nonce[0] ^= 1;
	assert_int_equal(hb_hello_verify(fx->ks, &h, NOW_MS, 30000), HB_AUTH_BAD_MAC);

	/* UDP: token slot present and zero, datagram-sized */
	hbc_init(&c, DEV, HB_UDP);
	n = hbc_hello(&c, fx->buf, sizeof(fx->buf), fx->secret, (size_t)fx->slen, NOW_MS);
	assert_int_equal(n, 16 + (int)sizeof(struct hb_hello));
	assert_int_equal(hb_decode_dgram(fx->buf, (size_t)n, &f), HB_DECODE_OK);
	assert_int_equal(f.token, 0);
	memcpy(&h, f.payload, sizeof(h));
	assert_int_equal(hb_hello_verify(fx->ks, &h, NOW_MS, 30000), HB_AUTH_OK);
	/* too small a buffer is refused, not overrun */
	assert_int_equal(hbc_hello(&c, fx->buf, 40, fx->secret, (size_t)fx->slen, NOW_MS), -ENOSPC);
}

static void test_welcome(void **state)
{
	struct fixture *fx = *state;
	struct hbc c;
	struct hbc_ev ev;

	hbc_init(&c, DEV, HB_TCP);
	/* nothing may be sent before the session exists */
	assert_int_equal(hbc_ping(&c, fx->buf, sizeof(fx->buf), 1, NULL), -ENOTCONN);
	assert_int_equal(hbc_data(&c, fx->buf, sizeof(fx->buf), "x", 1, NULL), -ENOTCONN);
	/* a WELCOME we did not ask for is a protocol violation */
	assert_int_equal(welcome(fx, &c, 30000), HBC_EV_STRAY);
	HT_GT(hbc_hello(&c, fx->buf, sizeof(fx->buf), fx->secret, (size_t)fx->slen, NOW_MS), 0,
	      "HELLO encoded after the stray WELCOME");
	/* a PONG while waiting for WELCOME is too */
	uint8_t ts[8] = { 0 };
	assert_int_equal(server_says(fx, &c, HB_PONG, 0, 0, ts, 8, 10, &ev), HBC_EV_PROTO);
	c.attempt = 5;
	assert_int_equal(welcome(fx, &c, 20000), HBC_EV_WELCOME);
	assert_int_equal(c.state, HBC_AUTHED);
	assert_int_equal(c.token, TOKEN);
	assert_int_equal(c.interval_ms, 20000);
	assert_int_equal(c.timeout_ms, 30000);
	assert_int_equal(c.attempt, 0); /* a session resets the backoff */
	HT_EQ(c.welcome_flags, 0, "flags of a 16-byte WELCOME");
	HT_FALSE(hbc_keepalive(&c), "hbc_keepalive after a 16-byte WELCOME");
	HT_TRUE(hbc_wants_pings(&c), "hbc_wants_pings after a 16-byte WELCOME");
	/* a second WELCOME is not expected */
	assert_int_equal(welcome(fx, &c, 20000), HBC_EV_PROTO);
}

/* The 20-byte WELCOME carries server flags; the 16-byte one means none; other lengths are
 * malformed. */
static void test_welcome_flags(void **state)
{
	struct fixture *fx = *state;
	uint8_t w[HB_WELCOME_FLAGS_LEN], odd[18] = { 0 };
	struct hb_welcome base;
	uint32_t flags = htonl(HB_WELCOME_KEEPALIVE);
	struct hb_frame f;
	struct hbc_ev ev;
	struct hbc c;
	size_t n;

	hb_put_be64(&base.token, TOKEN);
	base.interval_ms = htonl(30000);
	base.timeout_ms = htonl(90000);
	memcpy(w, &base, sizeof(base));
	memcpy(w + sizeof(base), &flags, sizeof(flags));
	hbc_init(&c, DEV, HB_TCP);
	HT_GT(hbc_hello(&c, fx->buf, sizeof(fx->buf), fx->secret, (size_t)fx->slen, NOW_MS), 0,
	      "HELLO encoded");
	HT_EQ(server_says(fx, &c, HB_WELCOME, 0, TOKEN, w, sizeof(w), 0, &ev), HBC_EV_WELCOME,
	      "a WELCOME with flags opens the session");
	HT_EQ(c.welcome_flags, HB_WELCOME_KEEPALIVE, "the keepalive flag taken from the WELCOME");
	HT_EQ(c.interval_ms, 30000, "interval of a WELCOME with flags");
	HT_EQ(c.timeout_ms, 90000, "timeout of a WELCOME with flags");
	HT_EQ(c.token, TOKEN, "token of a WELCOME with flags");
	/* keepalive mode over TCP: no heartbeat wanted; PINGs still build (the server answers) */
	HT_TRUE(hbc_keepalive(&c), "hbc_keepalive after a TCP WELCOME with KEEPALIVE");
	HT_FALSE(hbc_wants_pings(&c), "hbc_wants_pings in keepalive mode");
	HT_GT(hbc_ping(&c, fx->buf, sizeof(fx->buf), 1, NULL), 0, "a PING may still be built");
	hbc_reset(&c);
	HT_FALSE(hbc_keepalive(&c), "hbc_keepalive without a session");
	HT_FALSE(hbc_wants_pings(&c), "hbc_wants_pings without a session");
	/* the flag is TCP's: over UDP the device heartbeats whatever it says */
	hbc_init(&c, DEV, HB_UDP);
	HT_GT(hbc_hello(&c, fx->buf, sizeof(fx->buf), fx->secret, (size_t)fx->slen, NOW_MS), 0,
	      "UDP HELLO encoded");
	HT_EQ(server_says(fx, &c, HB_WELCOME, 0, TOKEN, w, sizeof(w), 0, &ev), HBC_EV_WELCOME,
	      "a UDP WELCOME with flags opens the session");
	HT_FALSE(hbc_keepalive(&c), "hbc_keepalive over UDP");
	HT_TRUE(hbc_wants_pings(&c), "hbc_wants_pings over UDP despite the flag");

	/* the encoder refuses that length itself, so the frame is written out by hand */
	HT_EQ(hb_encode(fx->rx, sizeof(fx->rx), HB_TCP, HB_WELCOME, 0, 0, odd, sizeof(odd)), 0,
	      "encoding an 18-byte WELCOME");
	struct hb_hdr h = { .magic = htons(HB_MAGIC),
			    .version = HB_VERSION,
			    .type = HB_WELCOME,
			    .len = htons(sizeof(odd)) };
	memcpy(fx->rx, &h, sizeof(h));
	memcpy(fx->rx + sizeof(h), odd, sizeof(odd));
	n = sizeof(h) + sizeof(odd);
	HT_EQ(hb_decode_stream(fx->rx, n, &f), HB_DECODE_BAD_LEN,
	      "an 18-byte WELCOME is malformed");
}

static void test_pong_matching_and_rtt(void **state)
{
	struct fixture *fx = *state;
	struct hbc c;
	struct hbc_ev ev;
	struct hb_frame f;
	uint16_t s1, s2;
	int n;

	authed(fx, &c, HB_TCP);
	n = hbc_ping(&c, fx->buf, sizeof(fx->buf), 1000000, &s1);
	assert_int_equal(n, HB_PING_TCP_BYTES);
	assert_int_equal(hb_decode_stream(fx->buf, (size_t)n, &f), HB_DECODE_OK);
	assert_int_equal(f.type, HB_PING);
	assert_int_equal(f.seq, s1);
	assert_int_equal(hb_get_be64(f.payload), 1000000);
	HT_GT(hbc_ping(&c, fx->buf, sizeof(fx->buf), 2000000, &s2), 0, "second PING encoded");
	assert_int_equal((uint16_t)(s1 + 1), s2);
	assert_int_equal(hbc_pings_outstanding(&c), 2);

	/* answers out of order: RTT comes from the echoed timestamp, not from our records */
	uint8_t ts[8];
	hb_put_be64(ts, 2000000);
	assert_int_equal(server_says(fx, &c, HB_PONG, s2, 0, ts, 8, 2500000, &ev), HBC_EV_PONG);
	assert_int_equal(ev.rtt_ns, 500000);
	assert_int_equal(ev.seq, s2);
	hb_put_be64(ts, 1000000);
	assert_int_equal(server_says(fx, &c, HB_PONG, s1, 0, ts, 8, 4000000, &ev), HBC_EV_PONG);
	assert_int_equal(ev.rtt_ns, 3000000);
	assert_int_equal(hbc_pings_outstanding(&c), 0);
	/* a duplicate PONG, one for a seq never sent, and one from the future are strays */
	assert_int_equal(server_says(fx, &c, HB_PONG, s1, 0, ts, 8, 5000000, &ev), HBC_EV_STRAY);
	assert_int_equal(server_says(fx, &c, HB_PONG, s2 + 7, 0, ts, 8, 5000000, &ev),
			 HBC_EV_STRAY);
	HT_GT(hbc_ping(&c, fx->buf, sizeof(fx->buf), 9000000, &s1), 0, "PING at 9 ms encoded");
	hb_put_be64(ts, 9000000);
	assert_int_equal(server_says(fx, &c, HB_PONG, s1, 0, ts, 8, 8000000, &ev), HBC_EV_STRAY);
	assert_int_equal(server_says(fx, &c, HB_PONG, s1, 0, ts, 8, 9000001, &ev), HBC_EV_PONG);
	assert_int_equal(ev.rtt_ns, 1);
}

static void test_window_and_seq_wrap(void **state)
{
	struct fixture *fx = *state;
	struct hbc c;
	struct hbc_ev ev;
	uint8_t ts[8] = { 0 };
	uint16_t first, s;

	authed(fx, &c, HB_TCP);
	c.seq = 65530; /* wrap in the middle of the window */
	HT_GT(hbc_ping(&c, fx->buf, sizeof(fx->buf), 0, &first), 0,
	      "first PING of the window encoded");
	for (int i = 0; i < HBC_PING_WINDOW - 1; i++)
		HT_GT(hbc_ping(&c, fx->buf, sizeof(fx->buf), 0, &s), 0,
		      "PING %d of the window encoded", i + 2);
	assert_int_equal(hbc_pings_outstanding(&c), HBC_PING_WINDOW);
	/* the oldest is still inside the window across the wrap */
	assert_int_equal(server_says(fx, &c, HB_PONG, first, 0, ts, 8, 1, &ev), HBC_EV_PONG);
	/* the next-oldest sits at the window's edge: two more frames push it out */
	HT_GT(hbc_ping(&c, fx->buf, sizeof(fx->buf), 0, NULL), 0, "PING beyond the window encoded");
	HT_GT(hbc_data(&c, fx->buf, sizeof(fx->buf), "x", 1, NULL), 0,
	      "DATA beyond the window encoded");
	assert_int_equal(server_says(fx, &c, HB_PONG, (uint16_t)(first + 1), 0, ts, 8, 1, &ev),
			 HBC_EV_STRAY);
	assert_int_equal(server_says(fx, &c, HB_PONG, s, 0, ts, 8, 1, &ev), HBC_EV_PONG);
}

static void test_data_ack_echo(void **state)
{
	struct fixture *fx = *state;
	struct hbc c;
	struct hbc_ev ev;
	struct hb_frame f;
	uint16_t d1, d2, e1, p1;
	const char payload[] = "temperature=21.5";
	int n;

	authed(fx, &c, HB_TCP);
	HT_GT(hbc_data(&c, fx->buf, sizeof(fx->buf), payload, sizeof(payload), &d1), 0,
	      "DATA encoded");
	HT_GT(hbc_ping(&c, fx->buf, sizeof(fx->buf), 5, &p1), 0, "PING encoded");
	n = hbc_data(&c, fx->buf, sizeof(fx->buf), payload, sizeof(payload), &d2);
	assert_int_equal(n, 8 + (int)sizeof(payload));
	assert_int_equal(hb_decode_stream(fx->buf, (size_t)n, &f), HB_DECODE_OK);
	assert_int_equal(f.type, HB_DATA);
	assert_memory_equal(f.payload, payload, sizeof(payload));
	n = hbc_echo(&c, fx->buf, sizeof(fx->buf), "abcd", 4, &e1);
	HT_GT(n, 0, "ECHO encoded");
	assert_int_equal(hbc_data_outstanding(&c), 2);
	assert_int_equal(hbc_echo_outstanding(&c), 1);

	/* an ACK for the PING's seq is not an ACK for DATA */
	assert_int_equal(server_says(fx, &c, HB_ACK, p1, 0, NULL, 0, 9, &ev), HBC_EV_STRAY);
	assert_int_equal(server_says(fx, &c, HB_ACK, d2, 0, NULL, 0, 9, &ev), HBC_EV_ACK);
	assert_int_equal(server_says(fx, &c, HB_ACK, d2, 0, NULL, 0, 9, &ev), HBC_EV_STRAY);
	assert_int_equal(hbc_data_outstanding(&c), 1);
	assert_int_equal(server_says(fx, &c, HB_ACK, d1, 0, NULL, 0, 9, &ev), HBC_EV_ACK);
	assert_int_equal(hbc_data_outstanding(&c), 0);

	/* the ECHO comes back verbatim: same type, same seq, payload handed to the caller */
	assert_int_equal(server_says(fx, &c, HB_ECHO, e1, 0, "abcd", 4, 9, &ev), HBC_EV_ECHO);
	assert_int_equal(ev.len, 4);
	assert_memory_equal(ev.payload, "abcd", 4);
	assert_int_equal(server_says(fx, &c, HB_ECHO, e1, 0, "abcd", 4, 9, &ev), HBC_EV_STRAY);
	/* invalid lengths are refused by the builder */
	assert_int_equal(hbc_data(&c, fx->buf, sizeof(fx->buf), payload, 0, NULL), -EINVAL);
	assert_int_equal(hbc_echo(&c, fx->buf, 10, payload, 16, NULL), -ENOSPC);
	/* the server must never send client frames */
	assert_int_equal(server_says(fx, &c, HB_DATA, 0, 0, "x", 1, 9, &ev), HBC_EV_PROTO);
}

static void test_bye_and_error(void **state)
{
	struct fixture *fx = *state;
	struct hbc c;
	struct hbc_ev ev;
	struct hb_bye b = { .reason = htons(HB_BYE_EXPIRED) };
	struct hb_error e = { .code = htons(HB_ERR_AUTH) };

	authed(fx, &c, HB_TCP);
	assert_int_equal(server_says(fx, &c, HB_BYE, 0, 0, &b, sizeof(b), 1, &ev), HBC_EV_BYE);
	assert_int_equal(ev.code, HB_BYE_EXPIRED);
	assert_int_equal(c.bye_reason, HB_BYE_EXPIRED);
	assert_int_equal(c.state, HBC_CLOSED);
	assert_int_equal(hbc_ping(&c, fx->buf, sizeof(fx->buf), 1, NULL), -ENOTCONN);
	/* after the session ended, late replies are strays */
	uint8_t ts[8] = { 0 };
	assert_int_equal(server_says(fx, &c, HB_PONG, 0, 0, ts, 8, 1, &ev), HBC_EV_STRAY);

	/* ERROR(AUTH) answering our HELLO: authentication failed */
	hbc_init(&c, DEV, HB_TCP);
	HT_GT(hbc_hello(&c, fx->buf, sizeof(fx->buf), fx->secret, (size_t)fx->slen, NOW_MS), 0,
	      "HELLO encoded");
	assert_int_equal(server_says(fx, &c, HB_ERROR, 0, 0, &e, sizeof(e), 1, &ev),
			 HBC_EV_AUTH_FAILED);
	assert_int_equal(c.state, HBC_CLOSED);
	assert_int_equal(c.error_code, HB_ERR_AUTH);

	/* any other ERROR ends an open session too */
	authed(fx, &c, HB_TCP);
	e.code = htons(HB_ERR_MALFORMED);
	assert_int_equal(server_says(fx, &c, HB_ERROR, 0, 0, &e, sizeof(e), 1, &ev), HBC_EV_ERROR);
	assert_int_equal(ev.code, HB_ERR_MALFORMED);
	assert_int_equal(c.state, HBC_CLOSED);

	/* our own BYE closes the session and carries the reason */
	authed(fx, &c, HB_TCP);
	struct hb_frame f;
	int n = hbc_bye(&c, fx->buf, sizeof(fx->buf), HB_BYE_NORMAL);
	assert_int_equal(n, 10);
	assert_int_equal(hb_decode_stream(fx->buf, (size_t)n, &f), HB_DECODE_OK);
	assert_int_equal(f.type, HB_BYE);
	assert_int_equal(c.state, HBC_CLOSED);
	assert_int_equal(hbc_bye(&c, fx->buf, sizeof(fx->buf), 0), -ENOTCONN);
}

static void test_udp_tokens(void **state)
{
	struct fixture *fx = *state;
	struct hbc c;
	struct hbc_ev ev;
	struct hb_frame f;
	uint8_t ts[8];
	uint16_t s;
	int n;

	authed(fx, &c, HB_UDP);
	n = hbc_ping(&c, fx->buf, sizeof(fx->buf), 77, &s);
	assert_int_equal(n, HB_PING_UDP_BYTES);
	assert_int_equal(hb_decode_dgram(fx->buf, (size_t)n, &f), HB_DECODE_OK);
	assert_int_equal(f.token, TOKEN); /* every frame of the session carries the token */
	hb_put_be64(ts, 77);
	/* a PONG with another session's token is not ours, even with a matching seq */
	assert_int_equal(server_says(fx, &c, HB_PONG, s, TOKEN + 1, ts, 8, 100, &ev), HBC_EV_STRAY);
	assert_int_equal(server_says(fx, &c, HB_PONG, s, TOKEN, ts, 8, 100, &ev), HBC_EV_PONG);
	assert_int_equal(ev.rtt_ns, 23);
	/* a reset forgets the session */
	hbc_reset(&c);
	assert_int_equal(c.token, 0);
	assert_int_equal(c.state, HBC_IDLE);
	assert_int_equal(c.device_id, DEV);
}

static void test_backoff(void **state)
{
	const struct hbc_backoff p = { .base_ms = 500, .max_ms = 30000, .jitter_pct = 50 };
	const struct hbc_backoff full = { .base_ms = 1000, .max_ms = 8000, .jitter_pct = 100 };
	const struct hbc_backoff none = { .base_ms = 100, .max_ms = 1000, .jitter_pct = 0 };
	struct hbc c;
	uint32_t cap = 500;

	(void)state;
	hbc_init(&c, DEV, HB_TCP);
	/* bounds: [cap/2, cap] with the cap doubling to max, for the extremes of rnd */
	for (int a = 0; a < 12; a++) {
		uint8_t at = c.attempt;
		uint32_t lo = hbc_backoff_ms(&c, &p, 0);

		c.attempt = at;
		uint32_t hi = hbc_backoff_ms(&c, &p, UINT32_MAX);
		assert_int_equal(lo, cap - cap / 2);
		assert_int_equal(hi, cap);
		cap = cap * 2 > 30000 ? 30000 : cap * 2;
	}
	/* the attempt counter saturates instead of wrapping back to short delays */
	c.attempt = 254;
	hbc_backoff_ms(&c, &p, 0);
	hbc_backoff_ms(&c, &p, 0);
	assert_int_equal(c.attempt, 255);
	assert_int_equal(hbc_backoff_ms(&c, &p, UINT32_MAX), 30000);

	/* without jitter the sequence is exact */
	hbc_init(&c, DEV, HB_TCP);
	assert_int_equal(hbc_backoff_ms(&c, &none, 12345), 100);
	assert_int_equal(hbc_backoff_ms(&c, &none, 12345), 200);
	assert_int_equal(hbc_backoff_ms(&c, &none, 12345), 400);
	assert_int_equal(hbc_backoff_ms(&c, &none, 12345), 800);
	assert_int_equal(hbc_backoff_ms(&c, &none, 12345), 1000);

	/* full jitter spreads a fleet over the whole [0, cap]: check the spread of 10,000 draws */
	uint64_t x = 1;
	unsigned quart[4] = { 0 };
	for (int i = 0; i < 10000; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		c.attempt = 3;
		uint32_t d = hbc_backoff_ms(&c, &full, (uint32_t)(x >> 32));
		HT_LE(d, 8000, "backoff of draw %d within the cap of attempt 3", i);
		quart[d * 4 / 8001]++;
	}
	for (int q = 0; q < 4; q++)
		HT_TRUE(quart[q] > 2200 && quart[q] < 2800,
			"draws in quarter %d of [0, 8000] ms (of 10000)", q);
}

/* Version 2: the device derives the session key from its HELLO and the WELCOME (as the server
 * does, here with the same library calls hbd makes), ignores a WELCOME or reply not tagged under
 * it, tags its own frames, keeps its PING timestamps strictly rising, and answers a path
 * challenge with the same bytes. */
static void test_v2_session(void **state)
{
	struct fixture *fx = *state;
	const uint8_t snonce[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, wrong[16] = { 9 };
	uint8_t prk[HB_MAC_LEN], key[HB_SESSION_KEY_LEN], pl[8];
	struct hb_welcome2 w = { .interval_ms = htonl(1000), .timeout_ms = htonl(1500) };
	struct hb_hello_msg m;
	struct hb_frame f;
	struct hbc_ev ev;
	struct hbc c;
	uint64_t ts1, ts2;
	int n;

	hbc_init(&c, DEV, HB_UDP);
	HT_EQ(hbc_use_v2(&c), 0, "version 2 on UDP");
	n = hbc_hello(&c, fx->buf, sizeof(fx->buf), fx->secret, (size_t)fx->slen, NOW_MS);
	HT_EQ(n, HB_TAG_LEN + 16 + (int)sizeof(struct hb_hello_bound), "a v2 HELLO's size");
	HT_EQ(hb_decode_dgram(fx->buf, (size_t)n, &f), HB_DECODE_OK, "decode of the v2 HELLO");
	HT_EQ(f.version, HB_VERSION_2, "its version");
	HT_EQ(hb_hello_parse(f.payload, f.len, &m), 0, "the bound HELLO");
	HT_EQ(hb_hello_msg_verify(fx->ks, &m, 0, NOW_MS, 30000, prk), HB_AUTH_OK, "its MAC");
	HT_EQ(hb_session_key(prk, snonce, TOKEN, key), 0, "the server's session key");
	w.token = htobe64(TOKEN);
	memcpy(w.nonce, snonce, sizeof(snonce));
	/* a WELCOME from someone without the secret: another key */
	n = (int)hb_encode_v2(fx->rx, sizeof(fx->rx), HB_WELCOME, 1, TOKEN, &w, sizeof(w), wrong);
	hb_decode_dgram(fx->rx, (size_t)n, &f);
	HT_EQ(hbc_input(&c, &f, 0, &ev), HBC_EV_STRAY, "a WELCOME under another key");
	HT_EQ(c.state, HBC_HELLO_SENT, "still waiting for the WELCOME");
	n = (int)hb_encode_v2(fx->rx, sizeof(fx->rx), HB_WELCOME, 1, TOKEN, &w, sizeof(w), key);
	hb_decode_dgram(fx->rx, (size_t)n, &f);
	HT_EQ(hbc_input(&c, &f, 0, &ev), HBC_EV_WELCOME, "the server's WELCOME");
	HT_TRUE(!memcmp(c.key, key, sizeof(key)), "the device derived the server's key");
	/* PINGs: tagged, timestamps rising even when the caller's clock does not */
	n = hbc_ping(&c, fx->buf, sizeof(fx->buf), 5000, NULL);
	HT_EQ(n, HB_PING_V2_BYTES, "a v2 PING's size");
	hb_decode_dgram(fx->buf, (size_t)n, &f);
	HT_TRUE(hb_frame_tag_ok(key, f.raw, f.size), "the PING's tag under the session key");
	ts1 = hb_get_be64(f.payload);
	n = hbc_ping(&c, fx->buf, sizeof(fx->buf), 5000, NULL);
	hb_decode_dgram(fx->buf, (size_t)n, &f);
	ts2 = hb_get_be64(f.payload);
	HT_GT(ts2, ts1, "a second PING at the same clock still has a newer timestamp");
	/* its PONG under another key, or as version 1, is a stray; under the key it counts */
	memcpy(pl, f.payload, 8);
	n = (int)hb_encode_v2(fx->rx, sizeof(fx->rx), HB_PONG, f.seq, TOKEN, pl, 8, wrong);
	hb_decode_dgram(fx->rx, (size_t)n, &f);
	HT_EQ(hbc_input(&c, &f, 6000, &ev), HBC_EV_STRAY, "a PONG under another key");
	n = (int)hb_encode(fx->rx, sizeof(fx->rx), HB_UDP, HB_PONG, f.seq, TOKEN, pl, 8);
	hb_decode_dgram(fx->rx, (size_t)n, &f);
	HT_EQ(hbc_input(&c, &f, 6000, &ev), HBC_EV_STRAY, "a version 1 PONG");
	n = (int)hb_encode_v2(fx->rx, sizeof(fx->rx), HB_PONG, f.seq, TOKEN, pl, 8, key);
	hb_decode_dgram(fx->rx, (size_t)n, &f);
	HT_EQ(hbc_input(&c, &f, 6000, &ev), HBC_EV_PONG, "the PONG under the key");
	/* a path challenge is answered with its bytes, under the key */
	memcpy(pl, "\x11\x22\x33\x44\x55\x66\x77\x88", 8);
	n = (int)hb_encode_v2(fx->rx, sizeof(fx->rx), HB_PATH_CHALLENGE, 0, TOKEN, pl, 8, key);
	hb_decode_dgram(fx->rx, (size_t)n, &f);
	HT_EQ(hbc_input(&c, &f, 6000, &ev), HBC_EV_PATH_CHALLENGE, "a path challenge");
	n = hbc_path_response(&c, fx->buf, sizeof(fx->buf), ev.payload);
	HT_GT(n, 0, "PATH_RESPONSE built");
	hb_decode_dgram(fx->buf, (size_t)n, &f);
	HT_EQ(f.type, HB_PATH_RESPONSE, "its type");
	HT_TRUE(!memcmp(f.payload, pl, 8), "it carries the challenge's bytes");
	HT_TRUE(hb_frame_tag_ok(key, f.raw, f.size), "under the session key");
	/* TCP has no version 2 */
	hbc_init(&c, DEV, HB_TCP);
	HT_EQ(hbc_use_v2(&c), -EINVAL, "version 2 on TCP");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello_verifies),
		cmocka_unit_test(test_welcome),
		cmocka_unit_test(test_welcome_flags),
		cmocka_unit_test(test_pong_matching_and_rtt),
		cmocka_unit_test(test_window_and_seq_wrap),
		cmocka_unit_test(test_data_ack_echo),
		cmocka_unit_test(test_bye_and_error),
		cmocka_unit_test(test_udp_tokens),
		cmocka_unit_test(test_backoff),
		cmocka_unit_test(test_v2_session),
	};

	return cmocka_run_group_tests_name("hbclient", tests, setup, teardown);
}
