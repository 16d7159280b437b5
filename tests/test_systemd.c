// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The systemd units in contrib/systemd: `systemd-analyze verify` accepts them without a word,
 * and hbd.service's own command line, run with exactly its CapabilityBoundingSet (checked in
 * /proc), starts, reports READY over sd_notify, uses the pinned maps, binds a port below 1024,
 * and serves its control socket and metrics. Without CAP_NET_BIND_SERVICE in the set it cannot
 * bind that port, which shows the set is what the daemon really gets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <bpf/bpf.h>
#include <cmocka.h>
#include <ctype.h>

#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "lib/ht_assert.h"
#include "lib/ctl.h"
#include "lib/sh.h"

static char dir[64]; /* generated units and scratch files */

static int setup(void **state)
{
	char bin[PATH_MAX], sbin[PATH_MAX];

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/hbo-units.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	tc_bin("hbd", bin, sizeof(bin));
	if (!realpath(bin, sbin))
		return -1;
	*strrchr(sbin, '/') = 0;
	/* the units with this build's binaries, so verify finds every ExecStart */
	return hbt_sh("scripts/gen-units.sh %s %s /etc /usr/share/doc/hbeat", dir, sbin);
}

static int teardown(void **state)
{
	(void)state;
	ht_reap(state);
	if (dir[0])
		hbt_sh("rm -rf %s", dir);
	return 0;
}

static void verify_units(void **state)
{
	(void)state;
	/* a template is verified as an instance */
	HT_EQ(hbt_sh("cp %s/hbeat-bpf@.service %s/hbeat-bpf@eth0.service", dir, dir), 0,
	      "copy of hbeat-bpf@.service in %s", dir);
	HT_EQ(hbt_sh("systemd-analyze verify %s/hbd.service %s/hbeat-bpf@eth0.service "
		     "> %s/verify.out 2>&1",
		     dir, dir, dir),
	      0, "systemd-analyze verify ran on the units (output in %s/verify.out)", dir);
	/* not even a warning (an unknown key is only a warning, with exit status 0) */
	HT_EQ(hbt_sh("test ! -s %s/verify.out || { cat %s/verify.out >&2; false; }", dir, dir), 0,
	      "systemd-analyze verify found nothing to say (output in %s/verify.out)", dir);
	/* and verify does catch a broken unit, so the check above means something */
	HT_EQ(hbt_sh("sed 's|^ExecStart=[^ ]*|ExecStart=/nonexistent/hbd|' %s/hbd.service > "
		     "%s/broken.service",
		     dir, dir),
	      0, "broken unit written in %s", dir);
	HT_NE(hbt_sh("systemd-analyze verify %s/broken.service 2>/dev/null", dir), 0,
	      "systemd-analyze verify refused a unit whose ExecStart does not exist");
}

/* Value of a key in the generated hbd.service, continuation lines joined. */
static void unit_value(const char *key, char *out, size_t cap)
{
	char path[128], line[1024];
	size_t klen = strlen(key), n = 0;
	bool in = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/hbd.service", dir);
	f = fopen(path, "r");
	assert_non_null(f);
	out[0] = 0;
	while (fgets(line, sizeof(line), f)) {
		char *s = line;

		if (!in && (strncmp(line, key, klen) || line[klen] != '='))
			continue;
		if (!in)
			s += klen + 1;
		while (isspace((unsigned char)*s))
			s++;
		size_t l = strcspn(s, "\n");
		in = l && s[l - 1] == '\\';
		if (in)
			l--;
		n += (size_t)snprintf(out + n, cap - n, "%.*s ", (int)l, s);
		if (!in)
			break;
	}
	fclose(f);
	HT_TRUE(out[0], "%s= in the unit file", key);
}

/* "CAP_BPF CAP_NET_ADMIN" -> "-all,+bpf,+net_admin" (setpriv's form), without drop if given. */
static void setpriv_caps(const char *caps, const char *drop, char *out, size_t cap)
{
	char copy[256], *save = NULL;
	size_t n = (size_t)snprintf(out, cap, "-all");

	snprintf(copy, sizeof(copy), "%s", caps);
	for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
		if (drop && !strcmp(t, drop))
			continue;
		n += (size_t)snprintf(out + n, cap - n, ",+");
		for (const char *c = t + 4; *c; c++) /* past "CAP_" */
			out[n++] = (char)tolower((unsigned char)*c);
		out[n] = 0;
	}
}

