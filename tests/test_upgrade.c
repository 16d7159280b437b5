// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Upgrade without dropping devices (SIGUSR2, user/hbd/upgrade.c):
 *   - userspace mode on loopback: TCP devices mid-frame, with DATA in flight, not yet
 *     authenticated, UDP sessions, and devices connecting while the handover runs: none is
 *     dropped or refused, every heartbeat is answered, the half-sent frame completes in the new
 *     daemon, the same UDP tokens keep working, and the counters go on from the old daemon's;
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

#include "test_hbd_harness.h"
#include "test_hbload_run.h"
#include "test_netns_env.h"

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

/* Waits for d's daemon to exit after an upgrade and makes d the successor; returns its pid
 * (0 on failure).
 */
static pid_t await_successor(struct ht_daemon *d)
{
	char line[1024], cmd[256], *p;
	int st = -1;
	pid_t old = d->pid, next = 0;
	uint64_t end = ht_now_ms() + 30000;
	FILE *f;

	while (ht_now_ms() < end && waitpid(old, &st, WNOHANG) != old)
		ht_sleep_ms(5);
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "old hbd exit status %#x\n", st);
		return 0;
	}
	/* the last ready line is the successor's */
	snprintf(cmd, sizeof(cmd), "grep 'upgrade: taking over' %s | tail -1", d->err);
	f = popen(cmd, "r");
	if (f && fgets(line, sizeof(line), f) && (p = strstr(line, "pid=")))
		next = atoi(p + 4);
	if (f)
		pclose(f);
	d->pid = next;
	/* a failed test's teardown (ht_reap) ends the daemon now serving, not the one gone */
	ht_track(d, false);
	ht_track(d, true);
	return next;
}

static pid_t upgrade(struct ht_daemon *d)
{
	assert_int_equal(kill(d->pid, SIGUSR2), 0);
	return await_successor(d);
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

static void userspace(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "2", "--interval", "5",
					    NULL };
	struct hb_ping half = { .ts = htobe64(4242) };
	uint8_t frame[64], buf[HB_MAX_FRAME];
	int tcp[NTCP], udp[NUDP], fresh, during[20], nduring = 0;
	uint64_t tok[NUDP];
	struct ht_daemon d;
	struct hb_frame f;
	struct hb_hello h;
	size_t n;

	(void)state;
	assert_int_equal(ht_start(&d, args), 0);
	for (int i = 0; i < NTCP; i++)
		assert_true((tcp[i] = ht_tcp_login(d.port, (uint64_t)(100 + i), false, NULL)) >= 0);
	for (int i = 0; i < NUDP; i++) {
		udp[i] = ht_udp(false);
		assert_int_not_equal(tok[i] = ht_udp_login(udp[i], d.port, false, (uint64_t)(150 + i)), 0);
	}
	fresh = ht_tcp(d.port, false); /* connected, no HELLO yet */
	assert_true(fresh >= 0);
	/* five devices are half-way through a PING, three have DATA in flight */
	n = hb_encode(frame, sizeof(frame), HB_TCP, HB_PING, 7, 0, &half, sizeof(half));
	for (int i = 0; i < 5; i++)
		assert_int_equal(send(tcp[i], frame, 5, MSG_NOSIGNAL), 5);
	for (int i = 5; i < 8; i++)
		assert_int_equal(ht_send_frame(tcp[i], HB_DATA, 9, "in flight", 9), 0);

	assert_int_equal(kill(d.pid, SIGUSR2), 0);
	/* devices arriving while the handover runs: none refused */
	for (; nduring < 20; nduring++) {
		during[nduring] = ht_tcp_login(d.port, (uint64_t)(160 + nduring), false, NULL);
		assert_true(during[nduring] >= 0);
	}
	assert_true(await_successor(&d) > 0);

	/* the half PINGs complete in the new daemon */
	for (int i = 0; i < 5; i++) {
		assert_int_equal(send(tcp[i], frame + 5, n - 5, MSG_NOSIGNAL), (ssize_t)(n - 5));
		assert_int_equal(ht_recv_frame(tcp[i], buf, &f, HT_IO_MS), 1);
		assert_int_equal(f.type, HB_PONG);
		assert_int_equal(f.seq, 7);
		assert_memory_equal(f.payload, &half, sizeof(half));
	}
	/* the DATA in flight was ACKed (by the old daemon or the new one) */
	for (int i = 5; i < 8; i++)
		assert_true(ht_expect(tcp[i], HB_ACK, -1));
	for (int i = 0; i < NTCP; i++)
		assert_true(tcp_ping(tcp[i], (uint16_t)(100 + i)));
	for (int i = 0; i < nduring; i++)
		assert_true(tcp_ping(during[i], 1));
	for (int i = 0; i < NUDP; i++) {
		assert_true(udp_ping(udp[i], d.port, tok[i], (uint16_t)(200 + i)));
		assert_int_equal(ht_udp_send(udp[i], d.port, false, HB_ECHO, 9, tok[i], "same", 4), 0);
		assert_int_equal(ht_udp_recv(udp[i], buf, &f, HT_IO_MS), 1);
		assert_int_equal(f.type, HB_ECHO);
	}
	/* the one that had not said HELLO yet can still do so */
	ht_hello(&h, 199, 0);
	assert_int_equal(ht_send_frame(fresh, HB_HELLO, 1, &h, sizeof(h)), 0);
	assert_true(ht_expect(fresh, HB_WELCOME, -1));
	assert_true(tcp_ping(fresh, 3));

	for (int i = 0; i < NTCP; i++)
		close(tcp[i]);
	for (int i = 0; i < nduring; i++)
		close(during[i]);
	for (int i = 0; i < NUDP; i++)
		close(udp[i]);
	close(fresh);
	assert_int_equal(ht_stop(&d), 0);
	printf("old hbd: handoff_out %lld; new hbd: handoff_in %lld, errors %lld\n",
	       ht_exit_stat(&d, "handoff_out"), last_stat(&d, "handoff_in"),
	       last_stat(&d, "errors"));
	/* 40 authenticated + 1 not yet, and the ones of `during` the old one had accepted */
	assert_true(ht_exit_stat(&d, "handoff_out") >= NTCP + 1);
	assert_int_equal(ht_exit_stat(&d, "tcp_closed"), 0);
	assert_int_equal(ht_exit_stat(&d, "errors"), 0);
	assert_true(last_stat(&d, "handoff_in") >= NTCP + 1 + NUDP);
	assert_int_equal(last_stat(&d, "errors"), 0);
	ht_cleanup(&d);
}

