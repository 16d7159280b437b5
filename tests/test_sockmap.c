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

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/sockios.h>

#include <bpf/bpf.h>

#include "lib/bpf_util.h"
#include "lib/sock.h"
#include "log.h"

static struct hbk *H;
static __u16 PORT;
static char CG[PATH_MAX]; /* our child cgroup, the process is in it */

/* ------------------------------------------------------------------------------------------ */
/* What the daemon does with a connection's map entries                                       */

static int conn_get(__u64 cookie, struct hb_conn *c)
{
	struct hb_conn_key k = { .cookie = cookie };

	return bpf_map_lookup_elem(hbk_map_fd(H, HB_MAP_CONNS), &k, c);
}

/* The server socket into the sockhash: from here on hb_parser/hb_verdict see its bytes. */
static void join(const struct ht_pair *p)
{
	struct hb_conn_key k = { .cookie = p->cookie };
	__u64 fd = (__u64)p->srv;

	HT_EQ(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_SOCKHASH), &k, &fd, BPF_NOEXIST), 0,
	      "server socket of cookie %llu into the sockhash", (unsigned long long)p->cookie);
}

/* What the daemon does after a good HELLO: conns entry AUTHED, then the socket into the
 * sockhash (user/hbd/tcp.c, join_sockhash). */
static void authenticate(const struct ht_pair *p)
{
	struct hb_conn_key k = { .cookie = p->cookie };
	struct hb_conn c;

	__u64 zero = 0;

	HT_EQ(conn_get(p->cookie, &c), 0, "conns entry that hb_sockops made for the connection");
	c.state = HB_STATE_AUTHED;
	c.device_id = 1000 + p->cport;
	c.seen_slot = 1 + p->cport % 200; /* within the 256 + 16 slots of group_setup's maps */
	HT_EQ(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_SEEN), &c.seen_slot, &zero, BPF_ANY), 0,
	      "seen slot %u cleared", c.seen_slot);
	HT_EQ(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_CONNS), &k, &c, BPF_EXIST), 0,
	      "conns entry marked AUTHED");
	join(p);
}

/* The daemon's seen slot of an authenticated connection. */
static __u64 seen_of(const struct hb_conn *c)
{
	__u64 v = ~0ull;

	HT_EQ(bpf_map_lookup_elem(hbk_map_fd(H, HB_MAP_SEEN), &c->seen_slot, &v), 0,
	      "seen slot %u readable", c->seen_slot);
	return v;
}

/* Closes both ends and waits (bounded, 2 s) for hb_sockops to drop the conns entry, so the next
 * test's counter snapshot is not disturbed by this one's close. */
static void close_pair(struct ht_pair *p)
{
	struct hb_conn c;

	close(p->cli);
	close(p->srv);
	for (int i = 0; i < 200 && conn_get(p->cookie, &c) == 0; i++)
		usleep(10000);
	HT_NE(conn_get(p->cookie, &c), 0, "conns entry of cookie %llu gone within 2 s of the close",
	      (unsigned long long)p->cookie);
}

static void set_daemon_dead(bool dead)
{
	struct hb_config c = { 0 };
	__u32 zero = 0;

	if (dead)
		c.alive_ns = hbt_now_ns() - 10000000000ull, c.grace_ns = 1000000000ull;
	HT_EQ(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_CONFIG), &zero, &c, BPF_ANY), 0,
	      "daemon liveness in the config map set to %s", dead ? "dead" : "alive");
}

/* ------------------------------------------------------------------------------------------ */
/* conns lifecycle                                                                            */

