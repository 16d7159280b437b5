// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Faults, with the BPF side loaded on a veth between two namespaces:
 *   - kill -9 of hbd: XDP goes on answering admitted UDP sessions for the grace period, then
 *     stops (a dead service must not look alive); a new hbd brings them back;
 *   - restart within the grace period: the new hbd takes the UDP sessions over from the pinned
 *     map (no heartbeat of 100 devices missed, DATA/ECHO/BYE of an adopted session work),
 *     removes conns entries of dead connections, and refuses to run beside another hbd;
 *   - the NIC goes down and up, its XDP program disappears: hbd says so, heartbeats go on in
 *     userspace;
 *   - no bpffs, a BPF load that fails: a clear message, the userspace path serves;
 *   - kernel maps full: the next devices are served in userspace, the others stay the kernel's;
 *   - the pin directory and its pins are root's alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <bpf/bpf.h>
#include <cmocka.h>
#include <pwd.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "lib/ht_assert.h"
#include "lib/hbd_harness.h"
#include "lib/run_prog.h"
#include "lib/netns_env.h"
#include "lib/sh.h"

#define PORT 7641
#define PORT_S "7641"

static struct hn_env E;

/* hbd on the loaded port; the interval sets expiry (1.5 intervals), so a test that keeps a
 * session silent on purpose gives it a long one.
 */
static const char *const *hbd_args(const char *grace, const char *interval)
{
	static const char *args[16];

	args[0] = "--pin-path";
	args[1] = E.pin;
	args[2] = "--port";
	args[3] = PORT_S;
	args[4] = "--grace";
	args[5] = grace;
	args[6] = "--interval";
	args[7] = interval;
	args[8] = "--workers";
	args[9] = "2";
	args[10] = NULL;
	return args;
}

/* One UDP PING; true if its PONG came within ms. */
static bool udp_ping(int fd, uint64_t tok, uint16_t seq, int ms)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping p = { .ts = htobe64(seq) };
	struct hb_frame f;
	uint64_t end = ht_now_ms() + (uint64_t)ms;

	if (ht_udp_send(fd, PORT, false, HB_PING, seq, tok, &p, sizeof(p)))
		return false;
	while (ht_now_ms() < end) {
		if (ht_udp_recv(fd, buf, &f, (int)(end - ht_now_ms())) != 1)
			return false;
		if (f.type == HB_PONG && f.seq == seq)
			return true;
	}
	return false;
}

static int find_hbload(char *path, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	exe[n > 0 ? n : 0] = 0;
	return hbt_find("hbload", exe, path, len);
}

/* hbload in the client namespace; its JSON summary comes out of *out_fd. */
static pid_t spawn_hbload(const char *keys, const char *proto, int clients, int first,
			  double seconds, int *out_fd)
{
	static char hbload[PATH_MAX], ns[96], c[16], f[16], dur[16];
	const char *argv[] = { "nsenter",
			       ns,
			       hbload,
			       "--server",
			       HN_SRV_ADDR,
			       "--port",
			       PORT_S,
			       "--clients",
			       c,
			       "--proto",
			       proto,
			       "--interval",
			       "0.2",
			       "--duration",
			       dur,
			       "--keys",
			       keys,
			       "--first-device",
			       f,
			       "--source",
			       "10.77.1.1-10.77.1.4",
			       "--json",
			       "--no-progress",
			       NULL };

	HT_EQ(find_hbload(hbload, sizeof(hbload)), 0, "$BUILD/hbload found");
	snprintf(ns, sizeof(ns), "--net=/run/netns/%s", E.cli_ns);
	snprintf(c, sizeof(c), "%d", clients);
	snprintf(f, sizeof(f), "%d", first);
	snprintf(dur, sizeof(dur), "%.1f", seconds);
	return hbt_spawn("/usr/bin/nsenter", argv, out_fd, "/dev/null");
}

static void kill9(struct ht_daemon *d)
{
	kill(d->pid, SIGKILL);
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
}

