// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Upgrade without dropping devices (SIGUSR2, user/hbd/upgrade.c):
 *   - userspace mode on loopback: TCP devices mid-frame, with DATA in flight, not yet
 *     authenticated, UDP sessions, and devices connecting while the handover runs: none is
 *     dropped or refused, every heartbeat is answered, the half-sent frame completes in the new
 *     daemon, the same UDP tokens keep working, and the counters go on from the old daemon's;
 *     also with the rings on one thread (--ring-threads);
 *   - offload mode in a netns: hbload's TCP and UDP devices heartbeat at the interval the server
 *     asks for through two upgrades in a row, with no connection dropped, no heartbeat missed
 *     (all answered by the kernel) and no device expired: each successor knows when the kernel
 *     last heard from every device it takes over, also when that was before it started.
 * The test process is a child subreaper, so each successor becomes its child when its parent
 * (the old daemon) exits, and is waited for like the first one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <sys/prctl.h>

#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "lib/ht_assert.h"
#include "lib/hbd_harness.h"
#include "lib/run_prog.h"
#include "lib/netns_env.h"
#include "lib/sh.h"

#define NTCP 40
#define NUDP 10

/* offload_two_upgrades: server and devices at one heartbeat interval, the default expiry
 * multiplier (1.5), so a device is expired after one timeout (7.5 s) without a heartbeat the
 * daemon knows of: a stamp lost in a handover shows within it
 */
#define IV_S "5"
#define TIMEOUT_MS 7500
#define BEFORE_MS 6000 /* heartbeating before the first upgrade: the old daemon's ages grow */
#define AFTER_MS (TIMEOUT_MS + 1500) /* after each upgrade: a timeout, a tick and some slack */

static struct hn_env E;

static pid_t upgrade(struct ht_daemon *d)
{
	HT_EQ(kill(d->pid, SIGUSR2), 0, "SIGUSR2 to hbd %d", (int)d->pid);
	return ht_await_successor(d);
}

/* A counter from the last JSON line hbd printed at exit (the last daemon's). */
static long long last_stat(const struct ht_daemon *d, const char *name)
{
	char cmd[256], line[64] = "";
	FILE *f;

	snprintf(cmd, sizeof(cmd), "grep pings_user %s | tail -1 | jq -r '.%s'", d->out, name);
	f = popen(cmd, "r");
	if (f && !fgets(line, sizeof(line), f))
		line[0] = 0;
	if (f)
		pclose(f);
	return line[0] >= '0' && line[0] <= '9' ? atoll(line) : -1;
}

static bool tcp_ping(int fd, uint16_t seq)
{
	struct hb_ping p = { .ts = htobe64(seq) };
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;

	return !ht_send_frame(fd, HB_PING, seq, &p, sizeof(p)) &&
	       ht_recv_frame(fd, buf, &f, HT_IO_MS) == 1 && f.type == HB_PONG && f.seq == seq;
}

static bool udp_ping(int fd, uint16_t port, uint64_t tok, uint16_t seq)
{
	struct hb_ping p = { .ts = htobe64(seq) };
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;

	return !ht_udp_send(fd, port, false, HB_PING, seq, tok, &p, sizeof(p)) &&
	       ht_udp_recv(fd, buf, &f, HT_IO_MS) == 1 && f.type == HB_PONG && f.seq == seq;
}

/* The userspace handover, with hbd started with ARGS (its successor gets the same), whose
 * workers run on WORKER_THREADS threads.
 */
