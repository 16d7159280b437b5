// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Keepalive mode (hbctl load --tcp keepalive) on a veth between two namespaces, with the real
 * hbctl, sock_ops and hbd:
 *   - sock_ops sets SO_KEEPALIVE, TCP_KEEPIDLE/KEEPINTVL/KEEPCNT and TCP_USER_TIMEOUT from the
 *     config map's timing, counted, and nothing before a daemon has written a timing;
 *   - the WELCOME carries the KEEPALIVE flag (20 bytes); the connection is AUTHED in conns
 *     with no sockhash entry; a device that stays silent is kept over four detection bounds
 *     (its kernel answers the probes, counted in the server namespace's TcpExt TCPKeepAlive);
 *     PING, ECHO, DATA and BYE are still served;
 *   - a device whose packets are dropped (nftables in the client namespace: the peer vanished,
 *     the connection half-open) is expired within interval x (probes + 1) and a little: the
 *     presence event says expired, the slot is freed, the counters say why;
 *   - the device library in keepalive mode sends no PINGs, has the socket options set and
 *     reports the kernel's RTT;
 *   - hbctl conns shows the kernel's RTT and last-ACK age (dump and exact lookup);
 *   - an upgrade (SIGUSR2) keeps the connection on the kernel's timer in the successor;
 *   - hbctl load refuses while the hbd that serves the pins runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <bpf/bpf.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hb_diag.h"
#include "hbdev.h"
#include "lib/bpf_util.h"
#include "lib/ctl.h"
#include "lib/ht_assert.h"
#include "lib/hbd_harness.h"
#include "lib/netns_env.h"
#include "lib/sh.h"
#include "lib/sock.h"

#define PORT 7651
#define PORT_S "7651"
#define INTERVAL_S 1
#define PROBES 2
#define BOUND_MS (INTERVAL_S * (PROBES + 1) * 1000) /* the kill after the last packet */

static struct hn_env E;
static struct ht_daemon D;
static char CTL[108];
static bool nft_on; /* the client namespace's drop rule is in */
static int lfd_left = -1; /* a test's own listener on the service port, closed by teardown */

static int pin_fd(const char *name)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", E.pin, name);
	return bpf_obj_get(path);
}

/* hbd on the loaded port with a 1 s interval and 2 probes: a 3 s detection bound. */
static void start_hbd(void)
{
	const char *args[] = { "--pin-path",	     E.pin, "--port",	 PORT_S, "--interval", "1",
			       "--keepalive-probes", "2",   "--workers", "1",	 NULL };

	HT_EQ(tc_start(&D, CTL, sizeof(CTL), false, NULL, args), 0,
	      "hbd in keepalive mode started in %s", E.srv_ns);
}

/* hbd with a 4 s interval and 1 probe: an 8 s bound, long enough for the kernel's timer wheel
 * to round each keepalive timer by up to 256 ms (HZ 250) and short enough for a test. */
#define SLACK_INTERVAL_S 4
#define SLACK_BOUND_MS (SLACK_INTERVAL_S * (1 + 1) * 1000)

static void start_hbd_slack(void)
{
	const char *args[] = { "--pin-path",	     E.pin, "--port",	 PORT_S, "--interval", "4",
			       "--keepalive-probes", "1",   "--workers", "1",	 NULL };

	HT_EQ(tc_start(&D, CTL, sizeof(CTL), false, NULL, args), 0,
	      "hbd in keepalive mode (--interval 4 --keepalive-probes 1) started in %s", E.srv_ns);
}

static void stop_hbd(void)
{
	HT_EQ(ht_stop(&D), 0, "exit code of hbd after SIGTERM");
	tc_cleanup(&D);
}

/* The conns entry of device dev (its key in *cookie). */
static bool conn_of_device(uint64_t dev, __u64 *cookie, struct hb_conn *c)
{
	struct hb_conn_key k, next, *prev = NULL;
	int fd = pin_fd(HB_MAP_CONNS);
	bool found = false;

	while (fd >= 0 && !found && !bpf_map_get_next_key(fd, prev, &next)) {
		k = next;
		prev = &k;
		if (!bpf_map_lookup_elem(fd, &k, c) && c->device_id == dev) {
			*cookie = k.cookie;
			found = true;
		}
	}
	if (fd >= 0)
		close(fd);
	return found;
}

static bool in_sockhash(__u64 cookie)
{
	int fd = pin_fd(HB_MAP_SOCKHASH);
	bool in = fd >= 0 && hbt_in_sockhash(fd, cookie);

	if (fd >= 0)
		close(fd);
	return in;
}

