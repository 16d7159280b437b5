// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd's limits, one daemon each with the limit set low: what a client sees when it is reached,
 * that it is counted, and that clients within their limits are not touched. Loopback sources
 * 127.0.0.x stand in for distinct addresses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "lib/ht_assert.h"
#include "lib/ctl.h"
#include "lib/hbd_harness.h"

static void ping_ok(int fd, uint16_t seq)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping p = { .ts = htobe64(seq) };
	struct hb_frame f;

	HT_EQ(ht_send_frame(fd, HB_PING, seq, &p, sizeof(p)), 0, "PING %u sent", seq);
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to PING %u within %d ms", seq,
	      HT_IO_MS);
	HT_EQ(f.type, HB_PONG, "frame type of the answer to PING %u", seq);
	HT_EQ(f.seq, seq, "sequence number of the PONG");
}

/* Logs in over TCP from a given source. */
static int login_from(uint16_t port, const char *src, uint64_t dev)
{
	struct hb_hello h;
	int fd = ht_tcp_from(port, src);

	if (fd < 0)
		return -1;
	ht_hello(&h, dev, 0);
	if (ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)) || !ht_expect(fd, HB_WELCOME, -1)) {
		close(fd);
		return -1;
	}
	return fd;
}

static int udp_from(const char *src)
{
	int fd = ht_udp(false);

	HT_GE(fd, 0, "UDP socket for source %s", src);
	HT_EQ(ht_bind_src(fd, src), 0, "bind to source address %s", src);
	return fd;
}

static bool udp_silent(int fd, int ms)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;

	return ht_udp_recv(fd, buf, &f, ms) != 1;
}

static void stop_expect(struct ht_daemon *d, const char *counter, long long at_least)
{
	HT_EQ(ht_stop(d), 0, "exit code of hbd after SIGTERM");
	HT_GE(ht_exit_stat(d, counter), at_least, "the %s exit counter", counter);
	HT_EQ(ht_exit_stat(d, "errors"), 0, "the errors exit counter");
	ht_cleanup(d);
}

static void max_per_source(void **state)
{
	static const char *const args[] = { "--no-offload",	"--workers", "2",
					    "--max-per-source", "3",	     NULL };
	struct ht_daemon d;
	int a[3], extra, other, again = -1;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --max-per-source 3 started");
	for (int i = 0; i < 3; i++)
		HT_GE((a[i] = login_from(d.port, "127.0.0.1", (uint64_t)(1 + i))), 0,
		      "login %d of 3 from 127.0.0.1", i + 1);
	/* the fourth from the same address is refused, cleanly */
	extra = ht_tcp_from(d.port, "127.0.0.1");
	HT_TRUE(ht_expect(extra, HB_ERROR, HB_ERR_FULL),
		"ERROR(FULL) for a fourth client from 127.0.0.1");
	HT_TRUE(ht_eof(extra, HT_IO_MS), "close after ERROR(FULL)");
	close(extra);
	/* another address is not affected, nor are the three */
	HT_GE((other = login_from(d.port, "127.0.0.2", 5)), 0,
	      "login from another address, 127.0.0.2");
	for (int i = 0; i < 3; i++)
		ping_ok(a[i], (uint16_t)(10 + i));
	/* one leaves: room for one more from there (bounded wait for the close to be seen) */
	close(a[0]);
	for (int i = 0; i < 100 && again < 0; i++) {
		again = login_from(d.port, "127.0.0.1", 4);
		if (again < 0)
			ht_sleep_ms(20);
	}
	HT_GE(again, 0, "login from 127.0.0.1 again within 2 s of one leaving");
	close(again);
	close(other);
	close(a[1]);
	close(a[2]);
	stop_expect(&d, "refused_per_source", 1);
}

