// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd over UDP in --no-offload mode: sessions by token, no reflection, expiry, drain. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <arpa/inet.h>

#include "clock.h"
#include "hbclient.h"
#include "lib/clients.h"
#include "lib/ht_assert.h"
#include "lib/hbd_harness.h"

#define SILENCE_MS 300 /* how long "no reply" is waited for */

static struct ht_daemon D;

static int group_setup(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "2",
					    "--interval",   "100",	 NULL };

	(void)state;
	return ht_start(&D, args);
}

static int group_teardown(void **state)
{
	int rc = ht_stop(&D);

	(void)state;
	if (rc != 0 || ht_exit_stat(&D, "udp_active") != 0 || ht_exit_stat(&D, "errors") != 0 ||
	    ht_exit_stat(&D, "unknown_session") < 3 || ht_exit_stat(&D, "frames_bad") < 3) {
		fprintf(stderr, "daemon exit %d, udp_active %lld, errors %lld, unknown %lld\n", rc,
			ht_exit_stat(&D, "udp_active"), ht_exit_stat(&D, "errors"),
			ht_exit_stat(&D, "unknown_session"));
		rc = -1;
	}
	ht_cleanup(&D);
	return rc;
}

static void udp_ping(int fd, uint16_t port, bool v6, uint64_t token, uint16_t seq)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping p = { .ts = htobe64(0xabcdef0000000000ull | seq) };
	struct hb_frame f;

	HT_EQ(ht_udp_send(fd, port, v6, HB_PING, seq, token, &p, sizeof(p)), 0, "PING %u sent",
	      seq);
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "an answer to PING %u within %d ms", seq,
	      HT_IO_MS);
	HT_EQ(f.type, HB_PONG, "frame type of the answer to PING %u", seq);
	HT_EQ(f.seq, seq, "sequence number of the PONG");
	HT_EQ(f.token, token, "session token of the PONG");
	assert_memory_equal(f.payload, &p, sizeof(p));
}

static bool silent(int fd)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;

	return ht_udp_recv(fd, buf, &f, SILENCE_MS) < 0;
}

static void hello_welcome_ping_pong(void **state)
{
	int a = ht_udp(false), b = ht_udp(true);
	uint64_t ta, tb;

	(void)state;
	ta = ht_udp_login(a, D.port, false, 1);
	tb = ht_udp_login(b, D.port, true, 2);
	HT_NE(ta, 0, "UDP login of device 1 over IPv4 (0: no WELCOME)");
	HT_NE(tb, 0, "UDP login of device 2 over IPv6 (0: no WELCOME)");
	HT_NE(ta, tb, "two sessions with different tokens");
	for (uint16_t i = 0; i < 20; i++) {
		udp_ping(a, D.port, false, ta, i);
		udp_ping(b, D.port, true, tb, i);
	}
	close(a);
	close(b);
}

static void unknown_token_gets_nothing(void **state)
{
	struct hb_ping p = { 0 };
	int fd = ht_udp(false);

	(void)state;
	HT_EQ(ht_udp_send(fd, D.port, false, HB_PING, 1, 0x1234, &p, sizeof(p)), 0,
	      "PING with an unknown token sent");
	HT_TRUE(silent(fd), "no answer to a PING with an unknown token");
	HT_EQ(ht_udp_send(fd, D.port, false, HB_ECHO, 2, 0x1234, "x", 1), 0,
	      "ECHO with an unknown token sent");
	HT_TRUE(silent(fd), "no answer to an ECHO with an unknown token");
	HT_EQ(ht_udp_send(fd, D.port, false, HB_PING, 3, 0, &p, sizeof(p)), 0,
	      "PING with token 0 sent");
	HT_TRUE(silent(fd), "no answer to a PING with token 0");
	close(fd);
}