/* TcpExt TCPKeepAlive (probes sent) of a namespace: per netns, so the server's own. */
static long long keepalive_probes_sent(const char *ns)
{
	char cmd[512], line[64] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "nsenter --net=/run/netns/%s awk '/^TcpExt:/ { if (!h) { for (i = 1; i <= NF; "
		 "i++) n[i] = $i; h = 1 } else { for (i = 1; i <= NF; i++) if (n[i] == "
		 "\"TCPKeepAlive\") print $i } }' /proc/net/netstat",
		 ns);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	if (!fgets(line, sizeof(line), p))
		line[0] = 0;
	pclose(p);
	return line[0] ? atoll(line) : -1;
}

/* The client namespace stops answering anything from the service port: the device's kernel is
 * gone as far as the server can tell (no RST, no ACK), and the server's side is half-open. */
static void drop_device(bool on)
{
	if (on) {
		HT_EQ(hbt_sh("nsenter --net=/run/netns/%s nft 'add table inet hbt_ka; add chain "
			     "inet hbt_ka input { type filter hook input priority 0 ; } ; add rule "
			     "inet hbt_ka input tcp sport %d drop'",
			     E.cli_ns, PORT),
		      0, "nftables drop rule in %s", E.cli_ns);
		nft_on = true;
	} else if (nft_on) {
		hbt_sh("nsenter --net=/run/netns/%s nft delete table inet hbt_ka", E.cli_ns);
		nft_on = false;
	}
}

/* A presence subscription on the control socket (its fd), once hbd counts it. */
static int subscribe(void)
{
	char line[512];
	int fd = tc_connect(CTL);

	HT_GE(fd, 0, "connect to hbd's control socket %s", CTL);
	HT_EQ(tc_write(fd, "subscribe\n"), 0, "subscribe sent");
	HT_EQ(tc_line(fd, line, sizeof(line), HT_IO_MS), 0, "the reply to subscribe");
	HT_TRUE(strstr(line, "\"ok\":true") != NULL, "subscribe accepted: %s", line);
	return fd;
}

/* The next presence event for dev within ms: its line, or "" if none came. */
static void next_event(int fd, uint64_t dev, char *line, size_t cap, int ms)
{
	char want[48];
	uint64_t end = ht_now_ms() + (uint64_t)ms;

	snprintf(want, sizeof(want), "\"device\":%" PRIu64 ",", dev);
	while (ht_now_ms() < end) {
		if (tc_line(fd, line, cap, (int)(end - ht_now_ms())))
			break;
		if (strstr(line, want))
			return;
	}
	line[0] = 0;
}

static long long stat_of(const char *path)
{
	return hn_stat(&E, path);
}

/* ------------------------------------------------------------------------------------------ */

/* sock_ops alone, no hbd: with the timing a daemon would write, a connection to the service
 * port gets every option; without it (before any daemon), none. */
