// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd's application side against the real daemon (--no-offload): the control socket's
 * requests, downlink over TCP and UDP with every outcome, presence events, key reload with
 * revocation of live sessions (control socket and SIGHUP), /metrics checked against the
 * daemon's own counters, and sd_notify readiness.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "metrics.h"
#include "lib/ht_assert.h"
#include "lib/ctl.h"

static struct ht_daemon D;
static char CTL[108];
static uint16_t MPORT;

static int group_setup(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "2",
					    "--interval",   "100",	 NULL };

	(void)state;
	return tc_start(&D, CTL, sizeof(CTL), true, &MPORT, args);
}

static int group_teardown(void **state)
{
	int rc = ht_stop(&D);

	(void)state;
	if (rc || ht_exit_stat(&D, "errors") != 0) {
		fprintf(stderr, "daemon exit %d, errors %lld\n", rc, ht_exit_stat(&D, "errors"));
		rc = -1;
	}
	tc_cleanup(&D);
	tc_reap(state);
	return rc;
}

static long long stat_of(const char *ctl, const char *name)
{
	char line[4096];

	if (tc_req(ctl, "stats\n", line, sizeof(line)))
		return -1;
	return tc_num(line, name);
}

static void control_requests(void **state)
{
	char line[4096], big[3000];
	int fd;

	(void)state;
	HT_EQ(tc_req(CTL, "ping\n", line, sizeof(line)), 0, "reply to 'ping' on %s", CTL);
	assert_string_equal(line, "{\"req\":1,\"ok\":true}");
	HT_EQ(tc_req(CTL, "stats\n", line, sizeof(line)), 0, "reply to 'stats'");
	assert_non_null(strstr(line, "\"ok\":true,\"stats\":{\"pings_user\":"));
	HT_EQ(tc_req(CTL, "bogus\n", line, sizeof(line)), 0, "reply to an unknown request");
	assert_non_null(strstr(line, "\"ok\":false,\"error\":\"unknown request"));
	HT_EQ(tc_req(CTL, "send 5\n", line, sizeof(line)), 0, "reply to 'send' without a payload");
	assert_non_null(strstr(line, "usage: send DEVICE BASE64"));
	HT_EQ(tc_req(CTL, "send 5 !!!!\n", line, sizeof(line)), 0,
	      "reply to 'send' with a payload that is not base64");
	assert_non_null(strstr(line, "payload must be base64"));
	HT_EQ(tc_req(CTL, "send 0 aGk=\n", line, sizeof(line)), 0, "reply to 'send' to device 0");
	assert_non_null(strstr(line, "usage"));
	/* nobody connected as device 7: answered at once */
	HT_EQ(tc_req(CTL, "send 7 aGk=\n", line, sizeof(line)), 0,
	      "reply to 'send' to a device nobody is connected as");
	assert_non_null(strstr(line, "\"ok\":false,\"status\":\"offline\",\"device\":7"));
	/* blank lines are not requests; the request counter says so */
	fd = tc_connect(CTL);
	HT_GE(fd, 0, "connection to the control socket %s", CTL);
	HT_EQ(tc_write(fd, "\n\nping\n"), 0, "blank lines and 'ping' written");
	HT_EQ(tc_line(fd, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to 'ping' after blank lines within %d ms", HT_IO_MS);
	assert_string_equal(line, "{\"req\":1,\"ok\":true}");
	/* a line longer than any request: refused, then the connection ends */
	memset(big, 'x', sizeof(big));
	HT_EQ(ht_send_all(fd, big, sizeof(big)), 0, "a %zu-byte line written", sizeof(big));
	HT_EQ(tc_line(fd, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to a line too long within %d ms", HT_IO_MS);
	assert_non_null(strstr(line, "line too long"));
	HT_TRUE(ht_eof(fd, HT_IO_MS), "control connection closed after a line too long");
	close(fd);
}

/* Sends "send DEV <payload>" on fd (the reply comes later). */
static void request_send(int fd, uint64_t dev, const char *payload, int timeout_ms)
{
	char b64[64], req[160];

	tc_b64(payload, (int)strlen(payload), b64);
	if (timeout_ms)
		snprintf(req, sizeof(req), "send %" PRIu64 " %s %d\n", dev, b64, timeout_ms);
	else
		snprintf(req, sizeof(req), "send %" PRIu64 " %s\n", dev, b64);
	HT_EQ(tc_write(fd, req), 0, "request '%s' written", req);
}

static uint16_t expect_down_tcp(int dev_fd, const char *payload)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;

	HT_EQ(ht_recv_frame(dev_fd, buf, &f, HT_IO_MS), 1, "a frame for the device within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_DOWN, "frame type sent to the device");
	HT_EQ(f.len, strlen(payload), "DOWN payload length (of '%s')", payload);
	assert_memory_equal(f.payload, payload, f.len);
	return f.seq;
}

static void tcp_downlink(void **state)
{
	long long sent0 = stat_of(CTL, "down_sent"), acked0 = stat_of(CTL, "down_acked");
	long long failed0 = stat_of(CTL, "down_failed");
	int dev = ht_tcp_login(D.port, 9, false, NULL), ctl = tc_connect(CTL);
	uint16_t seq;
	char line[512];

	(void)state;
	HT_TRUE(dev >= 0 && ctl >= 0, "login of device 9 (fd %d) and control connection (fd %d)",
		dev, ctl);
	/* delivered: the device ACKs with the DOWN's seq */
	request_send(ctl, 9, "open valve 3", 0);
	seq = expect_down_tcp(dev, "open valve 3");
	HT_EQ(ht_send_frame(dev, HB_ACK, seq, NULL, 0), 0, "device's ACK for DOWN %u sent", seq);
	HT_EQ(tc_line(ctl, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to the delivered send within %d ms", HT_IO_MS);
	assert_non_null(
		strstr(line, "{\"req\":1,\"ok\":true,\"status\":\"delivered\",\"device\":9"));
	HT_EQ(tc_num(line, "seq"), seq, "seq in the reply: the DOWN's");
	HT_GE(tc_num(line, "rtt_us"), 0, "rtt_us in the reply: %s", line);
	/* an ACK for nothing in flight changes nothing: the session goes on */
	HT_EQ(ht_send_frame(dev, HB_ACK, (uint16_t)(seq + 100), NULL, 0), 0,
	      "ACK for nothing in flight sent");
	/* no ACK: timeout */
	request_send(ctl, 9, "no answer", 300);
	(void)expect_down_tcp(dev, "no answer");
	HT_EQ(tc_line(ctl, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to the unanswered send within %d ms", HT_IO_MS);
	assert_non_null(strstr(line, "{\"req\":2,\"ok\":false,\"status\":\"timeout\""));
	/* the session ends before the ACK: closed */
	request_send(ctl, 9, "gone soon", 0);
	(void)expect_down_tcp(dev, "gone soon");
	close(dev);
	HT_EQ(tc_line(ctl, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to the send whose session closed within %d ms", HT_IO_MS);
	assert_non_null(strstr(line, "{\"req\":3,\"ok\":false,\"status\":\"closed\""));
	close(ctl);
	HT_EQ(stat_of(CTL, "down_sent") - sent0, 3, "down_sent counter moved by the three sends");
	HT_EQ(stat_of(CTL, "down_acked") - acked0, 1, "down_acked counter moved by the one ACK");
	HT_EQ(stat_of(CTL, "down_failed") - failed0, 2,
	      "down_failed counter moved by the timeout and the close");
}

static void udp_downlink(void **state)
{
	int dev = ht_udp(false), ctl = tc_connect(CTL);
	uint64_t token = ht_udp_login(dev, D.port, false, 5);
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	char line[512];

	(void)state;
	HT_GE(ctl, 0, "connection to the control socket %s", CTL);
	HT_NE(token, 0, "UDP login of device 5");
	request_send(ctl, 5, "reboot at 3am", 0);
	HT_EQ(ht_udp_recv(dev, buf, &f, HT_IO_MS), 1, "a datagram for device 5 within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_DOWN, "frame type sent to device 5");
	HT_EQ(f.token, token, "token of the DOWN (device 5's session)");
	assert_memory_equal(f.payload, "reboot at 3am", f.len);
	HT_EQ(ht_udp_send(dev, D.port, false, HB_ACK, f.seq, token, NULL, 0), 0,
	      "device's ACK for DOWN %u sent", f.seq);
	HT_EQ(tc_line(ctl, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to the delivered send within %d ms", HT_IO_MS);
	assert_non_null(strstr(line, "\"ok\":true,\"status\":\"delivered\",\"device\":5"));
	/* an ACK with another session's token is nobody's */
	request_send(ctl, 5, "second", 300);
	HT_EQ(ht_udp_recv(dev, buf, &f, HT_IO_MS), 1, "the second DOWN within %d ms", HT_IO_MS);
	HT_EQ(ht_udp_send(dev, D.port, false, HB_ACK, f.seq, token ^ 1, NULL, 0), 0,
	      "ACK with another session's token sent");
	HT_EQ(tc_line(ctl, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to the send ACKed with the wrong token within %d ms", HT_IO_MS);
	assert_non_null(strstr(line, "\"status\":\"timeout\""));
	/* ACKs from new source ports (NAT rebinding): SO_REUSEPORT hands each to either worker,
	 * so most of the eight reach a worker that does not own the session and are forwarded
	 * to the owner by MSG_RING; every one must count, and each moves the session along */
	for (int i = 0; i < 8; i++) {
		int next = ht_udp(false);

		request_send(ctl, 5, "hop", 0);
		HT_EQ(ht_udp_recv(dev, buf, &f, HT_IO_MS), 1, "DOWN %d of 8 within %d ms", i + 1,
		      HT_IO_MS);
		HT_EQ(f.type, HB_DOWN, "frame type sent to device 5 (hop %d)", i + 1);
		HT_EQ(ht_udp_send(next, D.port, false, HB_ACK, f.seq, token, NULL, 0), 0,
		      "ACK from a new source port sent (hop %d)", i + 1);
		HT_EQ(tc_line(ctl, line, sizeof(line), HT_IO_MS), 0,
		      "reply line to hop %d's send within %d ms", i + 1, HT_IO_MS);
		assert_non_null(strstr(line, "\"status\":\"delivered\""));
		close(dev);
		dev = next;
	}
	HT_EQ(ht_udp_send(dev, D.port, false, HB_BYE, 2, token, "\0\0", 2), 0, "BYE sent");
	close(dev);
	close(ctl);
}

/* Next event line of a subscriber, of the given kind and device (others are skipped). */
static void expect_event(int sub, const char *kind, uint64_t dev, char *line, size_t cap)
{
	char want_kind[48], want_dev[48];

	snprintf(want_kind, sizeof(want_kind), "\"event\":\"%s\"", kind);
	snprintf(want_dev, sizeof(want_dev), "\"device\":%" PRIu64 ",", dev);
	for (int i = 0; i < 20; i++) {
		HT_EQ(tc_line(sub, line, cap, HT_IO_MS), 0,
		      "event line within %d ms while waiting for '%s' of device %" PRIu64, HT_IO_MS,
		      kind, dev);
		if (strstr(line, want_kind) && strstr(line, want_dev))
			return;
	}
	fail_msg("no %s event for device %" PRIu64, kind, dev);
}

static void presence_events(void **state)
{
	int sub = tc_connect(CTL), tcp, u1 = ht_udp(false), u2 = ht_udp(false);
	char line[512], first_session[40], *p;
	struct hb_bye bye = { .reason = htobe16(HB_BYE_NORMAL) };
	uint64_t t1, t2;

	(void)state;
	HT_GE(sub, 0, "subscriber connection to %s", CTL);
	HT_EQ(tc_write(sub, "subscribe\n"), 0, "'subscribe' written");
	HT_EQ(tc_line(sub, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to 'subscribe' within %d ms", HT_IO_MS);
	assert_string_equal(line, "{\"req\":1,\"ok\":true}");
	tcp = ht_tcp_login(D.port, 3, false, NULL);
	HT_GE(tcp, 0, "TCP login of device 3");
	expect_event(sub, "online", 3, line, sizeof(line));
	assert_non_null(strstr(line, "\"transport\":\"tcp\""));
	HT_EQ(ht_send_frame(tcp, HB_BYE, 2, &bye, sizeof(bye)), 0, "BYE of device 3 sent");
	expect_event(sub, "offline", 3, line, sizeof(line));
	close(tcp);
	/* UDP: online with the peer; a second HELLO supersedes the first session */
	t1 = ht_udp_login(u1, D.port, false, 4);
	HT_NE(t1, 0, "UDP login of device 4");
	expect_event(sub, "online", 4, line, sizeof(line));
	assert_non_null(strstr(line, "\"transport\":\"udp\""));
	assert_non_null(strstr(line, "\"peer\":\"127.0.0.1:"));
	p = strstr(line, "\"session\":\"");
	assert_non_null(p);
	snprintf(first_session, sizeof(first_session), "%.16s", p + 11);
	ht_sleep_ms(2); /* a newer HELLO timestamp */
	t2 = ht_udp_login(u2, D.port, false, 4);
	HT_NE(t2, 0, "second UDP login of device 4");
	expect_event(sub, "superseded", 4, line, sizeof(line));
	assert_non_null(strstr(line, first_session)); /* the old session, not the new one */
	HT_EQ(ht_udp_send(u2, D.port, false, HB_BYE, 2, t2, &bye, sizeof(bye)), 0,
	      "BYE of device 4's second session sent");
	expect_event(sub, "offline", 4, line, sizeof(line));
	close(u1);
	close(u2);
	close(sub);
}

static void metrics_parse_addr(void **state)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	socklen_t len;

	(void)state;
	HT_EQ(hbd_metrics_parse_addr("9107", &ss, &len), 0, "parse of '9107'");
	HT_EQ(s4->sin_family, AF_INET, "address family of '9107'");
	HT_EQ(s4->sin_addr.s_addr, htonl(INADDR_LOOPBACK), "address of '9107' (local by default)");
	HT_EQ(ntohs(s4->sin_port), 9107, "port of '9107'");
	HT_EQ(hbd_metrics_parse_addr(":9107", &ss, &len), 0, "parse of ':9107'");
	HT_EQ(s4->sin_addr.s_addr, htonl(INADDR_LOOPBACK), "address of ':9107'");
	HT_EQ(hbd_metrics_parse_addr("0.0.0.0:80", &ss, &len), 0, "parse of '0.0.0.0:80'");
	HT_EQ(s4->sin_addr.s_addr, 0, "address of '0.0.0.0:80'");
	HT_EQ(hbd_metrics_parse_addr("[::1]:80", &ss, &len), 0, "parse of '[::1]:80'");
	HT_EQ(ss.ss_family, AF_INET6, "address family of '[::1]:80'");
	HT_EQ(len, sizeof(struct sockaddr_in6), "address length of '[::1]:80'");
	HT_NE(hbd_metrics_parse_addr("", &ss, &len), 0, "parse of '' refused");
	HT_NE(hbd_metrics_parse_addr("host:80", &ss, &len), 0, "parse of 'host:80' refused");
	HT_NE(hbd_metrics_parse_addr("1.2.3.4:65536", &ss, &len), 0,
	      "parse of '1.2.3.4:65536' refused");
	HT_NE(hbd_metrics_parse_addr("[::1]80", &ss, &len), 0, "parse of '[::1]80' refused");
	HT_NE(hbd_metrics_parse_addr("127.0.0.1:-1", &ss, &len), 0,
	      "parse of '127.0.0.1:-1' refused");
}

/* Every sample line is "name value" or "name{labels} value"; histogram buckets grow. */
static void check_exposition(const char *text)
{
	char prev_hist[96] = "";
	long long prev = -1;

	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		char l[512];

		snprintf(l, sizeof(l), "%.*s", (int)n, p);
		p += n + (nl ? 1 : 0);
		if (!l[0] || !strncmp(l, "# HELP ", 7) || !strncmp(l, "# TYPE ", 7))
			continue;
		char *sp = strrchr(l, ' ');
		assert_non_null(sp);
		HT_TRUE(sp[1] == '-' || (sp[1] >= '0' && sp[1] <= '9'),
			"a number after the last space of '%s'", l);
		HT_TRUE((l[0] >= 'a' && l[0] <= 'z') || l[0] == '_',
			"a metric name at the start of '%s'", l);
		char *b = strstr(l, "_bucket{le=");
		if (b) {
			long long v = atoll(sp + 1);

			if (!strncmp(prev_hist, l, (size_t)(b - l)))
				HT_GE(v, prev, "histogram buckets cumulative at '%s'", l);
			snprintf(prev_hist, sizeof(prev_hist), "%.*s", (int)(b - l), l);
			prev = v;
		}
	}
}

static void metrics_match_counters(void **state)
{
	int fd = ht_tcp_login(D.port, 8, false, NULL), status = 0;
	uint8_t buf[HB_MAX_FRAME];
	char line[4096], series[128];
	struct hb_ping ping = { .ts = htobe64(1) };
	struct hb_frame f;
	char *text;

	(void)state;
	HT_TRUE(fd >= 0 && MPORT, "login of device 8 (fd %d) and the metrics port (%u)", fd, MPORT);
	for (uint16_t i = 0; i < 5; i++) {
		HT_EQ(ht_send_frame(fd, HB_PING, i, &ping, sizeof(ping)), 0, "PING %u sent", i);
		HT_TRUE(ht_expect(fd, HB_PONG, -1), "PONG %u", i);
	}
	HT_EQ(ht_send_frame(fd, HB_DATA, 9, "t=21", 4), 0, "DATA sent");
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to the DATA within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_ACK, "frame type of the answer to DATA");
	/* quiet now: the counters hold still between the two reads */
	text = tc_curl(MPORT, "/metrics", &status);
	HT_EQ(tc_req(CTL, "stats\n", line, sizeof(line)), 0, "reply to 'stats'");
	assert_non_null(text);
	HT_EQ(status, 200, "HTTP status of GET /metrics");
	check_exposition(text);
	assert_non_null(strstr(text, "hbeat_build_info{version=\""));
	assert_non_null(strstr(text, "mode=\"userspace\"} 1\n"));
	HT_EQ(tc_metric(text, "hbeat_devices_connected{transport=\"tcp\"}"), 1,
	      "hbeat_devices_connected for TCP");
	HT_EQ(tc_metric(text, "hbeat_heartbeats_user_total"), tc_num(line, "pings_user"),
	      "hbeat_heartbeats_user_total against pings_user");
	HT_GE(tc_metric(text, "hbeat_heartbeats_user_total"), 5,
	      "hbeat_heartbeats_user_total after 5 PINGs");
	HT_EQ(tc_metric(text, "hbeat_heartbeats_kernel_total{transport=\"udp\"}"), 0,
	      "hbeat_heartbeats_kernel_total for UDP (no kernel path here)");
	HT_EQ(tc_metric(text, "hbeat_auth_total{result=\"ok\"}"), tc_num(line, "auth_ok"),
	      "hbeat_auth_total ok against auth_ok");
	HT_EQ(tc_metric(text, "hbeat_auth_total{result=\"failed\"}"), tc_num(line, "auth_fail"),
	      "hbeat_auth_total failed against auth_fail");
	HT_EQ(tc_metric(text, "hbeat_data_frames_total"), tc_num(line, "frames_data"),
	      "hbeat_data_frames_total against frames_data");
	HT_EQ(tc_metric(text, "hbeat_data_bytes_total"), tc_num(line, "data_bytes"),
	      "hbeat_data_bytes_total against data_bytes");
	HT_EQ(tc_metric(text, "hbeat_drops_total{reason=\"malformed\"}"),
	      tc_num(line, "frames_bad"), "hbeat_drops_total malformed against frames_bad");
	/* every daemon counter under its own name, equal to what the control socket says */
#define CHECK(name)                                                                      \
	snprintf(series, sizeof(series), "hbeat_daemon_counter{counter=\"%s\"}", #name); \
	HT_EQ(tc_metric(text, series), tc_num(line, #name), "%s against the stats request", series);
	HB_USTATS(CHECK)
#undef CHECK
	/* the sink write the DATA frame waited for was timed */
	HT_GE(tc_metric(text, "hbeat_sink_write_seconds_count"), 1,
	      "hbeat_sink_write_seconds_count after a DATA frame");
	HT_EQ(tc_metric(text, "hbeat_sink_write_seconds_bucket{le=\"+Inf\"}"),
	      tc_metric(text, "hbeat_sink_write_seconds_count"),
	      "the +Inf bucket of hbeat_sink_write_seconds against its count");
	free(text);
	close(fd);
	/* nothing else is served */
	text = tc_curl(MPORT, "/", &status);
	HT_EQ(status, 404, "HTTP status of GET /");
	free(text);
}

/* Keys of the shared test set, minus device 9, plus device 101 revoked; or a broken file. */
static void write_keys(const char *path, bool drop9, bool revoke101, bool broken)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	for (uint64_t d = 1; d <= 9; d++) {
		uint8_t s[HB_SECRET_MAX];

		if (d == 9 && drop9)
			continue;
		ht_secret(d, s);
		fprintf(f, "%" PRIu64 " ", d);
		for (int i = 0; i < 16; i++)
			fprintf(f, "%02x", s[i]);
		fprintf(f, "\n");
	}
	fprintf(f, "100-199 derive %s\n", HT_MASTER);
	if (revoke101)
		fprintf(f, "101 revoked\n");
	if (broken)
		fprintf(f, "12 not-hex-at-all\n");
	HT_EQ(fclose(f), 0, "key store written to %s", path);
}

static void reload_revokes_live_sessions(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "2", NULL };
	struct ht_daemon d;
	char ctl[108], line[512];
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	struct hb_ping ping = { .ts = htobe64(7) };
	int tcp, u101 = ht_udp(false), u102 = ht_udp(false), sub, fd;
	uint64_t t101, t102;

	(void)state;
	HT_EQ(tc_start(&d, ctl, sizeof(ctl), false, NULL, args), 0,
	      "hbd with a control socket started");
	sub = tc_connect(ctl);
	HT_EQ(tc_write(sub, "subscribe\n"), 0, "'subscribe' written");
	HT_EQ(tc_line(sub, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to 'subscribe' within %d ms", HT_IO_MS);
	tcp = ht_tcp_login(d.port, 9, false, NULL);
	t101 = ht_udp_login(u101, d.port, false, 101);
	t102 = ht_udp_login(u102, d.port, false, 102);
	HT_TRUE(tcp >= 0 && t101 && t102,
		"TCP login of 9 (fd %d), UDP logins of 101 (%#llx) and 102 (%#llx)", tcp,
		(unsigned long long)t101, (unsigned long long)t102);

	/* a store that does not parse changes nothing */
	write_keys(d.keys, true, true, true);
	HT_EQ(tc_req(ctl, "reload\n", line, sizeof(line)), 0,
	      "reply to 'reload' of a broken key store");
	assert_non_null(strstr(line, "\"ok\":false"));
	assert_non_null(strstr(line, "keys:11"));
	HT_EQ(ht_send_frame(tcp, HB_PING, 1, &ping, sizeof(ping)), 0, "PING of device 9 sent");
	HT_TRUE(ht_expect(tcp, HB_PONG, -1), "PONG for device 9 after the refused reload");

	/* device 9 removed, 101 revoked inside its range: both live sessions are cut */
	write_keys(d.keys, true, true, false);
	HT_EQ(tc_req(ctl, "reload\n", line, sizeof(line)), 0, "reply to 'reload'");
	assert_non_null(strstr(line, "\"ok\":true"));
	HT_EQ(tc_num(line, "revoked"), 1, "'revoked' in the reload reply: %s", line);
	HT_EQ(tc_num(line, "revoked_sessions"), 2, "'revoked_sessions' in the reload reply: %s",
	      line);
	HT_TRUE(ht_expect(tcp, HB_BYE, HB_BYE_REVOKED),
		"BYE(REVOKED) to device 9 (removed from the store)");
	HT_TRUE(ht_eof(tcp, HT_IO_MS), "close of device 9's connection");
	close(tcp);
	HT_EQ(ht_udp_recv(u101, buf, &f, HT_IO_MS), 1, "a datagram for device 101 within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_BYE, "frame type sent to revoked device 101");
	HT_EQ(be16toh(*(const uint16_t *)f.payload), HB_BYE_REVOKED, "BYE reason for device 101");
	/* the revoked UDP session is gone: its heartbeats get nothing */
	HT_EQ(ht_udp_send(u101, d.port, false, HB_PING, 2, t101, &ping, sizeof(ping)), 0,
	      "PING of revoked device 101 sent");
	HT_EQ(ht_udp_recv(u101, buf, &f, 300), -1,
	      "no answer to the revoked session within 300 ms");
	/* the rest of the range is untouched */
	HT_EQ(ht_udp_send(u102, d.port, false, HB_PING, 2, t102, &ping, sizeof(ping)), 0,
	      "PING of device 102 sent");
	HT_EQ(ht_udp_recv(u102, buf, &f, HT_IO_MS), 1, "an answer to device 102 within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_PONG, "frame type of the answer to device 102");
	expect_event(sub, "revoked", 9, line, sizeof(line));
	/* and neither device gets back in */
	fd = ht_tcp(d.port, false);
	{
		struct hb_hello h;

		ht_hello(&h, 9, 0);
		HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0,
		      "HELLO of removed device 9 sent");
		HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_AUTH), "ERROR(AUTH) for removed device 9");
		close(fd);
	}
	HT_EQ(ht_udp_login(u101, d.port, false, 101), 0,
	      "UDP login of revoked device 101 (a token means it got in)");
	HT_EQ(stat_of(ctl, "revoked"), 2, "the revoked counter (device 9 and device 101)");
	HT_EQ(stat_of(ctl, "key_reloads"), 1,
	      "the key_reloads counter (the broken store does not count)");

	/* SIGHUP reloads too: device 9 is back */
	write_keys(d.keys, false, true, false);
	kill(d.pid, SIGHUP);
	for (int i = 0; i < 300 && stat_of(ctl, "key_reloads") < 2; i++)
		ht_sleep_ms(10);
	HT_EQ(stat_of(ctl, "key_reloads"), 2, "the key_reloads counter within 3 s of SIGHUP");
	tcp = ht_tcp_login(d.port, 9, false, NULL);
	HT_GE(tcp, 0, "login of device 9 after the SIGHUP reload");
	close(tcp);
	close(sub);
	close(u101);
	close(u102);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "errors"), 0, "the errors exit counter");
	ht_cleanup(&d);
}

/* Next datagram on the notify socket containing want (others skipped); false after ms. */
static bool notified(int fd, const char *want, char *msg, size_t cap, int ms)
{
	uint64_t end = ht_now_ms() + (uint64_t)ms;

	while (ht_now_ms() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, (int)(end - ht_now_ms())) <= 0)
			break;
		n = recv(fd, msg, cap - 1, 0);
		if (n <= 0)
			break;
		msg[n] = 0;
		if (strstr(msg, want))
			return true;
	}
	return false;
}

static void sd_notify_readiness(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "1", NULL };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ht_daemon d;
	char msg[512];
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	(void)state;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/hbo-notify-%d.sock", (int)getpid());
	unlink(sa.sun_path);
	tc_track_sock(sa.sun_path);
	HT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind of the notify socket %s",
	      sa.sun_path);
	/* what systemd gives a Type=notify service with WatchdogSec=0.4 */
	setenv("NOTIFY_SOCKET", sa.sun_path, 1);
	setenv("WATCHDOG_USEC", "400000", 1);
	HT_EQ(ht_start(&d, args), 0, "hbd with NOTIFY_SOCKET started");
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	HT_TRUE(notified(fd, "READY=1", msg, sizeof(msg), HT_IO_MS), "READY=1 within %d ms",
		HT_IO_MS);
	assert_non_null(strstr(msg, "STATUS=0 devices online (tcp 0, udp 0)"));
	HT_TRUE(notified(fd, "WATCHDOG=1", msg, sizeof(msg), HT_IO_MS),
		"WATCHDOG=1 within %d ms (WatchdogSec 0.4)", HT_IO_MS);
	kill(d.pid, SIGHUP);
	HT_TRUE(notified(fd, "RELOADING=1", msg, sizeof(msg), HT_IO_MS),
		"RELOADING=1 after SIGHUP");
	HT_TRUE(notified(fd, "READY=1", msg, sizeof(msg), HT_IO_MS), "READY=1 after the reload");
	kill(d.pid, SIGTERM);
	HT_TRUE(notified(fd, "STOPPING=1", msg, sizeof(msg), HT_IO_MS), "STOPPING=1 after SIGTERM");
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
	close(fd);
	unlink(sa.sun_path);
}

int main(void)
{
	const struct CMUnitTest shared[] = {
		cmocka_unit_test(control_requests),   cmocka_unit_test(tcp_downlink),
		cmocka_unit_test(udp_downlink),	      cmocka_unit_test(presence_events),
		cmocka_unit_test(metrics_parse_addr), cmocka_unit_test(metrics_match_counters),
	};
	const struct CMUnitTest own[] = {
		cmocka_unit_test_teardown(reload_revokes_live_sessions, tc_reap),
		cmocka_unit_test_teardown(sd_notify_readiness, tc_reap),
	};
	int rc;

	signal(SIGPIPE, SIG_IGN);
	rc = cmocka_run_group_tests_name("hbd_control", shared, group_setup, group_teardown);
	rc |= cmocka_run_group_tests_name("hbd_control_own_daemon", own, NULL, NULL);
	return rc;
}
