/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Sans-IO device side of the wire protocol (version 1, and version 2 over UDP: hbc_use_v2):
 * one small state machine per device.
 *
 * No sockets, no clocks, no threads, no allocation: the caller moves bytes and passes in the
 * time. hbload drives 500,000 of these from io_uring; the device library (user/device) drives one
 * with blocking sockets. Every build function writes one complete frame for the device's
 * transport (TCP: header + payload; UDP: header + session token + payload) into the caller's
 * buffer and returns its size, or a negative errno.
 *
 * Outstanding requests are tracked in sliding windows over the device's own 16-bit sequence
 * space (one seq per frame sent, as the ABI says): bit d of a window is the frame sent d frames
 * before the newest. A reply whose seq is not set in the matching window is a stray (duplicate,
 * very late or bogus) and changes nothing. Requests older than the window are forgotten; the
 * caller's sent/answered counters still show them as lost.
 */
#ifndef HB_HBCLIENT_H
#define HB_HBCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define HBC_PING_WINDOW 64
#define HBC_REQ_WINDOW 32 /* DATA and ECHO */

enum hbc_state {
	HBC_IDLE = 0, /* no transport, or transport up but HELLO not yet built */
	HBC_HELLO_SENT = 1, /* waiting for WELCOME */
	HBC_AUTHED = 2, /* session open: heartbeats, DATA and ECHO allowed */
	HBC_CLOSED = 3, /* BYE or ERROR received, or hbc_reset called: reconnect from here */
};

/* One device. 96 bytes: 500k of them are 48 MB. Fields are read-only to callers. */
struct hbc {
	uint64_t device_id;
	uint64_t token; /* session token from WELCOME (0 before) */
	uint64_t ping_out; /* window of unanswered PINGs */
	uint32_t data_out; /* window of DATA awaiting ACK */
	uint32_t echo_out; /* window of ECHO awaiting reflection */
	uint32_t interval_ms; /* what the server asked for in WELCOME */
	uint32_t timeout_ms; /* silence after which the server expires us */
	uint16_t seq; /* next sequence number to send */
	uint8_t state; /* enum hbc_state */
	uint8_t transport; /* enum hb_transport */
	uint8_t attempt; /* consecutive failed session attempts: the backoff exponent */
	uint8_t bye_reason; /* last BYE reason received (enum hb_bye_reason) */
	uint8_t error_code; /* last ERROR code received (enum hb_error_code; 255: a larger
			     * code), 0 if none */
	uint8_t welcome_flags; /* enum hb_welcome_flag of the last WELCOME */
	uint8_t version; /* HB_VERSION, or HB_VERSION_2 (UDP; hbc_use_v2) */
	uint8_t pad[7];
	uint64_t last_ts; /* version 2: the newest PING timestamp sent (each must be newer) */
	/* version 2: between HELLO and WELCOME the device's half of the key derivation (PRK),
	 * then the session key in the first HB_SESSION_KEY_LEN bytes */
	uint8_t key[HB_MAC_LEN];
};

/* What one received frame meant. */
enum hbc_event {
	HBC_EV_NONE = 0,
	HBC_EV_WELCOME, /* session open: token, interval_ms, timeout_ms, welcome_flags set */
	HBC_EV_PONG, /* answer to an outstanding PING: rtt_ns set */
	HBC_EV_ACK, /* a DATA frame was acknowledged */
	HBC_EV_ECHO, /* an ECHO came back: payload/len point into the caller's buffer */
	HBC_EV_DOWN, /* a downlink message: payload/len/seq; answer it with hbc_ack(seq) */
	HBC_EV_BYE, /* server ends the session: code = reason; state is CLOSED */
	HBC_EV_ERROR, /* server refused something: code = error; state is CLOSED */
	HBC_EV_AUTH_FAILED, /* ERROR(HB_ERR_AUTH) answering our HELLO; state is CLOSED */
	HBC_EV_STRAY, /* reply to nothing outstanding, or another session's token: ignored */
	HBC_EV_PROTO, /* a frame the server must not send, or not in this state: ignored */
	HBC_EV_PATH_CHALLENGE, /* version 2: the server checks that we are at the address it saw
				* our frames from: answer with hbc_path_response(payload) */
};

struct hbc_ev {
	uint16_t seq; /* the frame's seq */
	uint16_t code; /* BYE reason or ERROR code */
	uint64_t rtt_ns; /* PONG: now - the timestamp the PING carried */
	uint64_t ts; /* PONG: the timestamp the PING carried */
	const uint8_t *payload; /* ECHO, DOWN */
	uint16_t len;
};

/* Jittered exponential backoff: the cap doubles per failed attempt from base_ms up to max_ms;
 * the delay is drawn uniformly from [cap * (1 - jitter), cap]. jitter_pct 100 is "full jitter"
 * (any delay up to the cap), which spreads a fleet reconnecting after an outage best.
 */