static void malformed_gets_nothing(void **state)
{
	uint8_t junk[40] = "this is not a frame at all.....";
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping p = { 0 };
	size_t n;
	int fd = ht_udp(false);
	uint64_t tok = ht_udp_login(fd, D.port, false, 3);

	(void)state;
	HT_NE(tok, 0, "UDP login of device 3");
	HT_EQ(ht_udp_send_raw(fd, D.port, junk, sizeof(junk)), 0, "junk datagram sent");
	HT_TRUE(silent(fd), "no answer to a junk datagram");
	/* a valid PING cut short, and one with trailing bytes */
	n = hb_encode(buf, sizeof(buf), HB_UDP, HB_PING, 1, tok, &p, sizeof(p));
	HT_EQ(ht_udp_send_raw(fd, D.port, buf, n - 1), 0, "PING cut short by a byte sent");
	HT_TRUE(silent(fd), "no answer to a truncated PING");
	HT_EQ(ht_udp_send_raw(fd, D.port, buf, n + 1), 0, "PING with a trailing byte sent");
	HT_TRUE(silent(fd), "no answer to a PING with a trailing byte");
	/* a datagram larger than any frame */
	uint8_t huge[3000] = { 0 };

	memcpy(huge, buf, n);
	HT_EQ(ht_udp_send_raw(fd, D.port, huge, sizeof(huge)), 0, "%zu-byte datagram sent",
	      sizeof(huge));
	HT_TRUE(silent(fd), "no answer to a datagram larger than any frame");
	udp_ping(fd, D.port, false, tok, 9); /* the session is unharmed */
	close(fd);
}

