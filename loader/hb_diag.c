// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP_INFO of the service's connections through NETLINK_SOCK_DIAG: a port-filtered dump for a
 * listing, an exact 4-tuple lookup for one connection (see hb_diag.h). */
#include "hb_diag.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define RECV_BUF 65536
#define TCP_LISTEN_STATE 10 /* include/net/tcp_states.h, not exported to userspace */
#define RECV_TIMEOUT_S 5 /* a dump of half a million sockets takes well under this */

/* Every state a connection in conns can be in; not LISTEN (the listeners share the port), not
 * TIME_WAIT (a timewait socket carries no tcp_info). Bit n is TCP state n (TCP_ESTABLISHED 1). */
#define CONN_STATES                                                                          \
	((1u << 1) | (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 7) | (1u << 8) | \
	 (1u << 9) | (1u << 11))

struct diag_req {
	struct nlmsghdr nlh;
	struct inet_diag_req_v2 r;
};

static int diag_socket(void)
{
	struct timeval tv = { .tv_sec = RECV_TIMEOUT_S };
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void fill_req(struct diag_req *q, int family, uint16_t flags)
{
	memset(q, 0, sizeof(*q));
	q->nlh.nlmsg_len = sizeof(*q);
	q->nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	q->nlh.nlmsg_flags = NLM_F_REQUEST | flags;
	q->r.sdiag_family = (uint8_t)family;
	q->r.sdiag_protocol = IPPROTO_TCP;
	q->r.idiag_states = CONN_STATES;
	q->r.idiag_ext = 1 << (INET_DIAG_INFO - 1);
	q->r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	q->r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
}

/* One inet_diag message into *out: its cookie and, from INET_DIAG_INFO, RTT and last ACK.
 * False if the message carries no tcp_info, or is a listener: an exact lookup whose 4-tuple
 * names no connection falls back to the listener of the port, as a SYN would. */
static bool parse_msg(const struct nlmsghdr *h, struct hbk_tcp_diag *out)
{
	const struct inet_diag_msg *m = NLMSG_DATA(h);
	int len = (int)h->nlmsg_len - NLMSG_LENGTH(sizeof(*m));
	const struct rtattr *a = (const struct rtattr *)(m + 1);

	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)) || m->idiag_state == TCP_LISTEN_STATE)
		return false;
	out->cookie = (uint64_t)m->id.idiag_cookie[0] | (uint64_t)m->id.idiag_cookie[1] << 32;
	memset(out->peer_addr, 0, sizeof(out->peer_addr));
	if (m->idiag_family == AF_INET) {
		out->peer_addr[10] = out->peer_addr[11] = 0xff;
		memcpy(out->peer_addr + 12, m->id.idiag_dst, 4);
	} else {
		memcpy(out->peer_addr, m->id.idiag_dst, 16);
	}
	out->peer_port = ntohs(m->id.idiag_dport);
	for (; RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		struct tcp_info ti;
		size_t n = RTA_PAYLOAD(a);

		if (a->rta_type != INET_DIAG_INFO)
			continue;
		/* an older kernel's tcp_info is shorter: what it lacks reads as 0 */
		memset(&ti, 0, sizeof(ti));
		memcpy(&ti, RTA_DATA(a), n < sizeof(ti) ? n : sizeof(ti));
		out->rtt_us = ti.tcpi_rtt;
		out->last_ack_ms = ti.tcpi_last_ack_recv;
		return true;
	}
	return false;
}

struct vec {
	struct hbk_tcp_diag *v;
	size_t n, cap;
};

static int push(struct vec *v, const struct hbk_tcp_diag *d)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 256;
		struct hbk_tcp_diag *p = realloc(v->v, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		v->v = p;
		v->cap = cap;
	}
	v->v[v->n++] = *d;
	return 0;
}

/* Sends q and reads the replies until the dump ends (or the single answer of a lookup). */
static int run(int fd, const struct diag_req *q, struct vec *v)
{
	struct sockaddr_nl nl = { .nl_family = AF_NETLINK };
	bool dump = q->nlh.nlmsg_flags & NLM_F_DUMP;
	char *buf;
	int rc = 0;

	if (sendto(fd, q, sizeof(*q), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0)
		return -errno;
	buf = malloc(RECV_BUF);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t k = recv(fd, buf, RECV_BUF, 0);
		int left = (int)k;

		if (k < 0) {
			rc = -errno;
			break;
		}
		for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, left);
		     h = NLMSG_NEXT(h, left)) {
			struct hbk_tcp_diag d = { 0 };

			if (h->nlmsg_type == NLMSG_DONE)
				goto out;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);

				rc = e->error;
				goto out;
			}
			if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY && parse_msg(h, &d) &&
			    (rc = push(v, &d)))
				goto out;
			if (!dump)
				goto out;
		}
	}
