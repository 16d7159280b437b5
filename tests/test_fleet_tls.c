// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Fleet mode over TLS (hbd and hbctl fleet --nats-ca, --nats-cert, --nats-key): a nats-server
 * that requires TLS and verifies its clients' certificates, a CA made for the test with the
 * openssl tool, and a second CA that signed nothing of the server's.
 *
 * A node with the test's CA and a client certificate writes its device's presence and hbctl
 * reads it back; a node trusting the other CA, or with no client certificate, is refused and
 * says why, and serves its devices meanwhile; bad TLS options are usage errors. Needs
 * nats-server and openssl (scripts/deps.sh installs both).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <nats/nats.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hbdev.h"
#include "lib/hbd_harness.h"
#include "lib/ht_assert.h"
#include "lib/run_prog.h"
#include "lib/sock.h"

static char dir[64] = "/tmp/hbft-tls.XXXXXX", url[64], ca[96], rogue_ca[96], cert[96], key[96];
static pid_t nats_pid;
static uint16_t nats_port;

/* The CA, the server's certificate for 127.0.0.1, a client certificate and another CA, all
 * P-256 and valid for a day. */
static int make_certs(void)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "set -e; cd %s; exec 2> openssl.log\n"
		 "req() { n=$1 cn=$2; shift 2; openssl req -newkey ec -pkeyopt "
		 "ec_paramgen_curve:prime256v1 -nodes -keyout $n.key -subj /CN=$cn \"$@\"; }\n"
		 "ca() { req $1 $2 -x509 -days 1 -out $1.pem; }\n"
		 "signed() { req $1 $2 -out $1.csr; printf '%%s\\n' \"$3\" > $1.ext; "
		 "openssl x509 -req -in $1.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
		 "-extfile $1.ext -out $1.pem; }\n"
		 "ca ca hbeat-test-ca; ca rogue hbeat-rogue-ca\n"
		 "signed server 127.0.0.1 'subjectAltName=IP:127.0.0.1'\n"
		 "signed node hbeat-node 'extendedKeyUsage=clientAuth'\n",
		 dir);
	if (system(cmd)) {
		fprintf(stderr, "openssl failed (scripts/deps.sh installs it): %s/openssl.log\n",
			dir);
		return -1;
	}
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	snprintf(rogue_ca, sizeof(rogue_ca), "%s/rogue.pem", dir);
	snprintf(cert, sizeof(cert), "%s/node.pem", dir);
	snprintf(key, sizeof(key), "%s/node.key", dir);
	return 0;
}

static int nats_start(void)
{
	char conf[96], log[96];
	const char *argv[] = { "nats-server", "-c", conf, NULL };
	FILE *f;

	snprintf(conf, sizeof(conf), "%s/nats.conf", dir);
	snprintf(log, sizeof(log), "%s/nats.log", dir);
	f = fopen(conf, "w");
	if (!f)
		return -1;
	fprintf(f,
		"listen: 127.0.0.1:%u\n"
		"jetstream { store_dir: \"%s/store\" }\n"
		"tls { cert_file: \"%s/server.pem\", key_file: \"%s/server.key\", "
		"ca_file: \"%s/ca.pem\", verify: true, timeout: 2 }\n",
		nats_port, dir, dir, dir, dir);
	if (fclose(f))
		return -1;
	nats_pid = hbt_spawn_logged(argv, log);
	return nats_pid > 0 ? ht_wait_listening(nats_port, 10000) : -1;
}

static int group_setup(void **state)
{
	(void)state;
	signal(SIGPIPE, SIG_IGN);
	if (!mkdtemp(dir) || make_certs() || !(nats_port = ht_free_port()))
		return -1;
	snprintf(url, sizeof(url), "nats://127.0.0.1:%u", nats_port);
	if (nats_start()) {
		fprintf(stderr, "nats-server did not start (scripts/deps.sh installs it)\n");
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	char cmd[128];

	if (nats_pid > 0) {
		kill(nats_pid, SIGTERM);
		hbt_reap(nats_pid, time(NULL) + 5);
	}
	nats_Close();
	if (!getenv("HT_KEEP")) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd)) {
		}
	}
	return ht_reap(state);
}

