// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The test clients: blocking sockets, bounded waits, frames through the real codec. */
#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clients.h"
#include "clock.h"
#include "hbclient.h"
#include "ht_time.h"

uint32_t ht_srv4 = INADDR_LOOPBACK;

int ht_secret(uint64_t dev, uint8_t out[HB_SECRET_MAX])
{
	uint8_t master[32];

	if (dev >= 1 && dev <= 9) {
		for (int i = 0; i < 16; i++)
			out[i] = (uint8_t)(dev * 16 + i);
		return 16;
	}
	hb_hex_decode(HT_MASTER, master, sizeof(master));
	return hb_derive_secret(master, sizeof(master), dev, out) ? -1 : HB_MAC_LEN;
}

int ht_tcp(uint16_t port, bool v6)
{
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
	struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(port) };
	int rc;

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (v6) {
		s6.sin6_addr = in6addr_loopback;
		rc = connect(fd, (struct sockaddr *)&s6, sizeof(s6));
	} else {
		s4.sin_addr.s_addr = htonl(ht_srv4);
		rc = connect(fd, (struct sockaddr *)&s4, sizeof(s4));
	}
	if (rc) {
		close(fd);
		return -1;
	}
	return fd;
}

int ht_bind_src(int fd, const char *src4)
{
	struct sockaddr_in s4 = { .sin_family = AF_INET };

	if (inet_pton(AF_INET, src4, &s4.sin_addr) != 1)
		return -1;
	return bind(fd, (struct sockaddr *)&s4, sizeof(s4));
}

int ht_tcp_from(uint16_t port, const char *src4)
{
	struct sockaddr_in s4 = { .sin_family = AF_INET,
				  .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(ht_srv4) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (ht_bind_src(fd, src4) || connect(fd, (struct sockaddr *)&s4, sizeof(s4))) {
		close(fd);
		return -1;
	}
	return fd;
}

int ht_send_all(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int ht_send_frame(int fd, uint8_t type, uint16_t seq, const void *payload, uint16_t len)
{
	uint8_t buf[HB_MAX_FRAME];
	size_t n = hb_encode(buf, sizeof(buf), HB_TCP, type, seq, 0, payload, len);

	return n ? ht_send_all(fd, buf, n) : -1;
}

ssize_t ht_read_full(int fd, void *buf, size_t n, int ms)
{
	uint8_t *p = buf;
	size_t got = 0;
	uint64_t deadline = ht_now_ms() + (uint64_t)ms;

	while (got < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int left = (int)(deadline > ht_now_ms() ? deadline - ht_now_ms() : 0);
		ssize_t k;

		if (poll(&pfd, 1, left) <= 0)
			return -1;
		k = recv(fd, p + got, n - got, 0);
		if (k == 0)
			return 0;
		if (k < 0)
			return -1;
		got += (size_t)k;
	}
	return (ssize_t)n;
}

int ht_recv_frame(int fd, uint8_t *buf, struct hb_frame *f, int ms)
{
	ssize_t k = ht_read_full(fd, buf, sizeof(struct hb_hdr), ms);
	int rc;

	if (k <= 0)
		return (int)k;
	rc = hb_decode_stream(buf, sizeof(struct hb_hdr), f);
	if (rc < 0)
		return -1;
	if (rc == HB_DECODE_MORE) {
		k = ht_read_full(fd, buf + sizeof(struct hb_hdr), f->size - sizeof(struct hb_hdr),
				 ms);
		if (k <= 0)
			return -1;
		if (hb_decode_stream(buf, f->size, f))
			return -1;
	}
	return 1;
}

bool ht_eof(int fd, int ms)
{
	uint8_t b;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	if (poll(&pfd, 1, ms) <= 0)
		return false;
	return recv(fd, &b, 1, 0) <= 0;
}

void ht_hello(struct hb_hello *h, uint64_t dev, uint64_t ts_ms)
{
	uint8_t s[HB_SECRET_MAX];
	int n = ht_secret(dev, s);
	struct timespec now;

	if (!ts_ms) {
		clock_gettime(CLOCK_REALTIME, &now);
		ts_ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
	}
	hb_hello_sign(h, dev, ts_ms, s, (size_t)n);
}

int ht_tcp_login_flags(uint16_t port, uint64_t dev, bool v6, struct hb_welcome *wel, uint16_t *len,
		       uint32_t *flags)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_hello h;
	struct hb_frame f;
	uint32_t fl = 0;
	int fd = ht_tcp(port, v6);

	if (fd < 0)
		return -1;
	ht_hello(&h, dev, 0);
	if (ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)) ||
	    ht_recv_frame(fd, buf, &f, HT_IO_MS) != 1 || f.type != HB_WELCOME) {
		close(fd);
		return -1;
	}
	if (wel)
		memcpy(wel, f.payload, sizeof(*wel));
	if (f.len == HB_WELCOME_FLAGS_LEN)
		memcpy(&fl, f.payload + sizeof(struct hb_welcome), sizeof(fl));
	if (len)
		*len = f.len;
	if (flags)
		*flags = be32toh(fl);
	return fd;
}