static void sockops_sets_the_options(void **state)
{
	struct hb_config cfg;
	__u32 zero = 0;
	int cfd = pin_fd(HB_MAP_CONFIG), lfd, cli, srv, v;
	socklen_t len = sizeof(v);
	long long set0, err0;

	(void)state;
	HT_GE(cfd, 0, "the pinned config map");
	HT_EQ(bpf_map_lookup_elem(cfd, &zero, &cfg), 0, "config read");
	HT_EQ(cfg.tcp_path, HB_TCP_KEEPALIVE, "config.tcp_path of hbctl load --tcp keepalive");
	for (int with_timing = 0; with_timing < 2; with_timing++) {
		cfg.ka_idle_s = with_timing ? 7 : 0;
		cfg.ka_intvl_s = with_timing ? 3 : 0;
		cfg.ka_cnt = with_timing ? 4 : 0;
		cfg.ka_user_timeout_ms = with_timing ? 15000 : 0;
		HT_EQ(bpf_map_update_elem(cfd, &zero, &cfg, BPF_ANY), 0, "timing written");
		set0 = stat_of("kernel.sockops_keepalive");
		err0 = stat_of("kernel.sockops_keepalive_err");
		/* a listener in the server namespace on the service port, a client from the
		 * client namespace: sock_ops filters by port and by the loader's netns */
		HT_EQ(hn_enter(&E, E.srv_ns), 0, "into %s", E.srv_ns);
		lfd = lfd_left = ht_listener(AF_INET, HN_SRV_ADDR, PORT);
		HT_EQ(hn_enter_cli(&E), 0, "into %s", E.cli_ns);
		cli = ht_tcp(PORT, false);
		HT_GE(cli, 0, "connect to %s:%d", HN_SRV_ADDR, PORT);
		srv = accept(lfd, NULL, NULL);
		HT_GE(srv, 0, "accept");
		hn_leave(&E);
		HT_EQ(getsockopt(srv, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0, "SO_KEEPALIVE read");
		HT_EQ(v, with_timing, "SO_KEEPALIVE of the accepted socket (timing written: %d)",
		      with_timing);
		if (with_timing) {
			static const struct {
				int opt, want;
				const char *name;
			} o[] = { { TCP_KEEPIDLE, 7, "TCP_KEEPIDLE" },
				  { TCP_KEEPINTVL, 3, "TCP_KEEPINTVL" },
				  { TCP_KEEPCNT, 4, "TCP_KEEPCNT" },
				  { TCP_USER_TIMEOUT, 15000, "TCP_USER_TIMEOUT" } };

			for (size_t i = 0; i < sizeof(o) / sizeof(o[0]); i++) {
				HT_EQ(getsockopt(srv, IPPROTO_TCP, o[i].opt, &v, &len), 0,
				      "%s read", o[i].name);
				HT_EQ(v, o[i].want, "%s of the accepted socket", o[i].name);
			}
		}
		HT_EQ(stat_of("kernel.sockops_keepalive"), set0 + with_timing,
		      "sockops_keepalive (timing written: %d)", with_timing);
		HT_EQ(stat_of("kernel.sockops_keepalive_err"), err0, "sockops_keepalive_err");
		close(cli);
		close(srv);
		close(lfd);
		lfd_left = -1;
	}
	/* hbd writes its own timing when it starts */
	memset(&cfg.ka_idle_s, 0, 4 * sizeof(__u32));
	bpf_map_update_elem(cfd, &zero, &cfg, BPF_ANY);
	close(cfd);
}

/* The WELCOME, the kernel's view of the connection, a silent device that is kept, and the
 * frames that are still served. */
static void silent_device_is_kept_and_served(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping ping = { .ts = 77 };
	struct hb_welcome wel;
	struct hb_config cfg;
	struct hb_frame f;
	struct hb_conn c;
	char line[512];
	uint16_t wlen;
	uint32_t flags;
	__u64 cookie;
	__u32 zero = 0;
	long long probes0, probes1;
	int fd, ev, cfd;

	(void)state;
	start_hbd();
	cfd = pin_fd(HB_MAP_CONFIG);
	HT_EQ(bpf_map_lookup_elem(cfd, &zero, &cfg), 0, "config read");
	close(cfd);
	HT_EQ(cfg.ka_idle_s, INTERVAL_S, "TCP_KEEPIDLE hbd wrote into config");
	HT_EQ(cfg.ka_intvl_s, INTERVAL_S, "TCP_KEEPINTVL hbd wrote into config");
	HT_EQ(cfg.ka_cnt, PROBES, "TCP_KEEPCNT hbd wrote (--keepalive-probes)");
	HT_EQ(cfg.ka_user_timeout_ms, BOUND_MS, "TCP_USER_TIMEOUT hbd wrote: interval x (cnt + 1)");
	ev = subscribe();
	HT_EQ(hn_enter_cli(&E), 0, "into %s", E.cli_ns);
	fd = ht_tcp_login_flags(PORT, 101, false, &wel, &wlen, &flags);
	hn_leave(&E);
	HT_GE(fd, 0, "login of device 101");
	HT_EQ(wlen, HB_WELCOME_FLAGS_LEN, "WELCOME payload length in keepalive mode");
	HT_EQ(flags, HB_WELCOME_KEEPALIVE, "WELCOME flags in keepalive mode");
	HT_EQ(be32toh(wel.interval_ms), INTERVAL_S * 1000, "WELCOME interval: the probe interval");
	HT_EQ(be32toh(wel.timeout_ms), BOUND_MS, "WELCOME timeout: TCP_USER_TIMEOUT");
	next_event(ev, 101, line, sizeof(line), HT_IO_MS);
	HT_TRUE(strstr(line, "\"event\":\"online\"") != NULL, "online event for 101: '%s'", line);
	HT_TRUE(conn_of_device(101, &cookie, &c), "conns entry of device 101");
	HT_EQ(c.state, HB_STATE_AUTHED, "conns state of device 101");
	HT_EQ(c.flags & HB_CONN_KEEPALIVE, HB_CONN_KEEPALIVE, "HB_CONN_KEEPALIVE in its entry");
	HT_FALSE(in_sockhash(cookie), "device 101's socket in the sockhash (no psock wanted)");

	/* silent for four detection bounds: the server's kernel probes, the device's answers */
	probes0 = keepalive_probes_sent(E.srv_ns);
	ht_sleep_ms(4 * BOUND_MS + 500);
	probes1 = keepalive_probes_sent(E.srv_ns);
	HT_GE(probes1 - probes0, 4 * PROBES,
	      "keepalive probes the server sent in %d ms (TcpExt TCPKeepAlive %lld -> %lld)",
	      4 * BOUND_MS + 500, probes0, probes1);
	next_event(ev, 101, line, 10, 0);
	HT_EQ(line[0], 0, "no presence event for silent device 101 (got '%s')", line);
	HT_TRUE(conn_of_device(101, &cookie, &c), "device 101 still in conns");
	HT_EQ(stat_of("user.expired_tcp"), 0, "expired_tcp after %d ms of silence",
	      4 * BOUND_MS + 500);
	HT_EQ(stat_of("user.tcp_authed"), 1, "devices online");

	/* frames are served as on hbd's userspace path */
	HT_EQ(ht_send_frame(fd, HB_PING, 2, &ping, sizeof(ping)), 0, "PING sent");
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to the PING");
	HT_EQ(f.type, HB_PONG, "frame type of the answer");
	HT_EQ(f.seq, 2, "seq of the PONG");
	HT_EQ(stat_of("user.pings_user"), 1, "pings_user: hbd answered it");
	HT_EQ(ht_send_frame(fd, HB_ECHO, 3, "abc", 3), 0, "ECHO sent");
	HT_TRUE(ht_expect(fd, HB_ECHO, -1), "the ECHO back");
	{
		/* larger than one receive buffer (512 B): the poll's recv reads on until the
		 * socket is empty */
		uint8_t big[1000];

		for (size_t i = 0; i < sizeof(big); i++)
			big[i] = (uint8_t)i;
		HT_EQ(ht_send_frame(fd, HB_ECHO, 6, big, sizeof(big)), 0,
		      "ECHO of 1000 bytes sent");
		HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "the 1000-byte ECHO back");
		HT_EQ(f.len, sizeof(big), "length of the ECHO back");
		assert_memory_equal(f.payload, big, sizeof(big));
	}
	HT_EQ(ht_send_frame(fd, HB_DATA, 4, "reading=1", 9), 0, "DATA sent");
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to the DATA");
	HT_EQ(f.type, HB_ACK, "frame type of the answer to DATA");
	HT_EQ(f.seq, 4, "seq of the ACK");
	HT_TRUE(ht_file_contains(D.sink, "\"device\":101,", NULL, 0), "the DATA in the sink %s",
		D.sink);
	{
		struct hb_bye bye = { .reason = htobe16(HB_BYE_NORMAL) };

		HT_EQ(ht_send_frame(fd, HB_BYE, 5, &bye, sizeof(bye)), 0, "BYE sent");
	}
	HT_TRUE(ht_eof(fd, HT_IO_MS), "hbd closes after the BYE");
	next_event(ev, 101, line, sizeof(line), HT_IO_MS);
	HT_TRUE(strstr(line, "\"event\":\"offline\"") != NULL, "offline event after BYE: '%s'",
		line);
	close(fd);
	close(ev);
	stop_hbd();
}

