// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* sockmap tests over real loopback TCP (127.0.0.1, ::1): hb_sockops keeps a conns entry for the
 * server side of every connection on the test port; the test, like hbd once a device has
 * authenticated, marks the entry AUTHED and adds the socket to the sockhash; hb_parser/hb_verdict
 * then answer PINGs and ECHOs in the kernel while everything else reaches the server socket,
 * which accepts with plain accept() and reads with plain recv().
 *
 * Isolation: the test process moves itself into a child cgroup of its own and attaches
 * hb_sockops there, on a port picked free at start and with the netns cookie filter set, so a
 * real hbeat on the machine (root cgroup, port 7600) and this test never see each other. One
 * thread plays both ends: loopback TCP runs the handshake and delivery in softirq context during
 * the sending syscall, and the PONGs come from the psock's kworker, so the client simply polls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "lib/bpf_util.h"
#include "log.h"

static struct hbk *H;
static __u16 PORT;
static char CG[PATH_MAX]; /* our child cgroup */
static bool moved; /* the process is in CG */

/* ------------------------------------------------------------------------------------------ */
/* Sockets                                                                                    */

struct pair {
	int cli, srv;
	__u64 cookie; /* server socket's, the conns/sockhash key */
	__u16 cport; /* client port, host order */
};

static int listener(int family, const char *addr, __u16 port)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, zero = 0;

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (family == AF_INET) {
		struct sockaddr_in *a = (void *)&ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		inet_pton(AF_INET, addr, &a->sin_addr);
		len = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (void *)&ss;

		/* a v4-mapped bind address needs a dual-stack socket */
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, strchr(addr, '.') ? &zero : &one, sizeof(one));
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		inet_pton(AF_INET6, addr, &a->sin6_addr);
		len = sizeof(*a);
	}
	if (bind(fd, (struct sockaddr *)&ss, len) || listen(fd, 16))
		fail_msg("listen on %s port %u: %s", addr, port, strerror(errno));
	return fd;
}

/* Connects to addr:port through lfd, accepts, and returns both ends (server non-blocking). */
static void connect_pair(int lfd, int family, const char *addr, __u16 port, struct pair *p)
{
	struct sockaddr_storage ss = { 0 }, local;
	socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	socklen_t ll = sizeof(local), cl = sizeof(p->cookie);
	int one = 1;

	if (family == AF_INET) {
		struct sockaddr_in *a = (void *)&ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		inet_pton(AF_INET, addr, &a->sin_addr);
	} else {
		struct sockaddr_in6 *a = (void *)&ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		inet_pton(AF_INET6, addr, &a->sin6_addr);
	}
	p->cli = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(p->cli >= 0);
	/* every send() its own segment, so "split" means split on the wire */
	setsockopt(p->cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(p->cli, (struct sockaddr *)&ss, len))
		fail_msg("connect to %s port %u: %s", addr, port, strerror(errno));
	p->srv = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	assert_true(p->srv >= 0);
	assert_int_equal(getsockopt(p->srv, SOL_SOCKET, SO_COOKIE, &p->cookie, &cl), 0);
	assert_int_equal(getsockname(p->cli, (struct sockaddr *)&local, &ll), 0);
	p->cport = ntohs(local.ss_family == AF_INET ? ((struct sockaddr_in *)&local)->sin_port
						    : ((struct sockaddr_in6 *)&local)->sin6_port);
}

static int conn_get(__u64 cookie, struct hb_conn *c)
{
	struct hb_conn_key k = { .cookie = cookie };

	return bpf_map_lookup_elem(hbk_map_fd(H, HB_MAP_CONNS), &k, c);
}

/* The server socket into the sockhash: from here on hb_parser/hb_verdict see its bytes. */
static void join(const struct pair *p)
{
	struct hb_conn_key k = { .cookie = p->cookie };
	__u64 fd = (__u64)p->srv;

	assert_int_equal(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_SOCKHASH), &k, &fd, BPF_NOEXIST),
			 0);
}

static bool in_sockhash(int sfd, __u64 cookie)
{
	struct hb_conn_key k = { .cookie = cookie };
	__u64 v;

	return bpf_map_lookup_elem(sfd, &k, &v) == 0;
}

/* What the daemon does after a good HELLO: conns entry AUTHED, then the socket into the
 * sockhash (user/hbd/tcp.c, join_sockhash). */
static void authenticate(const struct pair *p)
{
	struct hb_conn_key k = { .cookie = p->cookie };
	struct hb_conn c;

	__u64 zero = 0;

	assert_int_equal(conn_get(p->cookie, &c), 0);
	c.state = HB_STATE_AUTHED;
	c.device_id = 1000 + p->cport;
	c.seen_slot = 1 + p->cport % 200; /* within the 256 + 16 slots of group_setup's maps */
	assert_int_equal(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_SEEN), &c.seen_slot, &zero,
					     BPF_ANY),
			 0);
	assert_int_equal(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_CONNS), &k, &c, BPF_EXIST), 0);
	join(p);
}