int ht_tcp_login(uint16_t port, uint64_t dev, bool v6, struct hb_welcome *wel)
{
	return ht_tcp_login_flags(port, dev, v6, wel, NULL, NULL);
}

bool ht_expect(int fd, uint8_t type, int code)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;

	if (ht_recv_frame(fd, buf, &f, HT_IO_MS) != 1) {
		fprintf(stderr, "expected %s, got nothing\n", hb_type_str(type));
		return false;
	}
	if (f.type != type) {
		fprintf(stderr, "expected %s, got %s\n", hb_type_str(type), hb_type_str(f.type));
		return false;
	}
	if (code >= 0 && (type == HB_ERROR || type == HB_BYE)) {
		uint16_t c = (uint16_t)(f.payload[0] << 8 | f.payload[1]);

		if (c != code) {
			fprintf(stderr, "expected %s %d, got %u\n", hb_type_str(type), code, c);
			return false;
		}
	}
	return true;
}

int ht_udp(bool v6)
{
	return socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
}

int ht_udp_send(int fd, uint16_t port, bool v6, uint8_t type, uint16_t seq, uint64_t token,
		const void *payload, uint16_t len)
{
	uint8_t buf[HB_MAX_FRAME];
	size_t n = hb_encode(buf, sizeof(buf), HB_UDP, type, seq, token, payload, len);
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6,
				   .sin6_port = htons(port),
				   .sin6_addr = in6addr_loopback };
	struct sockaddr_in s4 = { .sin_family = AF_INET,
				  .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(ht_srv4) };

	if (!n)
		return -1;
	if (v6)
		return sendto(fd, buf, n, 0, (struct sockaddr *)&s6, sizeof(s6)) == (ssize_t)n ? 0
											       : -1;
	return sendto(fd, buf, n, 0, (struct sockaddr *)&s4, sizeof(s4)) == (ssize_t)n ? 0 : -1;
}

int ht_udp_send_raw(int fd, uint16_t port, const void *buf, size_t n)
{
	struct sockaddr_in s4 = { .sin_family = AF_INET,
				  .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(ht_srv4) };

	return sendto(fd, buf, n, 0, (struct sockaddr *)&s4, sizeof(s4)) == (ssize_t)n ? 0 : -1;
}

int ht_udp_recv(int fd, uint8_t *buf, struct hb_frame *f, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (poll(&pfd, 1, ms) <= 0)
		return -1;
	n = recv(fd, buf, HB_MAX_FRAME, 0);
	if (n <= 0 || hb_decode_dgram(buf, (size_t)n, f))
		return -1;
	return 1;
}

uint64_t ht_udp_login(int fd, uint16_t port, bool v6, uint64_t dev)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_hello h;
	struct hb_frame f;

	ht_hello(&h, dev, 0);
	if (ht_udp_send(fd, port, v6, HB_HELLO, 1, 0, &h, sizeof(h)) ||
	    ht_udp_recv(fd, buf, &f, HT_IO_MS) != 1 || f.type != HB_WELCOME)
		return 0;
	if (hb_get_be64(f.payload) != f.token)
		return 0;
	return f.token;
}

int ht_v2_login(int fd, uint16_t port, uint64_t dev, struct hbc *c)
{
	uint8_t secret[HB_SECRET_MAX], buf[HB_MAX_FRAME];
	struct hb_frame f;
	struct hbc_ev ev;
	int slen = ht_secret(dev, secret), n;

	hbc_init(c, dev, HB_UDP);
	if (slen < 0 || hbc_use_v2(c))
		return -1;
	n = hbc_hello(c, buf, sizeof(buf), secret, (size_t)slen, hb_realtime_ms());
	if (n <= 0 || ht_udp_send_raw(fd, port, buf, (size_t)n))
		return -1;
	if (ht_udp_recv(fd, buf, &f, HT_IO_MS) != 1)
		return -1;
	return hbc_input(c, &f, 0, &ev) == HBC_EV_WELCOME ? 0 : -1;
}
