// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A running daemon under attack while good devices heartbeat beside the attackers:
 *   TCP: random bytes, wrong magic, oversized lengths, HELLOs cut short, slowloris dribbles,
 *        PINGs before HELLO, garbage after a good HELLO, wrong MACs past the failure budget,
 *        a connection flood from one address;
 *   UDP: random datagrams, wrong magic, oversized lengths, cut-short PINGs, unknown tokens;
 *        version 2: a replayed PING, wrong tags, a version 1 PING of a v2 session, a valid PING
 *        from a new address (challenged, answered there only after the device's response).
 * Every bad TCP connection must be closed by the daemon with the reply its case calls for, and
 * counted under its reason; no bad datagram may get any answer (no reflection); the good
 * devices (hbload, TCP and UDP) keep every PONG; the daemon keeps few regular fds, exits 0 on
 * SIGTERM, and, in the ASan pass of make test, leaks nothing (LeakSanitizer fails its exit).
 *
 * Twice: on loopback in userspace mode, and in a network namespace pair with the BPF side
 * loaded (hbctl on a veth), where the kernel answers the good devices' heartbeats and XDP drops
 * the malformed datagrams before hbd sees them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "clock.h"
#include "hbclient.h"
#include "lib/clients.h"
#include "lib/ht_assert.h"
#include "lib/hbd_harness.h"
#include "lib/run_prog.h"
#include "lib/netns_env.h"

#define GOOD 40 /* devices per transport */
#define GOOD_SECONDS 7
#define PER_SOURCE 30

static struct hn_env E;

struct ctx {
	struct ht_daemon d;
	const char *net; /* attacker source prefix: "127.0.0." or "10.77.1." */
	bool offload;
	unsigned first_src, next_src; /* attacker source host numbers, from first_src */
	char src[32];
	pid_t good[2];
	int good_out[2];
	char hbload[PATH_MAX];
};

static uint32_t rs = 0x1badb002;
static uint32_t rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 17;
	rs ^= rs << 5;
	return rs;
}

/* A fresh attacker address for every ten connections of a kind, so one kind's limits (and the
 * per-source limit of 30) do not mask another's; each wave has its own addresses (20 each).
 */
static const char *attacker(struct ctx *c)
{
	snprintf(c->src, sizeof(c->src), "%s%u", c->net, c->next_src++);
	return c->src;
}

/* X_FLOOD: PER_SOURCE of them admitted (and expired without HELLO), the rest refused with
 * ERROR(FULL), in whatever order the workers accepted them.
 */
enum expect { X_CLOSE, X_MALFORMED, X_TOO_LARGE, X_EXPIRED, X_FULL, X_AUTH, X_RATE, X_FLOOD };

struct conn {
	int fd;
	enum expect want;
	const char *what;
};

#define MAXC 400
static struct conn conns[MAXC];
static int nconns;

static void add(int fd, enum expect want, const char *what)
{
	HT_GE(fd, 0, "attack connection %d (%s)", nconns, what);
	HT_LT(nconns, MAXC, "attack connections kept (room for %d)", MAXC);
	conns[nconns++] = (struct conn){ fd, want, what };
}

static void send_hdr(int fd, uint16_t magic, uint8_t ver, uint8_t type, uint16_t len)
{
	struct hb_hdr h = { htons(magic), ver, type, htons(len), 0 };

	send(fd, &h, sizeof(h), MSG_NOSIGNAL);
}

static int find_hbload(char *path, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	exe[n > 0 ? n : 0] = 0;
	return hbt_find("hbload", exe, path, len);
}