/* The daemon's seen slot of an authenticated connection. */
static __u64 seen_of(const struct hb_conn *c)
{
	__u64 v = ~0ull;

	assert_int_equal(bpf_map_lookup_elem(hbk_map_fd(H, HB_MAP_SEEN), &c->seen_slot, &v), 0);
	return v;
}

/* Closes both ends and waits (bounded, 2 s) for hb_sockops to drop the conns entry, so the next
 * test's counter snapshot is not disturbed by this one's close. */
static void close_pair(struct pair *p)
{
	struct hb_conn c;

	close(p->cli);
	close(p->srv);
	for (int i = 0; i < 200 && conn_get(p->cookie, &c) == 0; i++)
		usleep(10000);
	if (conn_get(p->cookie, &c) == 0)
		fail_msg("conns entry of cookie %llu still there 2 s after close",
			 (unsigned long long)p->cookie);
}

static void send_all(int fd, const void *b, size_t n)
{
	assert_int_equal(send(fd, b, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads exactly n bytes within ms; fails the test otherwise. */
static void recv_exact(int fd, void *b, size_t n, int ms, const char *what)
{
	size_t got = 0;
	__u64 end = hbt_now_ns() + (__u64)ms * 1000000;

	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		__u64 now = hbt_now_ns();
		int left = now >= end ? 0 : (int)((end - now) / 1000000) + 1;

		if (poll(&p, 1, left) != 1)
			fail_msg("%s: got %zu of %zu bytes within %d ms", what, got, n, ms);
		ssize_t r = recv(fd, (char *)b + got, n - got, MSG_DONTWAIT);
		if (r <= 0 && !(r < 0 && errno == EAGAIN))
			fail_msg("%s: recv: %s", what, r ? strerror(errno) : "EOF");
		if (r > 0)
			got += r;
	}
}

/* Nothing arrives on fd within ms (for the server: the daemon never saw the frame). */
static void expect_silence(int fd, int ms, const char *what)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char b[64];

	if (poll(&p, 1, ms) != 0) {
		ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);

		fail_msg("%s: %zd unexpected bytes arrived (first 0x%02x)", what, r, r > 0 ? (__u8)b[0] : 0);
	}
	/* and a non-blocking read really has nothing */
	assert_int_equal(recv(fd, b, sizeof(b), MSG_DONTWAIT), -1);
	assert_int_equal(errno, EAGAIN);
}

static void set_daemon_dead(bool dead)
{
	struct hb_config c = { 0 };
	__u32 zero = 0;

	if (dead)
		c.alive_ns = hbt_now_ns() - 10000000000ull, c.grace_ns = 1000000000ull;
	assert_int_equal(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_CONFIG), &zero, &c, BPF_ANY), 0);
}

#define EXPECT_KSTATS(a, b, ...)                                                  \
	do {                                                                      \
		const char *_m = hbt_kstats_expect(a, b, __VA_ARGS__, NULL);      \
		if (_m)                                                           \
			fail_msg("%s", _m);                                       \
	} while (0)

/* ------------------------------------------------------------------------------------------ */
/* conns lifecycle                                                                            */

static void conn_lifecycle(int family, const char *laddr, int cfamily, const char *caddr,
			   const char *peer_fmt)
{
	struct hb_kstats k0, k1, k2;
	struct hb_conn c;
	struct pair p;
	char want[HB_PEER_STR];
	int lfd = listener(family, laddr, PORT);
	__u64 t0, t1;

	hbt_kstats(H, &k0);
	t0 = hbt_now_ns();
	connect_pair(lfd, cfamily, caddr, PORT, &p);
	t1 = hbt_now_ns();
	close(lfd);
	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sockops_insert", 1);

	assert_int_equal(conn_get(p.cookie, &c), 0);
	snprintf(want, sizeof(want), peer_fmt, p.cport);
	assert_string_equal(c.peer, want);
	assert_int_equal(c.state, HB_STATE_NEW);
	assert_int_equal(c.device_id, 0);
	assert_int_equal(c.pings, 0);
	assert_true(c.last_seen_ns >= t0 && c.last_seen_ns <= t1);
	/* the sockhash is hbd's to fill, when the device authenticates */
	assert_false(in_sockhash(hbk_map_fd(H, HB_MAP_SOCKHASH), p.cookie));

	close_pair(&p);
	hbt_kstats(H, &k2);
	EXPECT_KSTATS(&k1, &k2, "sockops_close", 1);
}

static void test_conn_v4(void **state)
{
	conn_lifecycle(AF_INET, "127.0.0.1", AF_INET, "127.0.0.1", "127.0.0.1:%u");
}

static void test_conn_v6(void **state)
{
	/* bpf_snprintf's %pI6 prints all eight groups (it has no compressed form) */
	conn_lifecycle(AF_INET6, "::1", AF_INET6, "::1",
		       "[0000:0000:0000:0000:0000:0000:0000:0001]:%u");
}

static void test_conn_v4_mapped(void **state)
{
	/* a dual-stack listener sees the IPv4 client as ::ffff:127.0.0.1; printed as IPv4 */
	conn_lifecycle(AF_INET6, "::ffff:127.0.0.1", AF_INET, "127.0.0.1", "127.0.0.1:%u");
}

