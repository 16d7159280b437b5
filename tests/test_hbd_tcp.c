// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd over TCP in --no-offload mode: the real daemon against blocking clients on loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>

#include "lib/ctl.h"
#include "lib/hbd_harness.h"
#include "lib/ht_assert.h"

static struct ht_daemon D; /* one daemon for the group; the tests that need their own start it */

static int group_setup(void **state)
{
	/* a long interval: nothing in this group may expire, even under valgrind */
	static const char *const args[] = { "--no-offload", "--workers", "2",
					    "--interval",   "100",	 NULL };

	(void)state;
	return ht_start(&D, args);
}

static int group_teardown(void **state)
{
	int rc = ht_stop(&D);

	(void)state;
	/* the whole group ran against this daemon: it must exit cleanly and have counted */
	if (rc != 0 || ht_exit_stat(&D, "auth_ok") < 5 || ht_exit_stat(&D, "tcp_active") != 0 ||
	    ht_exit_stat(&D, "errors") != 0) {
		fprintf(stderr, "daemon exit %d, auth_ok %lld, tcp_active %lld, errors %lld\n", rc,
			ht_exit_stat(&D, "auth_ok"), ht_exit_stat(&D, "tcp_active"),
			ht_exit_stat(&D, "errors"));
		rc = -1;
	}
	ht_cleanup(&D);
	return rc;
}

static void ping(int fd, uint16_t seq, uint64_t ts)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping p = { .ts = htobe64(ts) };
	struct hb_frame f;

	HT_EQ(ht_send_frame(fd, HB_PING, seq, &p, sizeof(p)), 0, "PING %u sent", seq);
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to PING %u within %d ms", seq,
	      HT_IO_MS);
	HT_EQ(f.type, HB_PONG, "frame type of the answer to PING %u", seq);
	HT_EQ(f.seq, seq, "sequence number of the PONG");
	HT_EQ(f.len, sizeof(p), "PONG payload length (the PING's)");
	assert_memory_equal(f.payload, &p, sizeof(p)); /* payload unchanged */
}

static void hello_welcome_v4_v6(void **state)
{
	struct hb_welcome w4, w6;
	uint16_t wlen = 0;
	int a, b;

	(void)state;
	a = ht_tcp_login_flags(D.port, 1, false, &w4, &wlen, NULL);
	HT_GE(a, 0, "IPv4 login of device 1");
	HT_EQ(wlen, sizeof(struct hb_welcome), "WELCOME length in userspace mode (no flags)");
	b = ht_tcp_login(D.port, 2, true, &w6); /* dual-stack listener */
	HT_GE(b, 0, "IPv6 login of device 2 (dual-stack listener)");
	HT_NE(hb_get_be64(&w4.token), 0, "WELCOME token of device 1 (0 is no session)");
	HT_NE(hb_get_be64(&w4.token), hb_get_be64(&w6.token), "two sessions with different tokens");
	HT_EQ(be32toh(w4.interval_ms), 100000, "WELCOME interval_ms (--interval 100)");
	HT_EQ(be32toh(w4.timeout_ms), 150000, "WELCOME timeout_ms (1.5 intervals)");
	ping(a, 2, 111);
	ping(b, 2, 222);
	close(a);
	close(b);
}

static void wrong_mac_error_and_close(void **state)
{
	struct hb_hello h;
	int fd = ht_tcp(D.port, false);

	(void)state;
	HT_GE(fd, 0, "TCP connection to hbd on port %u", D.port);
	ht_hello(&h, 3, 0);
	h.mac[0] ^= 1;
	HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0, "HELLO with a bad MAC sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_AUTH), "ERROR(AUTH) for a bad MAC");
	HT_TRUE(ht_eof(fd, HT_IO_MS), "close after ERROR(AUTH) for a bad MAC");
	close(fd);
	/* unknown device and a stale clock likewise */
	fd = ht_tcp(D.port, false);
	ht_hello(&h, 777, 0);
	HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0, "HELLO of unknown device 777 sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_AUTH), "ERROR(AUTH) for an unknown device");
	HT_TRUE(ht_eof(fd, HT_IO_MS), "close after ERROR(AUTH) for an unknown device");
	close(fd);
	fd = ht_tcp(D.port, false);
	ht_hello(&h, 3, 1000); /* 1970 */
	HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0, "HELLO stamped 1970 sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_AUTH), "ERROR(AUTH) for a stale HELLO timestamp");
	HT_TRUE(ht_eof(fd, HT_IO_MS), "close after ERROR(AUTH) for a stale timestamp");
	close(fd);
}

static void replayed_hello_refused(void **state)
{
	struct hb_hello h;
	int a = ht_tcp(D.port, false), b = ht_tcp(D.port, false);

	(void)state;
	ht_hello(&h, 4, 0);
	HT_EQ(ht_send_frame(a, HB_HELLO, 1, &h, sizeof(h)), 0, "HELLO of device 4 sent");
	HT_TRUE(ht_expect(a, HB_WELCOME, -1), "WELCOME for the first HELLO");
	/* the very same bytes again, on another connection: a replay */
	HT_EQ(ht_send_frame(b, HB_HELLO, 1, &h, sizeof(h)), 0,
	      "replayed HELLO sent on a second connection");
	HT_TRUE(ht_expect(b, HB_ERROR, HB_ERR_AUTH), "ERROR(AUTH) for a replayed HELLO");
	HT_TRUE(ht_eof(b, HT_IO_MS), "close after the replayed HELLO");
	ping(a, 5, 5); /* the original session is untouched */
	close(a);
	close(b);
}

