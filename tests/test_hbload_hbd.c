// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbload against the real daemon: $BUILD/hbd --no-offload on loopback (no BPF involved), a few
 * hundred TCP and UDP clients with DATA, ECHO and silent devices; hbload's JSON summary is
 * checked on its own and against the counters hbd prints when it exits. Downlinks sent with
 * the real hbctl through hbd's control socket reach hbload's devices and are ACKed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "lib/ht_assert.h"
#include "lib/run_prog.h"

#define MASTER "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define CLIENTS 300
#define SILENT 5

static char hbload_path[PATH_MAX], hbd_path[PATH_MAX], hbctl_path[PATH_MAX];

struct fx {
	char dir[64], keys[96], sink[96], log[96], port[12], ctl[96];
	pid_t hbd;
	int hbd_out;
	char out[16384], hbd_json[8192];
};

/* A port free for both TCP and UDP right now (hbd takes one --port for both). */
static int free_port(void)
{
	for (int tries = 0; tries < 50; tries++) {
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(a);
		int t = socket(AF_INET, SOCK_STREAM, 0), u = socket(AF_INET, SOCK_DGRAM, 0), ok;

		ok = !bind(t, (struct sockaddr *)&a, len) &&
		     !getsockname(t, (struct sockaddr *)&a, &len) &&
		     !bind(u, (struct sockaddr *)&a, len);
		close(t);
		close(u);
		if (ok)
			return ntohs(a.sin_port);
	}
	return -1;
}

static int listening(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), rc;

	rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
	close(fd);
	return rc == 0;
}

/* Starts hbd on fx->port with its pins (and control socket) under pins, waits until it
 * listens; the test fails if it does not.
 */
static void spawn_hbd(struct fx *fx, const char *pins)
{
	int port = atoi(fx->port);

	snprintf(fx->ctl, sizeof(fx->ctl), "%s/hbd.sock", pins);
	/* interval 0.2 s, expiry after 3 intervals (0.6 s): the silent devices expire well
	 * within the run, the others never, even on a loaded machine
	 */
	const char *argv[] = {
		hbd_path, "--no-offload", "--port", fx->port, "--keys", fx->keys, "--interval",
		"0.2", "--expiry-mult", "3", "--sink", fx->sink, "--max-clients", "2000",
		"--workers", "2", "--control", fx->ctl,
		/* never the default pins of a really loaded hbeat (a running demo) */
		"--pin-path", pins, NULL
	};
	fx->hbd = hbt_spawn(hbd_path, argv, &fx->hbd_out, fx->log);
	HT_GT(fx->hbd, 0, "hbd spawned (its log: %s)", fx->log);
	for (int i = 0; i < 100 && !listening(port); i++)
		nanosleep(&(struct timespec){ .tv_nsec = 50000000 }, NULL);
	if (!listening(port)) {
		kill(fx->hbd, SIGKILL);
		fail_msg("hbd did not start listening on %d (see %s)", port, fx->log);
	}
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	FILE *f;
	int port = free_port();

	HT_GT(port, 0, "a port free for both TCP and UDP");
	snprintf(fx->port, sizeof(fx->port), "%d", port);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_hbload_hbd.XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->keys, sizeof(fx->keys), "%s/keys", fx->dir);
	snprintf(fx->sink, sizeof(fx->sink), "%s/sink.jsonl", fx->dir);
	snprintf(fx->log, sizeof(fx->log), "%s/hbd.log", fx->dir);
	f = fopen(fx->keys, "w");
	assert_non_null(f);
	fprintf(f, "1-100000 derive %s\n", MASTER);
	fclose(f);
	*state = fx;
	spawn_hbd(fx, fx->dir);
	return 0;
}

/* Stops hbd (SIGTERM drains; bounded) and collects its counter line. */
static int stop_hbd(struct fx *fx)
{
	time_t deadline = time(NULL) + 15;
	int rc;

	if (fx->hbd <= 0)
		return -1;
	kill(fx->hbd, SIGTERM);
	hbt_drain(fx->hbd_out, fx->hbd_json, sizeof(fx->hbd_json), deadline);
	close(fx->hbd_out);
	rc = hbt_reap(fx->hbd, deadline);
	fx->hbd = 0;
	return rc;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	char cmd[160];

	stop_hbd(fx);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", fx->dir);
	free(fx);
	return 0;
}

