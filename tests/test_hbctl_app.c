// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl devices, send and events, the programs themselves, against the real hbd: provisioning
 * rewrites the key store safely and hbd applies it at once (new devices get in, removed ones
 * are cut off), a downlink reaches the example device, presence events stream out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <dirent.h>

#include <stdio.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "lib/ht_assert.h"
#include "lib/ctl.h"

static struct ht_daemon D;
static char CTL[108], HBCTL[PATH_MAX];

static int group_setup(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "2",
					    "--interval",   "100",	 NULL };

	(void)state;
	tc_bin("hbctl", HBCTL, sizeof(HBCTL));
	return tc_start(&D, CTL, sizeof(CTL), false, NULL, args);
}

static int group_teardown(void **state)
{
	int rc = ht_stop(&D);

	(void)state;
	tc_cleanup(&D);
	tc_reap(state);
	return rc;
}

/* Runs hbctl with args; its stdout (and stderr if err) goes to out. Returns the exit status. */
static int hbctl(char *out, size_t cap, bool err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int hbctl(char *out, size_t cap, bool err, const char *fmt, ...)
{
	char args[1024], cmd[PATH_MAX + 1200];
	size_t n = 0;
	va_list ap;
	FILE *p;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s %s%s", HBCTL, args, err ? " 2>&1" : " 2>/dev/null");
	p = popen(cmd, "r");
	assert_non_null(p);
	while (n + 1 < cap && (st = (int)fread(out + n, 1, cap - n - 1, p)) > 0)
		n += (size_t)st;
	out[n] = 0;
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static long long reloads(void)
{
	char line[4096];

	return tc_req(CTL, "stats\n", line, sizeof(line)) ? -1 : tc_num(line, "key_reloads");
}

/* HELLO as device id with this hex secret over TCP: the connected fd, or -1 if refused. */
static int login_with(uint64_t id, const char *hex)
{
	uint8_t secret[HB_SECRET_MAX], buf[HB_MAX_FRAME];
	int len = hb_hex_decode(hex, secret, sizeof(secret)), fd = ht_tcp(D.port, false);
	struct hb_frame f;
	struct hb_hello h;
	struct timespec now;

	HT_TRUE(len >= HB_SECRET_MIN && fd >= 0,
		"secret of %d bytes from '%s' (at least %d) and a connection (fd %d)", len, hex,
		HB_SECRET_MIN, fd);
	clock_gettime(CLOCK_REALTIME, &now);
	hb_hello_sign(&h, id, (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000, secret,
		      (size_t)len);
	HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0, "HELLO of device %llu sent",
	      (unsigned long long)id);
	if (ht_recv_frame(fd, buf, &f, HT_IO_MS) == 1 && f.type == HB_WELCOME)
		return fd;
	close(fd);
	return -1;
}

static void devices_add_list_remove(void **state)
{
	char out[4096], hex[160], *p;
	long long r0 = reloads();
	struct stat st;
	int fd;

	(void)state;
	/* add: a fresh secret, printed once, usable at once */
	HT_EQ(hbctl(out, sizeof(out), false, "devices add 42 --keys %s --control %s", D.keys, CTL),
	      0, "exit code of hbctl devices add 42; its output: %s", out);
	p = strstr(out, "secret (shown once; store it in the device): ");
	assert_non_null(p);
	HT_EQ(sscanf(p + strlen("secret (shown once; store it in the device): "), "%159s", hex), 1,
	      "the secret in hbctl's output: %s", out);
	HT_EQ(strlen(hex), 64, "hex digits of the secret hbctl made (32 random bytes)");
	assert_non_null(strstr(out, "hbd reloaded the key store"));
	HT_EQ(reloads(), r0 + 1, "key_reloads after hbctl devices add");
	HT_EQ(stat(D.keys, &st), 0, "stat of the key store %s", D.keys);
	HT_EQ(st.st_mode & 0777, 0600, "mode of the key store %s", D.keys);
	fd = login_with(42, hex);
	HT_GE(fd, 0, "login of device 42 with the secret hbctl printed");
	/* a second add of the same device is refused and changes nothing */
	HT_EQ(hbctl(out, sizeof(out), true, "devices add 42 --keys %s --control %s", D.keys, CTL),
	      3, "exit code of a second hbctl devices add 42; its output: %s", out);
	assert_non_null(strstr(out, "already has a secret"));
	/* list: devices, ranges, never secrets */
	HT_EQ(hbctl(out, sizeof(out), false, "devices list --keys %s --json", D.keys), 0,
	      "exit code of hbctl devices list --json; its output: %s", out);
	assert_non_null(strstr(out, "{\"kind\":\"device\",\"device\":42}"));
	assert_non_null(strstr(out, "{\"kind\":\"range\",\"first\":100,\"last\":199}"));
	assert_null(strstr(out, hex));
	/* remove: gone from the file, and its live session is cut */
	HT_EQ(hbctl(out, sizeof(out), false, "devices remove 42 --keys %s --control %s", D.keys,
		    CTL),
	      0, "exit code of hbctl devices remove 42; its output: %s", out);
	assert_non_null(strstr(out, "1 live session(s) cut"));
	HT_TRUE(ht_expect(fd, HB_BYE, HB_BYE_REVOKED),
		"BYE(REVOKED) to device 42 after hbctl devices remove");
	HT_TRUE(ht_eof(fd, HT_IO_MS), "close of device 42's connection");
	close(fd);
	HT_EQ(login_with(42, hex), -1, "login of removed device 42 refused");
	/* inside a derive range, removal is a revocation line; adding it again lifts it */
	HT_EQ(hbctl(out, sizeof(out), false,
		    "devices remove 150 --keys %s --control %s "
		    "--json",
		    D.keys, CTL),
	      0, "exit code of hbctl devices remove 150 (in a derive range); its output: %s", out);
	assert_non_null(strstr(out, "\"revoked_in_range\":true"));
	HT_TRUE(ht_file_contains(D.keys, "150 revoked", NULL, 0), "the revocation line in %s",
		D.keys);
	HT_EQ(hbctl(out, sizeof(out), false, "devices list --keys %s", D.keys), 0,
	      "exit code of hbctl devices list; its output: %s", out);
	assert_non_null(strstr(out, "revoked  150"));
	HT_EQ(hbctl(out, sizeof(out), false,
		    "devices add 150 --keys %s --control %s "
		    "--secret 00112233445566778899aabbccddeeff",
		    D.keys, CTL),
	      0, "exit code of hbctl devices add 150 --secret; its output: %s", out);
	HT_FALSE(ht_file_contains(D.keys, "150 revoked", NULL, 0),
		 "the revocation line of 150 gone from %s after the add", D.keys);
	fd = login_with(150, "00112233445566778899aabbccddeeff");
	HT_GE(fd, 0, "login of device 150 with its new secret");
	close(fd);
	/* errors: unknown device, bad id, bad secret */
	HT_EQ(hbctl(out, sizeof(out), true, "devices remove 5000 --keys %s --no-reload", D.keys), 3,
	      "exit code of hbctl devices remove of unknown device 5000; its output: %s", out);
	assert_non_null(strstr(out, "device 5000 is not in"));
	HT_EQ(hbctl(out, sizeof(out), true, "devices add abc --keys %s", D.keys), 1,
	      "exit code of hbctl devices add abc (bad id); its output: %s", out);
	HT_EQ(hbctl(out, sizeof(out), true, "devices add 7 --secret 12 --keys %s", D.keys), 1,
	      "exit code of hbctl devices add 7 --secret 12 (bad secret); its output: %s", out);
	HT_EQ(hbctl(out, sizeof(out), true, "devices frob --keys %s", D.keys), 1,
	      "exit code of hbctl devices frob; its output: %s", out);
	/* --no-reload leaves hbd alone; an unreachable hbd is a warning, not a failure */
	r0 = reloads();
	HT_EQ(hbctl(out, sizeof(out), false, "devices add 43 --keys %s --no-reload", D.keys), 0,
	      "exit code of hbctl devices add 43 --no-reload; its output: %s", out);
	HT_EQ(hbctl(out, sizeof(out), true,
		    "devices add 44 --keys %s --control "
		    "/nonexistent.sock",
		    D.keys),
	      0, "exit code of hbctl devices add 44 with hbd unreachable; its output: %s", out);
	assert_non_null(strstr(out, "hbd not reachable at /nonexistent.sock"));
	HT_EQ(reloads(), r0, "key_reloads after --no-reload and an unreachable hbd");
}

static void devices_edits_are_atomic_and_serialised(void **state)
{
	char out[4096], dir[64], keys[96], cmd[PATH_MAX + 256];
	struct dirent *e;
	DIR *dp;
	int n = 0;

	(void)state;
	snprintf(dir, sizeof(dir), "%s", D.dir);
	snprintf(keys, sizeof(keys), "%s/fleet", dir);
	HT_EQ(ht_write_keys(keys), 0, "key store %s written", keys);
	/* eight writers at once: the lock keeps every one of them */
	snprintf(cmd, sizeof(cmd),
		 "for i in 1 2 3 4 5 6 7 8; do %s devices add 100$i --keys %s --no-reload "
		 ">/dev/null 2>&1 & done; wait",
		 HBCTL, keys);
	HT_EQ(system(cmd), 0, "exit status of eight concurrent hbctl devices add");
	for (int i = 1; i <= 8; i++) {
		char want[32];

		snprintf(want, sizeof(want), "100%d ", i);
		HT_TRUE(ht_file_contains(keys, want, NULL, 0),
			"device %s added by one of eight concurrent writers, in %s", want, keys);
	}
	/* the result is a store hbd loads */
	{
		struct hb_keystore *ks;
		char why[256];

		HT_EQ(hb_keystore_load(keys, &ks, why, sizeof(why)), 0,
		      "load of the store the eight writers left (%s): %s", keys, why);
		HT_EQ(hb_keystore_devices(ks), 9 + 8, "devices in the store: 9 + the 8 added");
		hb_keystore_free(ks);
	}
	/* a store that does not parse is not edited */
	HT_EQ(system("true"), 0, "system(\"true\")");
	{
		FILE *f = fopen(keys, "a");

		fprintf(f, "77 nothex\n");
		fclose(f);
	}
	HT_EQ(hbctl(out, sizeof(out), true, "devices add 9999 --keys %s --no-reload", keys), 3,
	      "exit code of hbctl devices add to a store that does not parse; its output: %s", out);
	assert_non_null(strstr(out, ":19: "));
	HT_FALSE(ht_file_contains(keys, "9999 ", NULL, 0),
		 "device 9999 not added to the store that does not parse (%s)", keys);
	/* no temporary file is left behind */
	dp = opendir(dir);
	assert_non_null(dp);
	while ((e = readdir(dp)))
		n += strstr(e->d_name, ".tmp-") != NULL;
	closedir(dp);
	HT_EQ(n, 0, "temporary files left in %s", dir);
	unlink(keys);
	snprintf(cmd, sizeof(cmd), "%s.lock", keys);
	unlink(cmd);
}

static void send_and_events(void **state)
{
	char bin[PATH_MAX], cmd[PATH_MAX * 2], out[4096], dev_out[128], ev_out[128], hex[33];
	uint8_t s[HB_SECRET_MAX];
	pid_t dev, ev;
	int st;

	(void)state;
	snprintf(dev_out, sizeof(dev_out), "%s/device.out", D.dir);
	snprintf(ev_out, sizeof(ev_out), "%s/events.out", D.dir);
	/* a subscriber first, then the device */
	snprintf(cmd, sizeof(cmd), "exec %s events --control %s --count 2 --json > %s 2>&1", HBCTL,
		 CTL, ev_out);
	ev = fork();
	if (ev == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	/* the device connects only once hbd counts the subscriber */
	for (int i = 0; i < 300; i++) {
		char line[4096];

		if (!tc_req(CTL, "stats\n", line, sizeof(line)) && tc_num(line, "subscribers") == 1)
			break;
		ht_sleep_ms(10);
	}
	tc_bin("examples/device", bin, sizeof(bin));
	ht_secret(6, s);
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", s[i]);
	snprintf(cmd, sizeof(cmd), "exec %s --port %u --id 6 --secret %s --every 0 > %s 2>&1", bin,
		 D.port, hex, dev_out);
	dev = fork();
	if (dev == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 300 && !ht_file_contains(dev_out, "connected", NULL, 0); i++)
		ht_sleep_ms(10);
	HT_EQ(hbctl(out, sizeof(out), false, "send 6 'valve=open' --control %s", CTL), 0,
	      "exit code of hbctl send 6 'valve=open'; its output: %s", out);
	assert_non_null(strstr(out, "delivered to device 6 (10 bytes"));
	HT_EQ(hbctl(out, sizeof(out), false, "send 6 --hex 6869 --json --control %s", CTL), 0,
	      "exit code of hbctl send 6 --hex 6869 --json; its output: %s", out);
	assert_non_null(strstr(out, "\"ok\":true,\"status\":\"delivered\",\"device\":6"));
	for (int i = 0; i < 100 && !ht_file_contains(dev_out, "downlink hi", NULL, 0); i++)
		ht_sleep_ms(10);
	HT_TRUE(ht_file_contains(dev_out, "downlink valve=open", NULL, 0),
		"the first downlink in the device's output %s", dev_out);
	HT_TRUE(ht_file_contains(dev_out, "downlink hi", NULL, 0),
		"the second downlink in the device's output %s", dev_out);
	/* not connected, bad payloads, no hbd */
	HT_EQ(hbctl(out, sizeof(out), true, "send 99 x --control %s", CTL), 3,
	      "exit code of hbctl send to offline device 99; its output: %s", out);
	assert_non_null(strstr(out, "offline"));
	HT_EQ(hbctl(out, sizeof(out), true, "send 6 --hex zz --control %s", CTL), 1,
	      "exit code of hbctl send --hex zz; its output: %s", out);
	HT_EQ(hbctl(out, sizeof(out), true, "send 6 x --control /nonexistent.sock"), 3,
	      "exit code of hbctl send with no hbd; its output: %s", out);
	assert_non_null(strstr(out, "is hbd running with --control"));
	/* the device goes: offline, the second event; hbctl events exits after --count 2 */
	kill(dev, SIGTERM);
	HT_EQ(waitpid(dev, &st, 0), dev, "wait for the example device");
	HT_EQ(waitpid(ev, &st, 0), ev, "wait for hbctl events");
	HT_TRUE(WIFEXITED(st), "hbctl events exited (status %#x)", st);
	HT_EQ(WEXITSTATUS(st), 0, "exit code of hbctl events --count 2 (its output: %s)", ev_out);
	HT_TRUE(ht_file_contains(ev_out, "{\"event\":\"online\",\"device\":6,\"transport\":\"tcp\"",
				 NULL, 0),
		"the online event in hbctl events' output %s", ev_out);
	HT_TRUE(ht_file_contains(ev_out, "{\"event\":\"offline\",\"device\":6,", NULL, 0),
		"the offline event in hbctl events' output %s", ev_out);
}

/* hbctl reads a key store by hbd's rule: a line of 511 characters is one line, a longer one
 * makes the file unreadable, named by its line number (so the end of a long comment is never
 * taken for an entry, and hbctl never edits a file hbd would refuse, or refuses one hbd reads).
 */
static void devices_long_lines(void **state)
{
	char out[4096], path[128], cmd[1400];
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/long-keys", D.dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "#%0510d\n1 000102030405060708090a0b0c0d0e0f\n", 0);
	fclose(f);
	HT_EQ(hbctl(out, sizeof(out), true, "devices list --keys %s", path), 0,
	      "exit code of hbctl devices list of a store with a 511-character comment; its "
	      "output: %s",
	      out);
	assert_non_null(strstr(out, "device   1"));
	/* 546 characters: the device at the end of the comment must not appear */
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f,
		"1 000102030405060708090a0b0c0d0e0f\n#%0510d7 000102030405060708090a0b0c0d0e0f\n",
		0);
	fclose(f);
	HT_EQ(hbctl(out, sizeof(out), true, "devices list --keys %s", path), 3,
	      "exit code of hbctl devices list of a store with a 546-character line; its "
	      "output: %s",
	      out);
	if (!strstr(out, ":2: line longer than 511 characters"))
		fail_msg("hbctl's message does not name line 2 and its length: %s", out);
	snprintf(cmd, sizeof(cmd), "rm -f '%s' '%s.lock'", path, path);
	HT_EQ(system(cmd), 0, "%s", cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(devices_add_list_remove),
		cmocka_unit_test(devices_edits_are_atomic_and_serialised),
		cmocka_unit_test(send_and_events),
		cmocka_unit_test(devices_long_lines),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("hbctl_app", tests, group_setup, group_teardown);
}