static void ping_before_hello(void **state)
{
	struct hb_ping p = { .ts = 1 };
	int fd = ht_tcp(D.port, false);

	(void)state;
	HT_EQ(ht_send_frame(fd, HB_PING, 1, &p, sizeof(p)), 0, "PING before HELLO sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_NOT_AUTHED),
		"ERROR(NOT_AUTHED) for a PING before HELLO");
	HT_EQ(ht_send_frame(fd, HB_ECHO, 2, "x", 1), 0, "ECHO before HELLO sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_NOT_AUTHED),
		"ERROR(NOT_AUTHED) for an ECHO before HELLO");
	HT_EQ(ht_send_frame(fd, HB_DATA, 3, "x", 1), 0, "DATA before HELLO sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_NOT_AUTHED),
		"ERROR(NOT_AUTHED) for DATA before HELLO");
	HT_EQ(ht_send_frame(fd, HB_BEAT, 4, NULL, 0), 0, "BEAT before HELLO sent");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_NOT_AUTHED),
		"ERROR(NOT_AUTHED) for a BEAT before HELLO");
	close(fd);
}

static void echo_verbatim(void **state)
{
	uint8_t payload[HB_MAX_PAYLOAD], buf[HB_MAX_FRAME];
	struct hb_frame f;
	int fd = ht_tcp_login(D.port, 5, false, NULL);

	(void)state;
	HT_GE(fd, 0, "login of device 5");
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7);
	const uint16_t lens[] = { 0, 1, 100, HB_MAX_PAYLOAD };

	for (unsigned i = 0; i < 4; i++) {
		HT_EQ(ht_send_frame(fd, HB_ECHO, (uint16_t)(40 + i), payload, lens[i]), 0,
		      "ECHO of %u bytes sent", lens[i]);
		HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1,
		      "answer to the ECHO of %u bytes within %d ms", lens[i], HT_IO_MS);
		HT_EQ(f.type, HB_ECHO, "frame type of the answer to an ECHO");
		HT_EQ(f.seq, 40 + i, "sequence number of the reflected ECHO");
		HT_EQ(f.len, lens[i], "payload length of the reflected ECHO");
		if (lens[i])
			assert_memory_equal(f.payload, payload, lens[i]);
	}
	close(fd);
}

/* Waits (bounded) for the sink to hold a line containing needle. */
static bool sink_has(const char *needle, char *line, size_t cap)
{
	for (int i = 0; i < 300; i++) {
		if (ht_file_contains(D.sink, needle, line, cap))
			return true;
		ht_sleep_ms(10);
	}
	return false;
}

static void data_ack_and_sink(void **state)
{
	uint8_t bin[200], b64[300];
	char line[4096], needle[400];
	int fd = ht_tcp_login(D.port, 6, false, NULL);

	(void)state;
	HT_GE(fd, 0, "login of device 6");
	HT_EQ(ht_send_frame(fd, HB_DATA, 900, "hello", 5), 0, "DATA 900 sent");
	HT_TRUE(ht_expect(fd, HB_ACK, -1), "ACK for DATA 900");
	/* the ACK means the line is written already: no waiting needed */
	HT_TRUE(ht_file_contains(D.sink, "\"payload\":\"aGVsbG8=\"", line, sizeof(line)),
		"sink line with DATA 900's payload (written before the ACK): %s", D.sink);
	assert_non_null(
		strstr(line, "{\"device\":6,\"transport\":\"tcp\",\"seq\":900,\"time\":\""));
	assert_non_null(strstr(line, "Z\",\"payload\""));
	for (size_t i = 0; i < sizeof(bin); i++)
		bin[i] = (uint8_t)(255 - i);
	HT_EQ(ht_send_frame(fd, HB_DATA, 901, bin, sizeof(bin)), 0,
	      "DATA 901 (binary, %zu bytes) sent", sizeof(bin));
	HT_TRUE(ht_expect(fd, HB_ACK, -1), "ACK for DATA 901");
	EVP_EncodeBlock(b64, bin, sizeof(bin));
	snprintf(needle, sizeof(needle), "\"seq\":901,%s", "");
	HT_TRUE(sink_has(needle, line, sizeof(line)), "sink line for DATA 901 within 3 s: %s",
		D.sink);
	snprintf(needle, sizeof(needle), "\"payload\":\"%s\"}", b64);
	assert_non_null(strstr(line, needle));
	close(fd);
}

static void split_byte_by_byte(void **state)
{
	uint8_t stream[256], buf[HB_MAX_FRAME];
	struct hb_hello h;
	struct hb_ping p = { .ts = htobe64(0x1122334455667788ull) };
	struct hb_frame f;
	size_t n = 0;
	int fd = ht_tcp(D.port, false);

	(void)state;
	ht_hello(&h, 7, 0);
	n += hb_encode(stream + n, sizeof(stream) - n, HB_TCP, HB_HELLO, 1, 0, &h, sizeof(h));
	n += hb_encode(stream + n, sizeof(stream) - n, HB_TCP, HB_PING, 2, 0, &p, sizeof(p));
	n += hb_encode(stream + n, sizeof(stream) - n, HB_TCP, HB_DATA, 3, 0, "split", 5);
	for (size_t i = 0; i < n; i++) {
		HT_EQ(ht_send_all(fd, stream + i, 1), 0, "byte %zu of the stream sent", i);
		ht_sleep_ms(1); /* separate segments, separate receives */
	}
	HT_TRUE(ht_expect(fd, HB_WELCOME, -1), "WELCOME to the byte-by-byte HELLO");
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1,
	      "answer to the byte-by-byte PING within %d ms", HT_IO_MS);
	HT_EQ(f.type, HB_PONG, "frame type of the answer to the byte-by-byte PING");
	assert_memory_equal(f.payload, &p, sizeof(p));
	HT_TRUE(ht_expect(fd, HB_ACK, -1), "ACK for the byte-by-byte DATA");
	close(fd);
}