static void spawn_good(struct ctx *c, int i, const char *proto, unsigned first, const char *src)
{
	char clients[16], firstdev[16], duration[16];
	const char *argv[40];
	int n = 0;

	snprintf(clients, sizeof(clients), "%d", GOOD);
	snprintf(firstdev, sizeof(firstdev), "%u", first);
	snprintf(duration, sizeof(duration), "%d", GOOD_SECONDS);
	if (c->offload) {
		static char ns[64];

		snprintf(ns, sizeof(ns), "--net=/run/netns/%s", E.cli_ns);
		argv[n++] = "nsenter";
		argv[n++] = ns;
	}
	argv[n++] = c->hbload;
	argv[n++] = "--server";
	argv[n++] = c->offload ? HN_SRV_ADDR : "127.0.0.1";
	argv[n++] = "--port";
	static char port[8];
	snprintf(port, sizeof(port), "%u", c->d.port);
	argv[n++] = port;
	argv[n++] = "--clients";
	argv[n++] = clients;
	argv[n++] = "--proto";
	argv[n++] = proto;
	argv[n++] = "--interval";
	argv[n++] = "0.2";
	argv[n++] = "--duration";
	argv[n++] = duration;
	argv[n++] = "--keys";
	argv[n++] = c->d.keys;
	argv[n++] = "--first-device";
	argv[n++] = firstdev;
	argv[n++] = "--source";
	argv[n++] = src;
	argv[n++] = "--echo-every";
	argv[n++] = "5";
	argv[n++] = "--json";
	argv[n++] = "--no-progress";
	argv[n] = NULL;
	c->good[i] = hbt_spawn(c->offload ? "/usr/bin/nsenter" : c->hbload, argv, &c->good_out[i],
			       "/dev/null");
	HT_GT(c->good[i], 0, "hbload for the good %s devices spawned", proto);
}

static void check_good(struct ctx *c, int i, const char *proto)
{
	char out[4096];
	size_t n = hbt_drain(c->good_out[i], out, sizeof(out), time(NULL) + GOOD_SECONDS + 60);

	HT_EQ(hbt_reap(c->good[i], time(NULL) + 30), 0, "exit code of the good %s devices' hbload",
	      proto);
	out[n] = 0;
	printf("good %s devices: %s", proto, out);
	HT_EQ(hbt_num(out, "connected"), GOOD, "good %s devices connected (summary above)", proto);
	HT_GT(hbt_num(out, "pings"), GOOD * GOOD_SECONDS * 5 / 2,
	      "PINGs of the good %s devices (summary above)", proto);
	HT_EQ(hbt_num(out, "pongs"), hbt_num(out, "pings"),
	      "PONGs against PINGs of the good %s devices", proto);
	HT_EQ(hbt_num(out, "lost"), 0, "lost heartbeats of the good %s devices", proto);
	HT_EQ(hbt_num(out, "echo_ok"), hbt_num(out, "echo_sent"),
	      "ECHOs answered against ECHOs sent by the good %s devices", proto);
}