/* The peer vanished: its packets never arrive, it answers no probe. The kernel closes the
 * connection interval x (probes + 1) after the last packet it received, hbd learns it from its
 * receive and expires the device. */
static void vanished_device_is_expired(void **state)
{
	struct hb_conn c;
	char line[512];
	__u64 cookie;
	uint64_t t0, dt;
	long long timeouts0, closed0;
	int fd, ev;

	(void)state;
	start_hbd();
	ev = subscribe();
	HT_EQ(hn_enter_cli(&E), 0, "into %s", E.cli_ns);
	fd = ht_tcp_login(PORT, 102, false, NULL);
	hn_leave(&E);
	HT_GE(fd, 0, "login of device 102");
	next_event(ev, 102, line, sizeof(line), HT_IO_MS);
	HT_TRUE(strstr(line, "\"event\":\"online\"") != NULL, "online event for 102: '%s'", line);
	HT_TRUE(conn_of_device(102, &cookie, &c), "conns entry of device 102");
	timeouts0 = stat_of("kernel.sockops_close_timeout");
	closed0 = stat_of("user.tcp_closed");
	ht_sleep_ms(1500); /* a probe or two answered first */
	drop_device(true);
	t0 = ht_now_ms();
	next_event(ev, 102, line, sizeof(line), BOUND_MS + 3000);
	dt = ht_now_ms() - t0;
	HT_TRUE(strstr(line, "\"event\":\"expired\"") != NULL,
		"expired event for device 102 within %d ms of the drop: '%s'", BOUND_MS + 3000,
		line);
	fprintf(stderr,
		"keepalive detection: expired %" PRIu64 " ms after the drop (bound %d ms "
		"after the last packet received)\n",
		dt, BOUND_MS);
	/* the last packet came at most an interval before the drop (a probe's ACK) */
	HT_GE(dt, BOUND_MS - INTERVAL_S * 1000 - 100, "ms from the drop to the expiry (not early)");
	HT_LE(dt, BOUND_MS + 1000, "ms from the drop to the expiry: interval x (probes + 1) + 1 s");
	HT_EQ(stat_of("user.expired_tcp"), 1, "expired_tcp");
	HT_EQ(stat_of("user.keepalive_expired"), 1, "keepalive_expired");
	HT_EQ(stat_of("kernel.sockops_close_timeout"), timeouts0 + 1,
	      "sockops_close_timeout: the kernel saw ETIMEDOUT");
	/* the slot is freed through the normal close path */
	for (int i = 0; i < 100 && stat_of("user.tcp_active") != 0; i++)
		ht_sleep_ms(20);
	HT_EQ(stat_of("user.tcp_active"), 0, "open TCP connections after the expiry");
	HT_EQ(stat_of("user.tcp_authed"), 0, "devices online after the expiry");
	HT_EQ(stat_of("user.tcp_closed"), closed0 + 1, "tcp_closed");
	HT_FALSE(conn_of_device(102, &cookie, &c), "device 102's conns entry gone");
	drop_device(false);
	close(fd);
	close(ev);
	stop_hbd();
}