struct hbc_backoff {
	uint32_t base_ms;
	uint32_t max_ms;
	uint8_t jitter_pct; /* 0..100 */
};

void hbc_init(struct hbc *c, uint64_t device_id, enum hb_transport t);

/* Speak protocol version 2 (UDP only; -EINVAL on TCP): bound HELLO, a session key derived at
 * WELCOME, every frame tagged, frames from the server without the right tag ignored as
 * strays, and path challenges answered. Before the first HELLO. */
int hbc_use_v2(struct hbc *c);

/* Forgets the session (after the transport dropped or before reconnecting). Keeps device_id,
 * transport and attempt. Outstanding requests are dropped: the caller counts them as lost.
 */
void hbc_reset(struct hbc *c);

/* Builds a HELLO signed with the device secret; unix_ms is the wall clock (Unix time in ms)
 * the server checks against its clock window. State becomes HELLO_SENT. -EIO if libcrypto fails.
 */
int hbc_hello(struct hbc *c, void *buf, size_t cap, const uint8_t *secret, size_t slen,
	      uint64_t unix_ms);
/* The same, bound to one server (hbd --server-id; 0: none, as hbc_hello): the 64-byte HELLO
 * that only that server accepts, so a copy of it cannot open a session on another server of
 * the fleet. */
int hbc_hello_to(struct hbc *c, void *buf, size_t cap, const uint8_t *secret, size_t slen,
		 uint64_t unix_ms, uint64_t server_id);

/* Builds a PING carrying ts (any 64-bit clock value; the PONG returns it unchanged). Needs an
 * open session (-ENOTCONN otherwise). *seq (if not NULL) receives the frame's seq.
 */
int hbc_ping(struct hbc *c, void *buf, size_t cap, uint64_t ts, uint16_t *seq);
/* Builds a BEAT (TCP): a heartbeat the server answers with no frame, only TCP's ACK. */
int hbc_beat(struct hbc *c, void *buf, size_t cap, uint16_t *seq);
int hbc_data(struct hbc *c, void *buf, size_t cap, const void *payload, uint16_t len,
	     uint16_t *seq);
int hbc_echo(struct hbc *c, void *buf, size_t cap, const void *payload, uint16_t len,
	     uint16_t *seq);
/* Builds the ACK of a downlink (HBC_EV_DOWN) with its seq. The seq is the server's, so the
 * device's own sequence and windows do not move. -ENOTCONN without an open session.
 */
int hbc_ack(struct hbc *c, void *buf, size_t cap, uint16_t seq);
/* Builds the PATH_RESPONSE to a PATH_CHALLENGE (HBC_EV_PATH_CHALLENGE, its 8-byte payload). */
int hbc_path_response(struct hbc *c, void *buf, size_t cap, const uint8_t data[8]);
/* BYE ends the session from our side; state becomes CLOSED. Valid in any state with a session
 * or a pending HELLO (-ENOTCONN otherwise).
 */
int hbc_bye(struct hbc *c, void *buf, size_t cap, uint16_t reason);

/* Decodes one frame from the front of buf the way this device's transport frames them
 * (hb_decode_stream for TCP, hb_decode_dgram for UDP). Returns an enum hb_decode.
 */
int hbc_decode(const struct hbc *c, const void *buf, size_t n, struct hb_frame *f);

/* Consumes one decoded frame from the server at time now (same clock as the PING timestamps). */
enum hbc_event hbc_input(struct hbc *c, const struct hb_frame *f, uint64_t now, struct hbc_ev *ev);

/* Delay before the next connection attempt; counts the attempt. rnd is a uniform random 32-bit
 * value from the caller (so tests are deterministic). The first call after a WELCOME starts from
 * base_ms again.
 */
uint32_t hbc_backoff_ms(struct hbc *c, const struct hbc_backoff *p, uint32_t rnd);

/* 1 while the session is in keepalive mode: TCP, and the server's WELCOME carried
 * HB_WELCOME_KEEPALIVE. Its kernel tracks the connection with TCP keepalive; the device keeps
 * TCP keepalive on its own socket (interval_ms, TCP_USER_TIMEOUT = timeout_ms) and need not
 * send PINGs (any it sends are answered). The flag means nothing over UDP. */
int hbc_keepalive(const struct hbc *c);

/* 1 if the device should heartbeat now that a session is open: every session but one in
 * keepalive mode (0 there, and without a session). When to send is the caller's clock. */
int hbc_wants_pings(const struct hbc *c);

/* Outstanding requests in the windows. */
unsigned hbc_pings_outstanding(const struct hbc *c);
unsigned hbc_data_outstanding(const struct hbc *c);
unsigned hbc_echo_outstanding(const struct hbc *c);

const char *hbc_event_str(enum hbc_event e);

#endif