/* Maps shaped as the ABI says, pinned in a private directory, for offload mode. */
static void make_pins(const char *pins)
{
	LIBBPF_OPTS(bpf_map_create_opts, mm, .map_flags = BPF_F_MMAPABLE);
	struct {
		const char *name;
		int fd;
	} m[] = {
		{ HB_MAP_CONNS, bpf_map_create(BPF_MAP_TYPE_HASH, HB_MAP_CONNS, 8,
					       sizeof(struct hb_conn), 64, NULL) },
		{ HB_MAP_SESSIONS, bpf_map_create(BPF_MAP_TYPE_HASH, HB_MAP_SESSIONS, 8,
						  sizeof(struct hb_session), 64, NULL) },
		{ HB_MAP_CONFIG, bpf_map_create(BPF_MAP_TYPE_ARRAY, HB_MAP_CONFIG, 4,
						sizeof(struct hb_config), 1, &mm) },
	};
	char path[160];

	HT_EQ(mkdir(pins, 0700), 0, "mkdir %s", pins);
	for (unsigned i = 0; i < 3; i++) {
		HT_GE(m[i].fd, 0, "map %s created", m[i].name);
		snprintf(path, sizeof(path), "%s/%s", pins, m[i].name);
		HT_EQ(bpf_obj_pin(m[i].fd, path), 0, "pin of map %s at %s", m[i].name, path);
		close(m[i].fd);
	}
}

