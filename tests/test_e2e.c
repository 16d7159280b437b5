// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* End to end: two network namespaces on a veth pair, `hbctl load` on the server's veth, `hbd`,
 * and `hbload` with 1,000 TCP and 1,000 UDP devices. Asserts every PING answered, none by the
 * daemon, readable `bpftool map dump` of the pinned maps, DATA in the sink, silent devices
 * expired. The group teardown removes everything, also after a failed assertion; a shell trap
 * in scripts/run-tests.sh is not needed because cmocka runs teardown after every outcome but a
 * crash, and a crash still leaves the netns names unique per PID (and `netns.sh down` cleans).
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

#include "hbeat_abi.h"
#include "lib/ht_assert.h"
#include "lib/sh.h"

#define CLIENTS 1000
#define SILENT 2 /* devices that authenticate and then never heartbeat */
#define DURATION 6 /* seconds of heartbeats per transport */
#define PORT 7611
#define METRICS_PORT 7612 /* inside the server namespace */

#define STR_(x) #x
#define STR(x) STR_(x)

struct e2e {
	const char *build;
	char name[16]; /* netns prefix */
	char srv_ns[32], cli_ns[32], srv_if[24];
	char dir[64]; /* keys, sink, logs */
	char pin[64];
	pid_t hbd;
	int loaded;
};

static struct e2e E;

/* Runs a shell command and returns its first line of output as a number (-1 on failure). */
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

/* A field of a one-line JSON file, through jq. */
static long long jnum(const char *file, const char *path)
{
	return sh_num("jq -r '%s' %s/%s", path, E.dir, file);
}

/* A sample from the scraped metrics.txt (-1 if absent). */
static long long metric(const char *series)
{
	return sh_num("awk -v s='%s' '$1 == s { print $2 }' %s/metrics.txt", series, E.dir);
}

static void stop_hbd(void)
{
	int status;

	if (E.hbd <= 0)
		return;
	kill(E.hbd, SIGTERM);
	for (int i = 0; i < 100; i++) {
		if (waitpid(E.hbd, &status, WNOHANG) == E.hbd) {
			E.hbd = 0;
			return;
		}
		usleep(100 * 1000);
	}
	kill(E.hbd, SIGKILL);
	waitpid(E.hbd, &status, 0);
	E.hbd = 0;
}

static int teardown(void **state)
{
	stop_hbd();
	if (E.loaded)
		hbt_sh("nsenter --net=/run/netns/%s %s/hbctl unload --dev %s --pin-path %s >/dev/null",
		       E.srv_ns, E.build, E.srv_if, E.pin);
	hbt_sh("BUILD=%s scripts/netns.sh down %s", E.build, E.name);
	hbt_sh("rm -rf %s", E.pin); /* only if unload could not run */
	hbt_sh("rm -rf %s", E.dir);
	return 0;
}