/* The worst case of the bound: the device vanishes just after its kernel answered a probe, so
 * the last packet the server got is the drop's own moment. Each keepalive timer may fire late
 * by the timer wheel's granularity, so a probe every interval (the kill exactly interval x
 * (probes + 1) after the last packet, plus that slack) overshot; hbd's probe period leaves room
 * for it. */
static void bound_holds_after_a_probe(void **state)
{
	char line[512];
	uint64_t t0, dt, end;
	long long p0;
	int fd, ev;

	(void)state;
	start_hbd_slack();
	ev = subscribe();
	HT_EQ(hn_enter_cli(&E), 0, "into %s", E.cli_ns);
	fd = ht_tcp_login(PORT, 103, false, NULL);
	hn_leave(&E);
	HT_GE(fd, 0, "login of device 103");
	next_event(ev, 103, line, sizeof(line), HT_IO_MS);
	HT_TRUE(strstr(line, "\"event\":\"online\"") != NULL, "online event for 103: '%s'", line);
	/* the drop goes in right after the server's next probe (its answer takes a round trip
	 * on the veth, well under the poll's few milliseconds) */
	p0 = keepalive_probes_sent(E.srv_ns);
	end = ht_now_ms() + 2 * SLACK_INTERVAL_S * 1000;
	while (keepalive_probes_sent(E.srv_ns) == p0 && ht_now_ms() < end)
		;
	HT_GT(keepalive_probes_sent(E.srv_ns), p0, "a probe sent within %d s of the login",
	      2 * SLACK_INTERVAL_S);
	ht_sleep_ms(5);
	drop_device(true);
	t0 = ht_now_ms();
	next_event(ev, 103, line, sizeof(line), SLACK_BOUND_MS + 3000);
	dt = ht_now_ms() - t0;
	HT_TRUE(strstr(line, "\"event\":\"expired\"") != NULL,
		"expired event for device 103 within %d ms of the drop: '%s'",
		SLACK_BOUND_MS + 3000, line);
	fprintf(stderr,
		"keepalive detection after a probe: expired %" PRIu64 " ms after the drop "
		"(bound %d ms)\n",
		dt, SLACK_BOUND_MS);
	HT_LE(dt, SLACK_BOUND_MS, "ms from the drop to the expiry: within interval x (probes + 1)");
	drop_device(false);
	close(fd);
	close(ev);
	stop_hbd();
}

/* A device that sends a frame and resets the connection at once: the poll may report data and
 * the reset in one go, and hbd reads on past the data to the error, so the connection (off the
 * wheel, and with no keepalive timer once reset) is not left open. The frame asks for no
 * answer, whose failed send would tell hbd as well. */