static long long num(const char *json, const char *key)
{
	long long v = hbt_num(json, key);

	if (v == LLONG_MIN)
		fail_msg("no \"%s\" in: %s", key, json);
	return v;
}

static void load(struct fx *fx, const char *proto)
{
	const char *argv[] = {
		hbload_path, "--server",      "127.0.0.1", "--port",	 fx->port,
		"--keys",    fx->keys,	      "--clients", "300",	 "--proto",
		proto,	     "--interval",    "0.2",	   "--duration", "2",
		"--json",    "--no-progress", "--silent",  "5",		 "--data-every",
		"3",	     "--echo-every",  "4",	   NULL
	};
	int rc = hbt_run(hbload_path, argv, 60, fx->out, sizeof(fx->out));

	print_message("hbload %s -> exit %d\n%s", proto, rc, fx->out);
	HT_EQ(rc, 0, "exit code of hbload --proto %s (summary above)", proto);
	HT_EQ(num(fx->out, "connected"), CLIENTS, "hbload's connected over %s (summary above)",
	      proto);
	HT_GE(num(fx->out, "pings"), (CLIENTS - SILENT) * 5,
	      "hbload's pings over %s: the talking devices, 5 a second (summary above)", proto);
	HT_EQ(num(fx->out, "pongs"), num(fx->out, "pings"), "hbload's pongs against pings over %s",
	      proto);
	HT_EQ(num(fx->out, "lost"), 0, "hbload's lost over %s", proto);
	HT_GT(num(fx->out, "data_sent"), 0,
	      "hbload's data_sent with --data-every 3 (summary above)");
	HT_EQ(num(fx->out, "data_acked"), num(fx->out, "data_sent"),
	      "hbload's data_acked against data_sent over %s", proto);
	HT_GT(num(fx->out, "echo_sent"), 0,
	      "hbload's echo_sent with --echo-every 4 (summary above)");
	HT_EQ(num(fx->out, "echo_ok"), num(fx->out, "echo_sent"),
	      "hbload's echo_ok against echo_sent over %s", proto);
	HT_EQ(num(fx->out, "expired"), SILENT, "hbload's expired over %s: the silent devices",
	      proto);
	HT_EQ(num(fx->out, "connected_end"), CLIENTS - SILENT, "hbload's connected_end over %s",
	      proto);
	HT_EQ(num(fx->out, "errors"), 0, "hbload's errors over %s", proto);
	HT_EQ(num(fx->out, "stray"), 0, "hbload's stray over %s", proto);
	HT_EQ(num(fx->out, "reconnects"), 0, "hbload's reconnects over %s", proto);
}

static void test_tcp_then_udp(void **state)
{
	struct fx *fx = *state;
	long long pings = 0, data = 0;
	char line[512];
	FILE *sink;
	int lines = 0;

	load(fx, "tcp");
	pings += num(fx->out, "pings");
	data += num(fx->out, "data_sent");
	load(fx, "udp");
	pings += num(fx->out, "pings");
	data += num(fx->out, "data_sent");

	/* hbd saw the same: every heartbeat answered in userspace, every DATA acked and sunk */
	HT_EQ(stop_hbd(fx), 0, "exit code of hbd after SIGTERM (log: %s)", fx->log);
	print_message("hbd: %s\n", fx->hbd_json);
	HT_EQ(num(fx->hbd_json, "pings_user"), pings,
	      "hbd's pings_user against both runs' pings (hbd's line above)");
	HT_EQ(num(fx->hbd_json, "data_acked"), data,
	      "hbd's data_acked against both runs' data_sent");
	HT_EQ(num(fx->hbd_json, "expired_tcp"), SILENT,
	      "hbd's expired_tcp: the silent TCP devices");
	HT_EQ(num(fx->hbd_json, "expired_udp"), SILENT,
	      "hbd's expired_udp: the silent UDP devices");
	HT_EQ(num(fx->hbd_json, "auth_ok"), 2 * CLIENTS,
	      "hbd's auth_ok: every device of both runs");
	HT_EQ(num(fx->hbd_json, "auth_fail"), 0, "hbd's auth_fail");
	sink = fopen(fx->sink, "r");
	assert_non_null(sink);
	while (fgets(line, sizeof(line), sink))
		lines++;
	fclose(sink);
	HT_EQ(lines, data, "lines in the sink %s against the DATA sent", fx->sink);
}