static void conn_lifecycle(int family, const char *laddr, int cfamily, const char *caddr,
			   const char *peer_fmt)
{
	struct hb_kstats k0, k1, k2;
	struct hb_conn c;
	struct ht_pair p;
	char want[HB_PEER_STR];
	int lfd = ht_listener(family, laddr, PORT);
	__u64 t0, t1;

	hbt_kstats(H, &k0);
	t0 = hbt_now_ns();
	ht_connect_pair(lfd, cfamily, caddr, PORT, &p);
	t1 = hbt_now_ns();
	close(lfd);
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sockops_insert", 1);

	HT_EQ(conn_get(p.cookie, &c), 0, "conns entry for the new connection");
	snprintf(want, sizeof(want), peer_fmt, p.cport);
	assert_string_equal(c.peer, want);
	HT_EQ(c.state, HB_STATE_NEW, "state of a connection not authenticated yet");
	/* --tcp kernel: the verdict answers heartbeats, TCP keepalive stays off */
	HT_EQ(c.flags, 0, "conns flags on the kernel path (no HB_CONN_KEEPALIVE)");
	{
		int ka = -1;
		socklen_t len = sizeof(ka);

		HT_EQ(getsockopt(p.srv, SOL_SOCKET, SO_KEEPALIVE, &ka, &len), 0,
		      "SO_KEEPALIVE read");
		HT_EQ(ka, 0, "SO_KEEPALIVE of the server socket on the kernel path");
	}
	HT_EQ(c.device_id, 0, "device id before any HELLO");
	HT_EQ(c.pings, 0, "kernel-answered PINGs of a new connection");
	HT_TRUE(c.last_seen_ns >= t0 && c.last_seen_ns <= t1,
		"last_seen_ns %llu stamped during the connect [%llu, %llu]",
		(unsigned long long)c.last_seen_ns, (unsigned long long)t0, (unsigned long long)t1);
	/* the sockhash is hbd's to fill, when the device authenticates */
	HT_FALSE(hbt_in_sockhash(hbk_map_fd(H, HB_MAP_SOCKHASH), p.cookie),
		 "a connection in the sockhash before the daemon put it there");

	close_pair(&p);
	hbt_kstats(H, &k2);
	/* both ends closed cleanly: no error on the socket when it reached TCP_CLOSE */
	HT_KSTATS(&k1, &k2, "sockops_close", 1, "sockops_close_normal", 1);
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
	struct ht_pair p;
	__u8 ping[16], reply[16];
	int lfd = ht_listener(family, addr, PORT);
	__u64 t0, t1;

	ht_connect_pair(lfd, family, addr, PORT, &p);
	close(lfd);
	authenticate(&p);
	hbt_kstats(H, &k0);
	hbt_ping(ping, 0xbeef, 0x0102030405060708ull);
	t0 = hbt_now_ns();
	ht_send_segment(p.cli, ping, sizeof(ping));
	ht_recv_exact(p.cli, reply, sizeof(reply), 2000, "PONG");
	t1 = hbt_now_ns();
	ping[3] = HB_PONG; /* the PONG is the PING with only the type changed */
	assert_memory_equal(reply, ping, sizeof(ping));
	ht_expect_silence(p.srv, 50, "server socket after a kernel-answered PING");
	ht_expect_silence(p.cli, 50, "client after its one PONG");

	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_pong", 1);
	HT_EQ(conn_get(p.cookie, &c), 0, "conns entry after the PING");
	HT_EQ(c.pings, 1, "PINGs the kernel counted for the connection");
	HT_EQ(c.last_seq, 0xbeef, "sequence number of the last PING");
	HT_TRUE(c.last_seen_ns >= t0 && c.last_seen_ns <= t1,
		"last_seen_ns %llu stamped between the PING and its PONG [%llu, %llu]",
		(unsigned long long)c.last_seen_ns, (unsigned long long)t0, (unsigned long long)t1);
	/* the daemon's expiry reads it there */
	HT_EQ(seen_of(&c), c.last_seen_ns, "seen slot stamped like the conns entry");
	HT_EQ(c.state, HB_STATE_AUTHED, "state after a PING (the daemon's field, untouched)");
	HT_EQ(c.device_id, 1000 + p.cport, "device id after a PING (the daemon's, untouched)");
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

static void authed_pair(struct ht_pair *p, struct hb_kstats *k0);

/* Bytes the client sent that its peer's TCP has not yet acknowledged (SIOCOUTQ counts sent
 * and unsent; nothing is unsent here). */
static int unacked(int fd)
{
	int n = -1;

	HT_EQ(ioctl(fd, SIOCOUTQ, &n), 0, "SIOCOUTQ");
	return n;
}

/* A BEAT of an admitted connection: recorded like a PING, consumed in the kernel (no frame to
 * either side), and acknowledged by TCP, which is the device's whole answer. */
static void test_beat(void **state)
{
	struct hb_kstats k0, k1;
	struct hb_conn c;
	struct ht_pair p;
	__u8 beat[8];
	__u64 t0, t1;
	int left = -1;

	authed_pair(&p, &k0);
	hbt_frame(beat, HB_BEAT, 0x4242, NULL, 0);
	t0 = hbt_now_ns();
	ht_send_segment(p.cli, beat, sizeof(beat));
	for (int i = 0; i < 200 && (left = unacked(p.cli)) != 0; i++)
		usleep(5000);
	t1 = hbt_now_ns();
	HT_EQ(left, 0, "BEAT bytes the server's TCP has not acknowledged after 1 s");
	ht_expect_silence(p.srv, 50, "server socket after a BEAT the kernel took");
	ht_expect_silence(p.cli, 50, "client (a BEAT gets no answer frame)");
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_beat", 1, "sk_pong", 0, "sk_pass", 0);
	HT_EQ(conn_get(p.cookie, &c), 0, "conns entry after the BEAT");
	HT_EQ(c.pings, 1, "heartbeats the kernel counted for the connection");
	HT_EQ(c.last_seq, 0x4242, "sequence number of the last heartbeat");
	HT_TRUE(c.last_seen_ns >= t0 && c.last_seen_ns <= t1,
		"last_seen_ns %llu stamped between the BEAT and its ACK [%llu, %llu]",
		(unsigned long long)c.last_seen_ns, (unsigned long long)t0, (unsigned long long)t1);
	HT_EQ(seen_of(&c), c.last_seen_ns, "seen slot stamped by the BEAT");
	close_pair(&p);
}

/* Not admitted, or the daemon looks dead: the BEAT goes to the daemon, which decides (hbd
 * refuses it before the HELLO), exactly as a PING would. */
static void beat_to_daemon(bool dead)
{
	struct hb_kstats k0, k1;
	struct ht_pair p;
	__u8 beat[8], got[8];
	int lfd = ht_listener(AF_INET, "127.0.0.1", PORT);

	ht_connect_pair(lfd, AF_INET, "127.0.0.1", PORT, &p);
	close(lfd);
	if (dead)
		authenticate(&p);
	else
		join(&p);
	hbt_kstats(H, &k0);
	if (dead)
		set_daemon_dead(true);
	hbt_frame(beat, HB_BEAT, 9, NULL, 0);
	ht_send_segment(p.cli, beat, sizeof(beat));
	ht_recv_exact(p.srv, got, sizeof(got), 2000, "BEAT at the server");
	if (dead)
		set_daemon_dead(false);
	assert_memory_equal(got, beat, sizeof(beat));
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_beat", 0, dead ? "sk_daemon_dead" : "sk_not_authed", 1);
	close_pair(&p);
}

static void test_beat_not_authed(void **state)
{
	beat_to_daemon(false);
}

static void test_beat_daemon_dead(void **state)
{
	beat_to_daemon(true);
}

static void test_echo(void **state)
{
	struct hb_kstats k0, k1;
	struct hb_conn c;
	struct ht_pair p;
	__u8 pl[300], fr[400], reply[400];
	size_t n;
	int lfd = ht_listener(AF_INET, "127.0.0.1", PORT);

	for (size_t i = 0; i < sizeof(pl); i++)
		pl[i] = (__u8)(i * 13);
	ht_connect_pair(lfd, AF_INET, "127.0.0.1", PORT, &p);
	close(lfd);
	authenticate(&p);
	hbt_kstats(H, &k0);
	n = hbt_frame(fr, HB_ECHO, 7, pl, sizeof(pl));
	ht_send_segment(p.cli, fr, n);
	ht_recv_exact(p.cli, reply, n, 2000, "ECHO reflection");
	assert_memory_equal(reply, fr, n); /* verbatim, type unchanged */
	ht_expect_silence(p.srv, 50, "server socket after a kernel-reflected ECHO");
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_echo", 1);
	HT_EQ(conn_get(p.cookie, &c), 0, "conns entry after the ECHO");
	HT_EQ(c.echoes, 1, "ECHOs the kernel counted for the connection");
	HT_EQ(c.pings, 0, "PINGs counted for a connection that sent only an ECHO");
	/* an ECHO proves it alive as well */
	HT_EQ(seen_of(&c), c.last_seen_ns, "seen slot stamped by the ECHO");
	close_pair(&p);
}

/* ------------------------------------------------------------------------------------------ */
/* Frames for the daemon, coalesced and split frames                                          */

/* An authenticated v4 pair plus a counter snapshot: the usual start. */
static void authed_pair(struct ht_pair *p, struct hb_kstats *k0)
{
	int lfd = ht_listener(AF_INET, "127.0.0.1", PORT);

	ht_connect_pair(lfd, AF_INET, "127.0.0.1", PORT, p);
	close(lfd);
	authenticate(p);
	hbt_kstats(H, k0);
}

static void test_data_reaches_server(void **state)
{
	struct hb_kstats k0, k1;
	struct ht_pair p;
	__u8 fr[32], got[32];
	size_t n = hbt_frame(fr, HB_DATA, 9, "hello", 5);

	authed_pair(&p, &k0);
	ht_send_segment(p.cli, fr, n);
	ht_recv_exact(p.srv, got, n, 2000, "DATA at the server");
	assert_memory_equal(got, fr, n);
	ht_expect_silence(p.srv, 20, "server after the DATA frame");
	ht_expect_silence(p.cli, 50, "client (DATA is not answered by the kernel)");
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_pass", 1);
	close_pair(&p);
}

/* An ECHO over the daemon's --max-payload (config.max_payload) is not reflected by the kernel:
 * it reaches the daemon, which refuses it (ERROR(TOO_LARGE)) as it does on its own path. */
static void test_echo_over_max_payload(void **state)
{
	struct hb_config cfg = { .max_payload = 100 };
	struct hb_kstats k0, k1;
	struct ht_pair p;
	__u8 pl[101] = { 0 }, fr[200], got[200];
	__u32 zero = 0;
	size_t n;

	HT_EQ(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_CONFIG), &zero, &cfg, BPF_ANY), 0,
	      "config.max_payload set to 100");
	authed_pair(&p, &k0);
	n = hbt_frame(fr, HB_ECHO, 1, pl, 100);
	ht_send_segment(p.cli, fr, n);
	ht_recv_exact(p.cli, got, n, 2000, "reflection of an ECHO of 100 bytes (the limit)");
	n = hbt_frame(fr, HB_ECHO, 2, pl, 101);
	ht_send_segment(p.cli, fr, n);
	ht_expect_silence(p.cli, 100, "client, after an ECHO of 101 bytes (over the limit)");
	ht_recv_exact(p.srv, got, n, 2000, "the 101-byte ECHO at the server (the daemon)");
	assert_memory_equal(got, fr, n);
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_echo", 1, "sk_pass", 1);
	set_daemon_dead(false); /* the config as the other tests expect it */
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
	int pongs = 0, echoes = 0, passes = 0, beats = 0;
	struct ht_pair p;

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
		} else if (frs[i].type == HB_BEAT) {
			beats++; /* consumed: neither side sees it */
		} else {
			memcpy(to_srv + s, wire + w, len);
			s += len, passes++;
		}
		w += len;
	}

	authed_pair(&p, &k0);
	if (split_bytewise) {
		for (size_t i = 0; i < w; i++) {
			ht_send_segment(p.cli, wire + i, 1);
			usleep(2000); /* NODELAY + a pause: one segment per byte */
		}
	} else {
		ht_send_segment(p.cli, wire, w);
	}
	if (c)
		ht_recv_exact(p.cli, got, c, 3000, "kernel answers");
	assert_memory_equal(got, to_cli, c);
	if (s)
		ht_recv_exact(p.srv, got, s, 3000, "frames for the daemon");
	assert_memory_equal(got, to_srv, s);
	ht_expect_silence(p.srv, 30, "server after its frames");
	ht_expect_silence(p.cli, 50, "client after its answers");
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_pong", pongs, "sk_echo", echoes, "sk_pass", passes, "sk_beat",
		  beats);
	close_pair(&p);
}

