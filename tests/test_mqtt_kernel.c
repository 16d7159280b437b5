// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* MQTT through the kernel path: two network namespaces on a veth pair, `hbctl load --mqtt-port`
 * on the server's veth, hbd --mqtt-port, and real clients in the client namespace:
 *   - 1,000 `hbload --proto mqtt` devices: every PINGREQ answered, all of them in the kernel;
 *   - raw sockets: PINGREQs coalesced in one segment, one split over two, PINGREQs around a
 *     PUBLISH in one segment, split mid-PUBLISH and inside its remaining length (the
 *     strparser offset trap);
 *   - Python paho-mqtt and mosquitto_sub: connect, publish, subscribe, a downlink, several
 *     keepalives with every PINGRESP from the kernel (mqtt_pings_user stays 0);
 *   - a silent device is expired after 1.5 keepalives.
 * The group teardown unloads and removes the namespaces, also after a failed assertion.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "lib/ht_assert.h"
#include "lib/run_prog.h"
#include "lib/sh.h"

#define CLIENTS 1000
#define PORT 7631
#define MQTT_PORT 7632
#define REALM "hbmq-kernel"

#define STR_(x) #x
#define STR(x) STR_(x)

static struct {
	const char *build;
	char name[16], srv_ns[32], cli_ns[32], srv_if[24];
	char dir[64], pin[64];
	pid_t hbd;
	int loaded;
} E;

static long long sh_num(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static long long sh_num(const char *fmt, ...)
{
	char cmd[2048], line[128] = "";
	va_list ap;
	FILE *p;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	if (!fgets(line, sizeof(line), p))
		line[0] = 0;
	pclose(p);
	if (!line[0] || line[0] == '\n' || !strcmp(line, "null\n"))
		return -1;
	return atoll(line);
}

/* A field of hbctl stats --json, now. */
static long long stat_now(const char *field)
{
	return sh_num("nsenter --net=/run/netns/%s %s/hbctl stats --json --pin-path %s | jq -r .%s",
		      E.srv_ns, E.build, E.pin, field);
}

/* The MQTT password of a device, for the realm hbd serves. */
static void password(unsigned long long id, char *out, size_t cap)
{
	char cmd[512];
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s/hbctl devices mqtt-password %llu --keys %s/keys --realm %s",
		 E.build, id, E.dir, REALM);
	p = popen(cmd, "r");
	HT_TRUE(p != NULL, "running %s", cmd);
	HT_TRUE(fgets(out, (int)cap, p) != NULL, "a password from %s", cmd);
	pclose(p);
	out[strcspn(out, "\n")] = 0;
}

/* SIGTERM, then hbt_reap()'s bounded wait (SIGKILL after 10 s). */
static void stop_hbd(void)
{
	if (E.hbd <= 0)
		return;
	kill(E.hbd, SIGTERM);
	hbt_reap(E.hbd, time(NULL) + 10);
	E.hbd = 0;
}

static int teardown(void **state)
{
	stop_hbd();
	if (E.loaded)
		hbt_sh("nsenter --net=/run/netns/%s %s/hbctl unload --dev %s --pin-path %s >/dev/null",
		       E.srv_ns, E.build, E.srv_if, E.pin);
	hbt_sh("BUILD=%s scripts/netns.sh down %s", E.build, E.name);
	hbt_sh("rm -rf %s %s", E.pin, E.dir);
	return 0;
}