static void coalesced_frames(void **state)
{
	uint8_t stream[4096], buf[HB_MAX_FRAME];
	struct hb_frame f;
	size_t n = 0;
	int fd = ht_tcp_login(D.port, 8, false, NULL);

	(void)state;
	HT_GE(fd, 0, "login of device 8");
	for (uint16_t i = 0; i < 20; i++) {
		struct hb_ping p = { .ts = htobe64(i) };

		n += hb_encode(stream + n, sizeof(stream) - n, HB_TCP, HB_PING, i, 0, &p,
			       sizeof(p));
	}
	n += hb_encode(stream + n, sizeof(stream) - n, HB_TCP, HB_ECHO, 100, 0, "abc", 3);
	n += hb_encode(stream + n, sizeof(stream) - n, HB_TCP, HB_DATA, 101, 0, "zz", 2);
	n += hb_encode(stream + n, sizeof(stream) - n, HB_TCP, HB_PING, 102, 0, "12345678", 8);
	/* one write, one segment */
	HT_EQ(ht_send_all(fd, stream, n), 0, "%zu bytes of coalesced frames in one write", n);
	for (uint16_t i = 0; i < 20; i++) {
		HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1,
		      "answer to coalesced PING %u within %d ms", i, HT_IO_MS);
		HT_EQ(f.type, HB_PONG, "frame type of the answer to coalesced PING %u", i);
		HT_EQ(f.seq, i, "PONGs in the order of the PINGs");
		HT_EQ(hb_get_be64(f.payload), i, "PONG %u carries its PING's timestamp", i);
	}
	/* ECHO and PING answer at once; the ACK waits for the sink write */
	bool echo = false, pong = false, ack = false;

	for (int i = 0; i < 3; i++) {
		HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1,
		      "answer %d of 3 to the trailing ECHO, DATA and PING", i + 1);
		echo |= f.type == HB_ECHO && f.seq == 100 && !memcmp(f.payload, "abc", 3);
		pong |= f.type == HB_PONG && f.seq == 102;
		ack |= f.type == HB_ACK && f.seq == 101;
	}
	HT_TRUE(echo && pong && ack, "ECHO 100 (%d), PONG 102 (%d) and ACK 101 (%d) all came", echo,
		pong, ack);
	close(fd);
}

static void malformed_closes_only_that_client(void **state)
{
	uint8_t junk[16] = "GET / HTTP/1.1\r\n";
	struct hb_hdr big = { .magic = htons(HB_MAGIC),
			      .version = HB_VERSION,
			      .type = HB_ECHO,
			      .len = htons(HB_MAX_PAYLOAD + 1) };
	struct hb_hdr ver = { .magic = htons(HB_MAGIC),
			      .version = 9,
			      .type = HB_PING,
			      .len = htons(8) };
	int good = ht_tcp_login(D.port, 9, false, NULL), bad;

	(void)state;
	HT_GE(good, 0, "login of the good client, device 9");
	bad = ht_tcp_login(D.port, 100, false, NULL);
	HT_GE(bad, 0, "login of the bad client, device 100");
	HT_EQ(ht_send_all(bad, junk, sizeof(junk)), 0, "HTTP request bytes sent");
	HT_TRUE(ht_expect(bad, HB_ERROR, HB_ERR_MALFORMED), "ERROR(MALFORMED) for an HTTP request");
	HT_TRUE(ht_eof(bad, HT_IO_MS), "close after ERROR(MALFORMED)");
	close(bad);
	ping(good, 1, 1);
	/* an oversized length is refused on its header alone */
	bad = ht_tcp(D.port, false);
	HT_EQ(ht_send_all(bad, &big, sizeof(big)), 0, "header with an oversized length sent");
	HT_TRUE(ht_expect(bad, HB_ERROR, HB_ERR_TOO_LARGE),
		"ERROR(TOO_LARGE) for an oversized length");
	HT_TRUE(ht_eof(bad, HT_IO_MS), "close after ERROR(TOO_LARGE)");
	close(bad);
	ping(good, 2, 2);
	bad = ht_tcp(D.port, true);
	HT_EQ(ht_send_all(bad, &ver, sizeof(ver)), 0, "header of protocol version 9 sent");
	HT_TRUE(ht_expect(bad, HB_ERROR, HB_ERR_MALFORMED),
		"ERROR(MALFORMED) for an unknown version");
	HT_TRUE(ht_eof(bad, HT_IO_MS), "close after the unknown version");
	close(bad);
	/* a server-only frame type from a client (an ACK is the device's answer to a DOWN) */
	bad = ht_tcp_login(D.port, 101, false, NULL);
	HT_EQ(ht_send_frame(bad, HB_DOWN, 1, "x", 1), 0,
	      "DOWN (a server-only type) sent by a client");
	HT_TRUE(ht_expect(bad, HB_ERROR, HB_ERR_MALFORMED),
		"ERROR(MALFORMED) for a DOWN from a client");
	HT_TRUE(ht_eof(bad, HT_IO_MS), "close after the client's DOWN");
	close(bad);
	ping(good, 3, 3);
	close(good);
}