/* Opens every kind of bad TCP connection; slowloris ones are dribbled by dribble(). */
static void tcp_attacks(struct ctx *c)
{
	uint16_t port = c->d.port;
	uint8_t junk[300], frame[HB_MAX_FRAME];
	struct hb_hello h;
	const char *src = NULL;
	size_t n;
	int fd;

#define SRC_EVERY_10() (i % 10 ? src : (src = attacker(c)))
	c->next_src = c->first_src;
	c->first_src += 20;
	for (int i = 0; i < 40; i++) { /* random bytes; never "HB": judged at once */
		fd = ht_tcp_from(port, SRC_EVERY_10());
		n = 8 + rnd() % 290;
		for (size_t k = 0; k < n; k++)
			junk[k] = (uint8_t)rnd();
		junk[0] = (uint8_t)(junk[0] == 0x48 ? 0x47 : junk[0]);
		send(fd, junk, n, MSG_NOSIGNAL);
		add(fd, X_MALFORMED, "random bytes");
	}
	for (int i = 0; i < 15; i++) {
		fd = ht_tcp_from(port, SRC_EVERY_10());
		send_hdr(fd, 0x4843, 1, HB_PING, 8);
		add(fd, X_MALFORMED, "wrong magic");
		fd = ht_tcp_from(port, src);
		send_hdr(fd, HB_MAGIC, 7, HB_PING, 8);
		add(fd, X_MALFORMED, "wrong version");
	}
	for (int i = 0; i < 15; i++) {
		fd = ht_tcp_from(port, SRC_EVERY_10());
		send_hdr(fd, HB_MAGIC, 1, HB_DATA, 0xffff);
		add(fd, X_TOO_LARGE, "length 65535");
		fd = ht_tcp_from(port, src);
		send_hdr(fd, HB_MAGIC, 1, HB_ECHO, HB_MAX_PAYLOAD + 1);
		add(fd, X_TOO_LARGE, "length 1025");
	}
	for (int i = 0; i < 15; i++) { /* a HELLO cut short, then nothing */
		fd = ht_tcp_from(port, SRC_EVERY_10());
		ht_hello(&h, 191, 0);
		n = hb_encode(frame, sizeof(frame), HB_TCP, HB_HELLO, 1, 0, &h, sizeof(h));
		send(fd, frame, 1 + rnd() % (n - 1), MSG_NOSIGNAL);
		add(fd, X_EXPIRED, "truncated HELLO");
	}
	for (int i = 0; i < 15; i++) { /* slowloris: dribble() sends a byte now and then */
		fd = ht_tcp_from(port, SRC_EVERY_10());
		add(fd, X_EXPIRED, "slowloris");
	}
	for (int i = 0; i < 10; i++) { /* heartbeats without a session */
		struct hb_ping p = { 0 };

		fd = ht_tcp_from(port, SRC_EVERY_10());
		ht_send_frame(fd, HB_PING, 1, &p, sizeof(p));
		add(fd, X_EXPIRED, "PING before HELLO");
	}
	for (int i = 0; i < 10; i++) { /* a real device gone bad after authenticating */
		fd = ht_tcp_from(port, SRC_EVERY_10());
		ht_hello(&h, (uint64_t)(180 + i), 0);
		ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h));
		HT_TRUE(ht_expect(fd, HB_WELCOME, -1),
			"WELCOME for device %d before it sends garbage", 180 + i);
		memset(junk, 0xa5, 64);
		send(fd, junk, 64, MSG_NOSIGNAL);
		add(fd, X_MALFORMED, "garbage after HELLO");
	}
	for (int i = 0; i < 5;
	     i++) { /* wrong MACs: 3 refused (the burst), then refused as over the budget */
		fd = ht_tcp_from(port, SRC_EVERY_10());
		ht_hello(&h, 190, 0);
		h.mac[3] ^= 0x10;
		ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h));
		/* one after the other: the order the daemon judges them in is the order sent */
		HT_TRUE(ht_expect(fd, HB_ERROR, i < 3 ? HB_ERR_AUTH : HB_ERR_RATE),
			"the answer to wrong MAC %d (%s)", i + 1,
			i < 3 ? "ERROR(AUTH), within the budget" : "ERROR(RATE), over it");
		add(fd, X_CLOSE, "wrong MAC");
	}
	src = attacker(c);
	for (int i = 0; i < PER_SOURCE + 20; i++) { /* a flood from one address */
		fd = ht_tcp_from(port, src);
		add(fd, X_FLOOD, "flood");
	}
#undef SRC_EVERY_10
}

/* One more byte of a HELLO on every slowloris connection. */
static void dribble(unsigned step)
{
	static uint8_t frame[HB_MAX_FRAME];
	static size_t n;

	if (!n) {
		struct hb_hello h;

		ht_hello(&h, 192, 0);
		n = hb_encode(frame, sizeof(frame), HB_TCP, HB_HELLO, 1, 0, &h, sizeof(h));
	}
	for (int i = 0; i < nconns; i++) {
		if (!strcmp(conns[i].what, "slowloris") && step < n - 1)
			send(conns[i].fd, frame + step, 1, MSG_NOSIGNAL);
	}
}