static int setup(void **state)
{
	pid_t me = getpid();

	E.build = getenv("BUILD") ? getenv("BUILD") : "build";
	snprintf(E.name, sizeof(E.name), "hbmq%d", me % 100000);
	snprintf(E.srv_ns, sizeof(E.srv_ns), "%s-srv", E.name);
	snprintf(E.cli_ns, sizeof(E.cli_ns), "%s-cli", E.name);
	snprintf(E.srv_if, sizeof(E.srv_if), "%s-s", E.name);
	snprintf(E.dir, sizeof(E.dir), "/tmp/hbmq-kernel-%d", me);
	snprintf(E.pin, sizeof(E.pin), "/sys/fs/bpf/hbmq-%d", me);

	if (hbt_sh("BUILD=%s scripts/netns.sh up %s 4 >&2", E.build, E.name) || mkdir(E.dir, 0700))
		goto fail;
	if (hbt_sh("printf '1-100000 derive %%s\\n' $(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n')"
		   " > %s/keys",
		   E.dir))
		goto fail;
	if (hbt_sh("nsenter --net=/run/netns/%s %s/hbctl load --dev %s --mode native --port %d "
		   "--mqtt-port %d --tcp kernel --pin-path %s >&2",
		   E.srv_ns, E.build, E.srv_if, PORT, MQTT_PORT, E.pin))
		goto fail;
	E.loaded = 1;
	E.hbd = fork();
	if (E.hbd < 0)
		goto fail;
	if (E.hbd == 0) {
		char ns[64], keys[96], sink[96], log[96], hbd[128], ctl[96];
		int fd;

		snprintf(ns, sizeof(ns), "/run/netns/%s", E.srv_ns);
		fd = open(ns, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET))
			_exit(127);
		snprintf(keys, sizeof(keys), "%s/keys", E.dir);
		snprintf(sink, sizeof(sink), "%s/sink.jsonl", E.dir);
		snprintf(log, sizeof(log), "%s/hbd.log", E.dir);
		snprintf(hbd, sizeof(hbd), "%s/hbd", E.build);
		snprintf(ctl, sizeof(ctl), "%s/ctl.sock", E.dir);
		fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0)
			dup2(fd, STDERR_FILENO);
		execl(hbd, "hbd", "--port", STR(PORT), "--mqtt-port", STR(MQTT_PORT),
		      "--mqtt-realm", REALM, "--keys", keys, "--sink", sink, "--interval", "1",
		      "--pin-path", E.pin, "--max-clients", "4096", "--control", ctl, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 100; i++) {
		if (hbt_sh("nsenter --net=/run/netns/%s ss -Hltn 'sport = :%d' | grep -q .",
			   E.srv_ns, MQTT_PORT) == 0)
			return 0;
		if (waitpid(E.hbd, NULL, WNOHANG) == E.hbd) {
			E.hbd = 0;
			hbt_sh("cat %s/hbd.log >&2", E.dir);
			goto fail;
		}
		usleep(100 * 1000);
	}
fail:
	fprintf(stderr, "mqtt kernel setup failed (errno %d: %s)\n", errno, strerror(errno));
	teardown(state);
	return -1;
}

static void test_hbload_kernel(void **state)
{
	long long k0 = stat_now("mqtt_pings_kernel"), u0 = stat_now("mqtt_pings_user"), pings;

	HT_GE(k0, 0, "mqtt_pings_kernel in hbctl stats --json");
	HT_EQ(hbt_sh("timeout --kill-after=5 40 nsenter --net=/run/netns/%s %s/hbload --proto mqtt "
		     "--server 10.77.0.1 --port %d --mqtt-realm %s --keys %s/keys --clients %d "
		     "--interval 2 --duration 8 --data-every 2 --json --no-progress > "
		     "%s/hbload.json 2>%s/hbload.err; r=$?; cat %s/hbload.json >&2; exit $r",
		     E.cli_ns, E.build, MQTT_PORT, REALM, E.dir, CLIENTS, E.dir, E.dir, E.dir),
	      0, "hbload --proto mqtt with %d devices (summary in %s/hbload.json)", CLIENTS, E.dir);
	HT_EQ(sh_num("jq -r .connected %s/hbload.json", E.dir), CLIENTS, "devices connected");
	pings = sh_num("jq -r .pings %s/hbload.json", E.dir);
	HT_GE(pings, 3 * CLIENTS, "PINGREQs sent");
	HT_EQ(sh_num("jq -r .pongs %s/hbload.json", E.dir), pings, "every PINGREQ answered");
	HT_EQ(sh_num("jq -r .lost %s/hbload.json", E.dir), 0, "none lost");
	HT_EQ(sh_num("jq -r .errors %s/hbload.json", E.dir), 0, "no errors");
	HT_EQ(sh_num("jq -r .data_acked %s/hbload.json", E.dir),
	      sh_num("jq -r .data_sent %s/hbload.json", E.dir), "every PUBLISH acknowledged");
	HT_EQ(stat_now("mqtt_pings_kernel") - k0, pings, "PINGREQs the kernel answered");
	HT_EQ(stat_now("mqtt_pings_user") - u0, 0, "PINGREQs hbd answered");
}

static void test_segments(void **state)
{
	static const char *const modes[] = { "coalesced", "split", "mixed" };
	static const int answered[] = { 3, 1, 6 };
	char pw[128];

	password(7, pw, sizeof(pw));
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		long long k0 = stat_now("mqtt_pings_kernel"), u0 = stat_now("mqtt_pings_user");

		HT_EQ(hbt_sh("nsenter --net=/run/netns/%s /usr/bin/python3 tests/mqtt/raw_client.py 10.77.0.1 "
			     "%d 7 '%s' %s >&2",
			     E.cli_ns, MQTT_PORT, pw, modes[i]),
		      0, "raw client, %s PINGREQs", modes[i]);
		HT_EQ(stat_now("mqtt_pings_kernel") - k0, answered[i],
		      "%s: PINGREQs the kernel answered", modes[i]);
		HT_EQ(stat_now("mqtt_pings_user") - u0, 0, "%s: PINGREQs hbd answered", modes[i]);
	}
	HT_EQ(hbt_sh("grep -c '\"topic\":\"devices/7/up/raw\"' %s/sink.jsonl | grep -qx 3", E.dir),
	      0, "the three PUBLISHes between PINGREQs stored");
}