#define DOWN_CLIENTS 8

/* `hbctl send` to device dev through hbd's control socket: its exit code (0: the device ACKed
 * the message), retried while the device is not yet online (status "offline"). */
static int send_down(struct fx *fx, unsigned dev)
{
	char id[16], out[1024];
	const char *argv[] = { hbctl_path, "send", "--control",	       fx->ctl, "--timeout", "3000",
			       "--json",   id,	   "downlink-payload", NULL };
	int rc = -1;

	snprintf(id, sizeof(id), "%u", dev);
	for (int i = 0; i < 40; i++) {
		rc = hbt_run(hbctl_path, argv, 10, out, sizeof(out));
		if (rc != 3 || !strstr(out, "\"offline\""))
			break;
		nanosleep(&(struct timespec){ .tv_nsec = 100000000 }, NULL);
	}
	return rc;
}

/* hbload's devices take downlinks: every `hbctl send` to one of them is delivered (hbd got
 * the ACK), over TCP and over UDP, and hbload counts each DOWN it received and ACKed. */
static void test_downlinks_are_acked(void **state)
{
	struct fx *fx = *state;
	static const char *const protos[] = { "tcp", "udp" };

	for (int p = 0; p < 2; p++) {
		char n[12];
		const char *argv[] = { hbload_path,
				       "--server",
				       "127.0.0.1",
				       "--port",
				       fx->port,
				       "--keys",
				       fx->keys,
				       "--clients",
				       n,
				       "--proto",
				       protos[p],
				       "--interval",
				       "0.2",
				       "--duration",
				       "6",
				       "--json",
				       "--no-progress",
				       "--first-device",
				       p ? "101" : "1",
				       NULL };
		time_t deadline = time(NULL) + 60;
		pid_t pid;
		int out, rc;

		snprintf(n, sizeof(n), "%d", DOWN_CLIENTS);
		pid = hbt_spawn(hbload_path, argv, &out, NULL);
		HT_GT(pid, 0, "hbload --proto %s spawned", protos[p]);
		for (unsigned d = 0; d < DOWN_CLIENTS; d++)
			HT_EQ(send_down(fx, (p ? 101 : 1) + d), 0,
			      "exit code of hbctl send to hbload's %s device %u (0: delivered)",
			      protos[p], (p ? 101 : 1) + d);
		hbt_drain(out, fx->out, sizeof(fx->out), deadline);
		close(out);
		rc = hbt_reap(pid, deadline);
		print_message("hbload %s -> exit %d\n%s", protos[p], rc, fx->out);
		HT_EQ(rc, 0, "exit code of hbload --proto %s (summary above)", protos[p]);
		HT_EQ(num(fx->out, "downs_received"), DOWN_CLIENTS,
		      "hbload's downs_received over %s: one a device", protos[p]);
		HT_EQ(num(fx->out, "downs_acked"), DOWN_CLIENTS, "hbload's downs_acked over %s",
		      protos[p]);
		HT_EQ(num(fx->out, "downs_dropped"), 0, "hbload's downs_dropped over %s",
		      protos[p]);
		HT_EQ(num(fx->out, "keepalive_devices"), 0,
		      "hbload's keepalive_devices against hbd --no-offload");
		HT_EQ(num(fx->out, "errors"), 0, "hbload's errors over %s", protos[p]);
		HT_EQ(num(fx->out, "pongs"), num(fx->out, "pings"),
		      "hbload's pongs against pings over %s", protos[p]);
	}
}

#define REHOME_CLIENTS 200

