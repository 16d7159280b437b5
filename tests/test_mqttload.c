// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* tools/mqttload against a real broker: Mosquitto 2.0 started by the test on a free loopback
 * port with a config it writes, ended by its pid. Every client gets its CONNACK and every
 * PINGREQ of the window its PINGRESP; the events a sampler reads come in order; no broker
 * means exit status 2, a bad command line exit status 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "lib/ht_assert.h"
#include "lib/run_prog.h"
#include "lib/sock.h"

#define RUN_TIMEOUT_S 30

static char tool[PATH_MAX];
static const char mosq[] = "/usr/sbin/mosquitto";

struct broker {
	pid_t pid;
	uint16_t port;
	char conf[64];
};

static void broker_start(struct broker *b)
{
	const char *argv[] = { mosq, "-c", b->conf, NULL };
	int fd, out;
	FILE *f;

	strcpy(b->conf, "/tmp/test_mqttload_conf.XXXXXX");
	fd = mkstemp(b->conf);
	HT_GE(fd, 0, "a config file for mosquitto");
	f = fdopen(fd, "w");
	HT_TRUE(f != NULL, "the config file opens");
	b->port = ht_free_port();
	fprintf(f,
		"listener %u 127.0.0.1\nallow_anonymous true\npersistence false\n"
		"log_dest stderr\nlog_type error\n",
		b->port);
	fclose(f);
	chmod(b->conf, 0644); /* read again by mosquitto after it drops to its own user */
	b->pid = hbt_spawn(mosq, argv, &out, "/dev/null");
	HT_GT(b->pid, 0, "mosquitto starts");
	close(out);
	HT_EQ(ht_wait_listening(b->port, 5000), 0, "mosquitto listens on 127.0.0.1:%u", b->port);
}

static void broker_stop(struct broker *b)
{
	if (b->pid > 0) {
		kill(b->pid, SIGTERM);
		hbt_reap(b->pid, time(NULL) + 10);
		b->pid = 0;
	}
	if (b->conf[0])
		unlink(b->conf);
	b->conf[0] = '\0';
}

/* The broker is the fixture's, so that a failed check (which leaves the test at once) still
 * ends it.
 */
static struct broker the_broker;

static int broker_teardown(void **state)
{
	broker_stop(&the_broker);
	return 0;
}

static void test_pings_answered(void **state)
{
	struct broker *b = &the_broker;
	char port[8], events[] = "/tmp/test_mqttload_ev.XXXXXX", out[4096], ev[4096] = "";
	int fd = mkstemp(events);
	const char *argv[] = { tool,	    "--server", "127.0.0.1",  "--port",	  port,
			       "--clients", "50",	"--interval", "0.2",	  "--duration",
			       "2",	    "--warmup", "0.4",	      "--steady", "1",
			       "--events",  events,	"--json",     NULL };
	long long pings;

	HT_GE(fd, 0, "an events file");
	broker_start(b);
	snprintf(port, sizeof(port), "%u", b->port);
	HT_EQ(hbt_run(tool, argv, RUN_TIMEOUT_S, out, sizeof(out)), 0, "mqttload runs: %s", out);
	broker_stop(b);
	HT_EQ(hbt_num(out, "connected"), 50, "every client got its CONNACK: %s", out);
	HT_EQ(hbt_num(out, "connected_end"), 50, "and was connected at the end: %s", out);
	pings = hbt_num(out, "pings");
	/* 50 clients, one PINGREQ each 0.2 s, over a 1 s window */
	HT_GE(pings, 240, "the window's PINGREQs were sent: %s", out);
	HT_LE(pings, 260, "no more than the schedule has: %s", out);
	HT_EQ(hbt_num(out, "pongs"), pings, "each got its PINGRESP: %s", out);
	HT_EQ(hbt_num(out, "lost"), 0, "none lost: %s", out);
	HT_EQ(hbt_num(out, "errors"), 0, "no errors: %s", out);
	HT_GT(read(fd, ev, sizeof(ev) - 1), 0, "events were written");
	close(fd);
	unlink(events);
	HT_TRUE(strstr(ev, "setup_done") && strstr(ev, "window_start steady 250") &&
			strstr(ev, "window_end steady") && strstr(ev, "run_end"),
		"the sampler's events: %s", ev);
	HT_TRUE(strstr(ev, "setup_done") < strstr(ev, "window_start") &&
			strstr(ev, "window_start") < strstr(ev, "window_end") &&
			strstr(ev, "window_end") < strstr(ev, "run_end"),
		"in order: %s", ev);
}

static void test_no_broker(void **state)
{
	char port[8], out[1024];
	const char *argv[] = { tool, "--server",	"127.0.0.1", "--port", port, "--clients",
			       "5",  "--setup-timeout", "2",	     "--json", NULL };

	snprintf(port, sizeof(port), "%u", ht_free_port());
	HT_EQ(hbt_run(tool, argv, RUN_TIMEOUT_S, out, sizeof(out)), 2,
	      "nothing listens: exit status 2");
}

static void test_bad_args(void **state)
{
	char out[1024];
	const char *name[] = { tool, "--server", "localhost", NULL };
	const char *src[] = { tool, "--server", "127.0.0.1", "--source", "10.0.0.1-x", NULL };
	const char *zero[] = { tool, "--server", "127.0.0.1", "--clients", "0", NULL };

	HT_EQ(hbt_run(tool, name, RUN_TIMEOUT_S, out, sizeof(out)), 1, "a host name is refused");
	HT_EQ(hbt_run(tool, src, RUN_TIMEOUT_S, out, sizeof(out)), 1, "a bad source range too");
	HT_EQ(hbt_run(tool, zero, RUN_TIMEOUT_S, out, sizeof(out)), 1, "and 0 clients");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_pings_answered, broker_teardown),
		cmocka_unit_test(test_no_broker),
		cmocka_unit_test(test_bad_args),
	};

	if (hbt_find("tools/mqttload", argv[0], tool, sizeof(tool))) {
		fprintf(stderr, "test_mqttload: tools/mqttload not built (make)\n");
		return 1;
	}
	if (access(mosq, X_OK)) {
		fprintf(stderr, "test_mqttload: %s missing (scripts/deps.sh installs it)\n", mosq);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