/* Every bad connection: the frame its case calls for (if any), then the daemon's close. */
static void check_closed(void)
{
	static const struct {
		int type, code;
	} want[] = {
		[X_CLOSE] = { 0, 0 },
		[X_MALFORMED] = { HB_ERROR, HB_ERR_MALFORMED },
		[X_TOO_LARGE] = { HB_ERROR, HB_ERR_TOO_LARGE },
		[X_EXPIRED] = { HB_BYE, HB_BYE_EXPIRED },
		[X_FULL] = { HB_ERROR, HB_ERR_FULL },
		[X_AUTH] = { HB_ERROR, HB_ERR_AUTH },
		[X_RATE] = { HB_ERROR, HB_ERR_RATE },
		[X_FLOOD] = { 0, 0 },
	};
	int flood_expired = 0, flood_full = 0;

	for (int i = 0; i < nconns; i++) {
		struct conn *k = &conns[i];
		uint8_t buf[HB_MAX_FRAME];
		struct hb_frame f;
		int last_type = -1, last_code = -1, rc;

		/* read frames until the daemon closes; the last one says why */
		while ((rc = ht_recv_frame(k->fd, buf, &f, 5000)) == 1) {
			last_type = f.type;
			last_code = f.len >= 2 ? (f.payload[0] << 8 | f.payload[1]) : -1;
		}
		if (rc != 0 && !(rc < 0 && errno == ECONNRESET))
			fail_msg("%s (connection %d): not closed by the daemon (rc %d)", k->what, i,
				 rc);
		if (k->want == X_FLOOD) {
			flood_expired += last_type == HB_BYE && last_code == HB_BYE_EXPIRED;
			flood_full += last_type == HB_ERROR && last_code == HB_ERR_FULL;
		} else if (want[k->want].type &&
			   (last_type != want[k->want].type || last_code != want[k->want].code))
			fail_msg("%s (connection %d): last frame %s %d, expected %s %d", k->what, i,
				 last_type < 0 ? "none" : hb_type_str((uint8_t)last_type),
				 last_code, hb_type_str((uint8_t)want[k->want].type),
				 want[k->want].code);
		close(k->fd);
	}
	nconns = 0;
	HT_EQ(flood_expired, PER_SOURCE, "flooders from one source expired by the hello timeout");
	HT_EQ(flood_full, 20, "flooders from one source refused with ERROR(FULL)");
}

/* Bad datagrams from attacker sockets; none may be answered. Returns datagrams sent. */
static int udp_attacks(struct ctx *c, int *socks, int nsocks)
{
	uint8_t b[1500];
	int sent = 0;

	for (int i = 0; i < nsocks; i++) {
		char src[32];

		snprintf(src, sizeof(src), "%s%d", c->net, 60 + i);
		socks[i] = ht_udp(false);
		HT_EQ(ht_bind_src(socks[i], src), 0, "bind of an attack socket to %s", src);
	}
	for (int r = 0; r < 400; r++) {
		int fd = socks[r % nsocks];
		size_t n;
		struct hb_ping p = { .ts = rnd() };

		switch (r % 5) {
		case 0: /* random */
			n = 1 + rnd() % 600;
			for (size_t k = 0; k < n; k++)
				b[k] = (uint8_t)rnd();
			break;
		case 1: /* wrong magic */
			n = hb_encode(b, sizeof(b), HB_UDP, HB_PING, 1, rnd(), &p, sizeof(p));
			b[1] ^= 1;
			break;
		case 2: /* oversized length */
			n = hb_encode(b, sizeof(b), HB_UDP, HB_PING, 1, rnd(), &p, sizeof(p));
			b[4] = 0xff, b[5] = 0xff;
			break;
		case 3: /* a PING cut short */
			n = hb_encode(b, sizeof(b), HB_UDP, HB_PING, 1, rnd(), &p, sizeof(p)) - 1 -
			    rnd() % 10;
			break;
		default: /* a well-formed PING with a token nobody was given: spoofing */
			n = hb_encode(b, sizeof(b), HB_UDP, HB_PING, 1,
				      (uint64_t)rnd() << 32 | rnd(), &p, sizeof(p));
			break;
		}
		if (!ht_udp_send_raw(fd, c->d.port, b, n))
			sent++;
	}
	return sent;
}

/* Version 2 attacks with a device's own captured frames (the attacker sees the wire, not the
 * key): a replayed PING, PINGs with a wrong tag, a version 1 PING under the session's token,
 * and a valid PING sent from a new address. Only what the device itself sends is answered, and
 * a new address only after it answered the path challenge from there. Returns 0 (fails the
 * test otherwise). */
static uint8_t c_path[8]; /* the last challenge's bytes */

static bool v2_expect(int fd, int type, struct hbc *c, int ms, const char *what)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	struct hbc_ev ev;

	if (ht_udp_recv(fd, buf, &f, ms) != 1) {
		HT_TRUE(type < 0, "%s: nothing came", what);
		return false;
	}
	HT_TRUE(type >= 0, "%s: a %s came back", what, hb_type_str(f.type));
	HT_EQ(f.type, type, "%s: the frame's type", what);
	enum hbc_event e = hbc_input(c, &f, hb_mono_ns(), &ev);
	if (type == HB_PATH_CHALLENGE) {
		HT_EQ(e, HBC_EV_PATH_CHALLENGE, "%s: a challenge under the session key", what);
		memcpy(c_path, ev.payload, 8);
	} else if (type == HB_PONG) {
		HT_EQ(e, HBC_EV_PONG, "%s: a PONG under the session key", what);
	}
	return true;
}