/* A node on this test's NATS; trust and mine are its --nats-ca and --nats-cert/--nats-key
 * (NULL: left out). */
static int start_node(struct ht_daemon *d, const char *name, const char *trust, bool mine)
{
	/* the devices here heartbeat only while the test polls them: a long expiry */
	const char *args[24] = {
		"--no-offload", "--interval", "1", "--expiry-mult", "60", "--nats", url,
		"--nats-node",	name
	};
	int n = 9;

	if (trust) {
		args[n++] = "--nats-ca";
		args[n++] = trust;
	}
	if (mine) {
		args[n++] = "--nats-cert";
		args[n++] = cert;
		args[n++] = "--nats-key";
		args[n++] = key;
	}
	args[n] = NULL;
	return ht_start(d, args);
}

static struct hbdev *open_dev(uint16_t port, uint64_t id)
{
	uint8_t secret[HB_SECRET_MAX];
	struct hbdev_config cfg = {
		.host = "127.0.0.1",
		.port = port,
		.transport = HB_TCP,
		.device_id = id,
		.secret = secret,
		.secret_len = (size_t)ht_secret(id, secret),
		.io_timeout_ms = 3000,
	};
	struct hbdev *d = NULL;

	HT_EQ(hbdev_open(&d, &cfg), 0, "hbdev_open of device %llu", (unsigned long long)id);
	HT_EQ(hbdev_connect(d), 0, "device %llu connects", (unsigned long long)id);
	return d;
}

/* Runs a built program (hbd, hbctl) to its end; its exit code, its output into out. */
static int run(const char *name, const char *const *args, char *out, size_t cap)
{
	char log[96];

	snprintf(log, sizeof(log), "%s/run.log", dir);
	return ht_run_built(name, args, log, out, cap);
}

/* hbctl fleet presence ID until it shows want (within ms); its last output in out. */
static bool presence_shows(const char *id, const char *want, char *out, size_t cap, int ms)
{
	const char *const args[] = { "fleet", "presence",    id,   "--nats",	 url, "--nats-ca",
				     ca,      "--nats-cert", cert, "--nats-key", key, NULL };
	uint64_t end = ht_now_ms() + (uint64_t)ms;

	do {
		if (run("hbctl", args, out, cap) == 0 && strstr(out, want))
			return true;
		ht_sleep_ms(100);
	} while (ht_now_ms() < end);
	return false;
}

/* The line of d's log with needle, waited for up to ms. */
static bool log_says(const struct ht_daemon *d, const char *needle, char *line, size_t cap, int ms)
{
	uint64_t end = ht_now_ms() + (uint64_t)ms;

	while (!ht_file_contains(d->err, needle, line, cap)) {
		if (ht_now_ms() >= end)
			return false;
		ht_sleep_ms(50);
	}
	return true;
}

static bool answers_heartbeats(struct hbdev *dev)
{
	struct hbdev_ev ev;
	uint64_t end = ht_now_ms() + 5000;

	while (ht_now_ms() < end)
		if (hbdev_poll(dev, 50, &ev) == 1 && ev.type == HBDEV_EV_PONG)
			return true;
	return false;
}

static void tls_node_writes_presence(void **state)
{
	struct ht_daemon n;
	struct hbdev *dev;
	char out[4096], line[1024];

	(void)state;
	HT_EQ(start_node(&n, "node-t", ca, true), 0, "node-t started with the CA and its cert");
	HT_TRUE(log_says(&n, "hbeat_nodes ready", line, sizeof(line), 10000),
		"node-t reached JetStream over TLS");
	dev = open_dev(n.port, 101);
	HT_TRUE(presence_shows("101", "online on node-t", out, sizeof(out), 10000),
		"hbctl fleet over TLS shows device 101 online on node-t: %s", out);
	HT_EQ(ht_stop(&n), 0, "node-t stops cleanly");
	HT_TRUE(presence_shows("101", "shutdown on node-t", out, sizeof(out), 5000),
		"its last write, at the stop, came over TLS too: %s", out);
	hbdev_close(dev);
	ht_cleanup(&n);
}

/* The server's certificate does not chain to the CA a node trusts (a server in the middle, as
 * the node sees it), or the node has no certificate of its own for a server that verifies
 * clients: no connection, a log line that says why, and heartbeats served all the same. */