static void reset_behind_data_is_seen(void **state)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	char line[512];
	int fd, ev;

	(void)state;
	start_hbd();
	ev = subscribe();
	/* five devices: one device's HELLOs within a millisecond would be refused as replays */
	for (int i = 0; i < 5; i++) {
		HT_EQ(hn_enter_cli(&E), 0, "into %s", E.cli_ns);
		fd = ht_tcp_login(PORT, (uint64_t)(110 + i), false, NULL);
		hn_leave(&E);
		HT_GE(fd, 0, "login of device %d", 110 + i);
		next_event(ev, (uint64_t)(110 + i), line, sizeof(line), HT_IO_MS);
		HT_TRUE(strstr(line, "\"event\":\"online\"") != NULL, "online event %d: '%s'", i,
			line);
		/* hbd stopped meanwhile: both arrive before it looks, and one poll completion
		 * reports them together */
		HT_EQ(kill(D.pid, SIGSTOP), 0, "SIGSTOP to hbd");
		/* an ACK of no downlink: hbd answers nothing, so no failed send tells it either */
		HT_EQ(ht_send_frame(fd, HB_ACK, 2, NULL, 0), 0, "ACK sent");
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(fd); /* RST */
		ht_sleep_ms(50);
		HT_EQ(kill(D.pid, SIGCONT), 0, "SIGCONT to hbd");
		next_event(ev, (uint64_t)(110 + i), line, sizeof(line), HT_IO_MS);
		HT_TRUE(strstr(line, "\"event\":\"offline\"") != NULL,
			"offline event %d after a frame and a reset: '%s'", i, line);
	}
	for (int i = 0; i < 100 && stat_of("user.tcp_active") != 0; i++)
		ht_sleep_ms(20);
	HT_EQ(stat_of("user.tcp_active"), 0, "open TCP connections after the resets");
	close(ev);
	stop_hbd();
}

/* The socket of this process that is device dev's connection (the device library keeps its
 * fd to itself): the one whose local port is the peer port of dev's conns entry. */
static int device_socket(uint64_t dev)
{
	struct hb_conn c;
	__u64 cookie;
	const char *colon;

	if (!conn_of_device(dev, &cookie, &c) || !(colon = strrchr(c.peer, ':')))
		return -1;
	for (int fd = 3; fd < 1024; fd++) {
		struct sockaddr_in a, l;
		socklen_t len = sizeof(a), ll = sizeof(l);
		int type;
		socklen_t tl = sizeof(type);

		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) || type != SOCK_STREAM)
			continue;
		if (!getpeername(fd, (struct sockaddr *)&a, &len) && a.sin_family == AF_INET &&
		    ntohs(a.sin_port) == PORT && !getsockname(fd, (struct sockaddr *)&l, &ll) &&
		    ntohs(l.sin_port) == atoi(colon + 1))
			return fd;
	}
	return -1;
}

static void device_library_in_keepalive_mode(void **state)
{
	uint8_t secret[HB_SECRET_MAX];
	struct hbdev_config cfg = { .host = HN_SRV_ADDR,
				    .port = PORT,
				    .transport = HB_TCP,
				    .device_id = 103,
				    .secret = secret };
	struct hbdev_ev ev;
	struct hbdev *d;
	uint32_t rtt = 0;
	int fd, v;
	socklen_t len = sizeof(v);

	(void)state;
	start_hbd();
	cfg.secret_len = (size_t)ht_secret(103, secret);
	HT_EQ(hbdev_open(&d, &cfg), 0, "hbdev_open of device 103");
	HT_EQ(hn_enter_cli(&E), 0, "into %s", E.cli_ns);
	HT_EQ(hbdev_connect(d), 0, "hbdev_connect of device 103");
	hn_leave(&E);
	HT_TRUE(hbdev_keepalive(d), "the session of device 103 is in keepalive mode");
	HT_TRUE(hbc_keepalive(hbdev_state(d)), "hbc_keepalive of its protocol state");
	HT_FALSE(hbc_wants_pings(hbdev_state(d)), "hbc_wants_pings in keepalive mode");
	fd = device_socket(103);
	HT_GE(fd, 0, "the device library's socket");
	HT_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0, "SO_KEEPALIVE read");
	HT_EQ(v, 1, "SO_KEEPALIVE on the device's socket");
	HT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len), 0, "TCP_KEEPIDLE read");
	HT_EQ(v, INTERVAL_S, "TCP_KEEPIDLE on the device's socket: the WELCOME's interval");
	HT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, &len), 0, "TCP_USER_TIMEOUT read");
	HT_EQ(v, BOUND_MS, "TCP_USER_TIMEOUT on the device's socket: the WELCOME's timeout");
	/* several intervals: no PING, still connected, both kernels probing */
	for (uint64_t end = ht_now_ms() + 3500; ht_now_ms() < end;) {
		HT_GE(hbdev_poll(d, 200, &ev), 0, "hbdev_poll");
		HT_NE(ev.type, HBDEV_EV_DISCONNECTED, "a disconnect while the server is there");
		HT_NE(ev.type, HBDEV_EV_PONG, "a PONG in keepalive mode");
	}
	HT_TRUE(hbdev_connected(d), "device 103 connected after 3.5 s without a PING");
	HT_EQ(stat_of("user.frames_ping"), 0, "PINGs hbd received from the device library");
	HT_EQ(hbdev_rtt_us(d, &rtt), 0, "hbdev_rtt_us");
	HT_GT(rtt, 0, "the kernel's RTT of the device's connection (us)");
	HT_EQ(hbdev_send(d, "t=21", 4, 3000), 0, "DATA from the device library acknowledged");
	hbdev_close(d);
	stop_hbd();
}