static void udp_v2_attacks(struct ctx *c)
{
	uint8_t cap[HB_MAX_FRAME], b[HB_MAX_FRAME];
	char sa[32], sb[32];
	struct hbc dev;
	int a, bsock, n, ncap;

	snprintf(sa, sizeof(sa), "%s%d", c->net, 68);
	snprintf(sb, sizeof(sb), "%s%d", c->net, 69);
	a = ht_udp(false);
	bsock = ht_udp(false);
	HT_EQ(ht_bind_src(a, sa), 0, "bind to %s", sa);
	HT_EQ(ht_bind_src(bsock, sb), 0, "bind to %s", sb);
	HT_EQ(ht_v2_login(a, c->d.port, 8, &dev), 0, "version 2 login of device 8 from %s", sa);
	/* a PING as the device sends it, captured on the wire */
	ncap = hbc_ping(&dev, cap, sizeof(cap), hb_mono_ns(), NULL);
	HT_GT(ncap, 0, "PING built");
	HT_EQ(ht_udp_send_raw(a, c->d.port, cap, (size_t)ncap), 0, "PING sent");
	v2_expect(a, HB_PONG, &dev, HT_IO_MS, "the device's own PING");
	/* the copy, from the same address, and then from another */
	HT_EQ(ht_udp_send_raw(a, c->d.port, cap, (size_t)ncap), 0, "replay sent");
	v2_expect(a, -1, &dev, 300, "a replayed PING");
	HT_EQ(ht_udp_send_raw(bsock, c->d.port, cap, (size_t)ncap), 0, "replay from elsewhere");
	v2_expect(bsock, -1, &dev, 300, "a replayed PING from another address");
	/* a forged tag, and the same frame as version 1 (no tag at all) */
	n = hbc_ping(&dev, b, sizeof(b), hb_mono_ns(), NULL);
	b[n - 1] ^= 0x10;
	HT_EQ(ht_udp_send_raw(a, c->d.port, b, (size_t)n), 0, "forged PING sent");
	v2_expect(a, -1, &dev, 300, "a PING with a wrong tag");
	b[2] = HB_VERSION;
	HT_EQ(ht_udp_send_raw(a, c->d.port, b, (size_t)n - HB_TAG_LEN), 0, "v1 PING sent");
	v2_expect(a, -1, &dev, 300, "a version 1 PING with the session's token");
	/* the device behind a new NAT mapping: its PING from there is not answered there, only
	 * challenged; answered from there, the session moves */
	n = hbc_ping(&dev, b, sizeof(b), hb_mono_ns(), NULL);
	HT_EQ(ht_udp_send_raw(bsock, c->d.port, b, (size_t)n), 0, "PING from the new address");
	v2_expect(bsock, HB_PATH_CHALLENGE, &dev, HT_IO_MS, "a valid PING from a new address");
	v2_expect(a, -1, &dev, 200, "the old address, meanwhile");
	n = hbc_path_response(&dev, b, sizeof(b), c_path);
	HT_GT(n, 0, "PATH_RESPONSE built");
	HT_EQ(ht_udp_send_raw(bsock, c->d.port, b, (size_t)n), 0, "PATH_RESPONSE sent");
	ht_sleep_ms(100); /* hbd moves the kernel's entry after the table's */
	n = hbc_ping(&dev, b, sizeof(b), hb_mono_ns(), NULL);
	HT_EQ(ht_udp_send_raw(bsock, c->d.port, b, (size_t)n), 0, "PING after validation");
	v2_expect(bsock, HB_PONG, &dev, HT_IO_MS, "a PING from the validated new address");
	n = hbc_ping(&dev, b, sizeof(b), hb_mono_ns(), NULL);
	HT_EQ(ht_udp_send_raw(a, c->d.port, b, (size_t)n), 0, "PING from the old address");
	v2_expect(a, HB_PATH_CHALLENGE, &dev, HT_IO_MS, "a PING from the old address now");
	close(a);
	close(bsock);
}