/* The effective capability set of a process, from /proc. */
static unsigned long long cap_eff(pid_t pid)
{
	char path[64], line[256];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* Runs hbd.service's ExecStart, its paths redirected into the scratch directory and $HBD_OPTS
 * as a site would set it (a service port below 1024), under setpriv with the unit's
 * CapabilityBoundingSet minus drop_cap. Returns hbd's pid once it is READY, or 0 if it exited
 * first (its exit status in *status). */
static pid_t run_unit_hbd(const char *drop_cap, uint16_t port, int *status)
{
	char exec[2048], caps[256], sp[256], cmd[4096], pins[96], keys[96], notify[108];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	char msg[512];
	pid_t pid;

	unit_value("ExecStart", exec, sizeof(exec));
	unit_value("CapabilityBoundingSet", caps, sizeof(caps));
	setpriv_caps(caps, drop_cap, sp, sizeof(sp));
	snprintf(pins, sizeof(pins), "/sys/fs/bpf/hbeat-test-%d-unit", (int)getpid());
	hbt_sh("rm -rf %s", pins);
	make_pins(pins);
	snprintf(keys, sizeof(keys), "%s/keys", dir);
	HT_EQ(ht_write_keys(keys), 0, "key store %s written", keys);
	chmod(keys, 0600);
	snprintf(notify, sizeof(notify), "%s/notify.sock", dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", notify);
	unlink(notify);
	HT_EQ(bind(nfd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind of the notify socket");
	snprintf(
		cmd, sizeof(cmd),
		"cd %s && exec setpriv --bounding-set=%s -- $(echo '%s' | sed "
		"-e 's|/etc/hbeat/keys|%s/keys|' -e 's|/var/lib/hbeat/|%s/|' "
		"-e 's|/run/hbeat/hbd.sock|%s/hbd.sock|' -e 's|127.0.0.1:9107|127.0.0.1:0|' "
		"-e 's|\\$HBD_OPTS|--port %u --workers 1 --pin-path %s|') > %s/hbd.out 2> %s/hbd.err",
		dir, sp, exec, dir, dir, dir, port, pins, dir, dir);
	pid = fork();
	HT_GE(pid, 0, "fork for the unit's command");
	if (pid == 0) {
		setenv("NOTIFY_SOCKET", notify, 1);
		/* what systemd sets for StateDirectory=hbeat: the default sink goes there */
		setenv("STATE_DIRECTORY", dir, 1);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	{
		struct ht_daemon d = { .pid = pid };

		snprintf(d.dir, sizeof(d.dir), "%s", dir);
		ht_track(&d, true); /* reaped by the teardown if an assertion fails */
	}
	/* READY=1 over sd_notify, what systemd's Type=notify waits for; or an early exit */
	for (int i = 0; i < 1000; i++) {
		struct pollfd pfd = { .fd = nfd, .events = POLLIN };
		ssize_t n;

		if (waitpid(pid, status, WNOHANG) == pid) {
			pid = 0;
			break;
		}
		if (poll(&pfd, 1, 10) == 1 && (n = recv(nfd, msg, sizeof(msg) - 1, 0)) > 0) {
			msg[n] = 0;
			if (strstr(msg, "READY=1"))
				break;
		}
	}
	close(nfd);
	return pid;
}

static void stop_unit_hbd(pid_t pid)
{
	int status;

	kill(pid, SIGTERM);
	HT_EQ(waitpid(pid, &status, 0), pid, "wait for the unit's hbd");
	HT_TRUE(WIFEXITED(status), "the unit's hbd exited (status %#x)", status);
	HT_EQ(WEXITSTATUS(status), 0, "exit code of the unit's hbd after SIGTERM (log: %s/hbd.err)",
	      dir);
}

static void forget_unit_hbd(void)
{
	struct ht_daemon d = { .pid = 0 };
	char pins[96];

	snprintf(d.dir, sizeof(d.dir), "%s", dir);
	ht_track(&d, false);
	snprintf(pins, sizeof(pins), "/sys/fs/bpf/hbeat-test-%d-unit", (int)getpid());
	hbt_sh("rm -rf %s", pins);
}

/* A port below 1024 that nothing else here uses. */
static uint16_t low_port(void)
{
	return (uint16_t)(1023 - getpid() % 300);
}

static void unit_command_runs_with_its_capabilities(void **state)
{
	const unsigned long long want = 1ull << 39 /* CAP_BPF */ | 1ull << 12 /* CAP_NET_ADMIN */ |
					1ull << 10 /* CAP_NET_BIND_SERVICE */;
	char line[1024], path[128], *p, *text;
	int status = 0;
	pid_t pid;

	(void)state;
	pid = run_unit_hbd(NULL, low_port(), &status);
	HT_GT(pid, 0, "the unit's hbd still running after its start (exit status %#x)", status);
	/* exactly the unit's capabilities, no more */
	HT_EQ(cap_eff(pid), want,
	      "effective capabilities of the unit's hbd (the unit's set, no more)");
	snprintf(path, sizeof(path), "%s/hbd.err", dir);
	HT_TRUE(ht_file_contains(path, "ready:", line, sizeof(line)), "the ready line in %s", path);
	assert_non_null(strstr(line, "mode=offload"));
	p = strstr(line, "metrics_port=");
	assert_non_null(p);
	text = tc_curl((uint16_t)atoi(p + 13), "/metrics", &status);
	HT_EQ(status, 200, "HTTP status of GET /metrics");
	free(text);
	snprintf(path, sizeof(path), "%s/hbd.sock", dir);
	HT_EQ(tc_req(path, "ping\n", line, sizeof(line)), 0,
	      "reply to 'ping' on the unit's control socket %s", path);
	assert_string_equal(line, "{\"req\":1,\"ok\":true}");
	/* the unit names no sink: hbd's default is data.jsonl in $STATE_DIRECTORY */
	snprintf(path, sizeof(path), "%s/data.jsonl", dir);
	HT_EQ(access(path, F_OK), 0, "the unit's sink %s (in $STATE_DIRECTORY)", path);
	stop_unit_hbd(pid);
	forget_unit_hbd();
}

/* The set is what hbd gets: without CAP_NET_BIND_SERVICE the low port is out of reach. */
static void without_a_capability_it_cannot(void **state)
{
	char path[128];
	int status = 0;

	(void)state;
	HT_EQ(run_unit_hbd("CAP_NET_BIND_SERVICE", low_port(), &status), 0,
	      "the unit's hbd without CAP_NET_BIND_SERVICE exited at start (not running)");
	HT_TRUE(WIFEXITED(status), "the unit's hbd exited (status %#x)", status);
	HT_EQ(WEXITSTATUS(status), 3,
	      "exit code of hbd without CAP_NET_BIND_SERVICE (3: cannot listen; log: %s/hbd.err)",
	      dir);
	snprintf(path, sizeof(path), "%s/hbd.err", dir);
	HT_TRUE(ht_file_contains(path, "Permission denied", NULL, 0),
		"'Permission denied' for the low port in %s", path);
	forget_unit_hbd();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(verify_units),
		cmocka_unit_test_teardown(unit_command_runs_with_its_capabilities, ht_reap),
		cmocka_unit_test_teardown(without_a_capability_it_cannot, ht_reap),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("systemd", tests, setup, teardown);
}