out:
	free(buf);
	return rc;
}

static int cmp_cookie(const void *a, const void *b)
{
	const struct hbk_tcp_diag *x = a, *y = b;

	return x->cookie < y->cookie ? -1 : x->cookie > y->cookie;
}

int hbk_diag_dump(uint16_t lport, struct hbk_tcp_diag **out, size_t *n)
{
	static const int families[] = { AF_INET, AF_INET6 };
	struct vec v = { 0 };
	struct diag_req q;
	int fd, rc = 0;

	*out = NULL;
	*n = 0;
	fd = diag_socket();
	if (fd < 0)
		return fd;
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]) && !rc; i++) {
		fill_req(&q, families[i], NLM_F_DUMP);
		q.r.id.idiag_sport = htons(lport); /* filtered in the kernel, after the walk */
		rc = run(fd, &q, &v);
	}
	close(fd);
	if (rc) {
		free(v.v);
		return rc;
	}
	if (v.n)
		qsort(v.v, v.n, sizeof(*v.v), cmp_cookie);
	*out = v.v;
	*n = v.n;
	return 0;
}

const struct hbk_tcp_diag *hbk_diag_find(const struct hbk_tcp_diag *v, size_t n, uint64_t cookie)
{
	struct hbk_tcp_diag key = { .cookie = cookie };

	return n ? bsearch(&key, v, n, sizeof(*v), cmp_cookie) : NULL;
}

/* "10.0.0.2:40000" or "[2001:...]:40000" into family, address and port (host order). */
static int parse_peer(const char *peer, int *family, uint8_t addr[16], uint16_t *port)
{
	char a[64];
	const char *colon;
	size_t len;

	if (peer[0] == '[') {
		colon = strstr(peer, "]:");
		if (!colon)
			return -EINVAL;
		len = (size_t)(colon - peer - 1);
		colon++;
		*family = AF_INET6;
	} else {
		colon = strrchr(peer, ':');
		if (!colon)
			return -EINVAL;
		len = (size_t)(colon - peer);
		*family = AF_INET;
	}
	if (len >= sizeof(a))
		return -EINVAL;
	memcpy(a, peer + (*family == AF_INET6), len);
	a[len] = 0;
	if (inet_pton(*family, a, addr) != 1)
		return -EINVAL;
	*port = (uint16_t)strtoul(colon + 1, NULL, 10);
	return 0;
}

int hbk_diag_lookup(const char *peer, uint16_t lport, uint64_t cookie, struct hbk_tcp_diag *out)
{
	struct ifaddrs *ifs = NULL;
	struct vec v = { 0 };
	uint8_t paddr[16];
	uint16_t pport;
	int family, fd, rc;

	rc = parse_peer(peer, &family, paddr, &pport);
	if (rc)
		return rc;
	if (getifaddrs(&ifs))
		return -errno;
	fd = diag_socket();
	if (fd < 0) {
		freeifaddrs(ifs);
		return fd;
	}
	rc = -ENOENT;
	for (struct ifaddrs *i = ifs; i && !v.n; i = i->ifa_next) {
		struct diag_req q;
		int e;

		if (!i->ifa_addr || i->ifa_addr->sa_family != family)
			continue;
		/* no NLM_F_DUMP: tcp_diag's find-one, a lookup of the 4-tuple; the cookie makes
		 * sure it is this connection and not a newer one on the same ports */
		fill_req(&q, family, 0);
		q.r.id.idiag_sport = htons(lport);
		q.r.id.idiag_dport = htons(pport);
		q.r.id.idiag_cookie[0] = (uint32_t)cookie;
		q.r.id.idiag_cookie[1] = (uint32_t)(cookie >> 32);
		if (family == AF_INET) {
			memcpy(q.r.id.idiag_src,
			       &((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr,
			       4);
			memcpy(q.r.id.idiag_dst, paddr, 4);
		} else {
			memcpy(q.r.id.idiag_src,
			       &((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr,
			       16);
			memcpy(q.r.id.idiag_dst, paddr, 16);
		}
		/* another address: nothing there (-ENOENT), or a socket with another cookie
		 * (-ESTALE), which is not the one asked for either */
		e = run(fd, &q, &v);
		if (e && e != -ENOENT && e != -ESTALE) {
			rc = e;
			break;
		}
	}
	close(fd);
	freeifaddrs(ifs);
	if (v.n) {
		*out = v.v[0];
		rc = 0;
	}
	free(v.v);
	return rc;
}