/* kill -9: the kernel answers for the grace period, then stops; a new hbd brings them back. */
static void kill9_grace_then_stop(void **state)
{
	struct ht_daemon d, d2;
	uint64_t tok, t_kill, last_pong = 0;
	long long dead0;
	int u, tcp;

	(void)state;
	HT_EQ(ht_start(&d, hbd_args("2", "1")), 0, "hbd with --grace 2 started in %s", E.srv_ns);
	HT_EQ(hn_enter_cli(&E), 0, "step into the client netns %s", E.cli_ns);
	u = ht_udp(false);
	tok = ht_udp_login(u, PORT, false, 1);
	HT_NE(tok, 0, "UDP login of device 1");
	tcp = ht_tcp_login(PORT, 2, false, NULL);
	HT_GE(tcp, 0, "TCP login of device 2");
	for (uint16_t i = 0; i < 5; i++)
		HT_TRUE(udp_ping(u, tok, i, 500), "XDP PONG for PING %u before the kill", i);
	dead0 = hn_stat(&E, "kernel.xdp_daemon_dead");
	kill9(&d);
	t_kill = ht_now_ms();
	/* the TCP connection went with the process */
	HT_TRUE(ht_eof(tcp, 2000), "the TCP connection closed by the kill -9");
	close(tcp);
	for (uint16_t i = 100; ht_now_ms() - t_kill < 3500; i++) {
		if (udp_ping(u, tok, i, 80))
			last_pong = ht_now_ms();
		ht_sleep_ms(20);
	}
	printf("kill -9 with --grace 2: XDP answered for %llu ms after the kill, then stopped\n",
	       (unsigned long long)(last_pong - t_kill));
	/* the last stamp is up to 250 ms older than the kill */
	HT_GE(last_pong - t_kill, 1500,
	      "ms XDP answered after kill -9 with --grace 2 (the stamp is up to 250 ms older)");
	HT_LE(last_pong - t_kill, 2300, "ms XDP answered after kill -9 with --grace 2");
	HT_GT(hn_stat(&E, "kernel.xdp_daemon_dead"), dead0,
	      "xdp_daemon_dead moved (from %lld) once the grace ran out", dead0);

	/* a new daemon: it takes the session over and the kernel answers it again */
	hn_leave(&E);
	HT_EQ(ht_start(&d2, hbd_args("2", "1")), 0, "new hbd started");
	HT_TRUE(ht_file_contains(d2.err, "took over 1 UDP sessions", NULL, 0),
		"the new hbd took over the session, says %s", d2.err);
	HT_EQ(hn_enter_cli(&E), 0, "step into the client netns %s", E.cli_ns);
	HT_TRUE(udp_ping(u, tok, 999, 1000), "PONG for the taken-over session");
	close(u);
	hn_leave(&E);
	HT_EQ(ht_stop(&d2), 0, "exit code of the new hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d2, "adopted"), 1, "the adopted exit counter");
	ht_cleanup(&d2);
	ht_cleanup(&d);
}

/* kill -9 and restart within the grace period while 100 UDP devices heartbeat. */
static void restart_adopts_pinned_state(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_conn_key stale = { .cookie = 0x5ca1ab1e };
	struct hb_conn sv = { .state = HB_STATE_AUTHED, .device_id = 77 };
	struct ht_daemon d, d2, d3;
	struct hb_frame f;
	struct hb_bye bye = { 0 };
	char out[4096], path[160];
	int u, tcp, hb_out = -1, conns_fd;
	uint64_t tok, t0;
	pid_t hb;
	size_t n;

	(void)state;
	HT_EQ(ht_start(&d, hbd_args("5", "5")), 0, "hbd with --grace 5 started");
	HT_EQ(hn_enter_cli(&E), 0, "step into the client netns %s", E.cli_ns);
	u = ht_udp(false);
	tok = ht_udp_login(u, PORT, false, 1);
	HT_NE(tok, 0, "UDP login of device 1");
	hn_leave(&E);
	hb = spawn_hbload(d.keys, "udp", 100, 100, 6, &hb_out);
	HT_GT(hb, 0, "hbload with 100 UDP devices spawned");
	ht_sleep_ms(2000);
	/* a conns entry whose connection is long gone (sock_ops missed its close) */
	snprintf(path, sizeof(path), "%s/%s", E.pin, HB_MAP_CONNS);
	conns_fd = bpf_obj_get(path);
	HT_GE(conns_fd, 0, "open of the pinned conns map %s", path);
	HT_EQ(bpf_map_update_elem(conns_fd, &stale, &sv, BPF_ANY), 0, "stale conns entry written");

	kill9(&d);
	t0 = ht_now_ms();
	ht_sleep_ms(1000);
	HT_EQ(ht_start(&d2, hbd_args("5", "5")), 0, "new hbd started 1 s after the kill");
	printf("restart: new hbd ready %llu ms after the kill\n",
	       (unsigned long long)(ht_now_ms() - t0));
	HT_TRUE(ht_file_contains(d2.err, "took over 101 UDP sessions", NULL, 0),
		"the new hbd took over 101 sessions, says %s", d2.err);
	HT_NE(bpf_map_lookup_elem(conns_fd, &stale, &sv), 0,
	      "stale conns entry removed by the new hbd");
	close(conns_fd);

	/* a second daemon on the same pins is refused */
	HT_NE(ht_start(&d3, hbd_args("5", "5")), 0, "a second hbd on the same pins refused");

	/* the adopted session works end to end with the token it had */
	HT_EQ(hn_enter_cli(&E), 0, "step into the client netns %s", E.cli_ns);
	HT_TRUE(udp_ping(u, tok, 7, 1000), "PONG for the adopted session");
	HT_EQ(ht_udp_send(u, PORT, false, HB_ECHO, 8, tok, "still me", 8), 0,
	      "ECHO of the adopted session sent");
	HT_EQ(ht_udp_recv(u, buf, &f, HT_IO_MS), 1, "an answer to the ECHO within %d ms", HT_IO_MS);
	HT_EQ(f.type, HB_ECHO, "frame type of the answer to the adopted session's ECHO");
	HT_EQ(ht_udp_send(u, PORT, false, HB_DATA, 9, tok, "kept", 4), 0,
	      "DATA of the adopted session sent");
	HT_EQ(ht_udp_recv(u, buf, &f, HT_IO_MS), 1, "an answer to the DATA within %d ms", HT_IO_MS);
	HT_EQ(f.type, HB_ACK, "frame type of the answer to the adopted session's DATA");
	HT_EQ(ht_udp_send(u, PORT, false, HB_BYE, 10, tok, &bye, sizeof(bye)), 0,
	      "BYE of the adopted session sent");
	ht_sleep_ms(200);
	HT_FALSE(udp_ping(u, tok, 11, 300),
		 "no PONG after the BYE (the kernel no longer answers it)");
	close(u);
	/* TCP devices reconnect to the new daemon */
	tcp = ht_tcp_login(PORT, 3, false, NULL);
	HT_GE(tcp, 0, "TCP login to the new hbd");
	close(tcp);
	hn_leave(&E);

	n = hbt_drain(hb_out, out, sizeof(out), time(NULL) + 30);
	out[n] = 0;
	HT_EQ(hbt_reap(hb, time(NULL) + 10), 0, "hbload's exit code");
	printf("100 UDP devices across kill -9 + restart: %s", out);
	HT_EQ(hbt_num(out, "connected_end"), 100, "hbload's devices connected at the end");
	HT_EQ(hbt_num(out, "lost"), 0, "hbload's lost heartbeats");
	HT_EQ(hbt_num(out, "pongs"), hbt_num(out, "pings"), "hbload's PONGs against its PINGs");
	HT_EQ(ht_stop(&d2), 0, "exit code of the new hbd after SIGTERM");
	HT_GE(ht_exit_stat(&d2, "adopted"), 101,
	      "the adopted exit counter (100 hbload devices and device 1)");
	HT_GE(ht_exit_stat(&d2, "stale_conns"), 1, "the stale_conns exit counter");
	ht_cleanup(&d2);
	ht_cleanup(&d);
}

/* NIC down and up, XDP program removed: hbd says so; heartbeats go on (userspace if need be). */
static void nic_down_up_and_xdp_gone(void **state)
{
	struct ht_daemon d;
	long long user0, kern0;
	uint64_t tok;
	int u, ok = 0;

	(void)state;
	HT_EQ(ht_start(&d, hbd_args("5", "5")), 0, "hbd with --grace 5 started");
	HT_EQ(hn_enter_cli(&E), 0, "step into the client netns %s", E.cli_ns);
	u = ht_udp(false);
	tok = ht_udp_login(u, PORT, false, 1);
	HT_NE(tok, 0, "UDP login of device 1");
	HT_TRUE(udp_ping(u, tok, 1, 500), "XDP PONG before the NIC goes down");

	HT_EQ(hbt_sh("ip -n %s link set %s down", E.srv_ns, E.srv_if), 0, "ip link set %s down",
	      E.srv_if);
	ht_sleep_ms(1500);
	HT_TRUE(ht_file_contains(d.err, "is down: no heartbeat reaches", NULL, 0),
		"hbd says %s is down, in %s", E.srv_if, d.err);
	HT_FALSE(udp_ping(u, tok, 2, 300), "no PONG while %s is down", E.srv_if);
	HT_EQ(hbt_sh("ip -n %s link set %s up && ip -n %s route replace 10.77.0.0/16 dev %s",
		     E.srv_ns, E.srv_if, E.srv_ns, E.srv_if),
	      0, "ip link set %s up, route back", E.srv_if);
	/* the peer notices the carrier again, routes come back */
	for (uint16_t i = 3; i < 60 && !ok; i++)
		ok = udp_ping(u, tok, i, 200);
	HT_TRUE(ok, "a PONG within 57 tries once %s is up", E.srv_if);
	ht_sleep_ms(1200);
	HT_TRUE(ht_file_contains(d.err, "is up with its XDP program", NULL, 0),
		"hbd says %s is up with its XDP program, in %s", E.srv_if, d.err);
	kern0 = hn_stat(&E, "kernel.xdp_pong");
	user0 = hn_stat(&E, "user.pings_user");
	HT_TRUE(udp_ping(u, tok, 70, 500), "PONG after the NIC came back");
	HT_EQ(hn_stat(&E, "kernel.xdp_pong"), kern0 + 1, "xdp_pong moved by the one PING");
	HT_EQ(hn_stat(&E, "user.pings_user"), user0, "pings_user unmoved (XDP answered)");

	/* the XDP program goes: the daemon answers, and says why */
	HT_EQ(hbt_sh("ip -n %s link set dev %s xdp off", E.srv_ns, E.srv_if), 0,
	      "XDP program removed from %s", E.srv_if);
	ht_sleep_ms(1500);
	HT_TRUE(ht_file_contains(d.err, "has no XDP program any more", NULL, 0),
		"hbd says %s has no XDP program, in %s", E.srv_if, d.err);
	for (uint16_t i = 80; i < 85; i++)
		HT_TRUE(udp_ping(u, tok, i, 500), "PONG %u from hbd without XDP", i);
	HT_GE(hn_stat(&E, "user.pings_user"), user0 + 5,
	      "pings_user moved by the 5 PINGs hbd answered (from %lld)", user0);
	close(u);
	hn_leave(&E);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
}

/* A load that fails and a missing bpffs: one clear line each, and hbd serves in userspace. */
static void bpf_unavailable(void **state)
{
	static const char *const nobpffs[] = { "--pin-path", "/tmp/hbh-not-bpffs/hbeat", NULL };
	struct ht_daemon d;
	char line[512];
	int fd;

	(void)state;
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s %s/hbctl load --dev no-such-nic "
		     "--pin-path %s-2 2>%s-err.txt",
		     E.srv_ns, E.build, E.pin, "/tmp/hbh-faults"),
	      2, "exit code of hbctl load --dev no-such-nic (2: environment)");
	HT_TRUE(ht_file_contains("/tmp/hbh-faults-err.txt", "no such NIC", line, sizeof(line)),
		"hbctl says there is no such NIC");
	unlink("/tmp/hbh-faults-err.txt");

	hn_unaim();
	HT_EQ(ht_start(&d, nobpffs), 0, "hbd with a pin path that is not on bpffs started");
	HT_TRUE(ht_file_contains(d.err, "no bpffs at /tmp/hbh-not-bpffs/hbeat", NULL, 0),
		"hbd says there is no bpffs, in %s", d.err);
	HT_TRUE(ht_file_contains(d.err, "mode=userspace(bpf-not-loaded)", NULL, 0),
		"'mode=userspace(bpf-not-loaded)' in %s", d.err);
	fd = ht_tcp_login(d.port, 1, false, NULL);
	HT_GE(fd, 0, "login served in userspace");
	close(fd);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
	hn_aim(&E);
}

