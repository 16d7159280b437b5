// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbload --proto mqtt against a real broker: Mosquitto 2.0, started by the test on 127.0.0.1
 * with a free port and a config it writes, ended by its pid. 1,000 devices connect, each
 * PINGREQ gets its PINGRESP, QoS 1 PUBLISHes their PUBACK; a broker that refuses anonymous
 * clients gets every CONNECT refused (CONNACK 5), counted as auth failures.
 */
#include <arpa/inet.h>
#include <errno.h>
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
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "lib/ht_assert.h"
#include "lib/run_prog.h"
#include "lib/sock.h"

#define MASTER "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define RUN_TIMEOUT_S 40

static char hbload_path[PATH_MAX];
static char mosq_path[PATH_MAX] = "/usr/sbin/mosquitto";
static char keys_path[] = "/tmp/test_mqtt_hbload_keys.XXXXXX";

struct broker {
	pid_t pid;
	int out_fd; /* mosquitto's stdout (it logs to stderr) */
	uint16_t port;
	char conf[64];
	char port_s[8];
	char out[16384];
	int status;
};

/* Mosquitto on a free loopback port; anonymous: whether it accepts clients without a
 * password file (it then ignores the password they send).
 */
/* The broker a test started, until broker_stop(): a failed check leaves the test function at
 * once, and the teardown then ends the broker, so none outlives the test. */
static struct broker *live_broker;

static struct broker *broker_start(int anonymous)
{
	struct broker *b = calloc(1, sizeof(*b));
	const char *argv[] = { mosq_path, "-c", b->conf, NULL };
	FILE *f;
	int fd;

	HT_TRUE(b != NULL, "memory for the broker");
	strcpy(b->conf, "/tmp/test_mqtt_hbload_conf.XXXXXX");
	fd = mkstemp(b->conf);
	HT_GE(fd, 0, "a config file for mosquitto");
	f = fdopen(fd, "w");
	b->port = ht_free_port();
	fprintf(f,
		"listener %u 127.0.0.1\nallow_anonymous %s\npersistence false\n"
		"log_dest stderr\nlog_type error\nmax_keepalive 65535\n",
		b->port, anonymous ? "true" : "false");
	fclose(f);
	snprintf(b->port_s, sizeof(b->port_s), "%u", b->port);
	b->pid = hbt_spawn(mosq_path, argv, &b->out_fd, NULL);
	HT_GT(b->pid, 0, "mosquitto started");
	live_broker = b;
	HT_EQ(ht_wait_listening(b->port, 5000), 0, "mosquitto listening on port %u", b->port);
	return b;
}

static void broker_stop(struct broker *b)
{
	live_broker = NULL;
	kill(b->pid, SIGTERM);
	HT_EQ(hbt_reap(b->pid, time(NULL) + 10), 0, "mosquitto's exit code after SIGTERM");
	close(b->out_fd);
	unlink(b->conf);
	free(b);
}

static int broker_reap(void **state)
{
	struct broker *b = live_broker;

	(void)state;
	if (!b)
		return 0;
	live_broker = NULL;
	kill(b->pid, SIGKILL);
	waitpid(b->pid, NULL, 0);
	close(b->out_fd);
	unlink(b->conf);
	free(b);
	return 0;
}

static void run(struct broker *b, ...)
{
	const char *argv[64] = { hbload_path, "--proto",       "mqtt",	  "--server",
				 "127.0.0.1", "--port",	       b->port_s, "--keys",
				 keys_path,   "--no-progress", "--json" };
	int argc = 11;
	va_list ap;

	va_start(ap, b);
	for (const char *a; (a = va_arg(ap, const char *)) && argc < 62;)
		argv[argc++] = a;
	va_end(ap);
	argv[argc] = NULL;
	b->status = hbt_run(hbload_path, argv, RUN_TIMEOUT_S, b->out, sizeof(b->out));
	print_message("hbload --proto mqtt -> exit %d\n%s", b->status, b->out);
}