static void second_hello_supersedes(void **state)
{
	int a = ht_tcp_login(D.port, 102, false, NULL), b;

	(void)state;
	HT_GE(a, 0, "first login of device 102");
	ht_sleep_ms(2); /* a newer HELLO timestamp */
	b = ht_tcp_login(D.port, 102, true, NULL);
	HT_GE(b, 0, "second login of device 102");
	HT_TRUE(ht_expect(a, HB_BYE, HB_BYE_SUPERSEDED), "BYE(SUPERSEDED) to the first connection");
	HT_TRUE(ht_eof(a, HT_IO_MS), "close of the superseded connection");
	ping(b, 9, 9);
	close(a);
	close(b);
}

static void client_bye_closes(void **state)
{
	struct hb_bye bye = { 0 };
	int fd = ht_tcp_login(D.port, 103, false, NULL);

	(void)state;
	HT_GE(fd, 0, "login of device 103");
	HT_EQ(ht_send_frame(fd, HB_DATA, 7, "last", 4), 0, "DATA before BYE sent");
	HT_EQ(ht_send_frame(fd, HB_BYE, 8, &bye, sizeof(bye)), 0, "client's BYE sent");
	/* the DATA still gets its ACK before the server closes */
	HT_TRUE(ht_expect(fd, HB_ACK, -1), "ACK for the DATA sent before BYE");
	HT_TRUE(ht_eof(fd, HT_IO_MS), "close after the client's BYE");
	close(fd);
}

static void many_clients(void **state)
{
	int fds[200];

	(void)state;
	for (int i = 0; i < 200; i++) {
		fds[i] = ht_tcp_login(D.port, 110 + (uint64_t)(i % 80), i % 2, NULL);
		if (i >= 80)
			HT_TRUE(ht_expect(fds[i - 80], HB_BYE, HB_BYE_SUPERSEDED),
				"BYE(SUPERSEDED) to connection %d when device %d logs in again",
				i - 80, 110 + i % 80);
		HT_GE(fds[i], 0, "login %d of 200 (device %d)", i, 110 + i % 80);
	}
	for (int i = 120; i < 200; i++)
		ping(fds[i], (uint16_t)i, (uint64_t)i);
	for (int i = 0; i < 200; i++)
		close(fds[i]);
}

/* Needs its own daemon: a capacity of 2 clients. */
static void full_refuses_cleanly(void **state)
{
	static const char *const args[] = { "--no-offload",  "--workers", "1",
					    "--max-clients", "2",	  NULL };
	struct ht_daemon d;
	int a, b, c;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --max-clients 2 started");
	a = ht_tcp_login(d.port, 1, false, NULL);
	b = ht_tcp_login(d.port, 2, false, NULL);
	HT_TRUE(a >= 0 && b >= 0, "the two logins within --max-clients 2 (fds %d, %d)", a, b);
	c = ht_tcp(d.port, false);
	HT_TRUE(ht_expect(c, HB_ERROR, HB_ERR_FULL), "ERROR(FULL) for a third client");
	HT_TRUE(ht_eof(c, HT_IO_MS), "close after ERROR(FULL)");
	close(c);
	close(a);
	/* a slot frees up again once a client leaves (bounded wait for the close) */
	for (int i = 0; i < 100; i++) {
		c = ht_tcp_login(d.port, 3, false, NULL);
		if (c >= 0)
			break;
		ht_sleep_ms(20);
	}
	HT_GE(c, 0, "login once a slot is free again (2 s)");
	close(b);
	close(c);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_GE(ht_exit_stat(&d, "full"), 1, "the 'full' exit counter");
	ht_cleanup(&d);
}

/* Needs its own daemon: a 0.2 s interval, so a 0.3 s timeout. */
static void silent_client_expires(void **state)
{
	static const char *const args[] = { "--no-offload", "--interval", "0.2", NULL };
	struct ht_daemon d;
	struct hb_welcome w;
	uint64_t t0;
	int quiet, chatty, unauth;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --interval 0.2 started");
	quiet = ht_tcp_login(d.port, 1, false, &w);
	chatty = ht_tcp_login(d.port, 2, false, NULL);
	unauth = ht_tcp(d.port, false);
	HT_TRUE(quiet >= 0 && chatty >= 0 && unauth >= 0,
		"quiet (%d), chatty (%d) and unauthenticated (%d) connections", quiet, chatty,
		unauth);
	HT_EQ(be32toh(w.timeout_ms), 300, "WELCOME timeout_ms for --interval 0.2");
	t0 = ht_now_ms();
	/* chatty heartbeats every 100 ms for 1 s and must survive; quiet must be expired */
	for (int i = 0; i < 10; i++) {
		ping(chatty, (uint16_t)i, (uint64_t)i);
		ht_sleep_ms(100);
	}
	HT_TRUE(ht_expect(quiet, HB_BYE, HB_BYE_EXPIRED), "BYE(EXPIRED) to the quiet device");
	HT_TRUE(ht_eof(quiet, HT_IO_MS), "close of the expired connection");
	/* a connection that never authenticated is closed after the timeout too (the hello
	 * timeout is never longer than the heartbeat timeout)
	 */
	HT_TRUE(ht_expect(unauth, HB_BYE, HB_BYE_EXPIRED),
		"BYE(EXPIRED) to the connection that never sent HELLO");
	HT_LT(ht_now_ms() - t0, 5000, "expiry within 5 s");
	ping(chatty, 99, 99);
	close(quiet);
	close(chatty);
	close(unauth);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_GE(ht_exit_stat(&d, "expired_tcp"), 1, "the expired_tcp exit counter");
	HT_GE(ht_exit_stat(&d, "hello_timeout"), 1, "the hello_timeout exit counter");
	ht_cleanup(&d);
}