/* The pins hold session tokens and peer addresses: root's alone. */
static void pins_root_only(void **state)
{
	struct stat st;
	char path[160];
	pid_t pid;
	int status;

	(void)state;
	HT_EQ(stat(E.pin, &st), 0, "stat of the pin directory %s", E.pin);
	HT_EQ(st.st_mode & 07777, 0700, "mode of the pin directory");
	HT_EQ(st.st_uid, 0, "owner of the pin directory");
	for (const char *const *m = (const char *const[]){ HB_MAP_CONNS, HB_MAP_SESSIONS,
							   HB_MAP_CONFIG, HB_MAP_USTATS, NULL };
	     *m; m++) {
		snprintf(path, sizeof(path), "%s/%s", E.pin, *m);
		HT_EQ(stat(path, &st), 0, "stat of pin %s", path);
		HT_EQ(st.st_mode & 0077, 0, "group and other bits of pin %s (nothing for them)",
		      path);
	}
	/* as nobody: neither the directory nor a map can be opened */
	pid = fork();
	HT_GE(pid, 0, "fork of the child that runs as nobody");
	if (pid == 0) {
		struct passwd *pw = getpwnam("nobody");

		if (!pw || setgid(pw->pw_gid) || setuid(pw->pw_uid))
			_exit(2);
		snprintf(path, sizeof(path), "%s/%s", E.pin, HB_MAP_SESSIONS);
		if (open(E.pin, O_RDONLY | O_DIRECTORY) >= 0 || errno != EACCES)
			_exit(3);
		if (bpf_obj_get(path) >= 0)
			_exit(4);
		_exit(0);
	}
	HT_EQ(waitpid(pid, &status, 0), pid, "wait for the child that runs as nobody");
	HT_TRUE(WIFEXITED(status), "the child that runs as nobody exited (status %#x)", status);
	HT_EQ(WEXITSTATUS(status), 0,
	      "exit code as nobody (2: setuid, 3: directory opened, 4: map opened)");
}