static void bad_mac_and_replay(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_hello h;
	struct hb_frame f;
	int fd = ht_udp(false);

	(void)state;
	ht_hello(&h, 4, 0);
	h.mac[5] ^= 0x80;
	HT_EQ(ht_udp_send(fd, D.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0,
	      "HELLO with a bad MAC sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "an answer to the bad HELLO within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_ERROR, "frame type of the answer to a bad MAC");
	HT_EQ(be16toh(*(uint16_t *)f.payload), HB_ERR_AUTH, "ERROR code for a bad MAC");
	HT_EQ(f.token, 0, "token of the ERROR (no session)");
	/* a good HELLO, then the same bytes again: the replay is refused */
	ht_hello(&h, 4, 0);
	HT_EQ(ht_udp_send(fd, D.port, false, HB_HELLO, 2, 0, &h, sizeof(h)), 0,
	      "good HELLO of device 4 sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "an answer to the good HELLO within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_WELCOME, "frame type of the answer to a good HELLO");
	HT_EQ(ht_udp_send(fd, D.port, false, HB_HELLO, 3, 0, &h, sizeof(h)), 0,
	      "replayed HELLO sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "an answer to the replayed HELLO within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_ERROR, "frame type of the answer to a replayed HELLO");
	close(fd);
}

static void echo_data_ack_sink(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	char line[4096];
	struct hb_frame f;
	int fd = ht_udp(false);
	uint64_t tok = ht_udp_login(fd, D.port, false, 5);

	(void)state;
	HT_NE(tok, 0, "UDP login of device 5");
	HT_EQ(ht_udp_send(fd, D.port, false, HB_ECHO, 7, tok, "verbatim", 8), 0, "ECHO sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "an answer to the ECHO within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_ECHO, "frame type of the answer to an ECHO");
	HT_EQ(f.seq, 7, "sequence number of the reflected ECHO");
	assert_memory_equal(f.payload, "verbatim", 8);
	HT_EQ(ht_udp_send(fd, D.port, false, HB_DATA, 8, tok, "hello", 5), 0, "DATA 8 sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "an answer to DATA 8 within %d ms", HT_IO_MS);
	HT_EQ(f.type, HB_ACK, "frame type of the answer to DATA");
	HT_EQ(f.seq, 8, "sequence number of the ACK");
	HT_EQ(f.token, tok, "session token of the ACK");
	HT_TRUE(ht_file_contains(D.sink, "\"transport\":\"udp\"", line, sizeof(line)),
		"a UDP line in the sink after the ACK: %s", D.sink);
	assert_non_null(strstr(line, "{\"device\":5,\"transport\":\"udp\",\"seq\":8,"));
	assert_non_null(strstr(line, "\"payload\":\"aGVsbG8=\"}"));
	close(fd);
}

static void bye_ends_session(void **state)
{
	struct hb_bye bye = { 0 };
	struct hb_ping p = { 0 };
	int fd = ht_udp(false);
	uint64_t tok = ht_udp_login(fd, D.port, false, 6);

	(void)state;
	HT_NE(tok, 0, "UDP login of device 6");
	udp_ping(fd, D.port, false, tok, 1);
	HT_EQ(ht_udp_send(fd, D.port, false, HB_BYE, 2, tok, &bye, sizeof(bye)), 0, "BYE sent");
	HT_TRUE(silent(fd), "no answer to a BYE");
	HT_EQ(ht_udp_send(fd, D.port, false, HB_PING, 3, tok, &p, sizeof(p)), 0,
	      "PING with the token of the ended session sent");
	HT_TRUE(silent(fd), "no answer to a PING of an ended session"); /* and the token is dead */
	close(fd);
}

static void nat_rebinding_moves_session(void **state)
{
	int a = ht_udp(false), b = ht_udp(false);
	uint64_t tok = ht_udp_login(a, D.port, false, 7);

	(void)state;
	HT_NE(tok, 0, "UDP login of device 7");
	udp_ping(a, D.port, false, tok, 1);
	/* same token from a new port: answered at the new address, the old one hears nothing */
	udp_ping(b, D.port, false, tok, 2);
	HT_TRUE(silent(a), "nothing for the old address after the session moved");
	udp_ping(b, D.port, false, tok, 3);
	close(a);
	close(b);
}

static void second_hello_supersedes(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping p = { 0 };
	struct hb_frame f;
	int a = ht_udp(false), b = ht_udp(true);
	uint64_t ta = ht_udp_login(a, D.port, false, 8), tb;

	(void)state;
	HT_NE(ta, 0, "first UDP login of device 8");
	ht_sleep_ms(2);
	tb = ht_udp_login(b, D.port, true, 8);
	HT_NE(tb, 0, "second UDP login of device 8 (IPv6)");
	HT_EQ(ht_udp_recv(a, buf, &f, HT_IO_MS), 1, "a datagram for the first session within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_BYE, "frame type sent to the superseded session");
	HT_EQ(be16toh(*(uint16_t *)f.payload), HB_BYE_SUPERSEDED,
	      "BYE reason for the superseded session");
	HT_EQ(f.token, ta, "token of the BYE (the superseded session's)");
	HT_EQ(ht_udp_send(a, D.port, false, HB_PING, 3, ta, &p, sizeof(p)), 0,
	      "PING of the superseded session sent");
	HT_TRUE(silent(a), "no answer to the superseded session");
	udp_ping(b, D.port, true, tb, 4);
	close(a);
	close(b);
}

static void many_sessions(void **state)
{
	int fds[100];
	uint64_t tok[100];

	(void)state;
	for (int i = 0; i < 100; i++) {
		fds[i] = ht_udp(false);
		tok[i] = ht_udp_login(fds[i], D.port, false, 100 + (uint64_t)i);
		HT_NE(tok[i], 0, "UDP login of device %d", 100 + i);
	}
	for (int i = 0; i < 100; i++)
		udp_ping(fds[i], D.port, false, tok[i], (uint16_t)i);
	for (int i = 0; i < 100; i++)
		close(fds[i]);
}

static void silent_session_expires(void **state)
{
	static const char *const args[] = { "--no-offload", "--interval", "0.2", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping p = { 0 };
	struct ht_daemon d;
	struct hb_frame f;
	int quiet = ht_udp(false), chatty = ht_udp(false);
	uint64_t tq, tc;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --interval 0.2 started");
	tq = ht_udp_login(quiet, d.port, false, 1);
	tc = ht_udp_login(chatty, d.port, false, 2);
	HT_TRUE(tq && tc, "logins of the quiet (token %#llx) and the chatty (%#llx) device",
		(unsigned long long)tq, (unsigned long long)tc);
	for (int i = 0; i < 10; i++) {
		udp_ping(chatty, d.port, false, tc, (uint16_t)i);
		ht_sleep_ms(100);
	}
	HT_EQ(ht_udp_recv(quiet, buf, &f, HT_IO_MS), 1,
	      "a datagram for the quiet device within %d ms", HT_IO_MS);
	HT_EQ(f.type, HB_BYE, "frame type sent to the quiet device");
	HT_EQ(be16toh(*(uint16_t *)f.payload), HB_BYE_EXPIRED, "BYE reason for the quiet device");
	udp_ping(chatty, d.port, false, tc, 99); /* still alive after 1 s */
	/* the expired token is dead (the wait also lets chatty expire: it is silent now) */
	HT_EQ(ht_udp_send(quiet, d.port, false, HB_PING, 1, tq, &p, sizeof(p)), 0,
	      "PING with the expired token sent");
	HT_TRUE(silent(quiet), "no answer to an expired session");
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_GE(ht_exit_stat(&d, "expired_udp"), 1, "the expired_udp exit counter");
	HT_EQ(ht_exit_stat(&d, "udp_active"), 0, "sessions still active at exit");
	ht_cleanup(&d);
	close(quiet);
	close(chatty);
}

static void sigterm_byes_sessions(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "3", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct ht_daemon d;
	struct hb_frame f;
	int fds[6];
	uint64_t tok[6];

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with three workers started");
	for (int i = 0; i < 6; i++) {
		fds[i] = ht_udp(i % 2);
		tok[i] = ht_udp_login(fds[i], d.port, i % 2, 1 + (uint64_t)i);
		HT_NE(tok[i], 0, "UDP login of device %d", 1 + i);
	}
	kill(d.pid, SIGTERM);
	for (int i = 0; i < 6; i++) {
		HT_EQ(ht_udp_recv(fds[i], buf, &f, HT_IO_MS), 1,
		      "a datagram for session %d after SIGTERM within %d ms", i, HT_IO_MS);
		HT_EQ(f.type, HB_BYE, "frame type sent to session %d on SIGTERM", i);
		HT_EQ(be16toh(*(uint16_t *)f.payload), HB_BYE_SHUTDOWN, "BYE reason on SIGTERM");
		HT_EQ(f.token, tok[i], "token of the BYE to session %d", i);
		close(fds[i]);
	}
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "udp_sessions"), 6, "the udp_sessions exit counter");
	HT_EQ(ht_exit_stat(&d, "udp_active"), 0, "sessions still active at exit");
	ht_cleanup(&d);
}

/* Version 2 in userspace: the device library's state machine logs in (a WELCOME tagged under
 * the derived key), PINGs, ECHOs and sends DATA, every answer tagged; a PING whose tag does not
 * verify, or sent twice, gets nothing. */
static void v2_session(void **state)
{
	uint8_t buf[HB_MAX_FRAME], p[HB_MAX_FRAME];
	struct hb_frame f;
	struct hbc_ev ev;
	struct hbc c;
	int fd = ht_udp(false), n;

	(void)state;
	HT_EQ(ht_v2_login(fd, D.port, 6, &c), 0, "version 2 login of device 6");
	n = hbc_ping(&c, p, sizeof(p), hb_mono_ns(), NULL);
	HT_EQ(ht_udp_send_raw(fd, D.port, p, (size_t)n), 0, "PING sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "an answer to the PING");
	HT_EQ(f.version, HB_VERSION_2, "the PONG's version");
	HT_EQ(hbc_input(&c, &f, hb_mono_ns(), &ev), HBC_EV_PONG, "a PONG under the session key");
	HT_EQ(ht_udp_send_raw(fd, D.port, p, (size_t)n), 0, "the same PING again");
	HT_NE(ht_udp_recv(fd, buf, &f, SILENCE_MS), 1, "no answer to a replayed PING");
	n = hbc_ping(&c, p, sizeof(p), hb_mono_ns(), NULL);
	p[n - 3] ^= 1;
	HT_EQ(ht_udp_send_raw(fd, D.port, p, (size_t)n), 0, "PING with a wrong tag sent");
	HT_NE(ht_udp_recv(fd, buf, &f, SILENCE_MS), 1, "no answer to a PING with a wrong tag");
	n = hbc_echo(&c, p, sizeof(p), "v2", 2, NULL);
	HT_EQ(ht_udp_send_raw(fd, D.port, p, (size_t)n), 0, "ECHO sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "the ECHO back");
	HT_EQ(hbc_input(&c, &f, hb_mono_ns(), &ev), HBC_EV_ECHO, "the ECHO under the session key");
	n = hbc_data(&c, p, sizeof(p), "v2", 2, NULL);
	HT_EQ(ht_udp_send_raw(fd, D.port, p, (size_t)n), 0, "DATA sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "the DATA's ACK");
	HT_EQ(hbc_input(&c, &f, hb_mono_ns(), &ev), HBC_EV_ACK, "an ACK under the session key");
	n = hbc_bye(&c, p, sizeof(p), HB_BYE_NORMAL);
	HT_EQ(ht_udp_send_raw(fd, D.port, p, (size_t)n), 0, "BYE sent");
	close(fd);
}

/* --require-udp-mac: a version 1 UDP HELLO gets ERROR(VERSION), a version 2 one a WELCOME;
 * TCP is not concerned. */
static void require_udp_mac(void **state)
{
	static const char *const args[] = { "--no-offload", "--require-udp-mac", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct ht_daemon d;
	struct hb_frame f;
	struct hb_hello h;
	struct hb_error e;
	struct hbc c;
	int fd = ht_udp(false), t;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd --require-udp-mac started");
	ht_hello(&h, 3, 0);
	HT_EQ(ht_udp_send(fd, d.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0, "v1 HELLO sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "an answer to the v1 HELLO");
	HT_EQ(f.type, HB_ERROR, "the answer to a v1 UDP HELLO: %s", hb_type_str(f.type));
	memcpy(&e, f.payload, sizeof(e));
	HT_EQ(ntohs(e.code), HB_ERR_VERSION, "its code: VERSION");
	HT_EQ(ht_v2_login(fd, d.port, 3, &c), 0, "version 2 login of the same device");
	t = ht_tcp_login(d.port, 4, false, NULL);
	HT_GE(t, 0, "TCP login (version 1) beside --require-udp-mac");
	close(t);
	close(fd);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd");
	HT_EQ(ht_exit_stat(&d, "udp_v1_refused"), 1, "udp_v1_refused");
	ht_cleanup(&d);
}

/* Needs its own daemon: an IPv4-only socket answers through sockaddr_in, not v4-mapped. */
static void ipv4_bind(void **state)
{
	static const char *const args[] = { "--no-offload", "--bind", "127.0.0.1", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct ht_daemon d;
	struct hb_frame f;
	int fd = ht_udp(false);
	uint64_t tok;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --bind 127.0.0.1 started");
	tok = ht_udp_login(fd, d.port, false, 9);
	HT_NE(tok, 0, "UDP login of device 9 to the IPv4-only socket");
	udp_ping(fd, d.port, false, tok, 1);
	HT_EQ(ht_udp_send(fd, d.port, false, HB_DATA, 2, tok, "v4", 2), 0, "DATA sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "an answer to DATA within %d ms", HT_IO_MS);
	HT_EQ(f.type, HB_ACK, "frame type of the answer to DATA");
	kill(d.pid, SIGTERM);
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "a datagram after SIGTERM within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_BYE, "frame type sent on SIGTERM");
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest shared[] = {
		cmocka_unit_test(hello_welcome_ping_pong),
		cmocka_unit_test(unknown_token_gets_nothing),
		cmocka_unit_test(malformed_gets_nothing),
		cmocka_unit_test(bad_mac_and_replay),
		cmocka_unit_test(echo_data_ack_sink),
		cmocka_unit_test(bye_ends_session),
		cmocka_unit_test(nat_rebinding_moves_session),
		cmocka_unit_test(second_hello_supersedes),
		cmocka_unit_test(many_sessions),
		cmocka_unit_test(v2_session),
	};
	const struct CMUnitTest own[] = {
		cmocka_unit_test_teardown(silent_session_expires, ht_reap),
		cmocka_unit_test_teardown(sigterm_byes_sessions, ht_reap),
		cmocka_unit_test_teardown(ipv4_bind, ht_reap),
		cmocka_unit_test_teardown(require_udp_mac, ht_reap),
	};
	int rc;

	rc = cmocka_run_group_tests_name("hbd_udp", shared, group_setup, group_teardown);
	rc |= cmocka_run_group_tests_name("hbd_udp_own_daemon", own, NULL, NULL);
	return rc;
}