/* BEATs keep a device alive as PINGs do, and get no answer frame. */
static void beats_keep_alive(void **state)
{
	static const char *const args[] = { "--no-offload", "--interval", "0.2", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct ht_daemon d;
	struct hb_frame f;
	int quiet, beating;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --interval 0.2 started");
	quiet = ht_tcp_login(d.port, 1, false, NULL);
	beating = ht_tcp_login(d.port, 2, false, NULL);
	HT_TRUE(quiet >= 0 && beating >= 0, "quiet (%d) and beating (%d) devices", quiet, beating);
	/* 12 BEATs 100 ms apart: 1.2 s, four times the 300 ms timeout */
	for (int i = 0; i < 12; i++) {
		HT_EQ(ht_send_frame(beating, HB_BEAT, (uint16_t)i, NULL, 0), 0, "BEAT %d sent", i);
		f.type = 0;
		HT_EQ(ht_recv_frame(beating, buf, &f, 100), -1,
		      "nothing (no frame, no close) in answer to BEAT %d (got type %u)", i, f.type);
	}
	HT_TRUE(ht_expect(quiet, HB_BYE, HB_BYE_EXPIRED), "BYE(EXPIRED) to the quiet device");
	ping(beating, 99, 99); /* still admitted */
	close(quiet);
	close(beating);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "beats_user"), 12, "the beats_user exit counter");
	HT_EQ(ht_exit_stat(&d, "frames_beat"), 12, "the frames_beat exit counter");
	ht_cleanup(&d);
}

/* Needs its own daemon: SIGTERM while clients are connected. */
static void sigterm_drains_with_bye(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "2", NULL };
	struct ht_daemon d;
	int a, b;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with two workers started");
	a = ht_tcp_login(d.port, 1, false, NULL);
	b = ht_tcp_login(d.port, 2, true, NULL);
	HT_TRUE(a >= 0 && b >= 0, "logins over IPv4 (fd %d) and IPv6 (fd %d)", a, b);
	HT_EQ(ht_send_frame(a, HB_DATA, 5, "before-stop", 11), 0, "DATA before SIGTERM sent");
	HT_TRUE(ht_expect(a, HB_ACK, -1), "ACK for the DATA before SIGTERM");
	kill(d.pid, SIGTERM);
	HT_TRUE(ht_expect(a, HB_BYE, HB_BYE_SHUTDOWN),
		"BYE(SHUTDOWN) to the IPv4 client on SIGTERM");
	HT_TRUE(ht_expect(b, HB_BYE, HB_BYE_SHUTDOWN),
		"BYE(SHUTDOWN) to the IPv6 client on SIGTERM");
	HT_TRUE(ht_eof(a, HT_IO_MS), "close of the IPv4 client after BYE(SHUTDOWN)");
	HT_TRUE(ht_eof(b, HT_IO_MS), "close of the IPv6 client after BYE(SHUTDOWN)");
	/* already terminating: exit code 0 */
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "tcp_active"), 0, "connections still active at exit");
	HT_EQ(ht_exit_stat(&d, "data_acked"), 1, "the data_acked exit counter");
	close(a);
	close(b);
	/* nothing listens any more */
	HT_LT(ht_tcp(d.port, false), 0, "a connection after hbd exited (nothing listens)");
	ht_cleanup(&d);
}

/* Needs its own daemon: --no-defer-taskrun sets the worker rings up without DEFER_TASKRUN (the
 * benchmark knob, and the path kernels before 6.1 take); heartbeats and DATA are still served. */
static void no_defer_taskrun_serves(void **state)
{
	static const char *const args[] = { "--no-offload", "--no-defer-taskrun", "--workers", "1",
					    NULL };
	struct ht_daemon d;
	int fd;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --no-defer-taskrun started");
	HT_TRUE(ht_file_contains(d.err, "worker rings: COOP_TASKRUN", NULL, 0),
		"its log says the rings have no DEFER_TASKRUN: %s", d.err);
	fd = ht_tcp_login(d.port, 1, false, NULL);
	HT_GE(fd, 0, "login of device 1");
	for (uint16_t i = 0; i < 20; i++)
		ping(fd, i, 1000 + i);
	HT_EQ(ht_send_frame(fd, HB_DATA, 20, "coop", 4), 0, "DATA sent");
	HT_TRUE(ht_expect(fd, HB_ACK, -1), "ACK for the DATA");
	close(fd);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
}

/* Context switches, voluntary and not, of the daemon's worker threads so far. */
static long long worker_switches(pid_t pid)
{
	long long sum = ht_thread_switches(pid, "hbd-worker-", true, true);

	HT_GE(sum, 0, "threads of hbd %d read", (int)pid);
	return sum;
}

#define PACED_CONNS 20
#define PACED_MAX 100
#define PACED_LOGIN_DEV 130 /* the logins' devices: 130 on (the harness's keys have 100..199) */

