// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd as an MQTT 3.1.1 endpoint (--mqtt-port), in userspace mode, with raw sockets: CONNECT
 * with the derived password, PINGREQ, PUBLISH QoS 0/1 into the sink (PUBACK after the
 * write), SUBSCRIBE, a downlink through the control socket, DISCONNECT; keepalive expiry with
 * the Will recorded; a new CONNECT superseding an older one; and the conformance table: each
 * bad byte sequence gets its CONNACK or a close, nothing is stored and the daemon goes on
 * serving. Real clients (mosquitto_pub/sub) too.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "lib/clients.h"
#include "lib/ctl.h"
#include "lib/hbd_harness.h"
#include "lib/ht_assert.h"
#include "lib/run_prog.h"
#include "lib/sh.h"
#include "lib/sock.h"
#include "mqtt.h"

#define REALM "hbmq-test"

struct fx {
	struct ht_daemon d;
	char ctl[128];
	uint16_t mport;
	char mport_s[8];
	uint16_t metrics_port;
	struct hb_keystore *ks;
};

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	char err[256];

	fx->mport = ht_free_port();
	snprintf(fx->mport_s, sizeof(fx->mport_s), "%u", fx->mport);
	const char *const args[] = {
		"--no-offload", "--workers", "2",	   "--mqtt-port", fx->mport_s,
		"--mqtt-realm", REALM,	     "--interval", "1",		  NULL
	};
	HT_EQ(tc_start(&fx->d, fx->ctl, sizeof(fx->ctl), true, &fx->metrics_port, args), 0,
	      "hbd with --mqtt-port %u started", fx->mport);
	HT_EQ(hb_keystore_load(fx->d.keys, &fx->ks, err, sizeof(err)), 0, "test key store: %s",
	      err);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	hb_keystore_free(fx->ks);
	tc_cleanup(&fx->d);
	free(fx);
	return 0;
}

/* The password of a device for a realm, valid days from today (negative: expired). */
static void password(struct fx *fx, uint64_t id, const char *realm, int days, char *pw)
{
	uint8_t s[HB_SECRET_MAX];
	int n = hb_keystore_secret(fx->ks, id, s);

	HT_GT(n, 0, "secret of device %" PRIu64, id);
	HT_GT(hb_mqtt_password(s, (size_t)n, realm, id,
			       (uint32_t)((int64_t)(time(NULL) / 86400) + days), pw),
	      0, "password of device %" PRIu64, id);
}

static int mqtt_connect_sock(struct fx *fx)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(fx->mport) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	HT_GE(fd, 0, "socket");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	HT_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect to the MQTT port");
	return fd;
}

/* A CONNECT of device id (user name "user" unless NULL: decimal id) with a password. */
static size_t connect_pkt(uint8_t *b, size_t cap, const char *user, const char *pw,
			  uint16_t keepalive, const char *will_topic)
{
	struct hb_mqtt_connect m = { .clean_session = true, .keepalive = keepalive };

	m.client_id = hb_mqtt_cstr("hbmq", 4);
	if (user) {
		m.has_user = true;
		m.user = hb_mqtt_cstr(user, strlen(user));
	}
	if (pw) {
		m.has_pass = true;
		m.pass = hb_mqtt_cstr(pw, strlen(pw));
	}
	if (will_topic) {
		m.will = true;
		m.will_topic = hb_mqtt_cstr(will_topic, strlen(will_topic));
		m.will_msg = hb_mqtt_cstr("gone", 4);
	}
	return hb_mqtt_encode_connect(b, cap, &m);
}

