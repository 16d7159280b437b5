/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A small, independent hbeat server for hbload's tests: epoll, plain sockets, the codec and
 * the HELLO check from user/common. It authenticates (ERROR(AUTH) and close on failure),
 * answers PING with PONG, DATA with ACK, reflects ECHO, honours BYE, and expires devices silent
 * for timeout_ms with BYE(EXPIRED) (TCP) or by forgetting the session (UDP). It is deliberately
 * simple (one thread, a table indexed by fd) so a failing hbload test points at hbload.
 */
#ifndef HT_HBLOAD_RESPONDER_H
#define HT_HBLOAD_RESPONDER_H

#include <stdint.h>

struct hb_keystore;
struct rsp_conn;
struct rsp_udp;

struct responder {
	const struct hb_keystore *ks;
	uint32_t interval_ms, timeout_ms;
	uint32_t udp_drop_ping; /* UDP: the Nth PING of each session gets no PONG (0: none) */
	int family;
	int lfd, ufd, ep;
	uint16_t port;
	volatile int stop;
	struct rsp_conn **conn; /* [RSP_MAX_FD] */
	struct rsp_udp *udp; /* [RSP_MAX_UDP] */
	unsigned nudp;
	/* what happened, for the tests */
	uint64_t hellos, auth_fail, pongs, acks, echoes, byes_rx, expired_tcp, expired_udp;
	uint64_t pongs_dropped; /* PONGs not sent (udp_drop_ping) */
	uint64_t tcp_open, tcp_peak;
};

/* Listens on the loopback address of the family, port (0: any; TCP and UDP on the same port);
 * reuseport lets several responder processes share a port (each is bound by RLIMIT_NOFILE).
 * The caller sets ks, interval_ms and timeout_ms. Returns 0 or a negative errno.
 */
int rsp_open(struct responder *r, int family, uint16_t port, int reuseport);

/* Serves until r->stop is set (checked every 20 ms). */
void rsp_serve(struct responder *r);

/* Closes every connection and socket, frees the tables. */
void rsp_shutdown(struct responder *r);

#endif /* HT_HBLOAD_RESPONDER_H */