/* ------------------------------------------------------------------------------------------ */
/* Heartbeats answered in the kernel                                                          */

static void ping_authed(int family, const char *addr)
{
	struct hb_kstats k0, k1;
	struct hb_conn c;
	struct pair p;
	__u8 ping[16], reply[16];
	int lfd = listener(family, addr, PORT);
	__u64 t0, t1;

	connect_pair(lfd, family, addr, PORT, &p);
	close(lfd);
	authenticate(&p);
	hbt_kstats(H, &k0);
	hbt_ping(ping, 0xbeef, 0x0102030405060708ull);
	t0 = hbt_now_ns();
	send_all(p.cli, ping, sizeof(ping));
	recv_exact(p.cli, reply, sizeof(reply), 2000, "PONG");
	t1 = hbt_now_ns();
	ping[3] = HB_PONG; /* the PONG is the PING with only the type changed */
	assert_memory_equal(reply, ping, sizeof(ping));
	expect_silence(p.srv, 50, "server socket after a kernel-answered PING");
	expect_silence(p.cli, 50, "client after its one PONG");

	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sk_pong", 1);
	assert_int_equal(conn_get(p.cookie, &c), 0);
	assert_int_equal(c.pings, 1);
	assert_int_equal(c.last_seq, 0xbeef);
	assert_true(c.last_seen_ns >= t0 && c.last_seen_ns <= t1);
	assert_int_equal(seen_of(&c), c.last_seen_ns); /* the daemon's expiry reads it there */
	assert_int_equal(c.state, HB_STATE_AUTHED);
	assert_int_equal(c.device_id, 1000 + p.cport); /* the daemon's fields untouched */
	close_pair(&p);
}

static void test_ping_v4(void **state)
{
	ping_authed(AF_INET, "127.0.0.1");
}

static void test_ping_v6(void **state)
{
	ping_authed(AF_INET6, "::1");
}

static void test_echo(void **state)
{
	struct hb_kstats k0, k1;
	struct hb_conn c;
	struct pair p;
	__u8 pl[300], fr[400], reply[400];
	size_t n;
	int lfd = listener(AF_INET, "127.0.0.1", PORT);

	for (size_t i = 0; i < sizeof(pl); i++)
		pl[i] = (__u8)(i * 13);
	connect_pair(lfd, AF_INET, "127.0.0.1", PORT, &p);
	close(lfd);
	authenticate(&p);
	hbt_kstats(H, &k0);
	n = hbt_frame(fr, HB_ECHO, 7, pl, sizeof(pl));
	send_all(p.cli, fr, n);
	recv_exact(p.cli, reply, n, 2000, "ECHO reflection");
	assert_memory_equal(reply, fr, n); /* verbatim, type unchanged */
	expect_silence(p.srv, 50, "server socket after a kernel-reflected ECHO");
	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sk_echo", 1);
	assert_int_equal(conn_get(p.cookie, &c), 0);
	assert_int_equal(c.echoes, 1);
	assert_int_equal(c.pings, 0);
	assert_int_equal(seen_of(&c), c.last_seen_ns); /* an ECHO proves it alive as well */
	close_pair(&p);
}

/* ------------------------------------------------------------------------------------------ */
/* Frames for the daemon, coalesced and split frames                                          */

/* An authenticated v4 pair plus a counter snapshot: the usual start. */
static void authed_pair(struct pair *p, struct hb_kstats *k0)
{
	int lfd = listener(AF_INET, "127.0.0.1", PORT);

	connect_pair(lfd, AF_INET, "127.0.0.1", PORT, p);
	close(lfd);
	authenticate(p);
	hbt_kstats(H, k0);
}

static void test_data_reaches_server(void **state)
{
	struct hb_kstats k0, k1;
	struct pair p;
	__u8 fr[32], got[32];
	size_t n = hbt_frame(fr, HB_DATA, 9, "hello", 5);

	authed_pair(&p, &k0);
	send_all(p.cli, fr, n);
	recv_exact(p.srv, got, n, 2000, "DATA at the server");
	assert_memory_equal(got, fr, n);
	expect_silence(p.srv, 20, "server after the DATA frame");
	expect_silence(p.cli, 50, "client (DATA is not answered by the kernel)");
	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sk_pass", 1);
	close_pair(&p);
}

/* Sends the frames in one send() (one segment), then checks that the client got exactly the
 * kernel's answers in order and the server exactly the frames meant for the daemon. */
struct fr {
	__u8 type;
	__u16 seq;
	__u16 len;
};