static void userspace_upgrade(const char *const *args, int worker_threads)
{
	struct hb_ping half = { .ts = htobe64(4242) };
	uint8_t frame[64], buf[HB_MAX_FRAME];
	int tcp[NTCP], udp[NUDP], fresh, during[20], nduring = 0;
	uint64_t tok[NUDP];
	struct ht_daemon d;
	struct hb_frame f;
	struct hb_hello h;
	size_t n;

	HT_EQ(ht_start(&d, args), 0, "hbd started");
	for (int i = 0; i < NTCP; i++)
		HT_GE((tcp[i] = ht_tcp_login(d.port, (uint64_t)(100 + i), false, NULL)), 0,
		      "TCP login of device %d", 100 + i);
	for (int i = 0; i < NUDP; i++) {
		udp[i] = ht_udp(false);
		HT_NE(tok[i] = ht_udp_login(udp[i], d.port, false, (uint64_t)(150 + i)), 0,
		      "UDP login of device %d", 150 + i);
	}
	fresh = ht_tcp(d.port, false); /* connected, no HELLO yet */
	HT_GE(fresh, 0, "connection that has not sent HELLO yet");
	/* five devices are half-way through a PING, three have DATA in flight */
	n = hb_encode(frame, sizeof(frame), HB_TCP, HB_PING, 7, 0, &half, sizeof(half));
	for (int i = 0; i < 5; i++)
		HT_EQ(send(tcp[i], frame, 5, MSG_NOSIGNAL), 5,
		      "half a PING on device %d's connection sent", 100 + i);
	for (int i = 5; i < 8; i++)
		HT_EQ(ht_send_frame(tcp[i], HB_DATA, 9, "in flight", 9), 0,
		      "DATA in flight on device %d's connection sent", 100 + i);

	HT_EQ(kill(d.pid, SIGUSR2), 0, "SIGUSR2 to hbd %d", (int)d.pid);
	/* devices arriving while the handover runs: none refused */
	for (; nduring < 20; nduring++) {
		during[nduring] = ht_tcp_login(d.port, (uint64_t)(160 + nduring), false, NULL);
		HT_GE(during[nduring], 0, "login of device %d during the handover", 160 + nduring);
	}
	HT_GT(ht_await_successor(&d), 0,
	      "the old hbd exited cleanly and named its successor (its log: %s)", d.err);

	/* the half PINGs complete in the new daemon */
	for (int i = 0; i < 5; i++) {
		HT_EQ(send(tcp[i], frame + 5, n - 5, MSG_NOSIGNAL), (ssize_t)(n - 5),
		      "rest of the half PING of device %d sent", 100 + i);
		HT_EQ(ht_recv_frame(tcp[i], buf, &f, HT_IO_MS), 1,
		      "an answer to device %d's completed PING within %d ms", 100 + i, HT_IO_MS);
		HT_EQ(f.type, HB_PONG, "frame type of the answer to the completed PING");
		HT_EQ(f.seq, 7, "sequence number of the PONG to the completed PING");
		assert_memory_equal(f.payload, &half, sizeof(half));
	}
	/* the DATA in flight was ACKed (by the old daemon or the new one) */
	for (int i = 5; i < 8; i++)
		HT_TRUE(ht_expect(tcp[i], HB_ACK, -1),
			"ACK for the DATA of device %d in flight at the upgrade", 100 + i);
	for (int i = 0; i < NTCP; i++)
		HT_TRUE(tcp_ping(tcp[i], (uint16_t)(100 + i)),
			"PONG for TCP device %d after the upgrade", 100 + i);
	for (int i = 0; i < nduring; i++)
		HT_TRUE(tcp_ping(during[i], 1),
			"PONG for device %d that logged in during the handover", 160 + i);
	for (int i = 0; i < NUDP; i++) {
		HT_TRUE(udp_ping(udp[i], d.port, tok[i], (uint16_t)(200 + i)),
			"PONG for UDP device %d after the upgrade", 150 + i);
		HT_EQ(ht_udp_send(udp[i], d.port, false, HB_ECHO, 9, tok[i], "same", 4), 0,
		      "ECHO of UDP device %d sent", 150 + i);
		HT_EQ(ht_udp_recv(udp[i], buf, &f, HT_IO_MS), 1,
		      "an answer to UDP device %d's ECHO within %d ms", 150 + i, HT_IO_MS);
		HT_EQ(f.type, HB_ECHO, "frame type of the answer to the ECHO");
	}
	HT_EQ(ht_threads_named(d.pid, "hbd-worker-", true), worker_threads,
	      "the successor's worker threads");
	/* the one that had not said HELLO yet can still do so */
	ht_hello(&h, 199, 0);
	HT_EQ(ht_send_frame(fresh, HB_HELLO, 1, &h, sizeof(h)), 0,
	      "HELLO of the connection that waited through the upgrade sent");
	HT_TRUE(ht_expect(fresh, HB_WELCOME, -1), "WELCOME for the HELLO after the upgrade");
	HT_TRUE(tcp_ping(fresh, 3), "PONG for device 199 after the upgrade");

	for (int i = 0; i < NTCP; i++)
		close(tcp[i]);
	for (int i = 0; i < nduring; i++)
		close(during[i]);
	for (int i = 0; i < NUDP; i++)
		close(udp[i]);
	close(fresh);
	HT_EQ(ht_stop(&d), 0, "exit code of the successor hbd after SIGTERM");
	printf("old hbd: handoff_out %lld; new hbd: handoff_in %lld, errors %lld\n",
	       ht_exit_stat(&d, "handoff_out"), last_stat(&d, "handoff_in"),
	       last_stat(&d, "errors"));
	/* 40 authenticated + 1 not yet, and the ones of `during` the old one had accepted */
	HT_GE(ht_exit_stat(&d, "handoff_out"), NTCP + 1, "the old hbd's handoff_out");
	HT_EQ(ht_exit_stat(&d, "tcp_closed"), 0, "the old hbd's tcp_closed");
	HT_EQ(ht_exit_stat(&d, "errors"), 0, "the old hbd's errors");
	HT_GE(last_stat(&d, "handoff_in"), NTCP + 1 + NUDP,
	      "the new hbd's handoff_in: every TCP connection and UDP session");
	HT_EQ(last_stat(&d, "errors"), 0, "the new hbd's errors");
	ht_cleanup(&d);
}