static int setup(void **state)
{
	pid_t me = getpid();

	E.build = getenv("BUILD") ? getenv("BUILD") : "build";
	snprintf(E.name, sizeof(E.name), "hbe%d", me % 100000);
	snprintf(E.srv_ns, sizeof(E.srv_ns), "%s-srv", E.name);
	snprintf(E.cli_ns, sizeof(E.cli_ns), "%s-cli", E.name);
	snprintf(E.srv_if, sizeof(E.srv_if), "%s-s", E.name);
	snprintf(E.dir, sizeof(E.dir), "/tmp/hbeat-e2e-%d", me);
	snprintf(E.pin, sizeof(E.pin), "/sys/fs/bpf/hbeat-e2e-%d", me);

	if (hbt_sh("BUILD=%s scripts/netns.sh up %s 4 >&2", E.build, E.name))
		goto fail;
	if (mkdir(E.dir, 0700))
		goto fail;
	if (hbt_sh("printf '1-100000 derive %%s\\n' $(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n')"
		   " > %s/keys",
		   E.dir))
		goto fail;
	/* --tcp kernel (the default, said here because this test is about it): the sockmap path
	 * answers TCP heartbeats */
	if (hbt_sh("nsenter --net=/run/netns/%s %s/hbctl load --dev %s --mode native --port %d "
		   "--tcp kernel --pin-path %s >&2",
		   E.srv_ns, E.build, E.srv_if, PORT, E.pin))
		goto fail;
	E.loaded = 1;

	E.hbd = fork();
	if (E.hbd < 0)
		goto fail;
	if (E.hbd == 0) {
		char ns[64], port[8], keys[96], sink[96], log[96], hbd[128], ctl[96];
		int fd;

		snprintf(ns, sizeof(ns), "/run/netns/%s", E.srv_ns);
		fd = open(ns, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET))
			_exit(127);
		snprintf(port, sizeof(port), "%d", PORT);
		snprintf(keys, sizeof(keys), "%s/keys", E.dir);
		snprintf(sink, sizeof(sink), "%s/sink.jsonl", E.dir);
		snprintf(log, sizeof(log), "%s/hbd.log", E.dir);
		snprintf(hbd, sizeof(hbd), "%s/hbd", E.build);
		fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0)
			dup2(fd, STDERR_FILENO);
		snprintf(ctl, sizeof(ctl), "%s/ctl.sock", E.dir);
		execl(hbd, "hbd", "--port", port, "--keys", keys, "--sink", sink, "--interval", "1",
		      "--pin-path", E.pin, "--max-clients", "4096", "--control", ctl, "--metrics",
		      "127.0.0.1:" STR(METRICS_PORT), (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 100; i++) {
		if (hbt_sh("nsenter --net=/run/netns/%s ss -Hltn 'sport = :%d' | grep -q .",
			   E.srv_ns, PORT) == 0)
			return 0;
		if (waitpid(E.hbd, NULL, WNOHANG) == E.hbd) {
			E.hbd = 0;
			hbt_sh("cat %s/hbd.log >&2", E.dir);
			goto fail;
		}
		usleep(100 * 1000);
	}
fail:
	fprintf(stderr, "e2e setup failed (errno %d: %s)\n", errno, strerror(errno));
	teardown(state);
	return -1;
}

/* Runs hbload for one transport in the client namespace; while it runs, dumps the pinned map
 * that holds that transport's devices with bpftool into MAP.dump.
 */
static void run_load_as(const char *proto, const char *map, const char *extra, const char *out)
{
	pid_t pid = fork();
	HT_GE(pid, 0, "fork for hbload --proto %s", proto);
	if (pid == 0) {
		char cmd[1024];

		snprintf(
			cmd, sizeof(cmd),
			"timeout --kill-after=5 %d nsenter --net=/run/netns/%s %s/hbload --server 10.77.0.1 --port %d "
			"--clients %d --proto %s --interval 1 --duration %d --keys %s/keys "
			"--source 10.77.1.1-10.77.1.4 --data-every 3 --echo-every 4 --silent %d "
			"%s --json > %s/%s",
			DURATION + 60, E.cli_ns, E.build, PORT, CLIENTS, proto, DURATION, E.dir,
			SILENT, extra, E.dir, out);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	sleep(DURATION / 2 + 1);
	HT_EQ(hbt_sh("bpftool map dump pinned %s/%s > %s/%s.dump", E.pin, map, E.dir, map), 0,
	      "bpftool dump of %s/%s into %s/%s.dump", E.pin, map, E.dir, map);
	/* and hbctl's listing of the same maps, read in batches (more than one here) */
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s %s/hbctl conns --pin-path %s --json "
		     "> %s/%s.hbctl.json",
		     E.srv_ns, E.build, E.pin, E.dir, map),
	      0, "hbctl conns --json into %s/%s.hbctl.json", E.dir, map);
	int status;
	HT_EQ(waitpid(pid, &status, 0), pid, "wait for hbload --proto %s", proto);
	HT_TRUE(WIFEXITED(status), "hbload --proto %s exited (status %#x); its summary is in %s/%s",
		proto, status, E.dir, out);
	HT_EQ(WEXITSTATUS(status), 0, "exit code of hbload --proto %s (summary in %s/%s)", proto,
	      E.dir, out);
}

static void run_load(const char *proto, const char *map)
{
	char out[32];

	snprintf(out, sizeof(out), "%s.json", proto);
	run_load_as(proto, map, "", out);
}