static long long jnum(const struct broker *b, const char *key)
{
	long long v = hbt_num(b->out, key);

	if (v == LLONG_MIN)
		fail_msg("no \"%s\" in hbload's output", key);
	return v;
}

static void test_thousand_devices(void **state)
{
	struct broker *b = broker_start(1);

	/* keepalive 1 s: 3 s of heartbeating are about 3 PINGREQs per device */
	run(b, "--clients", "1000", "--interval", "1", "--duration", "3", "--data-every", "2",
	    "--connect-rate", "2000", NULL);
	HT_EQ(b->status, 0, "hbload's exit code (summary above)");
	HT_TRUE(strstr(b->out, "\"proto\":\"mqtt\"") != NULL, "the summary names MQTT");
	HT_EQ(jnum(b, "connected"), 1000, "devices connected (summary above)");
	HT_EQ(jnum(b, "connected_end"), 1000, "devices connected at the end (summary above)");
	HT_GE(jnum(b, "pings"), 2000, "PINGREQs sent (summary above)");
	HT_EQ(jnum(b, "pongs"), jnum(b, "pings"), "every PINGREQ answered (summary above)");
	HT_EQ(jnum(b, "lost"), 0, "lost (summary above)");
	HT_EQ(jnum(b, "lost_closed"), 0, "lost_closed (summary above)");
	HT_GT(jnum(b, "data_sent"), 0, "PUBLISHes sent (summary above)");
	HT_EQ(jnum(b, "data_acked"), jnum(b, "data_sent"), "every PUBLISH acknowledged");
	HT_EQ(jnum(b, "errors"), 0, "errors (summary above)");
	HT_EQ(jnum(b, "stray"), 0, "stray (summary above)");
	HT_EQ(jnum(b, "auth_failed"), 0, "auth_failed (summary above)");
	HT_EQ(jnum(b, "server_closed"), 0, "server_closed (summary above)");
	HT_GT(jnum(b, "count"), 0, "RTTs measured (summary above)");
	HT_GT(jnum(b, "p99"), 0, "RTT p99 (summary above)");
	HT_LE(jnum(b, "p50"), jnum(b, "p99"), "RTT p50 against p99");
	broker_stop(b);
}

static void test_refused(void **state)
{
	struct broker *b = broker_start(0);

	run(b, "--clients", "20", "--interval", "1", "--duration", "1", NULL);
	HT_EQ(b->status, 2, "hbload's exit code when every device is refused (summary above)");
	HT_EQ(jnum(b, "auth_failed"), 20, "CONNACK refusals counted (summary above)");
	HT_EQ(jnum(b, "connected"), 0, "nobody connected (summary above)");
	broker_stop(b);
}

static void test_bad_args(void **state)
{
	const char *argv[] = { hbload_path, "--proto",	    "mqtt", "--server",
			       "127.0.0.1", "--port",	    "1",    "--clients",
			       "1",	    "--interval",   "1",    "--duration",
			       "1",	    "--echo-every", "2",    NULL };
	char out[1024];

	HT_EQ(hbt_run(hbload_path, argv, 10, out, sizeof(out)), 1,
	      "--echo-every refused with --proto mqtt");
}

int main(int argc, char **argv)
{
	int fd, rc;

	if (hbt_find("hbload", argv[0], hbload_path, sizeof(hbload_path))) {
		fprintf(stderr, "test_mqtt_hbload: no hbload binary\n");
		return 1;
	}
	if (access(mosq_path, X_OK)) {
		fprintf(stderr, "test_mqtt_hbload: %s missing (scripts/deps.sh installs it)\n",
			mosq_path);
		return 1;
	}
	fd = mkstemp(keys_path);
	if (fd < 0 || dprintf(fd, "1-1000000 derive %s\n", MASTER) < 0)
		return 1;
	close(fd);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_thousand_devices, broker_reap),
		cmocka_unit_test_teardown(test_refused, broker_reap),
		cmocka_unit_test(test_bad_args),
	};
	rc = cmocka_run_group_tests_name("mqtt_hbload", tests, NULL, NULL);
	unlink(keys_path);
	return rc;
}