struct paced {
	unsigned pings, gap_ms; /* what to send: so many PINGs, one every gap_ms */
	unsigned logins; /* and so many new devices logging in meanwhile, one after another */
	uint64_t login_median_ms; /* how long their WELCOMEs took */
	long long switches; /* what it cost: the worker threads' context switches */
	int threads; /* the daemon's worker threads */
	uint64_t worst_ms, median_ms; /* how long the PONGs took */
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* p->pings PINGs, one every p->gap_ms round-robin over PACED_CONNS devices, every PONG read as
 * it comes; fails unless each is answered. Fills in the cost and the round trips.
 */
/* The next login of paced_pings: connected, its HELLO sent; its WELCOME is awaited in the loop
 * (pfd at index PACED_CONNS). */
static void login_start(const struct ht_daemon *d, struct pollfd *pfd, unsigned i, uint64_t *t0)
{
	struct hb_hello h;

	*t0 = ht_now_ms();
	pfd->fd = ht_tcp(d->port, false);
	HT_GE(pfd->fd, 0, "connection of login %u", i);
	ht_hello(&h, PACED_LOGIN_DEV + i, 0);
	HT_EQ(ht_send_frame(pfd->fd, HB_HELLO, 1, &h, sizeof(h)), 0, "HELLO of login %u", i);
}

static void login_end(struct pollfd *pfd, unsigned i)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;

	HT_EQ(ht_recv_frame(pfd->fd, buf, &f, HT_IO_MS), 1, "answer to login %u", i);
	HT_EQ(f.type, HB_WELCOME, "login %u welcomed", i);
	close(pfd->fd);
	pfd->fd = -1;
}

static void paced_pings(const struct ht_daemon *d, struct paced *p)
{
	struct pollfd pfd[PACED_CONNS + 1];
	uint64_t rtt[PACED_MAX], took[PACED_MAX], start, deadline, login_t0 = 0;
	unsigned sent = 0, answered = 0, logged = 0;

	HT_LE(p->pings, PACED_MAX, "at most %d paced PINGs", PACED_MAX);
	HT_LE(p->logins, PACED_MAX, "at most %d logins", PACED_MAX);
	for (int i = 0; i < PACED_CONNS; i++) {
		pfd[i].fd = ht_tcp_login(d->port, 100 + i, false, NULL);
		pfd[i].events = POLLIN;
		HT_GE(pfd[i].fd, 0, "login of device %d", 100 + i);
	}
	pfd[PACED_CONNS].fd = -1;
	pfd[PACED_CONNS].events = POLLIN;
	p->switches = worker_switches(d->pid);
	p->threads = ht_threads_named(d->pid, "hbd-worker-", true);
	start = ht_now_ms();
	deadline = start + (uint64_t)p->pings * p->gap_ms + (uint64_t)HT_IO_MS;
	while (answered < p->pings || logged < p->logins) {
		uint64_t now = ht_now_ms(), next = start + (uint64_t)sent * p->gap_ms;

		HT_LT(now, deadline, "all %u PONGs within %d ms of the last PING (%u so far)",
		      p->pings, HT_IO_MS, answered);
		if (sent < p->pings && now >= next) {
			struct hb_ping ping = { .ts = htobe64(now) };

			HT_EQ(ht_send_frame(pfd[sent % PACED_CONNS].fd, HB_PING, (uint16_t)sent,
					    &ping, sizeof(ping)),
			      0, "PING %u sent", sent);
			sent++;
			continue;
		}
		/* the logins go on while the PINGs keep the worker busy, from the tenth PING on */
		if (pfd[PACED_CONNS].fd < 0 && logged < p->logins && sent >= 10 && sent < p->pings)
			login_start(d, &pfd[PACED_CONNS], logged, &login_t0);
		if (poll(pfd, PACED_CONNS + 1, sent < p->pings ? (int)(next - now) : 50) <= 0)
			continue;
		if (pfd[PACED_CONNS].revents & POLLIN) {
			login_end(&pfd[PACED_CONNS], logged);
			took[logged++] = ht_now_ms() - login_t0;
		}
		for (int i = 0; i < PACED_CONNS; i++) {
			uint8_t buf[HB_MAX_FRAME];
			struct hb_ping ping;
			struct hb_frame f;

			if (!(pfd[i].revents & POLLIN))
				continue;
			HT_EQ(ht_recv_frame(pfd[i].fd, buf, &f, HT_IO_MS), 1,
			      "a frame on device %d", 100 + i);
			HT_EQ(f.type, HB_PONG, "the answer is a PONG");
			HT_EQ(f.seq % PACED_CONNS, (unsigned)i, "PONG %u on the PING's connection",
			      f.seq);
			HT_LT(answered, p->pings, "no more PONGs than PINGs");
			memcpy(&ping, f.payload, sizeof(ping));
			rtt[answered++] = ht_now_ms() - be64toh(ping.ts);
		}
	}
	p->switches = worker_switches(d->pid) - p->switches;
	for (int i = 0; i < PACED_CONNS; i++)
		close(pfd[i].fd);
	qsort(rtt, p->pings, sizeof(rtt[0]), cmp_u64);
	p->median_ms = rtt[p->pings / 2];
	p->worst_ms = rtt[p->pings - 1];
	if (p->logins) {
		qsort(took, p->logins, sizeof(took[0]), cmp_u64);
		p->login_median_ms = took[p->logins / 2];
	}
}