/* hbctl conns: the kernel's RTT and last-ACK age of each TCP connection, from a dump (a
 * listing) and from an exact lookup (--device). */
static void conns_show_the_kernel_view(void **state)
{
	char cmd[512];
	long long rtt, ack;
	int fd, u;

	(void)state;
	start_hbd();
	HT_EQ(hn_enter_cli(&E), 0, "into %s", E.cli_ns);
	fd = ht_tcp_login(PORT, 104, false, NULL);
	u = ht_udp(false);
	HT_NE(ht_udp_login(u, PORT, false, 105), 0, "UDP login of device 105");
	hn_leave(&E);
	HT_GE(fd, 0, "login of device 104");
	ht_sleep_ms(1500); /* a probe answered: the last ACK is the probe's */
	for (int by_device = 0; by_device < 2; by_device++) {
		const char *sel = by_device ? "--device 104" : "--transport tcp";

		snprintf(
			cmd, sizeof(cmd),
			"nsenter --net=/run/netns/%s %s/hbctl conns --json --pin-path %s %s | jq -r "
			"'.conns[0].rtt_us'",
			E.srv_ns, E.build, E.pin, sel);
		rtt = -1;
		{
			FILE *p = popen(cmd, "r");
			char line[64] = "";

			if (p && fgets(line, sizeof(line), p))
				rtt = line[0] >= '0' && line[0] <= '9' ? atoll(line) : -1;
			if (p)
				pclose(p);
		}
		HT_GT(rtt, 0, "rtt_us of device 104 in hbctl conns --json %s", sel);
		snprintf(
			cmd, sizeof(cmd),
			"nsenter --net=/run/netns/%s %s/hbctl conns --json --pin-path %s %s | jq -e "
			"'.conns[0].last_ack_ms < 1500 and .conns[0].keepalive == true' >/dev/null",
			E.srv_ns, E.build, E.pin, sel);
		HT_EQ(hbt_sh("%s", cmd), 0,
		      "last_ack_ms under 1.5 s (probes answered) and keepalive true in hbctl conns "
		      "--json %s",
		      sel);
	}
	/* the loader's two ways: an exact lookup by 4-tuple and cookie, and the dump */
	{
		struct hbk_tcp_diag one, *all = NULL;
		struct hb_conn c;
		__u64 cookie;
		size_t n = 0;

		HT_TRUE(conn_of_device(104, &cookie, &c), "conns entry of device 104");
		HT_EQ(hn_enter(&E, E.srv_ns), 0, "into %s", E.srv_ns);
		HT_EQ(hbk_diag_lookup(c.peer, PORT, cookie, &one), 0,
		      "exact sock_diag lookup of %s (cookie %llu)", c.peer,
		      (unsigned long long)cookie);
		HT_EQ(one.cookie, cookie, "cookie of the socket found");
		HT_GT(one.rtt_us, 0, "its tcpi_rtt");
		HT_EQ(hbk_diag_lookup(c.peer, PORT, cookie + 1, &one), -ENOENT,
		      "exact lookup with another cookie");
		HT_EQ(hbk_diag_dump(PORT, &all, &n), 0, "sock_diag dump of port %d", PORT);
		hn_leave(&E);
		HT_TRUE(hbk_diag_find(all, n, cookie) != NULL,
			"device 104's socket in the dump of %zu", n);
		free(all);
	}
	ack = hbt_sh("nsenter --net=/run/netns/%s %s/hbctl conns --json --pin-path %s --transport "
		     "udp | jq -e '.sessions[0] | has(\"rtt_us\") | not' >/dev/null",
		     E.srv_ns, E.build, E.pin);
	HT_EQ(ack, 0, "no rtt_us for a UDP session");
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s %s/hbctl conns --pin-path %s | grep -q 'LAST ACK'",
		     E.srv_ns, E.build, E.pin),
	      0, "the table's LAST ACK column");
	close(fd);
	close(u);
	stop_hbd();
}

/* hbd reads the TCP mode and writes its timing once: a load beneath it is refused until it is
 * stopped. */