static void coalesced(const struct fr *frs, int n, bool split_bytewise)
{
	__u8 wire[4096], to_cli[4096], to_srv[4096], got[4096], pl[1024];
	size_t w = 0, c = 0, s = 0;
	struct hb_kstats k0, k1;
	int pongs = 0, echoes = 0, passes = 0;
	struct pair p;

	for (size_t i = 0; i < sizeof(pl); i++)
		pl[i] = (__u8)(i ^ 0x5a);
	for (int i = 0; i < n; i++) {
		size_t len = hbt_frame(wire + w, frs[i].type, frs[i].seq, pl, frs[i].len);

		if (frs[i].type == HB_PING) {
			memcpy(to_cli + c, wire + w, len);
			to_cli[c + 3] = HB_PONG;
			c += len, pongs++;
		} else if (frs[i].type == HB_ECHO) {
			memcpy(to_cli + c, wire + w, len);
			c += len, echoes++;
		} else {
			memcpy(to_srv + s, wire + w, len);
			s += len, passes++;
		}
		w += len;
	}

	authed_pair(&p, &k0);
	if (split_bytewise) {
		for (size_t i = 0; i < w; i++) {
			send_all(p.cli, wire + i, 1);
			usleep(2000); /* NODELAY + a pause: one segment per byte */
		}
	} else {
		send_all(p.cli, wire, w);
	}
	if (c)
		recv_exact(p.cli, got, c, 3000, "kernel answers");
	assert_memory_equal(got, to_cli, c);
	if (s)
		recv_exact(p.srv, got, s, 3000, "frames for the daemon");
	assert_memory_equal(got, to_srv, s);
	expect_silence(p.srv, 30, "server after its frames");
	expect_silence(p.cli, 50, "client after its answers");
	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sk_pong", pongs, "sk_echo", echoes, "sk_pass", passes);
	close_pair(&p);
}

static void test_coalesced_ping_data(void **state)
{
	coalesced((struct fr[]){ { HB_PING, 1, 8 }, { HB_DATA, 2, 20 } }, 2, false);
}

static void test_coalesced_data_ping(void **state)
{
	coalesced((struct fr[]){ { HB_DATA, 1, 20 }, { HB_PING, 2, 8 } }, 2, false);
}

static void test_coalesced_ping_ping(void **state)
{
	coalesced((struct fr[]){ { HB_PING, 1, 8 }, { HB_PING, 2, 8 } }, 2, false);
}

static void test_coalesced_mix(void **state)
{
	coalesced((struct fr[]){ { HB_DATA, 1, 3 }, { HB_PING, 2, 8 }, { HB_ECHO, 3, 0 },
				 { HB_PING, 4, 8 }, { HB_DATA, 5, 1000 }, { HB_ECHO, 6, 100 },
				 { HB_ACK, 7, 0 }, { HB_PING, 8, 8 }, { HB_BYE, 9, 2 },
				 { HB_PING, 10, 8 } },
		  10, false);
}

static void test_split_ping_bytewise(void **state)
{
	coalesced((struct fr[]){ { HB_PING, 0x4242, 8 } }, 1, true);
}

static void test_split_mixed_bytewise(void **state)
{
	/* every frame boundary, header and payload split, messages starting mid-segment */
	coalesced((struct fr[]){ { HB_DATA, 1, 5 }, { HB_PING, 2, 8 }, { HB_ECHO, 3, 3 } }, 3, true);
}

/* A segment ending inside the second frame's header: the strparser finishes the first message
 * and resumes the second at a nonzero offset into the next segment. */
static void test_split_inside_header(void **state)
{
	__u8 wire[64], got[64], pong[16];
	struct hb_kstats k0, k1;
	struct pair p;
	size_t a = hbt_ping(wire, 1, 11), b;

	b = hbt_frame(wire + a, HB_DATA, 2, "abcdefgh", 8);
	a += hbt_ping(wire + a + b, 3, 33);
	authed_pair(&p, &k0);
	send_all(p.cli, wire, 16 + 3); /* PING + 3 bytes of the DATA header */
	usleep(20000);
	send_all(p.cli, wire + 19, a + b - 19); /* the rest, then another PING */
	recv_exact(p.cli, got, 32, 3000, "two PONGs");
	memcpy(pong, wire, 16), pong[3] = HB_PONG;
	assert_memory_equal(got, pong, 16);
	memcpy(pong, wire + 16 + b, 16), pong[3] = HB_PONG;
	assert_memory_equal(got + 16, pong, 16);
	recv_exact(p.srv, got, b, 3000, "DATA at the server");
	assert_memory_equal(got, wire + 16, b);
	expect_silence(p.srv, 30, "server after the DATA");
	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sk_pong", 2, "sk_pass", 1);
	close_pair(&p);
}

/* ------------------------------------------------------------------------------------------ */
/* Heartbeats after frames the daemon has not read yet                                        */

/* n PINGs one after another (seq from seq0), each answered within 1 s by its PONG: the PING
 * with only the type changed. */
static void kernel_pongs(const struct pair *p, int n, __u16 seq0, const char *what)
{
	__u8 ping[16], reply[16];

	for (int i = 0; i < n; i++) {
		hbt_ping(ping, (__u16)(seq0 + i), i);
		send_all(p->cli, ping, sizeof(ping));
		recv_exact(p->cli, reply, sizeof(reply), 1000, what);
		ping[3] = HB_PONG;
		assert_memory_equal(reply, ping, sizeof(ping));
	}
}

