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
#include <sys/wait.h>

#include "lib/hbd_harness.h"

static void ping_ok(int fd, uint16_t seq)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping p = { .ts = htobe64(seq) };
	struct hb_frame f;

	assert_int_equal(ht_send_frame(fd, HB_PING, seq, &p, sizeof(p)), 0);
	assert_int_equal(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1);
	assert_int_equal(f.type, HB_PONG);
	assert_int_equal(f.seq, seq);
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

	assert_true(fd >= 0);
	assert_int_equal(ht_bind_src(fd, src), 0);
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
	assert_int_equal(ht_stop(d), 0);
	if (ht_exit_stat(d, counter) < at_least)
		fail_msg("%s = %lld, expected at least %lld", counter, ht_exit_stat(d, counter),
			 at_least);
	assert_int_equal(ht_exit_stat(d, "errors"), 0);
	ht_cleanup(d);
}

static void max_per_source(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "2", "--max-per-source",
					    "3", NULL };
	struct ht_daemon d;
	int a[3], extra, other, again = -1;

	(void)state;
	assert_int_equal(ht_start(&d, args), 0);
	for (int i = 0; i < 3; i++)
		assert_true((a[i] = login_from(d.port, "127.0.0.1", (uint64_t)(1 + i))) >= 0);
	/* the fourth from the same address is refused, cleanly */
	extra = ht_tcp_from(d.port, "127.0.0.1");
	assert_true(ht_expect(extra, HB_ERROR, HB_ERR_FULL));
	assert_true(ht_eof(extra, HT_IO_MS));
	close(extra);
	/* another address is not affected, nor are the three */
	assert_true((other = login_from(d.port, "127.0.0.2", 5)) >= 0);
	for (int i = 0; i < 3; i++)
		ping_ok(a[i], (uint16_t)(10 + i));
	/* one leaves: room for one more from there (bounded wait for the close to be seen) */
	close(a[0]);
	for (int i = 0; i < 100 && again < 0; i++) {
		again = login_from(d.port, "127.0.0.1", 4);
		if (again < 0)
			ht_sleep_ms(20);
	}
	assert_true(again >= 0);
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
	assert_int_equal(ht_start(&d, args), 0);
	good = ht_tcp_login(d.port, 1, false, NULL);
	slow = ht_tcp(d.port, false);
	assert_true(good >= 0 && slow >= 0);
	ht_hello(&h, 2, 0);
	n = hb_encode(frame, sizeof(frame), HB_TCP, HB_HELLO, 1, 0, &h, sizeof(h));
	t0 = ht_now_ms();
	for (size_t i = 0; i < n - 1 && ht_now_ms() - t0 < 3000; i++) {
		if (send(slow, frame + i, 1, MSG_NOSIGNAL) != 1)
			break; /* closed under us: that is the point */
		ping_ok(good, (uint16_t)i);
		ht_sleep_ms(50);
	}
	assert_true(ht_expect(slow, HB_BYE, HB_BYE_EXPIRED));
	assert_true(ht_eof(slow, HT_IO_MS));
	assert_true(ht_now_ms() - t0 < 2000);
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
	assert_int_equal(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0);
}