/* hbd with args, p paced PINGs to it, stopped. */
static void paced_daemon(const char *const *args, struct paced *p)
{
	struct ht_daemon d;

	HT_EQ(ht_start(&d, args), 0, "hbd started");
	paced_pings(&d, p);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
}

/* Needs its own daemons: with --batch-wait a busy worker sleeps until completions gather (or
 * the wait is up) instead of waking for each PING. The same paced PINGs, ten per wait, cost
 * the worker a fraction of the wakeups they cost without it, and none waits much longer than
 * the batch.
 */
static void batch_wait_gathers_wakeups(void **state)
{
	static const char *const plain[] = { "--no-offload", "--workers", "1",
					     "--batch-wait", "0",	  NULL };
	static const char *const batched[] = { "--no-offload", "--workers", "1",
					       "--batch-wait", "20000",	    NULL };
	struct paced without = { .pings = 100, .gap_ms = 2 }, with = without;

	(void)state;
	paced_daemon(plain, &without);
	paced_daemon(batched, &with);
	fprintf(stderr,
		"worker context switches for %u PINGs: %lld without, %lld with a 20 ms "
		"batch wait; slowest PONG %llu and %llu ms\n",
		without.pings, without.switches, with.switches,
		(unsigned long long)without.worst_ms, (unsigned long long)with.worst_ms);
	HT_GE(without.switches, without.pings / 2, "without it the worker woke for most PINGs");
	HT_LT(with.switches * 3, without.switches, "with it, under a third of those wakeups");
	HT_LE(with.worst_ms, 20 + (uint64_t)HT_IO_MS / 10, "no PONG waited much past the batch");
}

/* Needs its own daemons: four rings, each too quiet for a batch wait of its own (the busiest,
 * with 12 of the 20 devices, would gather 3 completions a wait; the gate needs 4), but busy
 * enough together (5 a wait). With --ring-threads 1 one thread runs all four, and its wait
 * gathers their completions in one wakeup; with a thread a ring each wakes for its PINGs.
 */
static void ring_threads_batch_across_rings(void **state)
{
	static const char *const apart[] = { "--no-offload", "--workers", "4",
					     "--batch-wait", "20000",	  NULL };
	static const char *const shared[] = { "--no-offload",	"--workers", "4",
					      "--ring-threads", "1",	     "--batch-wait",
					      "20000",		NULL };
	struct paced alone = { .pings = 100, .gap_ms = 8 }, together = alone;

	(void)state;
	paced_daemon(apart, &alone);
	paced_daemon(shared, &together);
	fprintf(stderr,
		"worker context switches for %u PINGs over 4 rings: %lld on %d threads, %lld on %d "
		"(--ring-threads 1); slowest PONG %llu and %llu ms\n",
		alone.pings, alone.switches, alone.threads, together.switches, together.threads,
		(unsigned long long)alone.worst_ms, (unsigned long long)together.worst_ms);
	HT_EQ(alone.threads, 4, "a thread a ring without --ring-threads");
	HT_EQ(together.threads, 1, "one thread with --ring-threads 1");
	HT_GE(alone.switches, alone.pings / 2, "a thread a ring woke for most PINGs");
	HT_LT(together.switches * 3, alone.switches,
	      "one thread for the four rings: under a third of those wakeups");
	HT_LE(together.worst_ms, 20 + (uint64_t)HT_IO_MS / 10,
	      "no PONG waited much past the batch");
}

/* Needs its own daemon: the PINGs of batch_wait_gathers_wakeups keep the worker's 50 ms wait
 * on while new devices log in, one after another. A device that connects sends nothing more
 * until its WELCOME, so a login held for the wait would take a whole wait longer: it must not
 * be (hbd skips the wait while a connection waits for its HELLO). */
static void batch_wait_spares_logins(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "1",
					    "--batch-wait", "50000",	 NULL };
	struct paced busy = { .pings = 100, .gap_ms = 2, .logins = 8 };

	(void)state;
	paced_daemon(args, &busy);
	fprintf(stderr,
		"%u logins among %u PINGs %u ms apart with a 50 ms batch wait: WELCOME after %llu "
		"ms (median); PONGs after %llu ms (median)\n",
		busy.logins, busy.pings, busy.gap_ms, (unsigned long long)busy.login_median_ms,
		(unsigned long long)busy.median_ms);
	HT_GE(busy.median_ms, 10, "the PINGs were held for the wait: it was on");
	HT_LT(busy.login_median_ms, 50, "a login waited for one wait at most, not two");
}

struct gauge_scrape {
	uint16_t port;
	long long value; /* hbeat_batch_wait_workers, -1 if the scrape failed */
};

static long long batch_wait_gauge(uint16_t port)
{
	int status = 0;
	char *text = tc_curl(port, "/metrics", &status);
	long long v = text && status == 200 ? tc_metric(text, "hbeat_batch_wait_workers") : -1;

	free(text);
	return v;
}

/* From a thread, so the PINGs go on meanwhile: the gauge 120 ms after paced_pings began (its
 * logins first, then about 100 ms into the 200 ms of PINGs). */
static void *scrape_mid_run(void *arg)
{
	struct gauge_scrape *g = arg;

	ht_sleep_ms(120);
	g->value = batch_wait_gauge(g->port);
	return NULL;
}

/* Needs its own daemon (with /metrics): hbeat_batch_wait_workers says whether a worker's rate
 * has its wait on, 1 while the paced PINGs run and 0 once they have stopped. */