static void userspace(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "2",
					    "--interval",   "5",	 NULL };

	(void)state;
	userspace_upgrade(args, 2);
}

/* The same with four rings served by one thread (--ring-threads): the handover stops and
 * restarts a thread that owns several rings, and the successor groups them again.
 */
static void userspace_ring_threads(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "4", "--ring-threads", "1",
					    "--interval",   "5",	 NULL };

	(void)state;
	userspace_upgrade(args, 1);
}

/* hbload's devices through two upgrades in a row, heartbeating at the server's interval, with
 * the kernel answering throughout.
 */
static void offload_two_upgrades(void **state)
{
	static const char *const args[] = { "--pin-path",    E.pin,  "--port",	   "7651",
					    "--workers",     "2",    "--interval", IV_S,
					    "--max-clients", "8192", NULL };
	static char hbload[PATH_MAX], ns[96], exe[PATH_MAX], dur[16];
	const char *tcp_argv[] = { "nsenter",
				   ns,
				   hbload,
				   "--server",
				   HN_SRV_ADDR,
				   "--port",
				   "7651",
				   "--clients",
				   "2000",
				   "--proto",
				   "tcp",
				   "--interval",
				   IV_S,
				   "--duration",
				   dur,
				   "--keys",
				   NULL,
				   "--first-device",
				   "1000",
				   "--source",
				   "10.77.1.1-10.77.1.4",
				   "--inflight",
				   "100",
				   "--json",
				   "--no-progress",
				   NULL };
	const char *udp_argv[] = { "nsenter",
				   ns,
				   hbload,
				   "--server",
				   HN_SRV_ADDR,
				   "--port",
				   "7651",
				   "--clients",
				   "500",
				   "--proto",
				   "udp",
				   "--interval",
				   IV_S,
				   "--duration",
				   dur,
				   "--keys",
				   NULL,
				   "--first-device",
				   "5000",
				   "--source",
				   "10.77.1.5",
				   "--inflight",
				   "100",
				   "--json",
				   "--no-progress",
				   NULL };
	long long expired_tcp, expired_udp;
	char out[2][4096], keys[128];
	struct ht_daemon d;
	pid_t hb[2];
	int hb_out[2];
	size_t n;
	ssize_t k;

	(void)state;
	/* its own key store: 1000..5499 derived */
	snprintf(keys, sizeof(keys), "/tmp/hbh-upgrade-keys-%d", (int)getpid());
	HT_EQ(hbt_sh("printf '1000-5499 derive %s\\n' > %s", HT_MASTER, keys), 0,
	      "key store %s written", keys);
	/* few HELLOs in flight: a veth's 256-packet ring drops bursts silently (FIELD-NOTES) */
	tcp_argv[16] = udp_argv[16] = keys;
	/* heartbeating until after the last wait below, whatever the upgrades take */
	snprintf(dur, sizeof(dur), "%d", (BEFORE_MS + 2 * AFTER_MS) / 1000 + 4);
	k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[k > 0 ? k : 0] = 0;
	HT_EQ(hbt_find("hbload", exe, hbload, sizeof(hbload)), 0, "$BUILD/hbload found");
	snprintf(ns, sizeof(ns), "--net=/run/netns/%s", E.cli_ns);
	snprintf(ht_netns, sizeof(ht_netns), "%s", E.srv_ns);
	{
		const char *a2[16];
		int i = 0;

		for (; args[i]; i++)
			a2[i] = args[i];
		a2[i++] = "--keys";
		a2[i++] = keys;
		a2[i] = NULL;
		HT_EQ(ht_start(&d, a2), 0, "hbd on port 7651 started");
	}
	hb[0] = hbt_spawn("/usr/bin/nsenter", tcp_argv, &hb_out[0], "/dev/null");
	hb[1] = hbt_spawn("/usr/bin/nsenter", udp_argv, &hb_out[1], "/dev/null");
	HT_TRUE(hb[0] > 0 && hb[1] > 0, "both hbload runs spawned (pids %d, %d)", (int)hb[0],
		(int)hb[1]);
	/* every device in and heartbeating before the first upgrade */
	for (int i = 0; i < 150 && (hn_stat(&E, "user.tcp_authed") < 2000 ||
				    hn_stat(&E, "user.udp_active") < 500);
	     i++)
		ht_sleep_ms(100);
	HT_EQ(hn_stat(&E, "user.tcp_authed"), 2000, "TCP devices authenticated within 15 s");
	HT_EQ(hn_stat(&E, "user.udp_active"), 500, "UDP sessions active within 15 s");
	ht_sleep_ms(BEFORE_MS);
	for (int round = 0; round < 2; round++) {
		uint64_t t0 = ht_now_ms();

		HT_GT(upgrade(&d), 0,
		      "upgrade %d: the old hbd exited cleanly and named its successor (log: %s)",
		      round + 1, d.err);
		printf("upgrade %d: the old hbd was gone %llu ms after SIGUSR2\n", round + 1,
		       (unsigned long long)(ht_now_ms() - t0));
		/* a device whose last heartbeat the successor does not know is expired by now */
		ht_sleep_ms(AFTER_MS);
		printf("upgrade %d: %lld TCP and %lld UDP devices expired so far\n", round + 1,
		       hn_stat(&E, "user.expired_tcp"), hn_stat(&E, "user.expired_udp"));
	}
	/* the counters go on across upgrades; read while every device still heartbeats */
	expired_tcp = hn_stat(&E, "user.expired_tcp");
	expired_udp = hn_stat(&E, "user.expired_udp");
	for (int i = 0; i < 2; i++) {
		n = hbt_drain(hb_out[i], out[i], sizeof(out[i]), time(NULL) + 60);
		out[i][n] = 0;
		HT_EQ(hbt_reap(hb[i], time(NULL) + 10), 0, "exit code of the %s hbload",
		      i ? "UDP" : "TCP");
		printf("%s devices through two upgrades: %s", i ? "UDP" : "TCP", out[i]);
	}
	HT_EQ(expired_tcp, 0, "TCP devices hbd expired through two upgrades");
	HT_EQ(expired_udp, 0, "UDP devices hbd expired through two upgrades");
	HT_EQ(hbt_num(out[0], "connected_end"), 2000,
	      "TCP devices connected at the end (summary above)");
	HT_EQ(hbt_num(out[0], "server_closed"), 0,
	      "TCP connections the server closed through two upgrades");
	HT_EQ(hbt_num(out[1], "connected_end"), 500,
	      "UDP devices connected at the end (summary above)");
	for (int i = 0; i < 2; i++) {
		HT_EQ(hbt_num(out[i], "expired"), 0,
		      "%s devices hbload saw expired through two upgrades", i ? "UDP" : "TCP");
		HT_EQ(hbt_num(out[i], "reconnects"), 0, "%s reconnects through two upgrades",
		      i ? "UDP" : "TCP");
		HT_EQ(hbt_num(out[i], "lost"), 0, "%s heartbeats lost through two upgrades",
		      i ? "UDP" : "TCP");
		HT_EQ(hbt_num(out[i], "pongs"), hbt_num(out[i], "pings"), "%s PONGs against PINGs",
		      i ? "UDP" : "TCP");
	}
	/* every heartbeat was the kernel's, before, during and after */
	HT_EQ(hn_stat(&E, "user.pings_user"), 0, "pings_user: every heartbeat was the kernel's");
	HT_GE(hn_stat(&E, "user.handoff_in"), 2 * (2000 + 500),
	      "handoff_in over two upgrades of 2000 TCP + 500 UDP");
	HT_EQ(ht_stop(&d), 0, "exit code of the last hbd after SIGTERM");
	HT_EQ(last_stat(&d, "errors"), 0, "the last hbd's errors");
	ht_cleanup(&d);
	unlink(keys);
}

static int netns_setup(void **state)
{
	(void)state;
	if (hn_up(&E, 'u', 8) || hn_load(&E, 7651, ""))
		return -1;
	ht_srv4 = HN_SRV_ADDR_HOST;
	return 0;
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
		cmocka_unit_test_teardown(userspace_ring_threads, ht_reap),
		cmocka_unit_test_setup_teardown(offload_two_upgrades, netns_setup, netns_teardown),
	};

	/* successors are children of the daemon they replace: adopt them when it exits */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("upgrade", tests, NULL, NULL);
}