/* Slowloris: a HELLO dribbled a byte at a time never completes within --hello-timeout. */
static void hello_timeout(void **state)
{
	static const char *const args[] = { "--no-offload", "--hello-timeout", "0.5", NULL };
	uint8_t frame[HB_MAX_FRAME];
	struct ht_daemon d;
	struct hb_hello h;
	int slow, good;
	uint64_t t0;
	size_t n;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --hello-timeout 0.5 started");
	good = ht_tcp_login(d.port, 1, false, NULL);
	slow = ht_tcp(d.port, false);
	HT_TRUE(good >= 0 && slow >= 0, "the good login (fd %d) and the slow connection (fd %d)",
		good, slow);
	ht_hello(&h, 2, 0);
	n = hb_encode(frame, sizeof(frame), HB_TCP, HB_HELLO, 1, 0, &h, sizeof(h));
	t0 = ht_now_ms();
	for (size_t i = 0; i < n - 1 && ht_now_ms() - t0 < 3000; i++) {
		if (send(slow, frame + i, 1, MSG_NOSIGNAL) != 1)
			break; /* closed under us: that is the point */
		ping_ok(good, (uint16_t)i);
		ht_sleep_ms(50);
	}
	HT_TRUE(ht_expect(slow, HB_BYE, HB_BYE_EXPIRED),
		"BYE(EXPIRED) to the HELLO dribbled a byte at a time");
	HT_TRUE(ht_eof(slow, HT_IO_MS), "close of the slow connection");
	HT_LT(ht_now_ms() - t0, 2000, "the slow connection closed within 2 s");
	ping_ok(good, 999);
	close(slow);
	close(good);
	stop_expect(&d, "hello_timeout", 1);
}

static void send_bad_hello(int fd, uint64_t dev)
{
	struct hb_hello h;

	ht_hello(&h, dev, 0);
	h.mac[0] ^= 1;
	HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0, "HELLO with a bad MAC sent");
}

/* Failed HELLOs are rate limited per source, on TCP and UDP; other sources are unaffected. */
static void auth_failures_rate_limited(void **state)
{
	static const char *const args[] = {
		"--no-offload", "--auth-fail-rate", "2", "--auth-fail-burst", "3", NULL
	};
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	struct hb_hello h;
	struct ht_daemon d;
	int fd, u, ok;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --auth-fail-rate 2 --auth-fail-burst 3 started");
	for (int i = 0; i < 3; i++) { /* the burst: refused after checking */
		fd = ht_tcp_from(d.port, "127.0.0.5");
		send_bad_hello(fd, 1);
		HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_AUTH),
			"ERROR(AUTH) for bad HELLO %d of the burst", i + 1);
		close(fd);
	}
	/* now a failure from there gets ERROR(RATE); a device that proves itself still gets in
	 * (devices behind one NAT share the address with whoever spent its budget) */
	fd = ht_tcp_from(d.port, "127.0.0.5");
	send_bad_hello(fd, 1);
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_RATE),
		"ERROR(RATE) for a bad HELLO from a source over its budget");
	close(fd);
	HT_GE((ok = login_from(d.port, "127.0.0.5", 4)), 0,
	      "login of device 4 from the source over its budget, with a good MAC");
	close(ok);
	HT_GE((ok = login_from(d.port, "127.0.0.6", 2)), 0, "login from another source, 127.0.0.6");
	close(ok);
	/* the budget refills at 2/s: one more try after 0.6 s */
	ht_sleep_ms(600);
	HT_GE((ok = login_from(d.port, "127.0.0.5", 1)), 0,
	      "login from 127.0.0.5 once its budget refilled (0.6 s)");
	close(ok);

	/* UDP: the same per source, but a limited source gets no answer at all */
	u = udp_from("127.0.0.7");
	for (int i = 0; i < 3; i++) {
		ht_hello(&h, 3, 0);
		h.mac[0] ^= 1;
		HT_EQ(ht_udp_send(u, d.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0,
		      "bad UDP HELLO %d of the burst sent", i + 1);
		HT_EQ(ht_udp_recv(u, buf, &f, HT_IO_MS), 1,
		      "an answer to bad UDP HELLO %d within %d ms", i + 1, HT_IO_MS);
		HT_EQ(f.type, HB_ERROR, "frame type of the answer to a bad UDP HELLO");
	}
	ht_hello(&h, 3, 0);
	h.mac[0] ^= 1;
	HT_EQ(ht_udp_send(u, d.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0,
	      "bad UDP HELLO from the limited source sent");
	HT_TRUE(udp_silent(u, 300), "no answer at all to a bad HELLO from a UDP source over its "
				    "budget");
	HT_NE(ht_udp_login(u, d.port, false, 5), 0,
	      "UDP login of device 5 from the source over its budget, with a good MAC");
	close(u);
	u = udp_from("127.0.0.8");
	HT_NE(ht_udp_login(u, d.port, false, 3), 0, "UDP login from another source, 127.0.0.8");
	close(u);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "auth_fail"), 6, "the auth_fail exit counter (3 TCP + 3 UDP)");
	HT_EQ(ht_exit_stat(&d, "auth_rate_limited"), 2,
	      "the auth_rate_limited exit counter (1 TCP + 1 UDP)");
	ht_cleanup(&d);
}