/* hbload's devices through two upgrades in a row, heartbeating at the server's interval, with
 * the kernel answering throughout.
 */
static void offload_two_upgrades(void **state)
{
	static const char *const args[] = { "--pin-path", E.pin, "--port", "7651", "--workers",
					    "2", "--interval", IV_S, "--max-clients", "8192", NULL };
	static char hbload[PATH_MAX], ns[96], exe[PATH_MAX], dur[16];
	const char *tcp_argv[] = { "nsenter", ns, hbload, "--server", HN_SRV_ADDR, "--port", "7651",
				   "--clients", "2000", "--proto", "tcp", "--interval", IV_S,
				   "--duration", dur, "--keys", NULL, "--first-device", "1000",
				   "--source", "10.77.1.1-10.77.1.4", "--inflight", "100", "--json",
				   "--no-progress", NULL };
	const char *udp_argv[] = { "nsenter", ns, hbload, "--server", HN_SRV_ADDR, "--port", "7651",
				   "--clients", "500", "--proto", "udp", "--interval", IV_S,
				   "--duration", dur, "--keys", NULL, "--first-device", "5000",
				   "--source", "10.77.1.5", "--inflight", "100", "--json",
				   "--no-progress", NULL };
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
	assert_int_equal(hbt_sh("printf '1000-5499 derive %s\\n' > %s", HT_MASTER, keys), 0);
	/* few HELLOs in flight: a veth's 256-packet ring drops bursts silently (FIELD-NOTES) */
	tcp_argv[16] = udp_argv[16] = keys;
	/* heartbeating until after the last wait below, whatever the upgrades take */
	snprintf(dur, sizeof(dur), "%d", (BEFORE_MS + 2 * AFTER_MS) / 1000 + 4);
	k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[k > 0 ? k : 0] = 0;
	assert_int_equal(hbt_find("hbload", exe, hbload, sizeof(hbload)), 0);
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
		assert_int_equal(ht_start(&d, a2), 0);
	}
	hb[0] = hbt_spawn("/usr/bin/nsenter", tcp_argv, &hb_out[0], "/dev/null");
	hb[1] = hbt_spawn("/usr/bin/nsenter", udp_argv, &hb_out[1], "/dev/null");
	assert_true(hb[0] > 0 && hb[1] > 0);
	/* every device in and heartbeating before the first upgrade */
	for (int i = 0; i < 150 && (hn_stat(&E, "user.tcp_authed") < 2000 ||
				    hn_stat(&E, "user.udp_active") < 500);
	     i++)
		ht_sleep_ms(100);
	assert_int_equal(hn_stat(&E, "user.tcp_authed"), 2000);
	assert_int_equal(hn_stat(&E, "user.udp_active"), 500);
	ht_sleep_ms(BEFORE_MS);
	for (int round = 0; round < 2; round++) {
		uint64_t t0 = ht_now_ms();

		assert_true(upgrade(&d) > 0);
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
		assert_int_equal(hbt_reap(hb[i], time(NULL) + 10), 0);
		printf("%s devices through two upgrades: %s", i ? "UDP" : "TCP", out[i]);
	}
	assert_int_equal(expired_tcp, 0);
	assert_int_equal(expired_udp, 0);
	assert_int_equal(hbt_num(out[0], "connected_end"), 2000);
	assert_int_equal(hbt_num(out[0], "server_closed"), 0);
	assert_int_equal(hbt_num(out[1], "connected_end"), 500);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(hbt_num(out[i], "expired"), 0);
		assert_int_equal(hbt_num(out[i], "reconnects"), 0);
		assert_int_equal(hbt_num(out[i], "lost"), 0);
		assert_int_equal(hbt_num(out[i], "pongs"), hbt_num(out[i], "pings"));
	}
	/* every heartbeat was the kernel's, before, during and after */
	assert_int_equal(hn_stat(&E, "user.pings_user"), 0);
	assert_true(hn_stat(&E, "user.handoff_in") >= 2 * (2000 + 500));
	assert_int_equal(ht_stop(&d), 0);
	assert_int_equal(last_stat(&d, "errors"), 0);
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
	ht_netns[0] = 0;
	ht_srv4 = INADDR_LOOPBACK;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(userspace, ht_reap),
		cmocka_unit_test_setup_teardown(offload_two_upgrades, netns_setup, netns_teardown),
	};

	(void)hbt_run;
	/* successors are children of the daemon they replace: adopt them when it exits */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("upgrade", tests, NULL, NULL);
}