/* Failed HELLOs are rate limited per source, on TCP and UDP; other sources are unaffected. */
static void auth_failures_rate_limited(void **state)
{
	static const char *const args[] = { "--no-offload", "--auth-fail-rate", "2",
					    "--auth-fail-burst", "3", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	struct hb_hello h;
	struct ht_daemon d;
	int fd, u, ok;

	(void)state;
	assert_int_equal(ht_start(&d, args), 0);
	for (int i = 0; i < 3; i++) { /* the burst: refused after checking */
		fd = ht_tcp_from(d.port, "127.0.0.5");
		send_bad_hello(fd, 1);
		assert_true(ht_expect(fd, HB_ERROR, HB_ERR_AUTH));
		close(fd);
	}
	/* now even a good HELLO from there is refused unchecked */
	fd = ht_tcp_from(d.port, "127.0.0.5");
	ht_hello(&h, 1, 0);
	assert_int_equal(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0);
	assert_true(ht_expect(fd, HB_ERROR, HB_ERR_RATE));
	close(fd);
	assert_true((ok = login_from(d.port, "127.0.0.6", 2)) >= 0);
	close(ok);
	/* the budget refills at 2/s: one more try after 0.6 s */
	ht_sleep_ms(600);
	assert_true((ok = login_from(d.port, "127.0.0.5", 1)) >= 0);
	close(ok);

	/* UDP: the same per source, but a limited source gets no answer at all */
	u = udp_from("127.0.0.7");
	for (int i = 0; i < 3; i++) {
		ht_hello(&h, 3, 0);
		h.mac[0] ^= 1;
		assert_int_equal(ht_udp_send(u, d.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0);
		assert_int_equal(ht_udp_recv(u, buf, &f, HT_IO_MS), 1);
		assert_int_equal(f.type, HB_ERROR);
	}
	ht_hello(&h, 3, 0);
	assert_int_equal(ht_udp_send(u, d.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0);
	assert_true(udp_silent(u, 300));
	close(u);
	u = udp_from("127.0.0.8");
	assert_int_not_equal(ht_udp_login(u, d.port, false, 3), 0);
	close(u);
	assert_int_equal(ht_stop(&d), 0);
	assert_int_equal(ht_exit_stat(&d, "auth_fail"), 6);
	assert_int_equal(ht_exit_stat(&d, "auth_rate_limited"), 2);
	ht_cleanup(&d);
}

/* DATA beyond --data-rate: TCP gets ERROR(RATE) and is closed, UDP is not ACKed. */
static void data_rate(void **state)
{
	static const char *const args[] = { "--no-offload", "--data-rate", "1", "--data-burst",
					    "5", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct ht_daemon d;
	struct hb_frame f;
	int fd, u, other;
	uint64_t tok;

	(void)state;
	assert_int_equal(ht_start(&d, args), 0);
	fd = ht_tcp_login(d.port, 1, false, NULL);
	other = ht_tcp_login(d.port, 2, false, NULL);
	assert_true(fd >= 0 && other >= 0);
	for (uint16_t i = 0; i < 5; i++) {
		assert_int_equal(ht_send_frame(fd, HB_DATA, i, "d", 1), 0);
		assert_true(ht_expect(fd, HB_ACK, -1));
	}
	assert_int_equal(ht_send_frame(fd, HB_DATA, 5, "d", 1), 0);
	assert_true(ht_expect(fd, HB_ERROR, HB_ERR_RATE));
	assert_true(ht_eof(fd, HT_IO_MS));
	close(fd);
	/* the other device has its own budget */
	assert_int_equal(ht_send_frame(other, HB_DATA, 1, "o", 1), 0);
	assert_true(ht_expect(other, HB_ACK, -1));
	close(other);

	u = ht_udp(false);
	tok = ht_udp_login(u, d.port, false, 3);
	assert_int_not_equal(tok, 0);
	for (uint16_t i = 0; i < 5; i++) {
		assert_int_equal(ht_udp_send(u, d.port, false, HB_DATA, i, tok, "u", 1), 0);
		assert_int_equal(ht_udp_recv(u, buf, &f, HT_IO_MS), 1);
		assert_int_equal(f.type, HB_ACK);
	}
	assert_int_equal(ht_udp_send(u, d.port, false, HB_DATA, 5, tok, "u", 1), 0);
	assert_true(udp_silent(u, 300));
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
	assert_int_equal(ht_start(&d, args), 0);
	fd = ht_tcp_login(d.port, 1, false, NULL);
	assert_true(fd >= 0);
	assert_int_equal(ht_send_frame(fd, HB_ECHO, 1, big, 100), 0);
	assert_true(ht_expect(fd, HB_ECHO, -1));
	assert_int_equal(ht_send_frame(fd, HB_DATA, 2, big, 101), 0);
	assert_true(ht_expect(fd, HB_ERROR, HB_ERR_TOO_LARGE));
	assert_true(ht_eof(fd, HT_IO_MS));
	close(fd);
	u = ht_udp(false);
	tok = ht_udp_login(u, d.port, false, 2);
	assert_int_not_equal(tok, 0);
	assert_int_equal(ht_udp_send(u, d.port, false, HB_ECHO, 1, tok, big, 101), 0);
	assert_true(udp_silent(u, 300));
	close(u);
	stop_expect(&d, "too_large", 2);
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
	assert_int_equal(ht_start(&d, args), 0);
	good = ht_tcp_login(d.port, 1, false, NULL);
	assert_true(good >= 0);
	/* a small receive window, set before connecting so it is the one advertised */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	{
		struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(d.port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		struct hb_hello h;

		assert_int_equal(connect(fd, (struct sockaddr *)&s4, sizeof(s4)), 0);
		ht_hello(&h, 2, 0);
		assert_int_equal(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0);
		assert_true(ht_expect(fd, HB_WELCOME, -1));
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
	assert_true(closed);
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
	static const char *const args[] = { "--no-offload", "--workers", "1", "--accept-rate",
					    "40", NULL };
	enum { N = 100 };
	struct ht_daemon d;
	struct hb_hello h;
	int fd[N], welcomed = 0;
	uint64_t t0;

	(void)state;
	assert_int_equal(ht_start(&d, args), 0);
	t0 = ht_now_ms();
	for (int i = 0; i < N; i++) {
		fd[i] = ht_tcp(d.port, false); /* completes in the kernel's listen queue */
		assert_true(fd[i] >= 0);
		ht_hello(&h, (uint64_t)(100 + i), 0);
		assert_int_equal(ht_send_frame(fd[i], HB_HELLO, 1, &h, sizeof(h)), 0);
	}
	for (int i = 0; i < N; i++) {
		if (ht_expect(fd[i], HB_WELCOME, -1))
			welcomed++;
		close(fd[i]);
	}
	printf("accept rate: %d of %d welcomed in %llu ms\n", welcomed, N,
	       (unsigned long long)(ht_now_ms() - t0));
	assert_int_equal(welcomed, N);
	/* a burst of 40 (one second's worth), then 40/s: 100 take at least 1.5 s */
	assert_true(ht_now_ms() - t0 >= 1200);
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
	assert_int_equal(ht_start(&d, args), 0);
	for (int i = 0; i < 2; i++) {
		u[i] = ht_udp(false);
		assert_int_not_equal(ht_udp_login(u[i], d.port, false, (uint64_t)(1 + i)), 0);
	}
	u[2] = ht_udp(false);
	ht_hello(&h, 3, 0);
	assert_int_equal(ht_udp_send(u[2], d.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0);
	assert_int_equal(ht_udp_recv(u[2], buf, &f, HT_IO_MS), 1);
	assert_int_equal(f.type, HB_ERROR);
	assert_int_equal(be16toh(*(uint16_t *)f.payload), HB_ERR_FULL);
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
		cmocka_unit_test_teardown(slow_reader, ht_reap),
		cmocka_unit_test_teardown(accept_rate, ht_reap),
		cmocka_unit_test_teardown(udp_max_clients, ht_reap),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("hbd_limits", tests, NULL, NULL);
}