/* BEATs between frames for the daemon and PINGs: each consumed where it stands, the stream
 * around it intact, whole or one byte per segment */
static void test_coalesced_beats(void **state)
{
	const struct fr frs[] = { { HB_BEAT, 1, 0 },
				  { HB_DATA, 2, 20 },
				  { HB_BEAT, 3, 0 },
				  { HB_PING, 4, 8 },
				  { HB_BEAT, 5, 0 } };

	coalesced(frs, 5, false);
	coalesced(frs, 5, true);
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
	coalesced((struct fr[]){ { HB_DATA, 1, 3 },
				 { HB_PING, 2, 8 },
				 { HB_ECHO, 3, 0 },
				 { HB_PING, 4, 8 },
				 { HB_DATA, 5, 1000 },
				 { HB_ECHO, 6, 100 },
				 { HB_ACK, 7, 0 },
				 { HB_PING, 8, 8 },
				 { HB_BYE, 9, 2 },
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
	coalesced((struct fr[]){ { HB_DATA, 1, 5 }, { HB_PING, 2, 8 }, { HB_ECHO, 3, 3 } }, 3,
		  true);
}

/* A segment ending inside the second frame's header: the strparser finishes the first message
 * and resumes the second at a nonzero offset into the next segment. */
static void test_split_inside_header(void **state)
{
	__u8 wire[64], got[64], pong[16];
	struct hb_kstats k0, k1;
	struct ht_pair p;
	size_t a = hbt_ping(wire, 1, 11), b;

	b = hbt_frame(wire + a, HB_DATA, 2, "abcdefgh", 8);
	a += hbt_ping(wire + a + b, 3, 33);
	authed_pair(&p, &k0);
	ht_send_segment(p.cli, wire, 16 + 3); /* PING + 3 bytes of the DATA header */
	usleep(20000);
	ht_send_segment(p.cli, wire + 19, a + b - 19); /* the rest, then another PING */
	ht_recv_exact(p.cli, got, 32, 3000, "two PONGs");
	memcpy(pong, wire, 16), pong[3] = HB_PONG;
	assert_memory_equal(got, pong, 16);
	memcpy(pong, wire + 16 + b, 16), pong[3] = HB_PONG;
	assert_memory_equal(got + 16, pong, 16);
	ht_recv_exact(p.srv, got, b, 3000, "DATA at the server");
	assert_memory_equal(got, wire + 16, b);
	ht_expect_silence(p.srv, 30, "server after the DATA");
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_pong", 2, "sk_pass", 1);
	close_pair(&p);
}

/* ------------------------------------------------------------------------------------------ */
/* Heartbeats after frames the daemon has not read yet                                        */

/* n PINGs one after another (seq from seq0), each answered within 1 s by its PONG: the PING
 * with only the type changed. */
static void kernel_pongs(const struct ht_pair *p, int n, __u16 seq0, const char *what)
{
	__u8 ping[16], reply[16];

	for (int i = 0; i < n; i++) {
		hbt_ping(ping, (__u16)(seq0 + i), i);
		ht_send_segment(p->cli, ping, sizeof(ping));
		ht_recv_exact(p->cli, reply, sizeof(reply), 1000, what);
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
	struct ht_pair p;
	size_t n;

	for (size_t i = 0; i < sizeof(pl); i++)
		pl[i] = (__u8)(i * 7);
	n = hbt_frame(fr, HB_DATA, 9, pl, sizeof(pl));
	authed_pair(&p, &k0);
	for (int i = 0; i < nframes; i++) {
		struct pollfd pf = { .fd = p.srv, .events = POLLIN };

		ht_send_segment(p.cli, fr, n);
		/* the first is at the server and unread before the next one arrives */
		HT_EQ(poll(&pf, 1, 2000), 1, "DATA frame %d readable at the server within 2 s", i);
		usleep(10000);
	}
	for (int i = 0; i < nframes; i++) {
		ht_recv_exact(p.srv, got, n, 2000, "DATA at the server");
		assert_memory_equal(got, fr, n);
	}
	kernel_pongs(&p, 3, 100, "PONG after the daemon read its frames");
	ht_expect_silence(p.srv, 20, "server after kernel-answered PINGs");
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_pass", nframes, "sk_pong", 3);
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
	struct ht_pair p;
	__u8 ping[16], got[16];
	int lfd = ht_listener(AF_INET6, "::1", PORT);

	ht_connect_pair(lfd, AF_INET6, "::1", PORT, &p);
	close(lfd);
	if (joined)
		join(&p);
	hbt_kstats(H, &k0);
	hbt_ping(ping, 5, 55);
	ht_send_segment(p.cli, ping, sizeof(ping));
	ht_recv_exact(p.srv, got, sizeof(got), 2000, "unauthenticated PING at the server");
	assert_memory_equal(got, ping, sizeof(ping)); /* delivered unmodified */
	ht_expect_silence(p.cli, 100, "client (an unauthenticated PING gets no kernel PONG)");
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_not_authed", joined ? 1 : 0);
	HT_EQ(conn_get(p.cookie, &c), 0, "conns entry of the unauthenticated connection");
	HT_EQ(c.pings, 0, "PINGs the kernel counted for an unauthenticated connection");
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
	struct ht_pair p;
	__u8 fr[32], got[32];
	size_t n = hbt_frame(fr, HB_DATA, 4, "early", 5);
	int lfd = ht_listener(AF_INET, "127.0.0.1", PORT);
	struct pollfd pf;

	ht_connect_pair(lfd, AF_INET, "127.0.0.1", PORT, &p);
	close(lfd);
	ht_send_segment(p.cli, fr, n);
	pf = (struct pollfd){ .fd = p.srv, .events = POLLIN };
	HT_EQ(poll(&pf, 1, 2000), 1, "early DATA readable (and left unread) at the server");
	hbt_kstats(H, &k0);
	authenticate(&p);
	ht_recv_exact(p.srv, got, n, 2000, "DATA that arrived before the join");
	assert_memory_equal(got, fr, n);
	kernel_pongs(&p, 2, 40, "PONG after the early DATA");
	ht_expect_silence(p.srv, 20, "server after kernel-answered PINGs");
	hbt_kstats(H, &k1);
	/* the early DATA went through the parser and verdict too, at the server's read */
	HT_KSTATS(&k0, &k1, "sk_pass", 1, "sk_pong", 2);
	close_pair(&p);
}

static void test_malformed_reaches_server(void **state)
{
	struct hb_kstats k0, k1;
	struct ht_pair p;
	__u8 bad[24], got[24];

	authed_pair(&p, &k0);
	hbt_ping(bad, 1, 1);
	bad[0] = 'X'; /* bad magic: the parser hands the rest of the segment to the daemon */
	memcpy(bad + 16, "trailing", 8);
	ht_send_segment(p.cli, bad, sizeof(bad));
	ht_recv_exact(p.srv, got, sizeof(got), 2000, "malformed bytes at the server");
	assert_memory_equal(got, bad, sizeof(bad));
	ht_expect_silence(p.cli, 100, "client (a malformed frame is never answered)");
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_malformed", 1);
	close_pair(&p);
}

static void test_daemon_dead(void **state)
{
	struct hb_kstats k0, k1;
	struct ht_pair p;
	__u8 ping[16], got[16];

	authed_pair(&p, &k0);
	set_daemon_dead(true);
	hbt_ping(ping, 6, 66);
	ht_send_segment(p.cli, ping, sizeof(ping));
	ht_recv_exact(p.srv, got, sizeof(got), 2000,
		      "PING at the server while the daemon looks dead");
	set_daemon_dead(false);
	assert_memory_equal(got, ping, sizeof(ping));
	ht_expect_silence(p.cli, 100, "client (no kernel PONG while the daemon is dead)");
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_daemon_dead", 1);
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
	HT_GE(pid, 0, "fork of the child in another netns");
	if (pid == 0) {
		/* no cmocka in the child: plain calls, the exit status says how far it got */
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_port = htons(PORT),
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
	HT_EQ(waitpid(pid, &st, 0), pid, "wait for the child in another netns");
	HT_TRUE(WIFEXITED(st), "child in another netns exited (status %#x)", st);
	/* 2: unshare or lo up, 3: listen, 4: connect or accept, 5: send */
	HT_EQ(WEXITSTATUS(st), 0, "exit code of the child's connection in another netns");
	usleep(50000);
	hbt_kstats(H, &k1);
	HT_KSTATS(&k0, &k1, "sk_pass", 0); /* i.e. nothing moved at all */
}

/* ------------------------------------------------------------------------------------------ */
/* Full maps and the pinned life cycle, each with a loader instance of its own                */

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

/* A loader instance of the test's own (H2), attached like hbctl load does, on the test's
 * cgroup. */
static void own_instance(struct hbk_opts *o)
{
	HT_EQ(hbk_netns_cookie(&o->netns_cookie), 0, "this netns's cookie");
	HT_EQ(hbk_open(&H2, o), 0, "BPF objects with max_conns %u loaded", o->max_conns);
	HT_EQ(hbk_attach_sockmap(H2), 0, "stream parser and verdict attached to the sockhash");
	HT_EQ(hbk_attach_sockops(H2, CG), 0, "sock_ops attached to %s", CG);
}

/* sockhash full when a device authenticates: the insert fails with E2BIG (hbd then answers that
 * device itself, tests/test_hbd_offload), and the connection keeps its conns entry and its
 * bytes on the ordinary path. */
static void test_sockhash_full(void **state)
{
	struct hbk_opts o = { .max_conns = 2, .max_sessions = 16 };
	struct hb_conn_key key = { .cookie = 1 }, ka, kb;
	struct hb_conn c;
	struct ht_pair a, b;
	__u8 ping[16], got[16];
	__u64 fd;
	int lfd, cfd, sfd;
	__u16 port = ht_free_port();

	o.port = port;
	own_instance(&o);
	cfd = hbk_map_fd(H2, HB_MAP_CONNS);
	sfd = hbk_map_fd(H2, HB_MAP_SOCKHASH);

	lfd = ht_listener(AF_INET, "127.0.0.1", port);
	ht_connect_pair(lfd, AF_INET, "127.0.0.1", port, &a);
	ht_connect_pair(lfd, AF_INET, "127.0.0.1", port, &b);
	close(lfd);
	ka.cookie = a.cookie, kb.cookie = b.cookie;
	/* a is admitted; a filler socket takes the other slot */
	HT_EQ(bpf_map_lookup_elem(cfd, &ka, &c), 0, "conns entry of connection a");
	c.state = HB_STATE_AUTHED;
	HT_EQ(bpf_map_update_elem(cfd, &ka, &c, BPF_EXIST), 0, "connection a marked AUTHED");
	fd = (__u64)a.srv;
	HT_EQ(bpf_map_update_elem(sfd, &ka, &fd, BPF_NOEXIST), 0, "a into the 2-slot sockhash");
	fd = (__u64)a.cli;
	HT_EQ(bpf_map_update_elem(sfd, &key, &fd, BPF_NOEXIST), 0, "the filler into the last slot");
	fd = (__u64)b.srv;
	HT_EQ(bpf_map_update_elem(sfd, &kb, &fd, BPF_NOEXIST), -E2BIG,
	      "b into the full sockhash refused");
	HT_EQ(bpf_map_lookup_elem(cfd, &kb, &c), 0, "conns entry of b, kept after the refusal");

	/* b is served by the ordinary path: its PING reaches the server untouched */
	hbt_ping(ping, 1, 1);
	ht_send_segment(b.cli, ping, sizeof(ping));
	ht_recv_exact(b.srv, got, sizeof(got), 2000, "PING of a connection not in the sockhash");
	assert_memory_equal(got, ping, sizeof(ping));
	/* and a is answered by the kernel */
	ht_send_segment(a.cli, ping, sizeof(ping));
	ht_recv_exact(a.cli, got, sizeof(got), 2000, "PONG on the connection in the sockhash");
	HT_EQ(got[3], HB_PONG, "frame type of the kernel's answer to a");

	close(a.cli), close(a.srv), close(b.cli), close(b.srv);
}

/* conns full: no entry for the connection, which works on the ordinary path. */
static void test_conns_full(void **state)
{
	struct hbk_opts o = { .max_conns = 1, .max_sessions = 16 };
	struct hb_kstats k0, k1;
	struct ht_pair a, b;
	__u8 fr[32], got[32];
	size_t n = hbt_frame(fr, HB_DATA, 3, "xyz", 3);
	int lfd, kfd;
	__u16 port = ht_free_port();

	o.port = port;
	own_instance(&o);
	kfd = hbk_map_fd(H2, HB_MAP_KSTATS);
	HT_EQ(hbk_read_kstats(kfd, &k0), 0, "kernel counters before the connections");
	lfd = ht_listener(AF_INET6, "::1", port);
	ht_connect_pair(lfd, AF_INET6, "::1", port, &a);
	ht_connect_pair(lfd, AF_INET6, "::1", port, &b);
	close(lfd);
	HT_EQ(hbk_read_kstats(kfd, &k1), 0, "kernel counters after the connections");
	HT_KSTATS(&k0, &k1, "sockops_insert", 1, "sockops_insert_err", 1);
	ht_send_segment(b.cli, fr, n);
	ht_recv_exact(b.srv, got, n, 2000, "DATA on the untracked connection");
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
	struct ht_pair p;
	char path[PATH_MAX + 32];
	__u8 ping[16], got[16];
	int lfd, cfd, kfd, sfd;
	struct hb_kstats ks;
	__u64 fd;
	__u16 port = ht_free_port();

	o.port = port;
	own_instance(&o);
	HT_EQ(hbk_write_config(H2, 0, NULL, HB_XDP_NONE), 0, "config written (no XDP)");
	hbt_pin_dir(PIN2, sizeof(PIN2));
	HT_EQ(hbk_pin(H2, PIN2), 0, "pin into %s", PIN2);
	HT_EQ(stat(PIN2, &st), 0, "pin directory %s exists", PIN2);
	HT_EQ(st.st_mode & 0777, 0700, "pin directory's mode (root's alone)");
	for (int i = 0; hbk_map_names[i]; i++) {
		snprintf(path, sizeof(path), "%s/%s", PIN2, hbk_map_names[i]);
		HT_EQ(access(path, F_OK), 0, "pin of map %s", hbk_map_names[i]);
	}
	snprintf(path, sizeof(path), "%s/%s", PIN2, HBK_PIN_LINK_SOCKOPS);
	HT_EQ(access(path, F_OK), 0, "pin of the sock_ops link");
	/* a second pin into the same directory is refused ("already loaded") */
	HT_EQ(hbk_pin(H2, PIN2), -EEXIST, "second pin into the same directory");
	hbk_close(H2); /* the loader exits */
	H2 = NULL;

	/* the service keeps working through the pins alone */
	snprintf(path, sizeof(path), "%s/%s", PIN2, HB_MAP_CONNS);
	cfd = bpf_obj_get(path);
	snprintf(path, sizeof(path), "%s/%s", PIN2, HB_MAP_KSTATS);
	kfd = bpf_obj_get(path);
	snprintf(path, sizeof(path), "%s/%s", PIN2, HB_MAP_SOCKHASH);
	sfd = bpf_obj_get(path);
	HT_TRUE(cfd >= 0 && kfd >= 0 && sfd >= 0,
		"pinned conns (fd %d), kstats (%d) and sockhash (%d) opened from %s", cfd, kfd, sfd,
		PIN2);
	lfd = ht_listener(AF_INET, "127.0.0.1", port);
	ht_connect_pair(lfd, AF_INET, "127.0.0.1", port, &p);
	k.cookie = p.cookie;
	HT_EQ(bpf_map_lookup_elem(cfd, &k, &c), 0, "conns entry made through the pinned program");
	c.state = HB_STATE_AUTHED;
	HT_EQ(bpf_map_update_elem(cfd, &k, &c, BPF_EXIST), 0, "pinned conns entry marked AUTHED");
	fd = (__u64)p.srv;
	HT_EQ(bpf_map_update_elem(sfd, &k, &fd, BPF_NOEXIST), 0, "socket into the pinned sockhash");
	hbt_ping(ping, 77, 7);
	ht_send_segment(p.cli, ping, sizeof(ping));
	ht_recv_exact(p.cli, got, sizeof(got), 2000, "PONG served from the pins");
	HT_EQ(got[3], HB_PONG, "frame type of the answer served from the pins");
	HT_EQ(hbk_read_kstats(kfd, &ks), 0, "pinned kernel counters");
	HT_EQ(ks.sk_pong, 1, "sk_pong of the pinned instance");
	close(p.cli), close(p.srv);

	/* unload: pins and directory gone, hooks detached */
	HT_EQ(hbk_unload(PIN2, NULL, &rep), 0, "unload of %s", PIN2);
	HT_TRUE(rep.sockops_detached, "unload detached sock_ops");
	HT_TRUE(rep.sockmap_detached, "unload detached the stream parser and verdict");
	{
		int nmaps = 0;

		while (hbk_map_names[nmaps])
			nmaps++;
		HT_EQ(rep.pins_removed, nmaps + 1, "pins removed: every map and the sock_ops link");
	}
	HT_EQ(access(PIN2, F_OK), -1, "pin directory gone after unload");
	PIN2[0] = 0;
	/* a new connection is no longer tracked (sock_ops detached) */
	ht_connect_pair(lfd, AF_INET, "127.0.0.1", port, &p);
	k.cookie = p.cookie;
	HT_EQ(bpf_map_lookup_elem(cfd, &k, &c), -ENOENT,
	      "conns entry for a connection made after unload");
	/* and its PING goes to the server, not answered (parser/verdict detached) */
	ht_send_segment(p.cli, ping, sizeof(ping));
	ht_recv_exact(p.srv, got, sizeof(got), 2000, "PING after unload");
	HT_EQ(got[3], HB_PING, "frame type at the server after unload (no kernel PONG)");
	close(p.cli), close(p.srv), close(lfd), close(cfd), close(kfd), close(sfd);
	HT_EQ(hbk_unload("/sys/fs/bpf/hbeat-test-nonexistent", NULL, &rep), -ENOENT,
	      "unload of a directory that holds no pins");
}

/* ------------------------------------------------------------------------------------------ */

static int group_teardown(void **state)
{
	hbk_close(H); /* never pinned: detaches sock_ops and parser/verdict */
	H = NULL;
	if (CG[0])
		hbt_cgroup_leave(CG);
	CG[0] = 0;
	return 0;
}

static int group_setup(void **state)
{
	struct hbk_opts o = { .max_conns = 256, .max_sessions = 16 };
	int err;

	hb_log_init("test_sockmap", getenv("HB_TEST_DEBUG") ? HB_LOG_DEBUG : HB_LOG_WARN);
	hbk_route_logs();
	if (hbt_ensure_bpffs())
		return -1;
	hbt_reap_stale();
	PORT = ht_free_port();
	o.port = PORT;
	if (hbk_netns_cookie(&o.netns_cookie) || hbk_open(&H, &o) || hbk_attach_sockmap(H))
		return -1;
	err = hbt_cgroup_enter(CG, sizeof(CG));
	if (err) {
		fprintf(stderr, "cannot use cgroup %s: %s\n", CG, strerror(-err));
		CG[0] = 0;
		group_teardown(state);
		return -1;
	}
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
		cmocka_unit_test(test_beat),
		cmocka_unit_test(test_beat_not_authed),
		cmocka_unit_test(test_beat_daemon_dead),
		cmocka_unit_test(test_coalesced_beats),
		cmocka_unit_test(test_data_reaches_server),
		cmocka_unit_test(test_echo_over_max_payload),
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