/* Frames for the daemon that are still unread when the strparser parses the next ones, then
 * heartbeats. Handed over with SK_PASS, each such frame was counted twice in TCP's copied_seq
 * (by the strparser read and again by the daemon's read), copied_seq ran ahead of rcv_nxt, and
 * a later segment no bigger than that lead never woke the strparser: the device's PINGs went
 * unanswered (bpf/sk_skb_hb.bpf.c, to_daemon(); scripts/copied-seq.bt shows the lead). The
 * frames are 208 bytes so that a lead of one of them outlasts the three 16-byte PINGs after it. */
static void frames_unread_then_pings(int nframes)
{
	__u8 fr[256], got[256], pl[200];
	struct hb_kstats k0, k1;
	struct pair p;
	size_t n;

	for (size_t i = 0; i < sizeof(pl); i++)
		pl[i] = (__u8)(i * 7);
	n = hbt_frame(fr, HB_DATA, 9, pl, sizeof(pl));
	authed_pair(&p, &k0);
	for (int i = 0; i < nframes; i++) {
		struct pollfd pf = { .fd = p.srv, .events = POLLIN };

		send_all(p.cli, fr, n);
		/* the first is at the server and unread before the next one arrives */
		assert_int_equal(poll(&pf, 1, 2000), 1);
		usleep(10000);
	}
	for (int i = 0; i < nframes; i++) {
		recv_exact(p.srv, got, n, 2000, "DATA at the server");
		assert_memory_equal(got, fr, n);
	}
	kernel_pongs(&p, 3, 100, "PONG after the daemon read its frames");
	expect_silence(p.srv, 20, "server after kernel-answered PINGs");
	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sk_pass", nframes, "sk_pong", 3);
	close_pair(&p);
}

static void test_pings_after_two_unread_frames(void **state)
{
	frames_unread_then_pings(2);
}

static void test_pings_after_four_unread_frames(void **state)
{
	frames_unread_then_pings(4);
}

/* ------------------------------------------------------------------------------------------ */
/* Not answered by the kernel                                                                 */

/* An unauthenticated connection's PING reaches the server untouched and gets no PONG. Before it
 * authenticates a connection is not in the sockhash, so no BPF program sees it at all; joined
 * but not AUTHED in conns (hbd did not admit it, or revoked it), the verdict hands it over. */
static void unauthed_ping(bool joined)
{
	struct hb_kstats k0, k1;
	struct hb_conn c;
	struct pair p;
	__u8 ping[16], got[16];
	int lfd = listener(AF_INET6, "::1", PORT);

	connect_pair(lfd, AF_INET6, "::1", PORT, &p);
	close(lfd);
	if (joined)
		join(&p);
	hbt_kstats(H, &k0);
	hbt_ping(ping, 5, 55);
	send_all(p.cli, ping, sizeof(ping));
	recv_exact(p.srv, got, sizeof(got), 2000, "unauthenticated PING at the server");
	assert_memory_equal(got, ping, sizeof(ping)); /* delivered unmodified */
	expect_silence(p.cli, 100, "client (an unauthenticated PING gets no kernel PONG)");
	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sk_not_authed", joined ? 1 : 0);
	assert_int_equal(conn_get(p.cookie, &c), 0);
	assert_int_equal(c.pings, 0);
	close_pair(&p);
}

static void test_unauthed_ping(void **state)
{
	unauthed_ping(false);
}

static void test_joined_not_authed_ping(void **state)
{
	unauthed_ping(true);
}

/* Bytes that arrived before the socket joined the sockhash and that the server has not read
 * (a device that sends on without waiting for its WELCOME): the server's next read still gets
 * them, and heartbeats after them are answered in the kernel. */
static void test_unread_before_join(void **state)
{
	struct hb_kstats k0, k1;
	struct pair p;
	__u8 fr[32], got[32];
	size_t n = hbt_frame(fr, HB_DATA, 4, "early", 5);
	int lfd = listener(AF_INET, "127.0.0.1", PORT);
	struct pollfd pf;

	connect_pair(lfd, AF_INET, "127.0.0.1", PORT, &p);
	close(lfd);
	send_all(p.cli, fr, n);
	pf = (struct pollfd){ .fd = p.srv, .events = POLLIN };
	assert_int_equal(poll(&pf, 1, 2000), 1); /* at the server, unread */
	hbt_kstats(H, &k0);
	authenticate(&p);
	recv_exact(p.srv, got, n, 2000, "DATA that arrived before the join");
	assert_memory_equal(got, fr, n);
	kernel_pongs(&p, 2, 40, "PONG after the early DATA");
	expect_silence(p.srv, 20, "server after kernel-answered PINGs");
	hbt_kstats(H, &k1);
	/* the early DATA went through the parser and verdict too, at the server's read */
	EXPECT_KSTATS(&k0, &k1, "sk_pass", 1, "sk_pong", 2);
	close_pair(&p);
}

static void test_malformed_reaches_server(void **state)
{
	struct hb_kstats k0, k1;
	struct pair p;
	__u8 bad[24], got[24];

	authed_pair(&p, &k0);
	hbt_ping(bad, 1, 1);
	bad[0] = 'X'; /* bad magic: the parser hands the rest of the segment to the daemon */
	memcpy(bad + 16, "trailing", 8);
	send_all(p.cli, bad, sizeof(bad));
	recv_exact(p.srv, got, sizeof(got), 2000, "malformed bytes at the server");
	assert_memory_equal(got, bad, sizeof(bad));
	expect_silence(p.cli, 100, "client (a malformed frame is never answered)");
	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sk_malformed", 1);
	close_pair(&p);
}