static void tls_refusals_are_said(void **state)
{
	static const struct {
		const char *name, *why;
		bool rogue, mine;
	} c[] = {
		{ "node-r", "a server certificate not of its CA", true, true },
		{ "node-n", "no client certificate", false, false },
	};
	char line[1024], out[4096];

	(void)state;
	for (unsigned i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct ht_daemon n;
		struct hbdev *dev;

		HT_EQ(start_node(&n, c[i].name, c[i].rogue ? rogue_ca : ca, c[i].mine), 0,
		      "%s started (%s)", c[i].name, c[i].why);
		HT_TRUE(log_says(&n, "not reachable yet", line, sizeof(line), 10000),
			"%s says NATS is not reachable (%s)", c[i].name, c[i].why);
		fprintf(stderr, "# %s (%s): %s\n", c[i].name, c[i].why, line);
		HT_TRUE(strstr(line, "no answer") == NULL, "with libnats' reason: %s", line);
		dev = open_dev(n.port, 102 + i);
		HT_TRUE(answers_heartbeats(dev), "%s answers heartbeats meanwhile", c[i].name);
		HT_TRUE(!ht_file_contains(n.err, "hbeat_nodes ready", line, sizeof(line)),
			"%s never reached JetStream", c[i].name);
		hbdev_close(dev);
		HT_EQ(ht_stop(&n), 0, "%s stops cleanly", c[i].name);
		ht_cleanup(&n);
	}
	{
		const char *const rogue[] = { "fleet",	    "status", "--nats",	     url,
					      "--nats-ca",  rogue_ca, "--nats-cert", cert,
					      "--nats-key", key,      NULL };

		HT_EQ(run("hbctl", rogue, out, sizeof(out)), 3,
		      "hbctl fleet trusting the other CA: %s", out);
		HT_TRUE(strstr(out, "cannot reach NATS") != NULL, "says so: %s", out);
		HT_TRUE(strstr(out, "unable to get local issuer certificate") != NULL,
			"and why, in OpenSSL's words: %s", out);
	}
}

static void tls_bad_options(void **state)
{
	char out[4096], missing[128], keys[128];
	const char *const half[] = { "--port", "0",	      "--keys", keys, "--nats",
				     url,      "--nats-cert", cert,	NULL };
	const char *const nofile[] = { "--port", "0",	      "--keys", keys, "--nats",
				       url,	 "--nats-ca", missing,	NULL };
	const char *const hbctl_half[] = {
		"fleet", "status", "--nats", url, "--nats-key", key, NULL
	};
	const char *const hbctl_nofile[] = { "fleet",	  "status", "--nats", url,
					     "--nats-ca", missing,  NULL };

	(void)state;
	snprintf(missing, sizeof(missing), "%s/no-such-ca.pem", dir);
	snprintf(keys, sizeof(keys), "%s/keys", dir);
	HT_EQ(ht_write_keys(keys), 0, "a key store");
	HT_EQ(run("hbd", half, out, sizeof(out)), 2, "hbd --nats-cert without --nats-key: %s", out);
	HT_TRUE(strstr(out, "--nats-cert and --nats-key go together") != NULL, "says so: %s", out);
	HT_EQ(run("hbctl", hbctl_half, out, sizeof(out)), 1,
	      "hbctl --nats-key without --nats-cert, a usage error: %s", out);
	HT_TRUE(strstr(out, "--nats-cert and --nats-key go together") != NULL, "says so: %s", out);
	HT_NE(run("hbd", nofile, out, sizeof(out)), 0, "hbd --nats-ca of a missing file: %s", out);
	HT_TRUE(strstr(out, "--nats-ca") != NULL && strstr(out, "no-such-ca.pem") != NULL,
		"names the option and the file: %s", out);
	HT_EQ(run("hbctl", hbctl_nofile, out, sizeof(out)), 3,
	      "hbctl --nats-ca of a missing file: %s", out);
	HT_TRUE(strstr(out, "--nats-ca") != NULL, "names the option: %s", out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tls_node_writes_presence),
		cmocka_unit_test(tls_refusals_are_said),
		cmocka_unit_test(tls_bad_options),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