/* Reads exactly n bytes within ms; returns how many came before EOF or the deadline. */
static size_t read_n(int fd, uint8_t *b, size_t n, int ms)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, ms) <= 0)
			break;
		r = recv(fd, b + got, n - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* The server closes the connection within ms (EOF or reset), with nothing more to read. */
static bool closed_within(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint8_t b[64];

	if (poll(&p, 1, ms) <= 0)
		return false;
	return recv(fd, b, sizeof(b), 0) <= 0;
}

static void expect(int fd, const uint8_t *want, size_t n, const char *what)
{
	uint8_t got[256];

	HT_EQ(read_n(fd, got, n, 2000), n, "bytes of %s", what);
	HT_TRUE(!memcmp(got, want, n), "%s as expected", what);
}

static const uint8_t connack_ok[] = { 0x20, 2, 0, 0 };
static const uint8_t pingresp[] = { 0xd0, 0 };

/* A connected, authenticated device's socket. */
static int session(struct fx *fx, uint64_t id, uint16_t keepalive, const char *will)
{
	char pw[HB_MQTT_PW_LEN + 1], user[24];
	uint8_t b[512];
	int fd = mqtt_connect_sock(fx);
	size_t n;

	password(fx, id, REALM, 30, pw);
	snprintf(user, sizeof(user), "%" PRIu64, id);
	n = connect_pkt(b, sizeof(b), user, pw, keepalive, will);
	HT_EQ(send(fd, b, n, 0), (ssize_t)n, "CONNECT sent");
	expect(fd, connack_ok, sizeof(connack_ok), "CONNACK 0");
	return fd;
}

static int sink_lines(const struct fx *fx)
{
	FILE *f = fopen(fx->d.sink, "r");
	int n = 0, c;

	if (!f)
		return 0;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

static void test_session(void **state)
{
	struct fx *fx = *state;
	int fd = session(fx, 1, 30, NULL);
	uint8_t b[256];
	size_t n;
	struct hb_mqtt_publish m = { .qos = 1, .packet_id = 7 };
	static const uint8_t puback7[] = { 0x40, 2, 0, 7 };
	static const uint8_t suback[] = { 0x90, 4, 0, 9, 1, 0x80 };

	/* a PINGREQ split over two segments, then coalesced with a second one */
	HT_EQ(send(fd, "\xc0", 1, 0), 1, "half a PINGREQ");
	usleep(20000);
	HT_EQ(send(fd, "\x00\xc0\x00", 3, 0), 3, "its rest and another PINGREQ");
	expect(fd, pingresp, 2, "first PINGRESP");
	expect(fd, pingresp, 2, "second PINGRESP");

	m.topic = hb_mqtt_cstr("devices/1/up/temp", 17);
	m.payload = (const uint8_t *)"21.5";
	m.payload_len = 4;
	n = hb_mqtt_encode_publish(b, sizeof(b), &m);
	HT_EQ(send(fd, b, n, 0), (ssize_t)n, "PUBLISH QoS 1");
	expect(fd, puback7, sizeof(puback7), "PUBACK 7");
	/* the PUBACK came after the write: the record is there */
	HT_TRUE(ht_file_contains(fx->d.sink, "\"topic\":\"devices/1/up/temp\"", NULL, 0),
		"the PUBLISH's record in the sink");
	HT_TRUE(ht_file_contains(fx->d.sink, "\"transport\":\"mqtt\"", NULL, 0),
		"the record says mqtt");

	m.qos = 0;
	m.packet_id = 0;
	m.topic = hb_mqtt_cstr("devices/1/up", 12);
	n = hb_mqtt_encode_publish(b, sizeof(b), &m);
	HT_EQ(send(fd, b, n, 0), (ssize_t)n, "PUBLISH QoS 0");
	/* two filters, its own downlink and another device's (the codec builds one) */
	static const uint8_t subscribe[] = "\x82\x24\x00\x09"
					   "\x00\x0e"
					   "devices/1/down"
					   "\x01"
					   "\x00\x0e"
					   "devices/2/down"
					   "\x01";
	HT_EQ(send(fd, subscribe, sizeof(subscribe) - 1, 0), (ssize_t)sizeof(subscribe) - 1,
	      "SUBSCRIBE to two filters");
	expect(fd, suback, sizeof(suback), "SUBACK granting its own downlink only");

	/* a downlink through the control socket arrives as PUBLISH QoS 1 */
	char req[256], reply[512];
	int cfd = tc_connect(fx->ctl);

	HT_GE(cfd, 0, "control socket");
	snprintf(req, sizeof(req), "send 1 aGk=\n");
	HT_EQ(tc_write(cfd, req), 0, "downlink request");
	HT_EQ(read_n(fd, b, 2, 2000), 2, "downlink PUBLISH header");
	HT_EQ(b[0], 0x32, "downlink is PUBLISH QoS 1");
	HT_EQ(read_n(fd, b + 2, b[1], 2000), b[1], "downlink PUBLISH body");
	{
		struct hb_mqtt_pkt p;
		struct hb_mqtt_publish d;

		HT_EQ(hb_mqtt_decode(b, 2u + b[1], 4096, &p), HB_MQTT_OK, "downlink framed");
		HT_EQ(hb_mqtt_parse_publish(&p, &d), HB_MQTT_OK, "downlink parsed");
		HT_TRUE(hb_mqtt_str_eq(d.topic, "devices/1/down"), "downlink topic");
		HT_TRUE(d.payload_len == 2 && !memcmp(d.payload, "hi", 2), "downlink payload");
		n = hb_mqtt_encode_ack(b, sizeof(b), HB_MQTT_PUBACK, d.packet_id);
		HT_EQ(send(fd, b, n, 0), (ssize_t)n, "PUBACK of the downlink");
	}
	HT_EQ(tc_line(cfd, reply, sizeof(reply), 3000), 0, "downlink result");
	HT_TRUE(strstr(reply, "delivered") != NULL, "downlink delivered: %s", reply);
	close(cfd);

	HT_EQ(send(fd, "\xe0\x00", 2, 0), 2, "DISCONNECT");
	HT_TRUE(closed_within(fd, 2000), "closed after DISCONNECT");
	close(fd);
	HT_EQ(sink_lines(fx), 2, "two PUBLISH records, no Will after a DISCONNECT");
	HT_EQ(hbt_sh("curl -sS --max-time 5 http://127.0.0.1:%u/metrics | grep -qx "
		     "'hbeat_mqtt_pings_total{path=\"user\"} 2'",
		     fx->metrics_port),
	      0, "/metrics counts the two PINGREQs hbd answered");
	HT_EQ(ht_stop(&fx->d), 0, "hbd's exit code");
	HT_EQ(ht_exit_stat(&fx->d, "mqtt_pings_user"), 2, "PINGREQs answered by hbd");
	HT_EQ(ht_exit_stat(&fx->d, "mqtt_connects"), 1, "CONNECTs accepted");
	HT_EQ(ht_exit_stat(&fx->d, "mqtt_publish"), 2, "PUBLISHes stored");
	HT_EQ(ht_exit_stat(&fx->d, "mqtt_wills"), 0, "no Will");
}

static void test_expiry_and_will(void **state)
{
	struct fx *fx = *state;
	int fd = session(fx, 2, 1, "devices/2/up/status");
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	HT_TRUE(closed_within(fd, 4000), "a silent device with keepalive 1 s expired");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	HT_GE((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000, 1400,
	      "not before 1.5 keepalives (ms)");
	close(fd);
	usleep(200000);
	HT_TRUE(ht_file_contains(fx->d.sink, "\"topic\":\"devices/2/up/will\"", NULL, 0),
		"the Will recorded");
	HT_EQ(ht_stop(&fx->d), 0, "hbd's exit code");
	HT_EQ(ht_exit_stat(&fx->d, "expired_tcp"), 1, "expired");
	HT_EQ(ht_exit_stat(&fx->d, "mqtt_wills"), 1, "one Will");
}

/* hbd shutting down ends every session without a Will: the devices did nothing wrong. */
static void test_drain_no_will(void **state)
{
	struct fx *fx = *state;
	int fd = session(fx, 7, 30, "devices/7/up/will");

	HT_EQ(ht_stop(&fx->d), 0, "hbd's exit code");
	HT_TRUE(closed_within(fd, 2000), "the session closed by the drain");
	close(fd);
	HT_FALSE(ht_file_contains(fx->d.sink, "up/will", NULL, 0), "no Will in the sink");
}

/* Keepalive 0: no expiry by hbd; the kernel's TCP keepalive watches the connection. */
static void test_keepalive_zero(void **state)
{
	struct fx *fx = *state;
	int fd = session(fx, 6, 0, NULL);

	/* hbd's own timeout is 1.5 s here (--interval 1) */
	usleep(2500 * 1000);
	HT_EQ(send(fd, "\xc0\x00", 2, 0), 2, "PINGREQ after 2.5 s of silence");
	expect(fd, pingresp, 2, "still served");
	HT_EQ(hbt_sh("ss -Htno state established '( sport = :%u )' | grep -q 'timer:(keepalive'",
		     fx->mport),
	      0, "TCP keepalive on hbd's side of the connection");
	close(fd);
}

static void test_supersede(void **state)
{
	struct fx *fx = *state;
	int a = session(fx, 3, 30, NULL), b = session(fx, 3, 30, NULL);

	HT_TRUE(closed_within(a, 2000), "the older session of device 3 closed");
	HT_EQ(send(b, "\xc0\x00", 2, 0), 2, "PINGREQ on the new one");
	expect(b, pingresp, 2, "the new session answers");
	close(a);

	/* across protocols: an hbeat TCP HELLO takes the device over from MQTT... */
	struct hb_welcome wel;
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	int t = ht_tcp_login(fx->d.port, 3, false, &wel);

	HT_GE(t, 0, "hbeat TCP login of device 3");
	HT_TRUE(closed_within(b, 2000), "the MQTT session closed for the hbeat one");
	close(b);
	/* ...and an MQTT CONNECT takes it back: the hbeat session is told BYE(SUPERSEDED) */
	b = session(fx, 3, 30, NULL);
	HT_EQ(ht_recv_frame(t, buf, &f, 2000), 1, "a frame on the hbeat connection");
	HT_EQ(f.type, HB_BYE, "it is a BYE");
	HT_EQ(be16toh(((const struct hb_bye *)f.payload)->reason), HB_BYE_SUPERSEDED,
	      "BYE(SUPERSEDED)");
	close(t);
	close(b);
}

/* clang-format off */
#define CONN5 0x10, 15, 0, 4, 'M', 'Q', 'T', 'T', 5, 2, 0, 10, 0, 0, 0, 1, 'a'
#define CONN31 0x10, 15, 0, 6, 'M', 'Q', 'I', 's', 'd', 'p', 3, 2, 0, 10, 0, 1, 'a'
#define RESERVED_FLAG 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 3, 0, 10, 0, 1, 'a'
#define HDR_FLAG 0x11, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 10, 0, 1, 'a'
/* clang-format on */

struct bad_case {
	const char *what;
	int login; /* first a valid CONNECT of device 4 (answered CONNACK 0) */
	const char *user, *realm; /* a CONNECT with these credentials (NULL: the bytes) */
	int days;
	uint8_t b[24];
	size_t n;
	uint8_t reply[4]; /* expected CONNACK code + 1, 0: no bytes at all */
};

static void test_conformance(void **state)
{
	struct fx *fx = *state;
	/* clang-format off */
	static const struct bad_case cases[] = {
		{ "MQTT 5.0 CONNECT", 0, NULL, NULL, 0, { CONN5 }, 17, { 2 } },
		{ "MQTT 3.1 CONNECT", 0, NULL, NULL, 0, { CONN31 }, 17, { 2 } },
		{ "reserved CONNECT flag", 0, NULL, NULL, 0, { RESERVED_FLAG }, 15, { 0 } },
		{ "fixed-header flags on CONNECT", 0, NULL, NULL, 0, { HDR_FLAG }, 15, { 0 } },
		{ "5-byte remaining length", 0, NULL, NULL, 0, { 0x10, 0xff, 0xff, 0xff, 0xff, 0x7f },
		  6, { 0 } },
		{ "PINGREQ before CONNECT", 0, NULL, NULL, 0, { 0xc0, 0 }, 2, { 0 } },
		{ "PUBLISH before CONNECT", 0, NULL, NULL, 0, { 0x30, 5, 0, 1, 't', 'h', 'i' }, 7,
		  { 0 } },
		{ "no user name", 0, "", REALM, 30, { 0 }, 0, { 6 } },
		{ "unknown device", 0, "99999", REALM, 30, { 0 }, 0, { 6 } },
		{ "user name 04", 0, "04", REALM, 30, { 0 }, 0, { 6 } },
		{ "another server's password", 0, "4", "elsewhere", 30, { 0 }, 0, { 6 } },
		{ "an expired password", 0, "4", REALM, -1, { 0 }, 0, { 6 } },
		{ "a password valid too long", 0, "4", REALM, 31, { 0 }, 0, { 6 } },
		{ "second CONNECT", 1, "4", REALM, 30, { 0 }, 0, { 0 } },
		{ "PUBLISH to another device", 1, NULL, NULL, 0,
		  { 0x30, 15, 0, 12, 'd', 'e', 'v', 'i', 'c', 'e', 's', '/', '5', '/', 'u', 'p',
		    'x' }, 17, { 0 } },
		{ "PUBLISH QoS 2", 1, NULL, NULL, 0,
		  { 0x34, 16, 0, 12, 'd', 'e', 'v', 'i', 'c', 'e', 's', '/', '4', '/', 'u', 'p', 0,
		    1 }, 18, { 0 } },
		{ "PUBLISH to devices/4/upx", 1, NULL, NULL, 0,
		  { 0x30, 16, 0, 13, 'd', 'e', 'v', 'i', 'c', 'e', 's', '/', '4', '/', 'u', 'p',
		    'x', 'y' }, 18, { 0 } },
		{ "PUBLISH QoS 3", 1, NULL, NULL, 0, { 0x36, 5, 0, 1, 't', 0, 1 }, 7, { 0 } },
		{ "PINGREQ with a flag", 1, NULL, NULL, 0, { 0xc1, 0 }, 2, { 0 } },
		{ "PUBREL", 1, NULL, NULL, 0, { 0x62, 2, 0, 1 }, 4, { 0 } },
		{ "UNSUBSCRIBE", 1, NULL, NULL, 0, { 0xa2, 5, 0, 1, 0, 1, 't' }, 7, { 0 } },
		{ "5-byte length after CONNECT", 1, NULL, NULL, 0,
		  { 0x30, 0x80, 0x80, 0x80, 0x80, 0x01 }, 6, { 0 } },
	};
	/* clang-format on */
	int before = sink_lines(fx);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct bad_case *c = &cases[i];
		int fd = c->login ? session(fx, 4, 30, NULL) : mqtt_connect_sock(fx);
		uint8_t b[512], got[8];
		size_t n = c->n;

		if (c->user) {
			char pw[HB_MQTT_PW_LEN + 1];

			password(fx, 4, c->realm, c->days, pw);
			n = connect_pkt(b, sizeof(b), *c->user ? c->user : NULL, pw, 30, NULL);
			/* no user name: no password either (the flags must agree) */
			if (!*c->user)
				n = connect_pkt(b, sizeof(b), NULL, NULL, 30, NULL);
		} else {
			memcpy(b, c->b, n);
		}
		HT_EQ(send(fd, b, n, 0), (ssize_t)n, "%s: sent", c->what);
		if (c->reply[0]) {
			uint8_t want[4] = { 0x20, 2, 0, (uint8_t)(c->reply[0] - 1) };

			HT_EQ(read_n(fd, got, 4, 2000), 4, "%s: a CONNACK", c->what);
			HT_TRUE(!memcmp(got, want, 4), "%s: CONNACK %u, got %02x %02x %02x %02x",
				c->what, c->reply[0] - 1, got[0], got[1], got[2], got[3]);
		}
		HT_TRUE(closed_within(fd, 2000), "%s: closed without another byte", c->what);
		close(fd);
	}
	HT_EQ(sink_lines(fx), before, "nothing stored");
	/* the daemon is unharmed: a good session works */
	int fd = session(fx, 4, 30, NULL);

	HT_EQ(send(fd, "\xc0\x00", 2, 0), 2, "PINGREQ after the table");
	expect(fd, pingresp, 2, "PINGRESP after the table");
	close(fd);
	HT_EQ(ht_stop(&fx->d), 0, "hbd's exit code after the table");
}

/* mosquitto_pub and mosquitto_sub from Debian's mosquitto-clients, MQTT 3.1.1. */
static void test_mosquitto_clients(void **state)
{
	struct fx *fx = *state;
	char pw[HB_MQTT_PW_LEN + 1], hbctl[PATH_MAX], out[512], cmd[PATH_MAX + 256];
	const char *subp = "/usr/bin/mosquitto_sub", *pubp = "/usr/bin/mosquitto_pub";
	int pfd;
	pid_t sub;

	password(fx, 5, REALM, 30, pw);
	{
		const char *argv[] = { pubp, "-h",	 "127.0.0.1", "-p",    fx->mport_s,
				       "-V", "mqttv311", "-u",	      "5",     "-P",
				       pw,   "-i",	 "hbmq-pub",  "-t",    "devices/5/up/x",
				       "-q", "1",	 "-m",	      "hello", NULL };

		HT_EQ(hbt_run(pubp, argv, 10, out, sizeof(out)), 0, "mosquitto_pub QoS 1");
		argv[16] = "0";
		HT_EQ(hbt_run(pubp, argv, 10, out, sizeof(out)), 0, "mosquitto_pub QoS 0");
	}
	usleep(100000);
	HT_TRUE(ht_file_contains(fx->d.sink, "\"topic\":\"devices/5/up/x\"", NULL, 0),
		"mosquitto_pub's record");
	{
		const char *argv[] = { subp, "-h",	 "127.0.0.1", "-p", fx->mport_s,
				       "-V", "mqttv311", "-u",	      "5",  "-P",
				       pw,   "-i",	 "hbmq-sub",  "-t", "devices/5/down",
				       "-q", "1",	 "-C",	      "1",  "-k",
				       "5",  NULL };

		sub = hbt_spawn(subp, argv, &pfd, NULL);
	}
	HT_GT(sub, 0, "mosquitto_sub started");
	/* it subscribes, and sends a PINGREQ (keepalive 5 s, its least) before the downlink */
	sleep(6);
	tc_bin("hbctl", hbctl, sizeof(hbctl));
	snprintf(cmd, sizeof(cmd), "%s send --control %s 5 downlink-for-5 >/dev/null", hbctl,
		 fx->ctl);
	HT_EQ(system(cmd), 0, "hbctl send to an MQTT device reports delivery");
	HT_GT(hbt_drain(pfd, out, sizeof(out) - 1, time(NULL) + 5), 0, "mosquitto_sub's output");
	HT_TRUE(strstr(out, "downlink-for-5") != NULL, "mosquitto_sub printed the downlink: %s",
		out);
	HT_EQ(hbt_reap(sub, time(NULL) + 5), 0, "mosquitto_sub's exit code");
	close(pfd);
	/* the exit line outgrows the harness's line buffer here: the control socket's stats */
	static char stats[32768];

	HT_EQ(tc_req(fx->ctl, "stats\n", stats, sizeof(stats)), 0, "stats from the control socket");
	HT_GE(tc_num(stats, "mqtt_pings_user"), 1, "mosquitto_sub's PINGREQs answered");
	HT_EQ(tc_num(stats, "down_acked"), 1, "the downlink acknowledged");
	HT_EQ(ht_stop(&fx->d), 0, "hbd's exit code");
}

static void test_mqtt_password_cli(void **state)
{
	struct fx *fx = *state;
	char hbctl[PATH_MAX], out[512], pw[HB_MQTT_PW_LEN + 1];
	const char *argv[] = { hbctl,	   "devices", "mqtt-password", "6", "--keys",
			       fx->d.keys, "--realm", REALM,	       NULL };

	tc_bin("hbctl", hbctl, sizeof(hbctl));
	HT_EQ(hbt_run(hbctl, argv, 10, out, sizeof(out)), 0, "hbctl devices mqtt-password");
	password(fx, 6, REALM, 30, pw);
	HT_TRUE(strlen(out) == strlen(pw) + 1 && !strncmp(out, pw, strlen(pw)) &&
			out[strlen(pw)] == '\n',
		"exactly one line, the password: %s", out);
	argv[3] = "99999";
	HT_NE(hbt_run(hbctl, argv, 10, out, sizeof(out)), 0, "a device not in the store");
	HT_EQ(out[0], 0, "nothing on stdout for it");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_session, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expiry_and_will, setup, teardown),
		cmocka_unit_test_setup_teardown(test_supersede, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keepalive_zero, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drain_no_will, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conformance, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mosquitto_clients, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mqtt_password_cli, setup, teardown),
	};

	return cmocka_run_group_tests_name("mqtt_hbd", tests, NULL, tc_reap);
}
