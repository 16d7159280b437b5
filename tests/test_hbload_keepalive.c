// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbload in keepalive mode against the real thing: hbctl load --tcp keepalive on a veth
 * between two namespaces, hbd with a 1 s interval and 2 probes (a 3 s detection bound), hbload
 * in the client namespace:
 *   - its devices see the WELCOME's KEEPALIVE flag and send no PINGs; they stay connected for
 *     several detection bounds, none expired or closed, while the server's kernel probes them
 *     (TcpExt TCPKeepAlive of the server namespace) and hbd receives no PING;
 *   - DATA and ECHO still flow in keepalive mode, and a downlink (hbctl send) is ACKed;
 *   - --force-pings keeps the PINGs on, and hbd answers them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/ctl.h"
#include "lib/ht_assert.h"
#include "lib/hbd_harness.h"
#include "lib/netns_env.h"
#include "lib/run_prog.h"

#define PORT 7652
#define PORT_S "7652"
#define FIRST "100" /* ht_write_keys: devices 100..199 derived from HT_MASTER */

static struct hn_env E;
static struct ht_daemon D;
static char CTL[108];
static char hbload_path[PATH_MAX], hbctl_path[PATH_MAX];
static char out[16384];

static void start_hbd(void)
{
	const char *args[] = { "--pin-path",	     E.pin, "--port",	 PORT_S, "--interval", "1",
			       "--keepalive-probes", "2",   "--workers", "1",	 NULL };

	HT_EQ(tc_start(&D, CTL, sizeof(CTL), false, NULL, args), 0,
	      "hbd in keepalive mode started in %s", E.srv_ns);
}

static void stop_hbd(void)
{
	HT_EQ(ht_stop(&D), 0, "exit code of hbd after SIGTERM");
	tc_cleanup(&D);
}

/* TcpExt TCPKeepAlive (keepalive probes sent) of a namespace: the counter is per netns. */
static long long probes_sent(const char *ns)
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