static void test_real_clients(void **state)
{
	char pw[128], pw2[128];
	long long u0 = stat_now("mqtt_pings_user"), k0 = stat_now("mqtt_pings_kernel");

	password(8, pw, sizeof(pw));
	password(9, pw2, sizeof(pw2));
	/* paho: keepalive 2 s for 8 s, a downlink sent to it meanwhile (paho's loop may send a
	 * PINGREQ up to a second late: with keepalive 1 it sometimes passes 1.5 keepalives) */
	HT_EQ(hbt_sh("(nsenter --net=/run/netns/%s /usr/bin/python3 tests/mqtt/paho_client.py 10.77.0.1 %d 8 "
		     "'%s' 2 8 > %s/paho.out 2>&1 &) ; sleep 3; "
		     "%s/hbctl send 8 paho-down --control %s/ctl.sock >&2",
		     E.cli_ns, MQTT_PORT, pw, E.dir, E.build, E.dir),
	      0, "hbctl send to the paho device reports delivery");
	/* mosquitto_sub: keepalive 5 s (its least), for 10 s. Not -C 1: it would DISCONNECT
	 * right behind its PUBACK, and in the kernel path a packet redirected to hbd goes
	 * through the psock's kworker while the FIN does not, so hbd may see the close first
	 * (docs/MQTT.md) */
	HT_EQ(hbt_sh("(timeout 15 nsenter --net=/run/netns/%s mosquitto_sub -h 10.77.0.1 -p %d "
		     "-V mqttv311 -u 9 -P '%s' -i hbmq-sub -t devices/9/down -q 1 -W 10 -k 5 "
		     "> %s/sub.out 2>&1 &) ; sleep 6; "
		     "%s/hbctl send 9 sub-down --control %s/ctl.sock >&2",
		     E.cli_ns, MQTT_PORT, pw2, E.dir, E.build, E.dir),
	      0, "hbctl send to the mosquitto_sub device reports delivery");
	/* hbctl conns shows it as an MQTT device with its keepalive */
	HT_EQ(sh_num("nsenter --net=/run/netns/%s %s/hbctl conns --json --pin-path %s --device 9 "
		     "| jq -r '.conns[0].mqtt_keepalive_s'",
		     E.srv_ns, E.build, E.pin),
	      5, "hbctl conns: device 9's MQTT keepalive");
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s mosquitto_pub -h 10.77.0.1 -p %d -V mqttv311 "
		     "-u 9 -P '%s' -i hbmq-pub -t devices/9/up -q 1 -m from-mosquitto_pub",
		     E.cli_ns, MQTT_PORT, pw2),
	      0, "mosquitto_pub QoS 1");
	sleep(6);
	HT_EQ(hbt_sh("grep -q '^down paho-down$' %s/paho.out && grep -q '^ok connected=1' "
		     "%s/paho.out && grep -q 'puback=2 suback=1' %s/paho.out",
		     E.dir, E.dir, E.dir),
	      0,
	      "paho connected, both PUBLISHes done (QoS 1 acknowledged), SUBACK, downlink (%s/paho.out)",
	      E.dir);
	HT_EQ(hbt_sh("grep -qx sub-down %s/sub.out", E.dir), 0,
	      "mosquitto_sub printed its downlink (%s/sub.out)", E.dir);
	HT_EQ(hbt_sh("grep -c '\"topic\":\"devices/8/up/paho\"' %s/sink.jsonl | grep -qx 2", E.dir),
	      0, "paho's QoS 0 and QoS 1 PUBLISH stored");
	HT_EQ(hbt_sh("grep -q '\"device\":9,\"transport\":\"mqtt\",\"topic\":\"devices/9/up\"' "
		     "%s/sink.jsonl",
		     E.dir),
	      0, "mosquitto_pub's PUBLISH stored");
	HT_GE(stat_now("mqtt_pings_kernel") - k0, 3,
	      "the clients' PINGREQs answered in the kernel");
	HT_EQ(stat_now("mqtt_pings_user") - u0, 0, "none answered by hbd");
}

static void test_silent_expired(void **state)
{
	char pw[128];
	long long e0 = stat_now("user.expired_tcp");

	password(10, pw, sizeof(pw));
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s /usr/bin/python3 tests/mqtt/raw_client.py 10.77.0.1 %d 10 "
		     "'%s' silent >&2",
		     E.cli_ns, MQTT_PORT, pw),
	      0, "a silent MQTT device closed within 4 s");
	HT_EQ(stat_now("user.expired_tcp") - e0, 1, "counted expired");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hbload_kernel),
		cmocka_unit_test(test_segments),
		cmocka_unit_test(test_real_clients),
		cmocka_unit_test(test_silent_expired),
	};

	return cmocka_run_group_tests_name("mqtt_kernel", tests, setup, teardown);
}