static void batch_wait_gauge_follows_rate(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "1",
					    "--batch-wait", "20000",	 NULL };
	struct paced busy = { .pings = 100, .gap_ms = 2 };
	struct gauge_scrape g = { .value = -1 };
	uint64_t end;
	struct ht_daemon d;
	pthread_t t;
	char ctl[108];
	long long after;

	(void)state;
	HT_EQ(tc_start(&d, ctl, sizeof(ctl), true, &g.port, args), 0, "hbd with /metrics started");
	HT_GT(g.port, 0, "the metrics port");
	HT_EQ(batch_wait_gauge(g.port), 0, "no worker's wait is on at the start");
	HT_EQ(pthread_create(&t, NULL, scrape_mid_run, &g), 0, "scrape thread");
	paced_pings(&d, &busy);
	pthread_join(t, NULL);
	HT_EQ(g.value, 1, "the worker's wait was on while the PINGs came");
	end = ht_now_ms() + 3000;
	while ((after = batch_wait_gauge(g.port)) != 0 && ht_now_ms() < end)
		ht_sleep_ms(100);
	HT_EQ(after, 0, "and off within 3 s of the last");
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	tc_cleanup(&d);
}

/* Needs its own daemon: PINGs 40 ms apart, under one and a half per 45 ms wait. A timed wait
 * would gather one PING at most and hold it until the timer; the worker must see that its
 * rate is too low and wake at each PING, so the PONGs come as fast as without the option.
 */
static void batch_wait_off_at_low_rate(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "1",
					    "--batch-wait", "45000",	 NULL };
	struct paced slow = { .pings = 25, .gap_ms = 40 };

	(void)state;
	paced_daemon(args, &slow);
	fprintf(stderr,
		"%u PINGs %u ms apart with a 45 ms batch wait: PONGs after %llu ms (median), "
		"%llu ms (slowest); %lld worker context switches\n",
		slow.pings, slow.gap_ms, (unsigned long long)slow.median_ms,
		(unsigned long long)slow.worst_ms, slow.switches);
	HT_LE(slow.median_ms, 5, "the PONGs did not wait for the timer");
	HT_GE(slow.switches, slow.pings / 2, "the worker woke for most PINGs");
}

/* Needs its own daemon: --sink-fsync puts an fdatasync between the write and the ACKs. */
static void sink_fsync_still_acks(void **state)
{
	static const char *const args[] = { "--no-offload", "--sink-fsync", "--bind", "127.0.0.1",
					    NULL };
	struct ht_daemon d;
	int fd;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --sink-fsync started");
	fd = ht_tcp_login(d.port, 1, false, NULL);
	HT_GE(fd, 0, "login of device 1");
	for (uint16_t i = 0; i < 5; i++) {
		HT_EQ(ht_send_frame(fd, HB_DATA, i, "synced", 6), 0, "synced DATA %u sent", i);
		HT_TRUE(ht_expect(fd, HB_ACK, -1), "ACK for synced DATA %u", i);
	}
	HT_TRUE(ht_file_contains(d.sink, "\"seq\":4,", NULL, 0),
		"DATA 4 in the sink after its ACK: %s", d.sink);
	close(fd);
	/* an IPv4 listener takes no IPv6 clients */
	HT_LT(ht_tcp(d.port, true), 0, "an IPv6 connection to an IPv4-only listener");
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "data_acked"), 5, "the data_acked exit counter");
	ht_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest shared[] = {
		cmocka_unit_test(hello_welcome_v4_v6),
		cmocka_unit_test(wrong_mac_error_and_close),
		cmocka_unit_test(replayed_hello_refused),
		cmocka_unit_test(ping_before_hello),
		cmocka_unit_test(echo_verbatim),
		cmocka_unit_test(data_ack_and_sink),
		cmocka_unit_test(split_byte_by_byte),
		cmocka_unit_test(coalesced_frames),
		cmocka_unit_test(malformed_closes_only_that_client),
		cmocka_unit_test(second_hello_supersedes),
		cmocka_unit_test(client_bye_closes),
		cmocka_unit_test(many_clients),
	};
	const struct CMUnitTest own[] = {
		cmocka_unit_test_teardown(full_refuses_cleanly, ht_reap),
		cmocka_unit_test_teardown(silent_client_expires, ht_reap),
		cmocka_unit_test_teardown(beats_keep_alive, ht_reap),
		cmocka_unit_test_teardown(sigterm_drains_with_bye, ht_reap),
		cmocka_unit_test_teardown(no_defer_taskrun_serves, ht_reap),
		cmocka_unit_test_teardown(batch_wait_gathers_wakeups, ht_reap),
		cmocka_unit_test_teardown(batch_wait_off_at_low_rate, ht_reap),
		cmocka_unit_test_teardown(batch_wait_spares_logins, ht_reap),
		cmocka_unit_test_teardown(ring_threads_batch_across_rings, ht_reap),
		cmocka_unit_test_teardown(batch_wait_gauge_follows_rate, tc_reap),
		cmocka_unit_test_teardown(sink_fsync_still_acks, ht_reap),
	};
	int rc;

	signal(SIGPIPE, SIG_IGN);
	rc = cmocka_run_group_tests_name("hbd_tcp", shared, group_setup, group_teardown);
	rc |= cmocka_run_group_tests_name("hbd_tcp_own_daemon", own, NULL, NULL);
	return rc;
}
