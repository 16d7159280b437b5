// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The hbload tests' own responder: one epoll thread answering TCP and UDP heartbeats. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "hbload_responder.h"
#include "proto.h"

#define RSP_MAX_FD 65536
#define RSP_MAX_UDP 8192

struct rsp_conn {
	uint8_t buf[HB_MAX_FRAME * 2];
	uint32_t len;
	uint8_t authed;
	uint64_t last_ms;
};

struct rsp_udp {
	uint64_t token;
	struct sockaddr_storage peer;
	socklen_t plen;
	uint64_t last_ms;
	uint32_t pings; /* PINGs of this session so far */
};

static uint64_t rsp_ms(int clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void rsp_close(struct responder *r, int fd)
{
	epoll_ctl(r->ep, EPOLL_CTL_DEL, fd, NULL);
	free(r->conn[fd]);
	r->conn[fd] = NULL;
	/* abortive close: the tests start hbload runs back to back on the same ports */
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &(struct linger){ 1, 0 }, sizeof(struct linger));
	close(fd);
	r->tcp_open--;
}

static void rsp_send_tcp(int fd, uint8_t type, uint16_t seq, const void *p, uint16_t len)
{
	uint8_t out[HB_MAX_FRAME];
	size_t n = hb_encode(out, sizeof(out), HB_TCP, type, seq, 0, p, len);

	/* a full socket buffer drops the reply: the client counts it as lost */
	if (n)
		(void)send(fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static int rsp_hello(struct responder *r, const struct hb_frame *f, struct hb_welcome *w)
{
	struct hb_hello h;

	r->hellos++;
	memcpy(&h, f->payload, sizeof(h));
	if (hb_hello_verify(r->ks, &h, rsp_ms(CLOCK_REALTIME), 30000) != HB_AUTH_OK) {
		r->auth_fail++;
		return -1;
	}
	uint64_t tok;
	do
		hb_random(&tok, sizeof(tok));
	while (!tok);
	hb_put_be64(&w->token, tok);
	w->interval_ms = htonl(r->interval_ms);
	w->timeout_ms = htonl(r->timeout_ms);
	return 0;
}

/* One TCP frame; returns -1 if the connection must close. */
static int rsp_tcp_frame(struct responder *r, int fd, const struct hb_frame *f)
{
	struct rsp_conn *c = r->conn[fd];
	struct hb_welcome w;
	struct hb_error e = { .code = htons(HB_ERR_AUTH) };

	if (f->type == HB_HELLO) {
		if (rsp_hello(r, f, &w)) {
			rsp_send_tcp(fd, HB_ERROR, f->seq, &e, sizeof(e));
			return -1;
		}
		c->authed = 1;
		rsp_send_tcp(fd, HB_WELCOME, f->seq, &w, sizeof(w));
		return 0;
	}
	if (f->type == HB_BYE) {
		r->byes_rx++;
		return -1;
	}
	if (!c->authed) {
		e.code = htons(HB_ERR_NOT_AUTHED);
		rsp_send_tcp(fd, HB_ERROR, f->seq, &e, sizeof(e));
		return 0;
	}
	switch (f->type) {
	case HB_PING:
		c->last_ms = rsp_ms(CLOCK_MONOTONIC);
		r->pongs++;
		rsp_send_tcp(fd, HB_PONG, f->seq, f->payload, f->len);
		return 0;
	case HB_DATA:
		r->acks++;
		rsp_send_tcp(fd, HB_ACK, f->seq, NULL, 0);
		return 0;
	case HB_ECHO:
		r->echoes++;
		rsp_send_tcp(fd, HB_ECHO, f->seq, f->payload, f->len);
		return 0;
	default:
		return -1;
	}
}

static void rsp_tcp_read(struct responder *r, int fd)
{
	struct rsp_conn *c = r->conn[fd];
	ssize_t n = recv(fd, c->buf + c->len, sizeof(c->buf) - c->len, MSG_DONTWAIT);
	size_t off = 0;

	if (n == 0 || (n < 0 && errno != EAGAIN)) {
		rsp_close(r, fd);
		return;
	}
	if (n < 0)
		return;
	c->len += (uint32_t)n;
	for (;;) {
		struct hb_frame f;
		int rc = hb_decode_stream(c->buf + off, c->len - off, &f);

		if (rc == HB_DECODE_MORE)
			break;
		if (rc < 0 || rsp_tcp_frame(r, fd, &f)) {
			rsp_close(r, fd);
			return;
		}
		off += f.size;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= (uint32_t)off;
}

static struct rsp_udp *rsp_udp_find(struct responder *r, uint64_t token)
{
	for (unsigned i = 0; i < r->nudp; i++)
		if (r->udp[i].token == token)
			return &r->udp[i];
	return NULL;
}

static void rsp_udp_read(struct responder *r)
{
	uint8_t in[2048], out[HB_MAX_FRAME];
	struct sockaddr_storage peer;
	socklen_t plen = sizeof(peer);
	struct hb_frame f;
	struct hb_welcome w;
	struct rsp_udp *s;
	uint8_t type;
	size_t n;
	ssize_t got =
		recvfrom(r->ufd, in, sizeof(in), MSG_DONTWAIT, (struct sockaddr *)&peer, &plen);

	if (got <= 0 || hb_decode_dgram(in, (size_t)got, &f))
		return;
	if (f.type == HB_HELLO) {
		struct hb_error e = { .code = htons(HB_ERR_AUTH) };

		if (rsp_hello(r, &f, &w) || r->nudp >= RSP_MAX_UDP) {
			n = hb_encode(out, sizeof(out), HB_UDP, HB_ERROR, f.seq, 0, &e, sizeof(e));
		} else {
			s = &r->udp[r->nudp++];
			s->token = hb_get_be64(&w.token);
			s->peer = peer;
			s->plen = plen;
			s->last_ms = rsp_ms(CLOCK_MONOTONIC);
			s->pings = 0;
			n = hb_encode(out, sizeof(out), HB_UDP, HB_WELCOME, f.seq, s->token, &w,
				      sizeof(w));
		}
		sendto(r->ufd, out, n, 0, (struct sockaddr *)&peer, plen);
		return;
	}
	s = rsp_udp_find(r, f.token);
	if (!s)
		return; /* unknown sessions get nothing back: no reflection */
	type = f.type;
	switch (f.type) {
	case HB_PING:
		s->last_ms = rsp_ms(CLOCK_MONOTONIC);
		if (++s->pings == r->udp_drop_ping) {
			r->pongs_dropped++;
			return;
		}
		r->pongs++;
		type = HB_PONG;
		break;
	case HB_DATA:
		r->acks++;
		n = hb_encode(out, sizeof(out), HB_UDP, HB_ACK, f.seq, f.token, NULL, 0);
		sendto(r->ufd, out, n, 0, (struct sockaddr *)&peer, plen);
		return;
	case HB_ECHO:
		r->echoes++;
		break;
	case HB_BYE:
		r->byes_rx++;
		*s = r->udp[--r->nudp];
		return;
	default:
		return;
	}
	n = hb_encode(out, sizeof(out), HB_UDP, type, f.seq, f.token, f.payload, f.len);
	sendto(r->ufd, out, n, 0, (struct sockaddr *)&peer, plen);
}

static void rsp_expire(struct responder *r)
{
	uint64_t now = rsp_ms(CLOCK_MONOTONIC);
	struct hb_bye b = { .reason = htons(HB_BYE_EXPIRED) };

	for (int fd = 0; fd < RSP_MAX_FD; fd++) {
		struct rsp_conn *c = r->conn[fd];

		if (c && c->authed && now - c->last_ms > r->timeout_ms) {
			rsp_send_tcp(fd, HB_BYE, 0, &b, sizeof(b));
			r->expired_tcp++;
			rsp_close(r, fd);
		}
	}
	for (unsigned i = 0; i < r->nudp;) {
		if (now - r->udp[i].last_ms > r->timeout_ms) {
			r->expired_udp++;
			r->udp[i] = r->udp[--r->nudp];
		} else {
			i++;
		}
	}
}

int rsp_open(struct responder *r, int family, uint16_t port, int reuseport)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	int one = 1;

	r->family = family;
	r->conn = calloc(RSP_MAX_FD, sizeof(*r->conn));
	r->udp = calloc(RSP_MAX_UDP, sizeof(*r->udp));
	if (family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;

		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a->sin_port = htons(port);
		len = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;

		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		a->sin6_port = htons(port);
		len = sizeof(*a);
	}
	r->lfd = socket(family, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(r->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (reuseport)
		setsockopt(r->lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (bind(r->lfd, (struct sockaddr *)&ss, len) || listen(r->lfd, 4096))
		return -errno;
	getsockname(r->lfd, (struct sockaddr *)&ss, &len);
	r->port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					  : ((struct sockaddr_in6 *)&ss)->sin6_port);
	r->ufd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	if (reuseport)
		setsockopt(r->ufd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	/* hbload's closing BYEs come as one burst of hundreds of small datagrams: the default
	 * receive buffer holds ~256 of them, fewer than a slow (sanitized) responder needs */
	int rcvbuf = 8 << 20;

	if (setsockopt(r->ufd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)))
		setsockopt(r->ufd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	/* the UDP port is the TCP one: hbload takes one --port */
	if (bind(r->ufd, (struct sockaddr *)&ss, len))
		return -errno;
	r->ep = epoll_create1(0);
	epoll_ctl(r->ep, EPOLL_CTL_ADD, r->lfd,
		  &(struct epoll_event){ .events = EPOLLIN, .data.fd = r->lfd });
	epoll_ctl(r->ep, EPOLL_CTL_ADD, r->ufd,
		  &(struct epoll_event){ .events = EPOLLIN, .data.fd = r->ufd });
	return 0;
}

void rsp_serve(struct responder *r)
{
	struct epoll_event ev[256];
	uint64_t last_expire = rsp_ms(CLOCK_MONOTONIC);

	while (!r->stop) {
		int n = epoll_wait(r->ep, ev, 256, 20);

		for (int i = 0; i < n; i++) {
			int fd = ev[i].data.fd;

			if (fd == r->lfd) {
				int c;

				while ((c = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					int one = 1;

					if (c >= RSP_MAX_FD) {
						close(c);
						continue;
					}
					setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					r->conn[c] = calloc(1, sizeof(struct rsp_conn));
					r->conn[c]->last_ms = rsp_ms(CLOCK_MONOTONIC);
					r->tcp_open++;
					if (r->tcp_open > r->tcp_peak)
						r->tcp_peak = r->tcp_open;
					epoll_ctl(r->ep, EPOLL_CTL_ADD, c,
						  &(struct epoll_event){ .events = EPOLLIN,
									 .data.fd = c });
				}
			} else if (fd == r->ufd) {
				for (int k = 0; k < 64; k++)
					rsp_udp_read(r);
			} else if (r->conn[fd]) {
				rsp_tcp_read(r, fd);
			}
		}
		if (rsp_ms(CLOCK_MONOTONIC) - last_expire >= 50) {
			rsp_expire(r);
			last_expire = rsp_ms(CLOCK_MONOTONIC);
		}
	}
}

void rsp_shutdown(struct responder *r)
{
	for (int fd = 0; fd < RSP_MAX_FD; fd++)
		if (r->conn[fd])
			rsp_close(r, fd);
	close(r->lfd);
	close(r->ufd);
	close(r->ep);
	free(r->conn);
	free(r->udp);
}
