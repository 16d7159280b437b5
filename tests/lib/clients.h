/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Tiny blocking hbeat clients for the daemon tests, on proto.h and auth.h: connect, log in as a
 * test device, send frames and expect answers, over TCP and UDP. Every wait is bounded.
 */
#ifndef HT_CLIENTS_H
#define HT_CLIENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "auth.h"
#include "hbeat_abi.h"
#include "proto.h"

/* Devices the tests know: 1..9 have explicit secrets, 100..199 derived ones. */
#define HT_MASTER "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
/* Longest wait for an expected frame: 3 s, or 30 s when the daemon runs under HBD_WRAP
 * (valgrind makes the first HELLO's libcrypto set-up take seconds).
 */
#define HT_IO_MS (getenv("HBD_WRAP") && *getenv("HBD_WRAP") ? 30000 : 3000)

/* Where the clients send IPv4 (host order): loopback unless a netns test sets the server's
 * address. IPv6 always goes to ::1.
 */
extern uint32_t ht_srv4;

/* The secret of a test device (16 bytes for 1..9, derived 32 for 100..199); its length. */
int ht_secret(uint64_t dev, uint8_t out[HB_SECRET_MAX]);
/* A signed HELLO payload for dev at ts_ms (0 = now). */
void ht_hello(struct hb_hello *h, uint64_t dev, uint64_t ts_ms);

/* ---- TCP ---- */

/* A TCP connection (TCP_NODELAY) to the server's port, or -1. */
int ht_tcp(uint16_t port, bool v6);
/* Binds an IPv4 socket to a local source address (port chosen by the kernel). */
int ht_bind_src(int fd, const char *src4);
/* An IPv4 TCP connection to the server's port from the source address src4 (e.g. 127.0.0.2). */
int ht_tcp_from(uint16_t port, const char *src4);
int ht_send_all(int fd, const void *buf, size_t n);
int ht_send_frame(int fd, uint8_t type, uint16_t seq, const void *payload, uint16_t len);
/* Reads exactly n bytes within ms; returns n, 0 on EOF, -1 on timeout/error. */
ssize_t ht_read_full(int fd, void *buf, size_t n, int ms);
/* One frame: returns 1 (frame in f, payload in buf), 0 on EOF, -1 on timeout or bad frame. */
int ht_recv_frame(int fd, uint8_t *buf, struct hb_frame *f, int ms);
/* True if the peer closes (EOF or reset) within ms without sending anything else. */
bool ht_eof(int fd, int ms);
/* Connects and authenticates dev; returns the fd (WELCOME in *wel if given) or -1. */
int ht_tcp_login(uint16_t port, uint64_t dev, bool v6, struct hb_welcome *wel);
/* The same, with the WELCOME's payload length (16, or 20 with server flags) and its flags (0
 * for a 16-byte one). */
int ht_tcp_login_flags(uint16_t port, uint64_t dev, bool v6, struct hb_welcome *wel, uint16_t *len,
		       uint32_t *flags);
/* Expects one frame of type (and, for ERROR/BYE, the code/reason; -1 = any); says on stderr
 * what came instead. */
bool ht_expect(int fd, uint8_t type, int code);

/* ---- UDP ---- */

int ht_udp(bool v6);
int ht_udp_send(int fd, uint16_t port, bool v6, uint8_t type, uint16_t seq, uint64_t token,
		const void *payload, uint16_t len);
/* n bytes as they are, to the server's IPv4 address. */
int ht_udp_send_raw(int fd, uint16_t port, const void *buf, size_t n);
/* One datagram within ms, decoded: 1, or -1 on timeout / undecodable. */
int ht_udp_recv(int fd, uint8_t *buf, struct hb_frame *f, int ms);
/* HELLO over UDP; returns the session token (0 on failure). */
uint64_t ht_udp_login(int fd, uint16_t port, bool v6, uint64_t dev);
/* A version 2 login of dev over IPv4 through the device library's state machine c: 0 once the
 * WELCOME (tagged under the derived session key) is taken, else -1. */
struct hbc;
int ht_v2_login(int fd, uint16_t port, uint64_t dev, struct hbc *c);

#endif /* HT_CLIENTS_H */