/* Kernel maps with room for three of each: the fourth device is served in userspace, the
 * first three stay the kernel's.
 */
static void full_kernel_maps(void **state)
{
	struct ht_daemon d;
	long long user0, xdp0, sk0;
	uint64_t tok[4];
	int u[4], t[4];

	(void)state;
	hn_unload(&E);
	HT_EQ(hn_load(&E, PORT, "--max-conns 3 --max-sessions 3"), 0, "hbctl load with maps of 3");
	HT_EQ(ht_start(&d, hbd_args("5", "5")), 0, "hbd started");
	HT_EQ(hn_enter_cli(&E), 0, "step into the client netns %s", E.cli_ns);
	for (int i = 0; i < 4; i++) {
		u[i] = ht_udp(false);
		HT_NE(tok[i] = ht_udp_login(u[i], PORT, false, (uint64_t)(1 + i)), 0,
		      "UDP login of device %d", 1 + i);
		HT_GE((t[i] = ht_tcp_login(PORT, (uint64_t)(100 + i), false, NULL)), 0,
		      "TCP login of device %d", 100 + i);
	}
	user0 = hn_stat(&E, "user.pings_user");
	xdp0 = hn_stat(&E, "kernel.xdp_pong");
	sk0 = hn_stat(&E, "kernel.sk_pong");
	for (int i = 0; i < 4; i++) {
		struct hb_ping p = { .ts = 1 };

		HT_TRUE(udp_ping(u[i], tok[i], (uint16_t)i, 1000), "PONG for UDP device %d", 1 + i);
		HT_EQ(ht_send_frame(t[i], HB_PING, (uint16_t)i, &p, sizeof(p)), 0,
		      "PING of TCP device %d sent", 100 + i);
		HT_TRUE(ht_expect(t[i], HB_PONG, -1), "PONG for TCP device %d", 100 + i);
	}
	printf("maps of 3: xdp_pong +%lld, sk_pong +%lld, pings_user +%lld\n",
	       hn_stat(&E, "kernel.xdp_pong") - xdp0, hn_stat(&E, "kernel.sk_pong") - sk0,
	       hn_stat(&E, "user.pings_user") - user0);
	HT_EQ(hn_stat(&E, "kernel.xdp_pong"), xdp0 + 3,
	      "xdp_pong: three UDP devices in the kernel's map");
	HT_EQ(hn_stat(&E, "kernel.sk_pong"), sk0 + 3,
	      "sk_pong: three TCP devices in the kernel's map");
	HT_EQ(hn_stat(&E, "user.pings_user"), user0 + 2,
	      "pings_user: the fourth of each, in userspace");
	HT_EQ(hn_stat(&E, "user.map_full"), 2, "the map_full counter");
	for (int i = 0; i < 4; i++) {
		close(u[i]);
		close(t[i]);
	}
	hn_leave(&E);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
}

static int setup(void **state)
{
	(void)state;
	if (hn_up(&E, 'f', 8) || hn_load(&E, PORT, ""))
		return -1;
	hn_aim(&E);
	return 0;
}

static int teardown(void **state)
{
	ht_reap(state);
	hn_down(&E);
	return 0;
}

static int each_teardown(void **state)
{
	hn_leave(&E);
	return ht_reap(state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pins_root_only),
		cmocka_unit_test_teardown(kill9_grace_then_stop, each_teardown),
		cmocka_unit_test_teardown(restart_adopts_pinned_state, each_teardown),
		cmocka_unit_test_teardown(nic_down_up_and_xdp_gone, each_teardown),
		cmocka_unit_test_teardown(bpf_unavailable, each_teardown),
		/* last: it leaves the BPF side loaded with tiny maps */
		cmocka_unit_test_teardown(full_kernel_maps, each_teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("faults", tests, setup, teardown);
}