static void check_run(const char *proto)
{
	char file[32];
	long long pings, pongs;

	snprintf(file, sizeof(file), "%s.json", proto);
	HT_EQ(jnum(file, ".clients"), CLIENTS, ".clients in %s/%s", E.dir, file);
	HT_EQ(jnum(file, ".connected"), CLIENTS, ".connected in %s/%s", E.dir, file);
	HT_EQ(jnum(file, ".auth_failed"), 0, ".auth_failed in %s/%s", E.dir, file);
	pings = jnum(file, ".pings");
	pongs = jnum(file, ".pongs");
	/* (CLIENTS - SILENT) devices at 1/s for DURATION s: well above half of that */
	HT_GT(pings, (CLIENTS - SILENT) * DURATION / 2,
	      "PINGs of the %d talking %s devices in %d s (at 1/s)", CLIENTS - SILENT, proto,
	      DURATION);
	HT_EQ(pongs, pings, "PONGs against PINGs in %s/%s", E.dir, file);
	HT_EQ(jnum(file, ".lost"), 0, ".lost in %s/%s", E.dir, file);
	HT_GT(jnum(file, ".rtt_us.p50"), 0, "RTT p50 in %s/%s", E.dir, file);
	HT_GE(jnum(file, ".rtt_us.p99"), jnum(file, ".rtt_us.p50"), "RTT p99 against p50 in %s/%s",
	      E.dir, file);
	HT_GT(jnum(file, ".data_sent"), 0, "DATA frames sent (every 3rd heartbeat) in %s/%s", E.dir,
	      file);
	HT_EQ(jnum(file, ".data_acked"), jnum(file, ".data_sent"),
	      ".data_acked against .data_sent in %s/%s", E.dir, file);
	HT_GT(jnum(file, ".echo_sent"), 0, "ECHOs sent (every 4th heartbeat) in %s/%s", E.dir,
	      file);
	HT_EQ(jnum(file, ".echo_ok"), jnum(file, ".echo_sent"),
	      ".echo_ok against .echo_sent in %s/%s", E.dir, file);
}

/* bpftool printed BTF-typed, named fields: the device id, the state by name, the peer as text. */
static void check_dump(const char *map, int want_entries)
{
	long long authed =
		sh_num("jq '[.[] | select(.value.state == \"HB_STATE_AUTHED\")] | length'"
		       " %s/%s.dump",
		       E.dir, map);
	long long with_peer = sh_num("jq '[.[] | select(.value.peer | startswith(\"10.77.1.\"))]"
				     " | length' %s/%s.dump",
				     E.dir, map);
	/* distinct ids in the simulator's range: each device its own entry */
	long long with_dev = sh_num("jq '[.[] | select(.value.device_id >= 1 and "
				    ".value.device_id <= %d) | .value.device_id] | unique | length'"
				    " %s/%s.dump",
				    CLIENTS, E.dir, map);
	long long beating = sh_num("jq '[.[] | select(.value.pings > 0 and .value.last_seen_ns > 0"
				   " and .value.last_seq >= 0)] | length' %s/%s.dump",
				   E.dir, map);

	const char *rows = strcmp(map, "conns") ? "sessions" : "conns";
	/* hbctl conns: every device once, authenticated, heard from (hbd's or the kernel's stamp) */
	long long listed = sh_num("jq '[.%s[] | select(.state == \"authed\" and .device_id >= 1 and"
				  " .device_id <= %d and .last_seen_ms_ago != null) | .device_id]"
				  " | unique | length' %s/%s.hbctl.json",
				  rows, CLIENTS, E.dir, map);

	if (authed < want_entries || with_peer < want_entries || with_dev < want_entries ||
	    beating < want_entries) {
		hbt_sh("head -c 1500 %s/%s.dump >&2", E.dir, map);
		fail_msg("%s dump: %lld authed, %lld with peer text, %lld with device id, %lld "
			 "heartbeating; want %d",
			 map, authed, with_peer, with_dev, beating, want_entries);
	}
	HT_GE(listed, want_entries,
	      "devices hbctl conns lists as authed and heard from (%s/%s.hbctl.json)", E.dir, map);
}

