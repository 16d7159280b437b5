// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Loopback TCP pairs for the kernel path tests, with every step checked. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "ht_assert.h"
#include "ht_time.h"
#include "sock.h"

int ht_listener(int family, const char *addr, uint16_t port)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, zero = 0;

	HT_GE(fd, 0, "listening socket for %s port %u", addr, port);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (family == AF_INET) {
		struct sockaddr_in *a = (void *)&ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		inet_pton(AF_INET, addr, &a->sin_addr);
		len = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (void *)&ss;

		/* a v4-mapped bind address needs a dual-stack socket */
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, strchr(addr, '.') ? &zero : &one,
			   sizeof(one));
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		inet_pton(AF_INET6, addr, &a->sin6_addr);
		len = sizeof(*a);
	}
	if (bind(fd, (struct sockaddr *)&ss, len) || listen(fd, 16))
		ht_fail(__FILE__, __LINE__, strerror(errno), "listen on %s port %u", addr, port);
	return fd;
}

void ht_connect_pair(int lfd, int family, const char *addr, uint16_t port, struct ht_pair *p)
{
	struct sockaddr_storage ss = { 0 }, local;
	socklen_t len =
		family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	socklen_t ll = sizeof(local), cl = sizeof(p->cookie);
	int one = 1;

	if (family == AF_INET) {
		struct sockaddr_in *a = (void *)&ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		inet_pton(AF_INET, addr, &a->sin_addr);
	} else {
		struct sockaddr_in6 *a = (void *)&ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		inet_pton(AF_INET6, addr, &a->sin6_addr);
	}
	p->cli = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	HT_GE(p->cli, 0, "client socket for %s port %u", addr, port);
	/* every send() its own segment, so "split" means split on the wire */
	setsockopt(p->cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(p->cli, (struct sockaddr *)&ss, len))
		ht_fail(__FILE__, __LINE__, strerror(errno), "connect to %s port %u", addr, port);
	p->srv = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	HT_GE(p->srv, 0, "accept of the connection to %s port %u", addr, port);
	HT_EQ(getsockopt(p->srv, SOL_SOCKET, SO_COOKIE, &p->cookie, &cl), 0,
	      "SO_COOKIE of the accepted socket");
	HT_EQ(getsockname(p->cli, (struct sockaddr *)&local, &ll), 0, "client's local address");
	p->cport = ntohs(local.ss_family == AF_INET ? ((struct sockaddr_in *)&local)->sin_port
						    : ((struct sockaddr_in6 *)&local)->sin6_port);
}

void ht_send_segment(int fd, const void *b, size_t n)
{
	HT_EQ(send(fd, b, n, MSG_NOSIGNAL), (ssize_t)n, "one send() of all %zu bytes", n);
}

void ht_recv_exact(int fd, void *b, size_t n, int ms, const char *what)
{
	size_t got = 0;
	uint64_t end = hbt_now_ns() + (uint64_t)ms * 1000000;

	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint64_t now = hbt_now_ns();
		int left = now >= end ? 0 : (int)((end - now) / 1000000) + 1;

		if (poll(&p, 1, left) != 1)
			ht_fail(__FILE__, __LINE__, "timed out",
				"%s: got %zu of %zu bytes within %d ms", what, got, n, ms);
		/* on a socket in a sockhash a wakeup can find nothing to read (the verdict took
		 * the bytes): not an error, poll again */
		ssize_t r = recv(fd, (char *)b + got, n - got, MSG_DONTWAIT);
		if (r <= 0 && !(r < 0 && errno == EAGAIN))
			ht_fail(__FILE__, __LINE__, r ? strerror(errno) : "EOF",
				"%s: recv after %zu of %zu bytes", what, got, n);
		if (r > 0)
			got += r;
	}
}

void ht_expect_silence(int fd, int ms, const char *what)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char b[64];

	if (poll(&p, 1, ms) != 0) {
		ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);

		ht_fail(__FILE__, __LINE__, "expected nothing to arrive",
			"%s: %zd unexpected bytes arrived (first 0x%02x)", what, r,
			r > 0 ? (uint8_t)b[0] : 0);
	}
	/* and a non-blocking read really has nothing */
	HT_EQ(recv(fd, b, sizeof(b), MSG_DONTWAIT), -1, "%s: non-blocking read", what);
	HT_EQ(errno, EAGAIN, "%s: errno of the non-blocking read", what);
}

uint16_t ht_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	HT_EQ(bind(fd, (struct sockaddr *)&a, l), 0, "bind to a free port");
	HT_EQ(getsockname(fd, (struct sockaddr *)&a, &l), 0, "the free port's number");
	close(fd);
	return ntohs(a.sin_port);
}

int ht_wait_listening(uint16_t port, int ms)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (int i = 0; i < ms / 10; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0), rc;

		rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
		close(fd);
		if (!rc)
			return 0;
		usleep(10000);
	}
	return -1;
}