static void udp_check_silent(int *socks, int nsocks)
{
	for (int i = 0; i < nsocks; i++) {
		struct pollfd p = { .fd = socks[i], .events = POLLIN };

		if (poll(&p, 1, i == 0 ? 500 : 0) > 0)
			fail_msg(
				"an attacker's socket got an answer: the service reflected a datagram");
		close(socks[i]);
	}
}

static void run(struct ctx *c, const char *good_tcp_src, const char *good_udp_src)
{
	int socks[8], fds_peak = 0, udp_sent;

	for (int i = 0; i < nconns; i++) /* left by an earlier failed run */
		close(conns[i].fd);
	nconns = 0;
	spawn_good(c, 0, "tcp", 100, good_tcp_src);
	spawn_good(c, 1, "udp", 140, good_udp_src);
	ht_sleep_ms(1000); /* the good devices are in */
	tcp_attacks(c);
	udp_sent = udp_attacks(c, socks, 8);
	for (unsigned step = 0; step < 30; step++) { /* 1.5 s, past the 1 s hello timeout */
		dribble(step);
		ht_sleep_ms(50);
		if (ht_fd_count(c->d.pid) > fds_peak)
			fds_peak = ht_fd_count(c->d.pid);
	}
	check_closed();
	udp_check_silent(socks, 8);
	udp_v2_attacks(c);
	/* a second wave while the good devices still run: nothing accumulated from the first */
	tcp_attacks(c);
	for (unsigned step = 0; step < 30; step++) {
		dribble(step);
		ht_sleep_ms(50);
	}
	check_closed();
	check_good(c, 0, "tcp");
	check_good(c, 1, "udp");
	printf("hbd held at most %d regular fds under attack; %d bad datagrams unanswered\n",
	       fds_peak, udp_sent);
	/* listeners, UDP sockets, rings, sink, maps, std streams: nothing per connection */
	HT_TRUE(fds_peak > 0 && fds_peak < 64,
		"regular fds hbd held under attack: %d (nothing per connection)", fds_peak);
}

static const char *const DAEMON_ARGS[] = {
	"--workers",	    "2",  "--interval",	       "1", "--hello-timeout", "1",
	"--max-per-source", "30", "--auth-fail-burst", "3", "--max-clients",   "4096",
};
#define NARGS (sizeof(DAEMON_ARGS) / sizeof(DAEMON_ARGS[0]))

static void expect_counters(struct ctx *c)
{
	struct {
		const char *name;
		long long min;
	} want[] = {
		/* two waves each: 40 random, 30 magic/version, 10 garbage after HELLO */
		{ "frames_bad", 2 * (40 + 30 + 10) },
		{ "too_large", 2 * 30 },
		/* 15 truncated, 15 slowloris, 10 PINGs before HELLO, 30 idle flooders */
		{ "hello_timeout", 2 * (15 + 15 + 10 + PER_SOURCE) },
		{ "refused_per_source", 2 * 20 },
		{ "auth_fail", 3 },
		{ "auth_rate_limited", 2 * 2 },
	};

	HT_EQ(ht_stop(&c->d), 0, "exit code of hbd after SIGTERM (clean; under ASan also no leak)");
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		long long v = ht_exit_stat(&c->d, want[i].name);

		printf("  %-20s %lld\n", want[i].name, v);
		if (v < want[i].min)
			fail_msg("%s = %lld, expected at least %lld", want[i].name, v, want[i].min);
	}
	if (!c->offload) {
		/* XDP drops the malformed ones before hbd in offload mode */
		HT_GE(ht_exit_stat(&c->d, "frames_bad"), 2 * (40 + 30 + 10) + 80 * 3,
		      "the frames_bad exit counter with every bad datagram reaching hbd");
		HT_GE(ht_exit_stat(&c->d, "unknown_session"), 80,
		      "the unknown_session exit counter");
	}
	if (!c->offload) {
		HT_GE(ht_exit_stat(&c->d, "udp_bad_tag"), 2, "udp_bad_tag: forged v2 PINGs");
		HT_GE(ht_exit_stat(&c->d, "udp_replay"), 2, "udp_replay: replayed v2 PINGs");
	}
	HT_GE(ht_exit_stat(&c->d, "path_challenges"), 2, "path_challenges");
	HT_EQ(ht_exit_stat(&c->d, "path_moves"), 1, "path_moves: the one validated move");
	HT_EQ(ht_exit_stat(&c->d, "errors"), 0, "the errors exit counter");
	HT_EQ(ht_exit_stat(&c->d, "tcp_active"), 0, "connections still active at exit");
}