static void test_tcp(void **state)
{
	run_load("tcp", "conns");
	check_run("tcp");
	/* the silent devices are gone from the map by the time of the dump: expired */
	check_dump("conns", CLIENTS - SILENT);
	/* the silent devices were expired by the daemon and told so */
	HT_EQ(jnum("tcp.json", ".expired"), SILENT,
	      "TCP devices expired by the daemon (.expired in %s/tcp.json)", E.dir);
}

/* The same TCP devices heartbeating with BEATs: the verdict takes every one (no answer frame,
 * nothing for hbd), hbd's expiry reads the stamps they leave and expires only the silent
 * devices, and DATA and ECHO between the BEATs are served as ever. */
static void test_tcp_beat(void **state)
{
	long long beats, k0, k1;

	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s %s/hbctl stats --json --pin-path %s > "
		     "%s/stats-before-beat.json",
		     E.srv_ns, E.build, E.pin, E.dir),
	      0, "hbctl stats --json before the BEAT run");
	run_load_as("tcp", "conns", "--beat", "tcp-beat.json");
	sleep(2); /* the silent devices' timeout (1.5 s) and a wheel tick */
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s %s/hbctl stats --json --pin-path %s > "
		     "%s/stats-beat.json",
		     E.srv_ns, E.build, E.pin, E.dir),
	      0, "hbctl stats --json after the BEAT run");
	beats = jnum("tcp-beat.json", ".beats");
	HT_EQ(jnum("tcp-beat.json", ".connected"), CLIENTS, ".connected in tcp-beat.json");
	HT_EQ(jnum("tcp-beat.json", ".pings"), 0, "PINGs sent with --beat");
	HT_GT(beats, (CLIENTS - SILENT) * DURATION / 2, "BEATs of the %d talking devices in %d s",
	      CLIENTS - SILENT, DURATION);
	k0 = jnum("stats-before-beat.json", ".kernel.sk_beat");
	k1 = jnum("stats-beat.json", ".kernel.sk_beat");
	HT_EQ(k1 - k0, beats, "BEATs the verdict took against hbload's BEATs");
	HT_EQ(jnum("stats-beat.json", ".user.beats_user"), 0, "BEATs that reached hbd");
	HT_EQ(jnum("tcp-beat.json", ".expired"), SILENT, "devices expired in the BEAT run");
	HT_EQ(jnum("stats-beat.json", ".user.expired_tcp") -
		      jnum("stats-before-beat.json", ".user.expired_tcp"),
	      SILENT, "TCP devices hbd expired in the BEAT run");
	HT_GT(jnum("tcp-beat.json", ".data_sent"), 0, "DATA frames between the BEATs");
	HT_EQ(jnum("tcp-beat.json", ".data_acked"), jnum("tcp-beat.json", ".data_sent"),
	      "DATA ACKed against DATA sent between BEATs");
	HT_EQ(jnum("tcp-beat.json", ".echo_ok"), jnum("tcp-beat.json", ".echo_sent"),
	      "ECHOs answered against ECHOs sent between BEATs");
}

static void test_udp(void **state)
{
	run_load("udp", "sessions");
	check_run("udp");
	check_dump("sessions", CLIENTS - SILENT);
}