static void test_daemon_dead(void **state)
{
	struct hb_kstats k0, k1;
	struct pair p;
	__u8 ping[16], got[16];

	authed_pair(&p, &k0);
	set_daemon_dead(true);
	hbt_ping(ping, 6, 66);
	send_all(p.cli, ping, sizeof(ping));
	recv_exact(p.srv, got, sizeof(got), 2000, "PING at the server while the daemon looks dead");
	set_daemon_dead(false);
	assert_memory_equal(got, ping, sizeof(ping));
	expect_silence(p.cli, 100, "client (no kernel PONG while the daemon is dead)");
	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sk_daemon_dead", 1);
	close_pair(&p);
}

/* Same port, same cgroup, another network namespace: hb_sockops must leave it alone. */
static void test_other_netns_ignored(void **state)
{
	struct hb_kstats k0, k1;
	pid_t pid;
	int st;

	hbt_kstats(H, &k0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* no cmocka in the child: plain calls, the exit status says how far it got */
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PORT),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int one = 1, l, c, s;

		if (unshare(CLONE_NEWNET) || system("ip link set lo up"))
			_exit(2);
		l = socket(AF_INET, SOCK_STREAM, 0);
		c = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4))
			_exit(3);
		if (connect(c, (struct sockaddr *)&a, sizeof(a)) || (s = accept(l, NULL, NULL)) < 0)
			_exit(4);
		if (send(c, "x", 1, 0) != 1)
			_exit(5);
		close(c), close(s), close(l);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	usleep(50000);
	hbt_kstats(H, &k1);
	EXPECT_KSTATS(&k0, &k1, "sk_pass", 0); /* i.e. nothing moved at all */
}

/* ------------------------------------------------------------------------------------------ */
/* Full maps and the pinned life cycle, each with a loader instance of its own                */

