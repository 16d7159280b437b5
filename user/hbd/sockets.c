// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Service sockets, created up front by the control thread so every worker shares one port. */
#include "sockets.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LISTEN_BACKLOG 4096 /* clamped by net.core.somaxconn */
#define UDP_RCVBUF (4 << 20)

static int parse_bind(const char *bind, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

	memset(ss, 0, sizeof(*ss));
	if (!bind || !*bind || !strcmp(bind, "::")) {
		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_any;
		s6->sin6_port = htons(port);
		*len = sizeof(*s6);
		return 0;
	}
	if (inet_pton(AF_INET6, bind, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		*len = sizeof(*s6);
		return 0;
	}
	if (inet_pton(AF_INET, bind, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		*len = sizeof(*s4);
		return 0;
	}
	return -EINVAL;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons(port);
}

static int open_one(int type, const struct sockaddr_storage *ss, socklen_t len, const char **what)
{
	int one = 1, zero = 0, fd;

	fd = socket(ss->ss_family, type | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		*what = "socket";
		return -errno;
	}
	*what = "setsockopt";
	/* SO_REUSEPORT makes the workers' sockets one group, and the kernel admits to a group
	 * only sockets of the same effective uid. SO_REUSEADDR checks no owner: on UDP it would
	 * let a socket of any user bind the same port (on a more specific address, which then
	 * wins the datagrams), so only the listener has it, where the kernel never lets a second
	 * socket share a listening port and it serves its one purpose, a restart while old
	 * connections sit in TIME_WAIT.
	 */
	if ((type == SOCK_STREAM && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one))) ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)))
		goto fail;
	/* dual-stack: IPv4 clients arrive as v4-mapped addresses on the same socket */
	if (ss->ss_family == AF_INET6 &&
	    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)))
		goto fail;
	/* A burst of HELLOs (a fleet coming back after an outage) must queue, not drop: 4 MiB
	 * beyond net.core.rmem_max with CAP_NET_ADMIN, else as much as rmem_max allows.
	 */
	if (type == SOCK_DGRAM) {
		int sz = UDP_RCVBUF;

		if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
			setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	}
	/* accepted sockets inherit it: a PONG must leave now, not wait for Nagle */
	if (type == SOCK_STREAM && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
		goto fail;
	*what = "bind";
	if (bind(fd, (const struct sockaddr *)ss, len))
		goto fail;
	*what = "listen";
	if (type == SOCK_STREAM && listen(fd, LISTEN_BACKLOG))
		goto fail;
	return fd;
fail:;
	int rc = -errno;

	close(fd);
	return rc;
}

void hbd_sockets_close(unsigned n, int *tcp, int *udp)
{
	for (unsigned i = 0; i < n; i++) {
		if (tcp[i] >= 0)
			close(tcp[i]);
		if (udp[i] >= 0)
			close(udp[i]);
		tcp[i] = udp[i] = -1;
	}
}

static int try_open(struct sockaddr_storage *ss, socklen_t len, unsigned n, int *tcp, int *udp,
		    uint16_t *port, char *why, size_t whylen)
{
	const char *what = "";
	int rc;

	for (unsigned i = 0; i < n; i++) {
		rc = open_one(SOCK_STREAM, ss, len, &what);
		if (rc < 0)
			goto fail;
		tcp[i] = rc;
		if (i == 0) {
			union {
				struct sockaddr sa;
				struct sockaddr_in in;
				struct sockaddr_in6 in6;
			} got = { 0 };
			socklen_t glen = sizeof(got);

			if (getsockname(tcp[0], &got.sa, &glen)) {
				rc = -errno;
				what = "getsockname";
				goto fail;
			}
			/* sin_port and sin6_port sit at the same offset */
			*port = ntohs(got.sa.sa_family == AF_INET6 ? got.in6.sin6_port
								   : got.in.sin_port);
			set_port(ss, *port);
		}
		rc = open_one(SOCK_DGRAM, ss, len, &what);
		if (rc < 0)
			goto fail;
		udp[i] = rc;
	}
	return 0;
fail:
	snprintf(why, whylen, "%s: %s", what, strerror(-rc));
	hbd_sockets_close(n, tcp, udp);
	return rc;
}

int hbd_sockets_open(const char *bind, uint16_t want_port, unsigned n, int *tcp, int *udp,
		     uint16_t *port, int *family, char *why, size_t whylen)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int rc = 0;

	for (unsigned i = 0; i < n; i++)
		tcp[i] = udp[i] = -1;
	if (parse_bind(bind, want_port, &ss, &len)) {
		snprintf(why, whylen, "--bind %s: not an IPv4 or IPv6 address", bind);
		return -EINVAL;
	}
	*family = ss.ss_family;
	/* an ephemeral TCP port may be taken for UDP: try a few */
	for (int attempt = 0; attempt < 8; attempt++) {
		set_port(&ss, want_port);
		rc = try_open(&ss, len, n, tcp, udp, port, why, whylen);
		if (rc != -EADDRINUSE || want_port)
			break;
	}
	return rc;
}

int hbd_sockets_open_tcp(const char *bind, uint16_t port, unsigned n, int *tcp, char *why,
			 size_t whylen)
{
	struct sockaddr_storage ss;
	const char *what = "";
	socklen_t len;
	int rc;

	for (unsigned i = 0; i < n; i++)
		tcp[i] = -1;
	if (parse_bind(bind, port, &ss, &len)) {
		snprintf(why, whylen, "--bind %s: not an IPv4 or IPv6 address", bind);
		return -EINVAL;
	}
	for (unsigned i = 0; i < n; i++) {
		rc = open_one(SOCK_STREAM, &ss, len, &what);
		if (rc < 0) {
			snprintf(why, whylen, "%s: %s", what, strerror(-rc));
			for (unsigned j = 0; j < i; j++) {
				close(tcp[j]);
				tcp[j] = -1;
			}
			return rc;
		}
		tcp[i] = rc;
	}
	return 0;
}