static void test_stats_and_sink(void **state)
{
	long long tcp_pings = jnum("tcp.json", ".pings"), udp_pings = jnum("udp.json", ".pings");
	long long acked = jnum("tcp.json", ".data_acked") + jnum("udp.json", ".data_acked");

	/* let the silent UDP sessions pass their timeout (1 s x 1.5) and a wheel tick */
	sleep(2);
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s %s/hbctl stats --json --pin-path %s > "
		     "%s/stats.json",
		     E.srv_ns, E.build, E.pin, E.dir),
	      0, "hbctl stats --json into %s/stats.json", E.dir);
	/* every heartbeat was answered in the kernel, none by the daemon */
	HT_EQ(jnum("stats.json", ".pings_user"), 0,
	      "heartbeats the daemon answered (%s/stats.json)", E.dir);
	HT_EQ(jnum("stats.json", ".pings_kernel"), tcp_pings + udp_pings,
	      "heartbeats the kernel answered against hbload's PINGs (%s/stats.json)", E.dir);
	HT_EQ(jnum("stats.json", ".user.expired_tcp"), SILENT, ".user.expired_tcp in %s/stats.json",
	      E.dir);
	HT_EQ(jnum("stats.json", ".user.expired_udp"), SILENT, ".user.expired_udp in %s/stats.json",
	      E.dir);
	HT_EQ(jnum("stats.json", ".user.auth_fail"), 0, ".user.auth_fail in %s/stats.json", E.dir);
	HT_EQ(jnum("stats.json", ".user.frames_bad"), 0, ".user.frames_bad in %s/stats.json",
	      E.dir);

	/* /metrics (curl inside the server namespace) says what hbctl stats says */
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s curl -sS --max-time 5 -o %s/metrics.txt "
		     "http://127.0.0.1:%d/metrics",
		     E.srv_ns, E.dir, METRICS_PORT),
	      0, "curl of /metrics into %s/metrics.txt", E.dir);
	HT_EQ(metric("hbeat_heartbeats_kernel_total{transport=\"udp\"}") +
		      metric("hbeat_heartbeats_kernel_total{transport=\"tcp\"}"),
	      jnum("stats.json", ".pings_kernel"),
	      "kernel heartbeats in %s/metrics.txt against stats.json", E.dir);
	HT_EQ(metric("hbeat_heartbeats_kernel_total{transport=\"tcp\"}"), tcp_pings,
	      "TCP kernel heartbeats in %s/metrics.txt against hbload's", E.dir);
	HT_EQ(metric("hbeat_heartbeats_kernel_total{transport=\"udp\"}"), udp_pings,
	      "UDP kernel heartbeats in %s/metrics.txt against hbload's", E.dir);
	HT_EQ(metric("hbeat_heartbeats_user_total"), jnum("stats.json", ".pings_user"),
	      "hbeat_heartbeats_user_total against stats.json (%s)", E.dir);
	HT_EQ(metric("hbeat_expired_total{transport=\"tcp\"}"), SILENT,
	      "hbeat_expired_total for TCP in %s/metrics.txt", E.dir);
	HT_EQ(metric("hbeat_expired_total{transport=\"udp\"}"), SILENT,
	      "hbeat_expired_total for UDP in %s/metrics.txt", E.dir);
	HT_EQ(metric("hbeat_auth_total{result=\"ok\"}"), jnum("stats.json", ".user.auth_ok"),
	      "hbeat_auth_total ok against stats.json (%s)", E.dir);
	HT_EQ(metric("hbeat_auth_total{result=\"failed\"}"), 0,
	      "hbeat_auth_total failed in %s/metrics.txt", E.dir);
	HT_EQ(metric("hbeat_data_frames_total"), jnum("stats.json", ".user.frames_data"),
	      "hbeat_data_frames_total against stats.json (%s)", E.dir);
	HT_EQ(metric("hbeat_data_acked_total"), acked,
	      "hbeat_data_acked_total against hbload's data_acked");
	HT_EQ(metric("hbeat_data_bytes_total"), jnum("stats.json", ".user.data_bytes"),
	      "hbeat_data_bytes_total against stats.json (%s)", E.dir);
	HT_EQ(metric("hbeat_drops_total{reason=\"xdp_malformed\"}"),
	      jnum("stats.json", ".kernel.xdp_drop_malformed"),
	      "hbeat_drops_total xdp_malformed against stats.json (%s)", E.dir);
	HT_EQ(metric("hbeat_devices_connected{transport=\"tcp\"}"), 0,
	      "hbeat_devices_connected for TCP after the runs");
	HT_EQ(metric("hbeat_devices_connected{transport=\"udp\"}"), 0,
	      "hbeat_devices_connected for UDP after the runs");
	HT_EQ(metric("hbeat_kernel_counter_total{counter=\"sk_pong\"}"),
	      jnum("stats.json", ".kernel.sk_pong"), "sk_pong in %s/metrics.txt against stats.json",
	      E.dir);
	/* the kernel path turns no TCP keepalive on, and says how connections closed */
	HT_EQ(metric("hbeat_keepalive_set_total{result=\"ok\"}"), 0,
	      "hbeat_keepalive_set_total ok on the kernel path (%s/metrics.txt)", E.dir);
	HT_EQ(metric("hbeat_keepalive_expired_total"), 0,
	      "hbeat_keepalive_expired_total on the kernel path (%s/metrics.txt)", E.dir);
	HT_EQ(metric("hbeat_tcp_closed_total{reason=\"reset\"}"),
	      jnum("stats.json", ".kernel.sockops_close_reset"),
	      "hbeat_tcp_closed_total reset against stats.json (%s)", E.dir);
	HT_EQ(metric("hbeat_tcp_closed_total{reason=\"normal\"}"),
	      jnum("stats.json", ".kernel.sockops_close_normal"),
	      "hbeat_tcp_closed_total normal against stats.json (%s)", E.dir);
	/* every TCP device's connection ended (hbload resets them, SO_LINGER 0; a BYE or hbd's
	 * expiry closes others cleanly), none by a timer */
	HT_GE(jnum("stats.json", ".kernel.sockops_close_reset + .kernel.sockops_close_normal + "
				 ".kernel.sockops_close_error"),
	      CLIENTS, "closes sock_ops counted after hbload's %d TCP devices left (%s/stats.json)",
	      CLIENTS, E.dir);
	HT_EQ(jnum("stats.json", ".kernel.sockops_close_timeout"), 0,
	      "closes by a keepalive or user timeout on the kernel path (%s/stats.json)", E.dir);
	HT_EQ(hbt_sh("grep -q '^hbeat_build_info{.*mode=\"offload\"} 1$' %s/metrics.txt", E.dir), 0,
	      "hbeat_build_info says mode offload in %s/metrics.txt", E.dir);

	/* every acknowledged DATA frame is a valid JSON line in the sink */
	HT_EQ(sh_num("wc -l < %s/sink.jsonl", E.dir), acked,
	      "lines in %s/sink.jsonl against hbload's data_acked", E.dir);
	HT_EQ(sh_num("jq -c 'select(.device >= 1 and (.payload | length) > 0)' "
		     "%s/sink.jsonl | wc -l",
		     E.dir),
	      acked, "valid DATA lines in %s/sink.jsonl against hbload's data_acked", E.dir);
}