/* A UDP server that dies loses its sessions, and a new one on the same port (same keys, fresh
 * state) does not answer their tokens: hbload's UDP devices notice the silence and send new
 * HELLOs, every one of them, well within the run. hbd is killed 2 s into an 8 s run; a device
 * gives up after 3 unanswered PINGs (0.6 s), waits its backoff (at most 0.5 s) and is back, so
 * the 5 s left are a generous bound. PINGs lost in the gap all belong to the dead sessions.
 */
static void test_udp_rehomes_after_restart(void **state)
{
	struct fx *fx = *state;
	char n[12], pins2[96];
	const char *argv[] = {
		hbload_path, "--server",   "127.0.0.1", "--port",  fx->port,	    "--keys",
		fx->keys,    "--clients",  n,		"--proto", "udp",	    "--interval",
		"0.2",	     "--duration", "8",		"--json",  "--no-progress", NULL
	};
	time_t deadline;
	pid_t pid;
	int out, rc;

	snprintf(n, sizeof(n), "%d", REHOME_CLIENTS);
	snprintf(pins2, sizeof(pins2), "%s/second", fx->dir);
	HT_EQ(mkdir(pins2, 0700), 0, "second hbd's directory %s", pins2);
	pid = hbt_spawn(hbload_path, argv, &out, NULL);
	HT_GT(pid, 0, "hbload spawned");
	deadline = time(NULL) + 60;
	sleep(2);
	kill(fx->hbd, SIGKILL);
	hbt_reap(fx->hbd, time(NULL) + 10);
	close(fx->hbd_out);
	fx->hbd = 0;
	spawn_hbd(fx, pins2);
	hbt_drain(out, fx->out, sizeof(fx->out), deadline);
	close(out);
	rc = hbt_reap(pid, deadline);
	print_message("hbload udp across an hbd restart -> exit %d\n%s", rc, fx->out);
	HT_EQ(rc, 0, "exit code of hbload (summary above)");
	HT_EQ(num(fx->out, "connected"), REHOME_CLIENTS, "hbload's connected");
	HT_EQ(num(fx->out, "rehellos"), REHOME_CLIENTS,
	      "hbload's rehellos: every device once, after the first hbd died");
	HT_EQ(num(fx->out, "reconnects"), REHOME_CLIENTS,
	      "hbload's reconnects: every re-HELLO got a session from the second hbd");
	HT_EQ(num(fx->out, "connected_end"), REHOME_CLIENTS, "hbload's connected_end");
	HT_EQ(num(fx->out, "auth_failed"), 0, "hbload's auth_failed");
	HT_EQ(num(fx->out, "errors"), 0, "hbload's errors");
	/* the dead sessions' PINGs do not hold the drain until hbd expires everyone */
	HT_EQ(num(fx->out, "expired"), 0, "hbload's expired");
	HT_GE(num(fx->out, "lost"), 3 * REHOME_CLIENTS,
	      "hbload's lost: at least the 3 unanswered PINGs of each device");
	HT_EQ(num(fx->out, "lost"), num(fx->out, "lost_closed"),
	      "every lost PING was on a dead session, none after the rehoming");
	HT_EQ(stop_hbd(fx), 0, "exit code of the second hbd after SIGTERM (log: %s)", fx->log);
	print_message("second hbd: %s\n", fx->hbd_json);
	HT_EQ(num(fx->hbd_json, "auth_ok"), REHOME_CLIENTS,
	      "the second hbd's auth_ok: every device came to it");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_tcp_then_udp, setup, teardown),
		cmocka_unit_test_setup_teardown(test_downlinks_are_acked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_udp_rehomes_after_restart, setup, teardown),
	};

	(void)argc;
	if (hbt_find("hbload", argv[0], hbload_path, sizeof(hbload_path)) ||
	    hbt_find("hbctl", argv[0], hbctl_path, sizeof(hbctl_path)) ||
	    hbt_find("hbd", argv[0], hbd_path, sizeof(hbd_path))) {
		fprintf(stderr, "test_hbload_hbd: hbload and hbd must be built ($BUILD or %s)\n",
			hbload_path);
		return 1;
	}
	return cmocka_run_group_tests_name("hbload against hbd", tests, NULL, NULL);
}