static void userspace(void **state)
{
	static struct ctx c;
	const char *args[NARGS + 2];

	(void)state;
	memset(&c, 0, sizeof(c));
	c.net = "127.0.0.";
	c.first_src = 10;
	HT_EQ(find_hbload(c.hbload, sizeof(c.hbload)), 0, "$BUILD/hbload found");
	args[0] = "--no-offload";
	memcpy(args + 1, DAEMON_ARGS, sizeof(DAEMON_ARGS));
	args[NARGS + 1] = NULL;
	HT_EQ(ht_start(&c.d, args), 0, "hbd under attack started");
	run(&c, "127.0.0.2-127.0.0.3", "127.0.0.4");
	expect_counters(&c);
	ht_cleanup(&c.d);
}

static void offload(void **state)
{
	static struct ctx c;
	const char *args[NARGS + 3];

	(void)state;
	memset(&c, 0, sizeof(c));
	c.net = "10.77.1.";
	c.first_src = 10;
	c.offload = true;
	HT_EQ(find_hbload(c.hbload, sizeof(c.hbload)), 0, "$BUILD/hbload found");
	HT_EQ(hn_load(&E, 7631, ""), 0, "hbctl load on port 7631");
	args[0] = "--pin-path";
	args[1] = E.pin;
	memcpy(args + 2, DAEMON_ARGS, sizeof(DAEMON_ARGS));
	args[NARGS + 2] = NULL;
	hn_aim(&E);
	/* hbd on the port hbctl loaded for (not --port 0): the fast paths filter by port */
	args[NARGS + 2] = NULL;
	{
		const char *a2[NARGS + 5];

		memcpy(a2, args, sizeof(args[0]) * (NARGS + 2));
		a2[NARGS + 2] = "--port";
		a2[NARGS + 3] = "7631";
		a2[NARGS + 4] = NULL;
		HT_EQ(ht_start(&c.d, a2), 0, "hbd on port 7631 started");
	}
	HT_TRUE(ht_file_contains(c.d.err, "mode=offload", NULL, 0), "'mode=offload' in %s",
		c.d.err);
	HT_EQ(hn_enter_cli(&E), 0, "step into the client netns %s", E.cli_ns);
	run(&c, "10.77.1.1-10.77.1.2", "10.77.1.3");
	hn_leave(&E);
	/* the good devices' heartbeats were the kernel's; XDP dropped the malformed datagrams */
	printf("kernel: pings_kernel %lld, xdp_drop_malformed %lld, xdp_unknown_session %lld\n",
	       hn_stat(&E, "pings_kernel"), hn_stat(&E, "kernel.xdp_drop_malformed"),
	       hn_stat(&E, "kernel.xdp_unknown_session"));
	HT_EQ(hn_stat(&E, "user.pings_user"), 0,
	      "pings_user: the good devices' heartbeats are the kernel's");
	HT_GT(hn_stat(&E, "pings_kernel"), GOOD * GOOD_SECONDS * 5,
	      "pings_kernel of the good devices");
	HT_GE(hn_stat(&E, "kernel.xdp_drop_malformed"), 3 * 80,
	      "xdp_drop_malformed: the malformed datagrams dropped in XDP");
	HT_GE(hn_stat(&E, "kernel.xdp_unknown_session"), 80,
	      "xdp_unknown_session: datagrams of unknown sessions dropped in XDP");
	HT_GE(hn_stat(&E, "kernel.xdp_bad_tag"), 2, "xdp_bad_tag: forged v2 PINGs dropped in XDP");
	HT_GE(hn_stat(&E, "kernel.xdp_replay"), 2, "xdp_replay: replayed v2 PINGs dropped in XDP");
	expect_counters(&c);
	ht_cleanup(&c.d);
}

static int netns_setup(void **state)
{
	(void)state;
	return hn_up(&E, 'x', 70);
}

static int netns_teardown(void **state)
{
	ht_reap(state);
	hn_down(&E);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(userspace, ht_reap),
		cmocka_unit_test_setup_teardown(offload, netns_setup, netns_teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("hostile", tests, NULL, NULL);
}