/* One example device (examples/device.c on the device library) in the client namespace,
 * provisioned with hbctl devices add: its heartbeats are answered in the kernel, a downlink
 * reaches it, and removing it with hbctl devices remove cuts it off in the kernel (its map
 * entry goes) and in hbd (BYE REVOKED). */
static void device_lifecycle(const char *proto, unsigned long long id)
{
	char secret[160], out[128];
	long long pings;
	pid_t pid;
	int status;

	HT_EQ(hbt_sh("%s/hbctl devices add %llu --keys %s/keys --control %s/ctl.sock > "
		     "%s/add-%llu.txt",
		     E.build, id, E.dir, E.dir, E.dir, id),
	      0, "hbctl devices add %llu (output in %s/add-%llu.txt)", id, E.dir, id);
	HT_EQ(hbt_sh("sed -n 's/^secret (shown once; store it in the device): //p' "
		     "%s/add-%llu.txt > %s/secret-%llu",
		     E.dir, id, E.dir, id),
	      0, "secret of device %llu picked out of %s/add-%llu.txt", id, E.dir, id);
	{
		FILE *f;

		snprintf(out, sizeof(out), "%s/secret-%llu", E.dir, id);
		f = fopen(out, "r");
		assert_non_null(f);
		HT_EQ(fscanf(f, "%159s", secret), 1, "secret read from %s", out);
		fclose(f);
	}
	snprintf(out, sizeof(out), "%s/device-%llu.out", E.dir, id);
	pid = fork();
	HT_GE(pid, 0, "fork for the example device %llu", id);
	if (pid == 0) {
		char cmd[1024];

		snprintf(cmd, sizeof(cmd),
			 "exec nsenter --net=/run/netns/%s %s/examples/device --server 10.77.0.1 "
			 "--port %d --id %llu --secret %s --every 0 %s > %s 2>&1",
			 E.cli_ns, E.build, PORT, id, secret, strcmp(proto, "udp") ? "" : "--udp",
			 out);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 300 && hbt_sh("grep -q connected %s", out); i++)
		usleep(10000);
	HT_EQ(hbt_sh("grep -q connected %s", out), 0,
	      "the example device %llu connected within 3 s (output in %s)", id, out);
	/* a few heartbeats (interval 1 s), each answered by XDP or the sockmap verdict */
	sleep(3);
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s %s/hbctl conns --pin-path %s --device %llu "
		     "--state authed --json > %s/conns-%llu.json",
		     E.srv_ns, E.build, E.pin, id, E.dir, id),
	      0, "hbctl conns --device %llu --state authed into %s/conns-%llu.json", id, E.dir, id);
	snprintf(out, sizeof(out), "conns-%llu.json", id);
	pings = jnum(out, strcmp(proto, "udp") ? ".conns[0].pings" : ".sessions[0].pings");
	HT_GE(pings, 2, "kernel-answered heartbeats of device %llu in %s/%s", id, E.dir, out);
	/* a downlink, acknowledged by the device */
	HT_EQ(hbt_sh("%s/hbctl send %llu 'set interval 60' --control %s/ctl.sock >&2", E.build, id,
		     E.dir),
	      0, "hbctl send to device %llu", id);
	snprintf(out, sizeof(out), "%s/device-%llu.out", E.dir, id);
	for (int i = 0; i < 100 && hbt_sh("grep -q 'downlink set interval 60' %s", out); i++)
		usleep(10000);
	HT_EQ(hbt_sh("grep -q 'downlink set interval 60' %s", out), 0,
	      "the downlink in the device's output %s within 1 s", out);
	/* revoked: the kernel forgets it and the device is told */
	HT_EQ(hbt_sh("%s/hbctl devices remove %llu --keys %s/keys --control %s/ctl.sock "
		     "--json > %s/rm-%llu.json",
		     E.build, id, E.dir, E.dir, E.dir, id),
	      0, "hbctl devices remove %llu (output in %s/rm-%llu.json)", id, E.dir, id);
	snprintf(out, sizeof(out), "rm-%llu.json", id);
	HT_EQ(jnum(out, ".sessions_cut"), 1, "sessions cut by the removal (%s/%s)", E.dir, out);
	snprintf(out, sizeof(out), "%s/device-%llu.out", E.dir, id);
	for (int i = 0; i < 100 && hbt_sh("grep -q 'disconnected %d' %s", HB_BYE_REVOKED, out); i++)
		usleep(10000);
	HT_EQ(hbt_sh("grep -q 'disconnected %d' %s", HB_BYE_REVOKED, out), 0,
	      "the device says it was revoked, in %s, within 1 s", out);
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s %s/hbctl conns --pin-path %s --device %llu "
		     "--json > %s/conns-%llu.json",
		     E.srv_ns, E.build, E.pin, id, E.dir, id),
	      0, "hbctl conns --device %llu into %s/conns-%llu.json", id, E.dir, id);
	snprintf(out, sizeof(out), "conns-%llu.json", id);
	HT_EQ(jnum(out, strcmp(proto, "udp") ? ".count.tcp" : ".count.udp"), 0,
	      "entries of the revoked device %llu left in the kernel's map", id);
	kill(pid, SIGTERM);
	HT_EQ(waitpid(pid, &status, 0), pid, "wait for the example device");
}

static void test_device_tcp(void **state)
{
	device_lifecycle("tcp", 900001);
}

static void test_device_udp(void **state)
{
	device_lifecycle("udp", 900002);
}

static void test_drain(void **state)
{
	int status;

	kill(E.hbd, SIGTERM);
	HT_EQ(waitpid(E.hbd, &status, 0), E.hbd, "wait for hbd");
	E.hbd = 0;
	HT_TRUE(WIFEXITED(status), "hbd exited after SIGTERM (status %#x)", status);
	HT_EQ(WEXITSTATUS(status), 0, "exit code of hbd after SIGTERM");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp),
		cmocka_unit_test(test_udp),
		cmocka_unit_test(test_stats_and_sink),
		cmocka_unit_test(test_tcp_beat),
		cmocka_unit_test(test_device_tcp),
		cmocka_unit_test(test_device_udp),
		cmocka_unit_test(test_drain),
	};

	if (getenv("BUILD") == NULL)
		setenv("BUILD", "build", 1);
	return cmocka_run_group_tests_name("e2e", tests, setup, teardown);
}
