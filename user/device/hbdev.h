/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbeat device library: the device side of the protocol on blocking sockets, for firmware and
 * tools. It drives the sans-IO core (hbclient.h, which hbload drives from io_uring) with one
 * TCP or UDP socket: connect and authenticate, heartbeat at the interval the server asks for
 * (or, when the server asks for TCP keepalive instead, let the kernels do it),
 * send DATA until it is acknowledged, receive downlink messages (and acknowledge them), and
 * reconnect with jittered exponential backoff when the session is lost.
 *
 * Dependencies: libc, and libcrypto for HMAC-SHA256 and random bytes (auth.c). Build:
 * libhbdevice.a holds this file and the protocol core; link it with -lcrypto.
 *
 * Threads: a struct hbdev belongs to one thread. Every call returns within the time it is
 * given (io_timeout_ms for one connection attempt).
 */
#ifndef HB_HBDEV_H
#define HB_HBDEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hbclient.h"

struct hbdev_config {
	const char *host; /* name or address of the server */
	uint16_t port;
	enum hb_transport transport; /* HB_TCP or HB_UDP */
	uint64_t device_id;
	const uint8_t *secret; /* the device's secret (16..64 bytes), copied */
	size_t secret_len;
	struct hbc_backoff backoff; /* zero: 500 ms doubling to 30 s, full jitter */
	uint32_t io_timeout_ms; /* one connect + HELLO/WELCOME; zero: 3000 */
	uint32_t data_retry_ms; /* UDP: resend an unacknowledged DATA after; zero: 1000 */
	uint64_t server_id; /* the server's --server-id: HELLOs bound to it (0: unbound) */
	/* UDP: protocol version 2 (every frame under a session key, docs/PROTOCOL.md) unless
	 * this is 1, for a server older than version 2; zero: 2 */
	uint8_t udp_version;
	/* TCP: heartbeat with BEAT frames, which the server answers with TCP's ACK alone (no
	 * PONG: cheaper for both sides). The socket gets TCP_USER_TIMEOUT = the server's timeout,
	 * so a server that stops acknowledging ends the session; RTT is hbdev_rtt_us(). A server
	 * without BEAT support closes the session with ERROR(MALFORMED): use PINGs there. */
	bool beat;
};

enum hbdev_event {
	HBDEV_EV_NONE = 0, /* the time given passed with nothing to report */
	HBDEV_EV_CONNECTED, /* a session is open (first or after a reconnect) */
	HBDEV_EV_DISCONNECTED, /* the session ended: code = BYE reason (enum hb_bye_reason),
				* HBDEV_CODE_ERROR + an ERROR code, or HBDEV_CODE_LOST if the
				* connection broke or the server went silent; the library
				* reconnects after a backoff delay */
	HBDEV_EV_AUTH_FAILED, /* the server refused our HELLO (unknown, revoked, clock): retried
			       * with backoff like any failed attempt */
	HBDEV_EV_DOWNLINK, /* a message from the application: payload, len (already ACKed) */
	HBDEV_EV_PONG, /* a heartbeat came back: rtt_ns (none in keepalive and beat modes) */
};

#define HBDEV_CODE_ERROR 0x100
#define HBDEV_CODE_LOST 0xffff

struct hbdev_ev {
	enum hbdev_event type;
	uint16_t code;
	uint16_t len;
	uint64_t rtt_ns;
	const uint8_t *payload; /* valid until the next call on this struct hbdev */
};

struct hbdev;

/* Checks the configuration and resolves host; does not connect yet. 0 or -errno. */
int hbdev_open(struct hbdev **out, const struct hbdev_config *cfg);
/* Says BYE if a session is open, closes the socket, frees everything (NULL is fine). */
void hbdev_close(struct hbdev *d);

/* One connection attempt now: connect, HELLO, WELCOME. 0, -EACCES if the HELLO was refused,
 * -ETIMEDOUT, or another -errno. hbdev_poll() and hbdev_send() call it themselves when needed.
 */
int hbdev_connect(struct hbdev *d);

/* Runs the device for up to timeout_ms: heartbeats when due, reads what the server sends,
 * reconnects when the session is gone and its backoff delay has passed. Returns 1 with *ev at
 * the first event, 0 when the time passed quietly, or -errno on a local failure.
 */
int hbdev_poll(struct hbdev *d, int timeout_ms, struct hbdev_ev *ev);

/* Sends one DATA frame (1..HB_MAX_PAYLOAD bytes) and waits up to timeout_ms for its ACK,
 * heartbeating meanwhile; over UDP it is resent every data_retry_ms, and after a reconnect on
 * either transport. 0 once acknowledged (the server has written it), -ETIMEDOUT, -EINVAL.
 * Downlinks arriving meanwhile are ACKed and kept for hbdev_poll (up to 8; beyond that they
 * are left unacknowledged, so the application sees them time out).
 */
int hbdev_send(struct hbdev *d, const void *data, uint16_t len, int timeout_ms);

/* True while a session is open. */
int hbdev_connected(const struct hbdev *d);
/* True while the session is in keepalive mode (the server asked for it in its WELCOME, TCP
 * only): no PINGs go out and no PONGs come back; this socket has TCP keepalive at the server's
 * interval and TCP_USER_TIMEOUT = its timeout, so both kernels track the connection. */
int hbdev_keepalive(const struct hbdev *d);
/* The kernel's smoothed round-trip time of the TCP connection (TCP_INFO tcpi_rtt), in any
 * mode; in keepalive mode it is the only RTT there is. 0, -ENOTCONN without a session, or
 * -EOPNOTSUPP over UDP (there HBDEV_EV_PONG carries each heartbeat's RTT). */
int hbdev_rtt_us(const struct hbdev *d, uint32_t *rtt_us);
/* The protocol state (token, interval, counters of outstanding requests). */
const struct hbc *hbdev_state(const struct hbdev *d);

#endif