/* DATA beyond --data-rate: TCP gets ERROR(RATE) and is closed, UDP is not ACKed. */
static void data_rate(void **state)
{
	static const char *const args[] = { "--no-offload", "--data-rate", "1",
					    "--data-burst", "5",	   NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct ht_daemon d;
	struct hb_frame f;
	int fd, u, other;
	uint64_t tok;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --data-rate 1 --data-burst 5 started");
	fd = ht_tcp_login(d.port, 1, false, NULL);
	other = ht_tcp_login(d.port, 2, false, NULL);
	HT_TRUE(fd >= 0 && other >= 0, "logins of device 1 (fd %d) and device 2 (fd %d)", fd,
		other);
	for (uint16_t i = 0; i < 5; i++) {
		HT_EQ(ht_send_frame(fd, HB_DATA, i, "d", 1), 0, "DATA %u of the burst sent", i);
		HT_TRUE(ht_expect(fd, HB_ACK, -1), "ACK for DATA %u of the burst", i);
	}
	HT_EQ(ht_send_frame(fd, HB_DATA, 5, "d", 1), 0, "DATA beyond the burst sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_RATE), "ERROR(RATE) for DATA beyond the burst");
	HT_TRUE(ht_eof(fd, HT_IO_MS), "close after ERROR(RATE)");
	close(fd);
	/* the other device has its own budget */
	HT_EQ(ht_send_frame(other, HB_DATA, 1, "o", 1), 0, "DATA of the other device sent");
	HT_TRUE(ht_expect(other, HB_ACK, -1), "ACK for the other device's DATA (its own budget)");
	close(other);

	u = ht_udp(false);
	tok = ht_udp_login(u, d.port, false, 3);
	HT_NE(tok, 0, "UDP login of device 3");
	for (uint16_t i = 0; i < 5; i++) {
		HT_EQ(ht_udp_send(u, d.port, false, HB_DATA, i, tok, "u", 1), 0,
		      "UDP DATA %u of the burst sent", i);
		HT_EQ(ht_udp_recv(u, buf, &f, HT_IO_MS), 1, "an answer to UDP DATA %u within %d ms",
		      i, HT_IO_MS);
		HT_EQ(f.type, HB_ACK, "frame type of the answer to UDP DATA %u", i);
	}
	HT_EQ(ht_udp_send(u, d.port, false, HB_DATA, 5, tok, "u", 1), 0,
	      "UDP DATA beyond the burst sent");
	HT_TRUE(udp_silent(u, 300), "no ACK for UDP DATA beyond the burst");
	close(u);
	stop_expect(&d, "data_rate_limited", 2);
}

/* --max-payload: a larger TCP frame closes the connection, a larger datagram is dropped. */
static void max_payload(void **state)
{
	static const char *const args[] = { "--no-offload", "--max-payload", "100", NULL };
	uint8_t big[101] = { 0 };
	struct ht_daemon d;
	int fd, u;
	uint64_t tok;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --max-payload 100 started");
	fd = ht_tcp_login(d.port, 1, false, NULL);
	HT_GE(fd, 0, "login of device 1");
	HT_EQ(ht_send_frame(fd, HB_ECHO, 1, big, 100), 0, "ECHO of 100 bytes sent");
	HT_TRUE(ht_expect(fd, HB_ECHO, -1), "ECHO of 100 bytes (the limit) reflected");
	HT_EQ(ht_send_frame(fd, HB_DATA, 2, big, 101), 0, "DATA of 101 bytes sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_TOO_LARGE),
		"ERROR(TOO_LARGE) for 101 bytes over --max-payload 100");
	HT_TRUE(ht_eof(fd, HT_IO_MS), "close after ERROR(TOO_LARGE)");
	close(fd);
	u = ht_udp(false);
	tok = ht_udp_login(u, d.port, false, 2);
	HT_NE(tok, 0, "UDP login of device 2");
	HT_EQ(ht_udp_send(u, d.port, false, HB_ECHO, 1, tok, big, 101), 0,
	      "UDP ECHO of 101 bytes sent");
	HT_TRUE(udp_silent(u, 300), "no answer to a UDP ECHO over --max-payload");
	close(u);
	stop_expect(&d, "too_large", 2);
}

/* --max-payload limits DATA, ECHO and DOWN payloads only: below the 56 bytes of a HELLO (or
 * the 8 of a PING) every TCP device could still log in before; it was refused TOO_LARGE. */
static void max_payload_below_hello(void **state)
{
	static const char *const args[] = { "--no-offload", "--max-payload", "4", NULL };
	uint8_t big[5] = { 0 };
	char ctl[108], line[512];
	struct ht_daemon d;
	int fd, u;
	uint64_t tok;

	(void)state;
	HT_EQ(tc_start(&d, ctl, sizeof(ctl), false, NULL, args), 0,
	      "hbd with --max-payload 4 started");
	fd = ht_tcp_login(d.port, 1, false, NULL);
	HT_GE(fd, 0, "TCP login of device 1 (a 56-byte HELLO) with --max-payload 4");
	ping_ok(fd, 1); /* a PING's 8 bytes are no DATA */
	HT_EQ(ht_send_frame(fd, HB_ECHO, 2, big, 4), 0, "ECHO of 4 bytes sent");
	HT_TRUE(ht_expect(fd, HB_ECHO, -1), "ECHO of 4 bytes (the limit) reflected");
	HT_EQ(ht_send_frame(fd, HB_ECHO, 3, big, 5), 0, "ECHO of 5 bytes sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_TOO_LARGE), "ERROR(TOO_LARGE) for a 5-byte ECHO");
	close(fd);
	fd = ht_tcp_login(d.port, 2, true, NULL);
	HT_GE(fd, 0, "TCP login of device 2 over IPv6");
	HT_EQ(ht_send_frame(fd, HB_DATA, 1, big, 5), 0, "DATA of 5 bytes sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_TOO_LARGE), "ERROR(TOO_LARGE) for 5 bytes of DATA");
	close(fd);
	u = ht_udp(false);
	tok = ht_udp_login(u, d.port, false, 3);
	HT_NE(tok, 0, "UDP login of device 3 with --max-payload 4");
	close(u);
	/* DOWN: the control socket takes no larger downlink ("AAAAAAA=" is 5 bytes) */
	HT_EQ(tc_req(ctl, "send 9 AAAAAAA=\n", line, sizeof(line)), 0, "reply to a 5-byte send");
	if (!strstr(line, "\"error\":\"payload must be base64 of 1..4 bytes\""))
		fail_msg("reply to a 5-byte downlink with --max-payload 4: %s", line);
	HT_EQ(tc_req(ctl, "send 9 AAAAAA==\n", line, sizeof(line)), 0, "reply to a 4-byte send");
	if (!strstr(line, "\"status\":\"offline\""))
		fail_msg("reply to a 4-byte downlink to an absent device: %s", line);
	stop_expect(&d, "too_large", 2);
	tc_cleanup(&d);
}

/* A client that sends ECHOs and never reads is closed once --max-output bytes wait for it. */
static void slow_reader(void **state)
{
	static const char *const args[] = { "--no-offload", "--max-output", "8192", NULL };
	uint8_t payload[1000] = { 0 }, frame[HB_MAX_FRAME];
	struct ht_daemon d;
	int fd, good, small = 4096;
	size_t n;
	uint64_t t0;
	bool closed = false;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --max-output 8192 started");
	good = ht_tcp_login(d.port, 1, false, NULL);
	HT_GE(good, 0, "login of device 1");
	/* a small receive window, set before connecting so it is the one advertised */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	{
		struct sockaddr_in s4 = { .sin_family = AF_INET,
					  .sin_port = htons(d.port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		struct hb_hello h;

		HT_EQ(connect(fd, (struct sockaddr *)&s4, sizeof(s4)), 0,
		      "connect of the client with a small receive window");
		ht_hello(&h, 2, 0);
		HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0,
		      "HELLO of the slow reader sent");
		HT_TRUE(ht_expect(fd, HB_WELCOME, -1), "WELCOME for the slow reader");
	}
	fcntl(fd, F_SETFL, O_NONBLOCK);
	n = hb_encode(frame, sizeof(frame), HB_TCP, HB_ECHO, 1, 0, payload, sizeof(payload));
	t0 = ht_now_ms();
	/* keep sending until the daemon gives up on us (a reset or EPIPE), 10 s at most */
	while (!closed && ht_now_ms() - t0 < 10000) {
		ssize_t k = send(fd, frame, n, MSG_NOSIGNAL);

		if (k < 0 && errno != EAGAIN)
			closed = true;
		else if (k < 0)
			ht_sleep_ms(1);
	}
	HT_TRUE(closed, "hbd closed the client that never reads within 10 s");
	ping_ok(good, 1);
	close(fd);
	close(good);
	stop_expect(&d, "slow_reader", 1);
}

/* --accept-rate: a burst beyond it waits in the kernel's queue and is served later, none
 * refused.
 */
static void accept_rate(void **state)
{
	static const char *const args[] = { "--no-offload",  "--workers", "1",
					    "--accept-rate", "40",	  NULL };
	enum { N = 100 };
	struct ht_daemon d;
	struct hb_hello h;
	int fd[N], welcomed = 0;
	uint64_t t0;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --accept-rate 40 started");
	t0 = ht_now_ms();
	for (int i = 0; i < N; i++) {
		fd[i] = ht_tcp(d.port, false); /* completes in the kernel's listen queue */
		HT_GE(fd[i], 0, "connection %d of the burst", i);
		ht_hello(&h, (uint64_t)(100 + i), 0);
		HT_EQ(ht_send_frame(fd[i], HB_HELLO, 1, &h, sizeof(h)), 0,
		      "HELLO %d of the burst sent", i);
	}
	for (int i = 0; i < N; i++) {
		if (ht_expect(fd[i], HB_WELCOME, -1))
			welcomed++;
		close(fd[i]);
	}
	printf("accept rate: %d of %d welcomed in %llu ms\n", welcomed, N,
	       (unsigned long long)(ht_now_ms() - t0));
	HT_EQ(welcomed, N, "clients of the burst welcomed");
	/* a burst of 40 (one second's worth), then 40/s: 100 take at least 1.5 s */
	HT_GE(ht_now_ms() - t0, 1200, "ms the 100 clients took to be welcomed");
	stop_expect(&d, "accept_paused", 1);
}

/* --max-clients for UDP sessions: the one too many gets ERROR(FULL). */
static void udp_max_clients(void **state)
{
	static const char *const args[] = { "--no-offload", "--max-clients", "2", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct ht_daemon d;
	struct hb_frame f;
	struct hb_hello h;
	int u[3];

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --max-clients 2 started");
	for (int i = 0; i < 2; i++) {
		u[i] = ht_udp(false);
		HT_NE(ht_udp_login(u[i], d.port, false, (uint64_t)(1 + i)), 0,
		      "UDP login of device %d", 1 + i);
	}
	u[2] = ht_udp(false);
	ht_hello(&h, 3, 0);
	HT_EQ(ht_udp_send(u[2], d.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0,
	      "UDP HELLO of a third device sent");
	HT_EQ(ht_udp_recv(u[2], buf, &f, HT_IO_MS), 1, "an answer to the third HELLO within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_ERROR, "frame type of the answer to a third device");
	HT_EQ(be16toh(*(uint16_t *)f.payload), HB_ERR_FULL, "ERROR code for a third device");
	for (int i = 0; i < 3; i++)
		close(u[i]);
	stop_expect(&d, "full", 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(max_per_source, ht_reap),
		cmocka_unit_test_teardown(hello_timeout, ht_reap),
		cmocka_unit_test_teardown(auth_failures_rate_limited, ht_reap),
		cmocka_unit_test_teardown(data_rate, ht_reap),
		cmocka_unit_test_teardown(max_payload, ht_reap),
		cmocka_unit_test_teardown(max_payload_below_hello, tc_reap),
		cmocka_unit_test_teardown(slow_reader, ht_reap),
		cmocka_unit_test_teardown(accept_rate, ht_reap),
		cmocka_unit_test_teardown(udp_max_clients, ht_reap),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("hbd_limits", tests, NULL, NULL);
}