static void load_refused_while_hbd_runs(void **state)
{
	char out[128];

	(void)state;
	snprintf(out, sizeof(out), "/tmp/hbka-load-%d.out", (int)getpid());
	start_hbd();
	hn_unload(&E);
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s %s/hbctl load --dev %s --port %d --tcp kernel "
		     "--pin-path %s > %s 2>&1",
		     E.srv_ns, E.build, E.srv_if, PORT, E.pin, out),
	      3, "exit code of hbctl load --tcp kernel while hbd runs (output in %s)", out);
	HT_TRUE(ht_file_contains(out, "stop hbd first", NULL, 0),
		"the refusal says to stop hbd first (output in %s)", out);
	HT_NE(access(E.pin, F_OK), 0, "nothing loaded by the refused load");
	stop_hbd();
	HT_EQ(hn_load(&E, PORT, "--tcp keepalive"), 0, "hbctl load once hbd has stopped");
	unlink(out);
}

/* An upgrade (SIGUSR2) hands the connection over; the successor leaves it to the kernel too:
 * served, not expired while silent, expired once the device vanishes. The test process is a
 * child subreaper, so the successor becomes its child when the old daemon exits. */
static void upgrade_keeps_the_kernel_as_timer(void **state)
{
	char line[1024], cmd[256], *p;
	struct hb_ping ping = { .ts = 5 };
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	pid_t old;
	int fd, st = -1;
	uint64_t end;
	FILE *pf;

	(void)state;
	start_hbd();
	HT_EQ(hn_enter_cli(&E), 0, "into %s", E.cli_ns);
	fd = ht_tcp_login(PORT, 106, false, NULL);
	hn_leave(&E);
	HT_GE(fd, 0, "login of device 106");
	old = D.pid;
	HT_EQ(kill(old, SIGUSR2), 0, "SIGUSR2 to hbd %d", (int)old);
	for (end = ht_now_ms() + 30000; ht_now_ms() < end && waitpid(old, &st, WNOHANG) != old;)
		ht_sleep_ms(5);
	HT_TRUE(st != -1 && WIFEXITED(st) && !WEXITSTATUS(st), "the old hbd exited 0 (status %#x)",
		st);
	snprintf(cmd, sizeof(cmd), "grep 'upgrade: taking over' %s | tail -1", D.err);
	pf = popen(cmd, "r");
	D.pid = pf && fgets(line, sizeof(line), pf) && (p = strstr(line, "pid=")) ? atoi(p + 4) : 0;
	if (pf)
		pclose(pf);
	ht_track(&D, false); /* the successor's pid, for a teardown after a failure */
	ht_track(&D, true);
	HT_GT(D.pid, 0, "the successor's pid in %s", D.err);
	HT_EQ(ht_send_frame(fd, HB_PING, 2, &ping, sizeof(ping)), 0, "PING sent after the upgrade");
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer from the successor");
	HT_EQ(f.type, HB_PONG, "frame type of the successor's answer");
	ht_sleep_ms(2 * BOUND_MS);
	HT_EQ(stat_of("user.expired_tcp"), 0, "expired_tcp after %d ms of silence past the upgrade",
	      2 * BOUND_MS);
	drop_device(true);
	for (end = ht_now_ms() + BOUND_MS + 3000;
	     ht_now_ms() < end && stat_of("user.keepalive_expired") < 1;)
		ht_sleep_ms(100);
	HT_EQ(stat_of("user.keepalive_expired"), 1,
	      "keepalive_expired: the successor expired the vanished device");
	drop_device(false);
	close(fd);
	stop_hbd();
}

static int setup(void **state)
{
	(void)state;
	if (hn_up(&E, 'k', 2) || hn_load(&E, PORT, "--tcp keepalive"))
		return -1;
	hn_aim(&E);
	return 0;
}

static int teardown(void **state)
{
	tc_reap(state);
	drop_device(false);
	hn_down(&E);
	return 0;
}

static int each_teardown(void **state)
{
	hn_leave(&E);
	drop_device(false);
	if (lfd_left >= 0)
		close(lfd_left); /* a failed test's: hbd needs the port */
	lfd_left = -1;
	return tc_reap(state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(sockops_sets_the_options, each_teardown),
		cmocka_unit_test_teardown(silent_device_is_kept_and_served, each_teardown),
		cmocka_unit_test_teardown(vanished_device_is_expired, each_teardown),
		cmocka_unit_test_teardown(bound_holds_after_a_probe, each_teardown),
		cmocka_unit_test_teardown(reset_behind_data_is_seen, each_teardown),
		cmocka_unit_test_teardown(device_library_in_keepalive_mode, each_teardown),
		cmocka_unit_test_teardown(conns_show_the_kernel_view, each_teardown),
		cmocka_unit_test_teardown(upgrade_keeps_the_kernel_as_timer, each_teardown),
		cmocka_unit_test_teardown(load_refused_while_hbd_runs, each_teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_CHILD_SUBREAPER, 1); /* an upgraded hbd's successor is ours to wait for */
	return cmocka_run_group_tests_name("keepalive", tests, setup, teardown);
}