static __u16 free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_int_equal(bind(fd, (struct sockaddr *)&a, l), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static struct hbk *H2;
static char PIN2[PATH_MAX];

static int own_teardown(void **state)
{
	struct hbk_unload_report rep;

	if (PIN2[0]) {
		hbk_unload(PIN2, NULL, &rep);
		hbt_rm_pin_dir(PIN2);
		PIN2[0] = 0;
	}
	hbk_close(H2);
	H2 = NULL;
	return 0;
}

/* sockhash full when a device authenticates: the insert fails with E2BIG (hbd then answers that
 * device itself, tests/test_hbd_offload), and the connection keeps its conns entry and its
 * bytes on the ordinary path. */
static void test_sockhash_full(void **state)
{
	struct hbk_opts o = { .max_conns = 2, .max_sessions = 16 };
	struct hb_conn_key key = { .cookie = 1 }, ka, kb;
	struct hb_conn c;
	struct pair a, b;
	__u8 ping[16], got[16];
	__u64 fd;
	int lfd, cfd, sfd;
	__u16 port = free_port();

	o.port = port;
	assert_int_equal(hbk_netns_cookie(&o.netns_cookie), 0);
	assert_int_equal(hbk_open(&H2, &o), 0);
	assert_int_equal(hbk_attach_sockmap(H2), 0);
	assert_int_equal(hbk_attach_sockops(H2, CG), 0);
	cfd = hbk_map_fd(H2, HB_MAP_CONNS);
	sfd = hbk_map_fd(H2, HB_MAP_SOCKHASH);

	lfd = listener(AF_INET, "127.0.0.1", port);
	connect_pair(lfd, AF_INET, "127.0.0.1", port, &a);
	connect_pair(lfd, AF_INET, "127.0.0.1", port, &b);
	close(lfd);
	ka.cookie = a.cookie, kb.cookie = b.cookie;
	/* a is admitted; a filler socket takes the other slot */
	assert_int_equal(bpf_map_lookup_elem(cfd, &ka, &c), 0);
	c.state = HB_STATE_AUTHED;
	assert_int_equal(bpf_map_update_elem(cfd, &ka, &c, BPF_EXIST), 0);
	fd = (__u64)a.srv;
	assert_int_equal(bpf_map_update_elem(sfd, &ka, &fd, BPF_NOEXIST), 0);
	fd = (__u64)a.cli;
	assert_int_equal(bpf_map_update_elem(sfd, &key, &fd, BPF_NOEXIST), 0);
	fd = (__u64)b.srv;
	assert_int_equal(bpf_map_update_elem(sfd, &kb, &fd, BPF_NOEXIST), -E2BIG);
	assert_int_equal(bpf_map_lookup_elem(cfd, &kb, &c), 0); /* its conns entry stays */

	/* b is served by the ordinary path: its PING reaches the server untouched */
	hbt_ping(ping, 1, 1);
	send_all(b.cli, ping, sizeof(ping));
	recv_exact(b.srv, got, sizeof(got), 2000, "PING of a connection not in the sockhash");
	assert_memory_equal(got, ping, sizeof(ping));
	/* and a is answered by the kernel */
	send_all(a.cli, ping, sizeof(ping));
	recv_exact(a.cli, got, sizeof(got), 2000, "PONG on the connection in the sockhash");
	assert_int_equal(got[3], HB_PONG);

	close(a.cli), close(a.srv), close(b.cli), close(b.srv);
}

/* conns full: no entry for the connection, which works on the ordinary path. */
static void test_conns_full(void **state)
{
	struct hbk_opts o = { .max_conns = 1, .max_sessions = 16 };
	struct hb_kstats k0, k1;
	struct pair a, b;
	__u8 fr[32], got[32];
	size_t n = hbt_frame(fr, HB_DATA, 3, "xyz", 3);
	int lfd, kfd;
	__u16 port = free_port();

	o.port = port;
	assert_int_equal(hbk_netns_cookie(&o.netns_cookie), 0);
	assert_int_equal(hbk_open(&H2, &o), 0);
	assert_int_equal(hbk_attach_sockmap(H2), 0);
	assert_int_equal(hbk_attach_sockops(H2, CG), 0);
	kfd = hbk_map_fd(H2, HB_MAP_KSTATS);
	assert_int_equal(hbk_read_kstats(kfd, &k0), 0);
	lfd = listener(AF_INET6, "::1", port);
	connect_pair(lfd, AF_INET6, "::1", port, &a);
	connect_pair(lfd, AF_INET6, "::1", port, &b);
	close(lfd);
	assert_int_equal(hbk_read_kstats(kfd, &k1), 0);
	EXPECT_KSTATS(&k0, &k1, "sockops_insert", 1, "sockops_insert_err", 1);
	send_all(b.cli, fr, n);
	recv_exact(b.srv, got, n, 2000, "DATA on the untracked connection");
	assert_memory_equal(got, fr, n);
	close(a.cli), close(a.srv), close(b.cli), close(b.srv);
}

/* What hbctl load/unload do: attach, pin, let the loader go; the kernel keeps serving from the
 * pins; unload removes everything. */
static void test_pinned_lifecycle(void **state)
{
	struct hbk_opts o = { .max_conns = 64, .max_sessions = 16 };
	struct hbk_unload_report rep;
	struct hb_conn_key k;
	struct hb_conn c;
	struct stat st;
	struct pair p;
	char path[PATH_MAX + 32];
	__u8 ping[16], got[16];
	int lfd, cfd, kfd, sfd;
	struct hb_kstats ks;
	__u64 fd;
	__u16 port = free_port();

	o.port = port;
	assert_int_equal(hbk_netns_cookie(&o.netns_cookie), 0);
	assert_int_equal(hbk_open(&H2, &o), 0);
	assert_int_equal(hbk_attach_sockmap(H2), 0);
	assert_int_equal(hbk_attach_sockops(H2, CG), 0);
	assert_int_equal(hbk_write_config(H2, 0, NULL, HB_XDP_NONE), 0);
	hbt_pin_dir(PIN2, sizeof(PIN2));
	assert_int_equal(hbk_pin(H2, PIN2), 0);
	assert_int_equal(stat(PIN2, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	for (int i = 0; hbk_map_names[i]; i++) {
		snprintf(path, sizeof(path), "%s/%s", PIN2, hbk_map_names[i]);
		assert_int_equal(access(path, F_OK), 0);
	}
	snprintf(path, sizeof(path), "%s/%s", PIN2, HBK_PIN_LINK_SOCKOPS);
	assert_int_equal(access(path, F_OK), 0);
	/* a second pin into the same directory is refused ("already loaded") */
	assert_int_equal(hbk_pin(H2, PIN2), -EEXIST);
	hbk_close(H2); /* the loader exits */
	H2 = NULL;

	/* the service keeps working through the pins alone */
	snprintf(path, sizeof(path), "%s/%s", PIN2, HB_MAP_CONNS);
	cfd = bpf_obj_get(path);
	snprintf(path, sizeof(path), "%s/%s", PIN2, HB_MAP_KSTATS);
	kfd = bpf_obj_get(path);
	snprintf(path, sizeof(path), "%s/%s", PIN2, HB_MAP_SOCKHASH);
	sfd = bpf_obj_get(path);
	assert_true(cfd >= 0 && kfd >= 0 && sfd >= 0);
	lfd = listener(AF_INET, "127.0.0.1", port);
	connect_pair(lfd, AF_INET, "127.0.0.1", port, &p);
	k.cookie = p.cookie;
	assert_int_equal(bpf_map_lookup_elem(cfd, &k, &c), 0);
	c.state = HB_STATE_AUTHED;
	assert_int_equal(bpf_map_update_elem(cfd, &k, &c, BPF_EXIST), 0);
	fd = (__u64)p.srv;
	assert_int_equal(bpf_map_update_elem(sfd, &k, &fd, BPF_NOEXIST), 0);
	hbt_ping(ping, 77, 7);
	send_all(p.cli, ping, sizeof(ping));
	recv_exact(p.cli, got, sizeof(got), 2000, "PONG served from the pins");
	assert_int_equal(got[3], HB_PONG);
	assert_int_equal(hbk_read_kstats(kfd, &ks), 0);
	assert_int_equal(ks.sk_pong, 1);
	close(p.cli), close(p.srv);

	/* unload: pins and directory gone, hooks detached */
	assert_int_equal(hbk_unload(PIN2, NULL, &rep), 0);
	assert_true(rep.sockops_detached);
	assert_true(rep.sockmap_detached);
	{
		int nmaps = 0;

		while (hbk_map_names[nmaps])
			nmaps++;
		assert_int_equal(rep.pins_removed, nmaps + 1); /* every map and the sock_ops link */
	}
	assert_int_equal(access(PIN2, F_OK), -1);
	PIN2[0] = 0;
	/* a new connection is no longer tracked (sock_ops detached) */
	connect_pair(lfd, AF_INET, "127.0.0.1", port, &p);
	k.cookie = p.cookie;
	assert_int_equal(bpf_map_lookup_elem(cfd, &k, &c), -ENOENT);
	/* and its PING goes to the server, not answered (parser/verdict detached) */
	send_all(p.cli, ping, sizeof(ping));
	recv_exact(p.srv, got, sizeof(got), 2000, "PING after unload");
	assert_int_equal(got[3], HB_PING);
	close(p.cli), close(p.srv), close(lfd), close(cfd), close(kfd), close(sfd);
	assert_int_equal(hbk_unload("/sys/fs/bpf/hbeat-test-nonexistent", NULL, &rep), -ENOENT);
}

/* ------------------------------------------------------------------------------------------ */

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		err = -errno;
	close(fd);
	return err;
}

static int group_teardown(void **state)
{
	char pid[32], procs[PATH_MAX + 16];

	hbk_close(H); /* never pinned: detaches sock_ops and parser/verdict */
	H = NULL;
	if (moved) {
		snprintf(pid, sizeof(pid), "%d", getpid());
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", HBK_DEFAULT_CGROUP);
		if (write_file(procs, pid))
			fprintf(stderr, "could not move back to the root cgroup\n");
		moved = false;
	}
	if (CG[0] && rmdir(CG))
		fprintf(stderr, "could not remove %s: %s\n", CG, strerror(errno));
	CG[0] = 0;
	return 0;
}

static int group_setup(void **state)
{
	struct hbk_opts o = { .max_conns = 256, .max_sessions = 16 };
	char pid[32], procs[PATH_MAX + 16];

	hb_log_init("test_sockmap", getenv("HB_TEST_DEBUG") ? HB_LOG_DEBUG : HB_LOG_WARN);
	hbk_route_logs();
	if (hbt_ensure_bpffs())
		return -1;
	hbt_reap_stale();
	PORT = free_port();
	o.port = PORT;
	if (hbk_netns_cookie(&o.netns_cookie) || hbk_open(&H, &o) || hbk_attach_sockmap(H))
		return -1;
	snprintf(CG, sizeof(CG), "%s/hbeat-test-%d", HBK_DEFAULT_CGROUP, (int)getpid());
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", CG);
	snprintf(pid, sizeof(pid), "%d", getpid());
	if (mkdir(CG, 0755) || write_file(procs, pid)) {
		fprintf(stderr, "cannot use cgroup %s: %s\n", CG, strerror(errno));
		group_teardown(state);
		return -1;
	}
	moved = true;
	if (hbk_attach_sockops(H, CG)) {
		group_teardown(state);
		return -1;
	}
	printf("test port %u, cgroup %s\n", PORT, CG);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conn_v4),
		cmocka_unit_test(test_conn_v6),
		cmocka_unit_test(test_conn_v4_mapped),
		cmocka_unit_test(test_ping_v4),
		cmocka_unit_test(test_ping_v6),
		cmocka_unit_test(test_echo),
		cmocka_unit_test(test_data_reaches_server),
		cmocka_unit_test(test_coalesced_ping_data),
		cmocka_unit_test(test_coalesced_data_ping),
		cmocka_unit_test(test_coalesced_ping_ping),
		cmocka_unit_test(test_coalesced_mix),
		cmocka_unit_test(test_split_ping_bytewise),
		cmocka_unit_test(test_split_mixed_bytewise),
		cmocka_unit_test(test_split_inside_header),
		cmocka_unit_test(test_pings_after_two_unread_frames),
		cmocka_unit_test(test_pings_after_four_unread_frames),
		cmocka_unit_test(test_unauthed_ping),
		cmocka_unit_test(test_joined_not_authed_ping),
		cmocka_unit_test(test_unread_before_join),
		cmocka_unit_test(test_malformed_reaches_server),
		cmocka_unit_test(test_daemon_dead),
		cmocka_unit_test(test_other_netns_ignored),
		cmocka_unit_test_teardown(test_sockhash_full, own_teardown),
		cmocka_unit_test_teardown(test_conns_full, own_teardown),
		cmocka_unit_test_teardown(test_pinned_lifecycle, own_teardown),
	};

	return cmocka_run_group_tests_name("test_sockmap", tests, group_setup, group_teardown);
}
