/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* TCP socket helpers for the tests that hold both ends of a loopback connection (the kernel
 * path tests): listen, connect and accept, send one segment, read exactly, expect nothing.
 * Each fails the running test, with a message, when the socket does not do what it must.
 */
#ifndef HT_SOCK_H
#define HT_SOCK_H

#include <stddef.h>
#include <stdint.h>

/* Both ends of a TCP connection made by ht_connect_pair(). */
struct ht_pair {
	int cli, srv;
	uint64_t cookie; /* the server socket's SO_COOKIE: hbeat's conns/sockhash key */
	uint16_t cport; /* client port, host order */
};

/* A listener on addr:port (family AF_INET or AF_INET6; a v4-mapped IPv6 address gets a
 * dual-stack socket). */
int ht_listener(int family, const char *addr, uint16_t port);

/* Connects to addr:port through the listener lfd and accepts: the client end blocking with
 * TCP_NODELAY, the server end non-blocking. */
void ht_connect_pair(int lfd, int family, const char *addr, uint16_t port, struct ht_pair *p);

/* One send() that must take all n bytes: with TCP_NODELAY one segment, which is what the
 * tests of coalesced and split frames build on. */
void ht_send_segment(int fd, const void *b, size_t n);

/* Reads exactly n bytes within ms (what: what they are, for the failure message). */
void ht_recv_exact(int fd, void *b, size_t n, int ms, const char *what);

/* Nothing arrives on fd within ms (for a server end: the daemon would never see a frame). */
void ht_expect_silence(int fd, int ms, const char *what);

/* A TCP port on 127.0.0.1 that nothing is bound to right now. */
uint16_t ht_free_port(void);

/* Waits up to ms for a TCP listener on 127.0.0.1:port (a server the test started): 0 once a
 * connect succeeds, -1 after ms. */
int ht_wait_listening(uint16_t port, int ms);

#endif /* HT_SOCK_H */