/* hbload in the client namespace, started (its pid; the summary's pipe in *fd). */
static pid_t spawn_hbload(const char *clients, const char *duration, const char *const *extra,
			  int *fd)
{
	char ns[96];
	const char *argv[40] = {
		"nsenter", ns,	      hbload_path,    "--server",	HN_SRV_ADDR, "--port",
		PORT_S,	   "--keys",  D.keys,	      "--first-device", FIRST,	     "--clients",
		clients,   "--proto", "tcp",	      "--interval",	"1",	     "--duration",
		duration,  "--json",  "--no-progress"
	};
	size_t n = 0;

	snprintf(ns, sizeof(ns), "--net=/run/netns/%s", E.cli_ns);
	while (argv[n])
		n++;
	for (; extra && *extra && n < 39; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	return hbt_spawn("/usr/bin/nsenter", argv, fd, NULL);
}

static int finish_hbload(pid_t pid, int fd)
{
	time_t deadline = time(NULL) + 60;
	int rc;

	out[0] = 0;
	hbt_drain(fd, out, sizeof(out), deadline);
	close(fd);
	rc = hbt_reap(pid, deadline);
	print_message("hbload -> exit %d\n%s", rc, out);
	return rc;
}

static long long num(const char *key)
{
	long long v = hbt_num(out, key);

	if (v == LLONG_MIN)
		fail_msg("no \"%s\" in hbload's summary: %s", key, out);
	return v;
}

/* `hbctl send` to device dev: its exit code (0: delivered), retried while it is offline. */
static int send_down(unsigned dev)
{
	char id[16], buf[1024];
	const char *argv[] = { hbctl_path, "send",	"--control",
			       CTL,	   "--timeout", "3000",
			       "--json",   id,		"to-a-keepalive-device",
			       NULL };
	int rc = -1;

	snprintf(id, sizeof(id), "%u", dev);
	for (int i = 0; i < 40; i++) {
		rc = hbt_run(hbctl_path, argv, 10, buf, sizeof(buf));
		if (rc != 3 || !strstr(buf, "\"offline\""))
			break;
		ht_sleep_ms(100);
	}
	return rc;
}

/* 40 devices, 9 s of heartbeating time at a 1 s interval (three detection bounds): no PING,
 * none expired or closed, the server's kernel probing them all along; one takes a downlink. */
static void devices_stay_without_pings(void **state)
{
	long long p0, p1, frames0;
	pid_t pid;
	int fd;

	(void)state;
	start_hbd();
	frames0 = hn_stat(&E, "user.frames_ping");
	p0 = probes_sent(E.srv_ns);
	pid = spawn_hbload("40", "9", NULL, &fd);
	HT_GT(pid, 0, "hbload spawned in %s", E.cli_ns);
	HT_EQ(send_down(100), 0, "exit code of hbctl send to device 100 in keepalive mode");
	HT_EQ(finish_hbload(pid, fd), 0, "exit code of hbload (summary above)");
	p1 = probes_sent(E.srv_ns);
	HT_EQ(num("connected"), 40, "hbload's connected");
	HT_EQ(num("keepalive_devices"), 40,
	      "hbload's keepalive_devices: every WELCOME had the flag");
	HT_EQ(num("pings"), 0, "PINGs hbload sent in keepalive mode");
	HT_EQ(num("expired"), 0, "hbload's expired after 9 s without a PING (bound 3 s)");
	HT_EQ(num("server_closed"), 0, "hbload's server_closed");
	HT_EQ(num("reconnects"), 0, "hbload's reconnects");
	HT_EQ(num("connected_end"), 40, "sessions open when heartbeating ended");
	HT_EQ(num("errors"), 0, "hbload's errors");
	HT_EQ(num("downs_received"), 1, "hbload's downs_received");
	HT_EQ(num("downs_acked"), 1, "hbload's downs_acked");
	HT_EQ(hn_stat(&E, "user.frames_ping"), frames0, "PINGs hbd received");
	HT_EQ(hn_stat(&E, "user.expired_tcp"), 0, "hbd's expired_tcp");
	/* idle 1 s, then a probe a second: each connection is probed about 8 times in 9 s; half
	 * of that leaves room for a loaded machine */
	HT_GE(p1 - p0, 40 * 4,
	      "keepalive probes the server sent (TcpExt TCPKeepAlive %lld -> %lld)", p0, p1);
	stop_hbd();
}

/* DATA and ECHO go on in keepalive mode; no PING goes with them. */
static void data_and_echo_without_pings(void **state)
{
	static const char *const extra[] = { "--data-every", "2", "--echo-every", "3", NULL };
	pid_t pid;
	int fd;

	(void)state;
	start_hbd();
	pid = spawn_hbload("10", "5", extra, &fd);
	HT_GT(pid, 0, "hbload spawned in %s", E.cli_ns);
	HT_EQ(finish_hbload(pid, fd), 0, "exit code of hbload (summary above)");
	HT_EQ(num("keepalive_devices"), 10, "hbload's keepalive_devices");
	HT_EQ(num("pings"), 0, "PINGs hbload sent in keepalive mode with DATA and ECHO");
	HT_GE(num("data_sent"), 10, "hbload's data_sent with --data-every 2 over 5 intervals");
	HT_EQ(num("data_acked"), num("data_sent"), "hbload's data_acked against data_sent");
	HT_GE(num("echo_sent"), 10, "hbload's echo_sent with --echo-every 3 over 5 intervals");
	HT_EQ(num("echo_ok"), num("echo_sent"), "hbload's echo_ok against echo_sent");
	HT_EQ(num("expired"), 0, "hbload's expired");
	HT_EQ(num("errors"), 0, "hbload's errors");
	stop_hbd();
}

/* --force-pings: the PINGs go on in a keepalive session, and hbd answers each. */
static void force_pings_keeps_them(void **state)
{
	static const char *const extra[] = { "--force-pings", NULL };
	long long frames0;
	pid_t pid;
	int fd;

	(void)state;
	start_hbd();
	frames0 = hn_stat(&E, "user.frames_ping");
	pid = spawn_hbload("10", "3", extra, &fd);
	HT_GT(pid, 0, "hbload spawned in %s", E.cli_ns);
	HT_EQ(finish_hbload(pid, fd), 0, "exit code of hbload (summary above)");
	HT_EQ(num("keepalive_devices"), 0, "hbload's keepalive_devices with --force-pings");
	HT_GE(num("pings"), 20, "hbload's pings with --force-pings: 10 devices, 3 intervals");
	HT_EQ(num("pongs"), num("pings"), "hbload's pongs against pings");
	HT_EQ(hn_stat(&E, "user.frames_ping") - frames0, num("pings"),
	      "PINGs hbd received against hbload's");
	stop_hbd();
}

static int setup(void **state)
{
	(void)state;
	if (hn_up(&E, 'L', 2) || hn_load(&E, PORT, "--tcp keepalive"))
		return -1;
	hn_aim(&E);
	return 0;
}

static int teardown(void **state)
{
	tc_reap(state);
	hn_down(&E);
	return 0;
}

static int each_teardown(void **state)
{
	hn_leave(&E);
	return tc_reap(state);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(devices_stay_without_pings, each_teardown),
		cmocka_unit_test_teardown(data_and_echo_without_pings, each_teardown),
		cmocka_unit_test_teardown(force_pings_keeps_them, each_teardown),
	};

	(void)argc;
	if (hbt_find("hbload", argv[0], hbload_path, sizeof(hbload_path)) ||
	    hbt_find("hbctl", argv[0], hbctl_path, sizeof(hbctl_path))) {
		fprintf(stderr, "test_hbload_keepalive: hbload and hbctl must be built\n");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("hbload keepalive", tests, setup, teardown);
}
