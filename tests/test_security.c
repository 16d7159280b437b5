// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The security review's findings as attacks on the real daemon: each test is what an attacker
 * would do, and checks that it no longer works (docs/RELIABILITY.md, "Security review
 * findings", says which finding each one covers and what it printed before the fix).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "clock.h"
#include "lib/ctl.h"
#include "lib/ht_assert.h"
#include "lib/hbd_harness.h"
#include "lib/sh.h"
#include "udp.h"
#include "worker.h"

/* ---- running as another user ---- */

/* Runs fn(arg) in a forked child that has become user nobody (groups, gid, uid dropped for
 * good); fn's return value is the child's exit code. Returns that code, or -1.
 */
static int as_nobody(int (*fn)(void *arg), void *arg)
{
	pid_t pid = fork();
	int st;

	HT_GE(pid, 0, "fork of the child that runs as nobody");
	if (pid == 0) {
		struct passwd *pw = getpwnam("nobody");

		if (!pw || setgroups(0, NULL) || setgid(pw->pw_gid) || setuid(pw->pw_uid) ||
		    !getuid())
			_exit(100);
		_exit(fn(arg));
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* ---- finding 1: another user takes over hbd's port ---- */

struct bind_case {
	int family, type;
	const char *addr;
	int v6only; /* IPv6: -1 leaves the default */
	int reuseaddr, reuseport;
};

struct bind_try {
	uint16_t port;
	const struct bind_case *cases;
	int ncases;
	int fd; /* pipe: one errno (0: bound) per case */
};

static int bind_one(const struct bind_case *c, uint16_t port)
{
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} a = { 0 };
	int fd = socket(c->family, c->type, 0), rc = 0;
	socklen_t len;

	if (fd < 0)
		return errno;
	if (c->reuseaddr)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &c->reuseaddr, sizeof(int));
	if (c->reuseport)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &c->reuseport, sizeof(int));
	if (c->family == AF_INET6 && c->v6only >= 0)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &c->v6only, sizeof(int));
	if (c->family == AF_INET) {
		a.in.sin_family = AF_INET;
		a.in.sin_port = htons(port);
		inet_pton(AF_INET, c->addr, &a.in.sin_addr);
		len = sizeof(a.in);
	} else {
		a.in6.sin6_family = AF_INET6;
		a.in6.sin6_port = htons(port);
		inet_pton(AF_INET6, c->addr, &a.in6.sin6_addr);
		len = sizeof(a.in6);
	}
	if (bind(fd, &a.sa, len))
		rc = errno;
	else if (c->type == SOCK_STREAM && listen(fd, 1))
		rc = errno; /* bound but cannot listen: a TCP port is only taken by a listener */
	close(fd);
	return rc;
}

static int try_binds(void *arg)
{
	struct bind_try *t = arg;

	for (int i = 0; i < t->ncases; i++) {
		int e = bind_one(&t->cases[i], t->port);

		if (write(t->fd, &e, sizeof(e)) != sizeof(e))
			return 1;
	}
	return 0;
}

/* Every way another user could bind hbd's port (both protocols, wildcard and specific
 * addresses of both families, with and without the reuse options) fails while hbd runs. */
static void expect_port_held(uint16_t port, const struct bind_case *cases, int n)
{
	struct bind_try t = { .port = port, .cases = cases, .ncases = n };
	int p[2], bound = 0;

	HT_EQ(pipe(p), 0, "pipe for the results of the binds");
	t.fd = p[1];
	HT_EQ(as_nobody(try_binds, &t), 0, "the child that tries the binds as nobody");
	close(p[1]);
	for (int i = 0; i < n; i++) {
		const struct bind_case *c = &cases[i];
		int e = -1;

		HT_EQ(read(p[0], &e, sizeof(e)), sizeof(e), "result of bind %d", i);
		if (e == EADDRINUSE || e == EACCES)
			continue;
		bound++;
		fprintf(stderr,
			"as nobody: %s %s%s%s:%u v6only=%d SO_REUSEADDR=%d SO_REUSEPORT=%d: %s\n",
			c->type == SOCK_DGRAM ? "UDP" : "TCP", c->family == AF_INET6 ? "[" : "",
			c->addr, c->family == AF_INET6 ? "]" : "", port, c->v6only, c->reuseaddr,
			c->reuseport, e ? strerror(e) : "BOUND (it would take hbd's traffic)");
	}
	close(p[0]);
	HT_EQ(bound, 0,
	      "binds of hbd's port %u by another user that did not fail with "
	      "EADDRINUSE or EACCES (listed above)",
	      port);
}

static int add_cases(struct bind_case *out, int n, int family, const char *addr, int v6only)
{
	static const int types[] = { SOCK_DGRAM, SOCK_STREAM };

	for (int t = 0; t < 2; t++)
		for (int ra = 0; ra < 2; ra++)
			for (int rp = 0; rp < 2; rp++)
				out[n++] = (struct bind_case){ family, types[t], addr,
							       v6only, ra,	 rp };
	return n;
}

static void port_takeover_by_another_user(void **state)
{
	static const char *const dual[] = { "--no-offload", "--workers", "2", NULL };
	static const char *const v4[] = { "--no-offload", "--workers", "2",
					  "--bind",	  "127.0.0.1", NULL };
	struct bind_case cases[64];
	struct ht_daemon d;
	int n = 0;

	(void)state;
	/* hbd on [::], dual-stack: every local address of both families is its */
	n = add_cases(cases, n, AF_INET, "0.0.0.0", -1);
	n = add_cases(cases, n, AF_INET, "127.0.0.1", -1);
	n = add_cases(cases, n, AF_INET, "127.0.0.2", -1);
	n = add_cases(cases, n, AF_INET6, "::", 0);
	n = add_cases(cases, n, AF_INET6, "::", 1);
	n = add_cases(cases, n, AF_INET6, "::1", -1);
	n = add_cases(cases, n, AF_INET6, "::ffff:127.0.0.1", 0);
	HT_EQ(ht_start(&d, dual), 0, "hbd on [::] started");
	expect_port_held(d.port, cases, n);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);

	/* hbd on 127.0.0.1: that address, and the wildcards that cover it */
	n = 0;
	n = add_cases(cases, n, AF_INET, "0.0.0.0", -1);
	n = add_cases(cases, n, AF_INET, "127.0.0.1", -1);
	n = add_cases(cases, n, AF_INET6, "::", 0);
	n = add_cases(cases, n, AF_INET6, "::ffff:127.0.0.1", 0);
	HT_EQ(ht_start(&d, v4), 0, "hbd on 127.0.0.1 started");
	expect_port_held(d.port, cases, n);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
}

/* ---- finding 12: the sink path ---- */

/* hbd as an operator would start it: no --sink, in directory cwd, with STATE_DIRECTORY as
 * systemd sets it (NULL: unset) and the extra arguments. 0 once it is ready; otherwise its exit
 * code (d->pid 0).
 */
static int start_plain(struct ht_daemon *d, const char *cwd, const char *state_dir,
		       const char *const *extra)
{
	char hbd[PATH_MAX], line[1024], *p;
	const char *argv[32];
	uint64_t deadline;
	int argc = 0, st;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/hbdtest.XXXXXX");
	HT_TRUE(mkdtemp(d->dir) != NULL, "scratch directory");
	snprintf(d->keys, sizeof(d->keys), "%s/keys", d->dir);
	snprintf(d->err, sizeof(d->err), "%s/hbd.err", d->dir);
	snprintf(d->out, sizeof(d->out), "%s/hbd.out", d->dir);
	HT_EQ(ht_write_keys(d->keys), 0, "key store %s", d->keys);
	ht_hbd_path(hbd, sizeof(hbd));
	argv[argc++] = hbd;
	argv[argc++] = "--keys";
	argv[argc++] = d->keys;
	argv[argc++] = "--port";
	argv[argc++] = "0";
	argv[argc++] = "--no-offload";
	argv[argc++] = "--pin-path";
	argv[argc++] = d->dir;
	for (int i = 0; extra && extra[i] && argc < 30; i++)
		argv[argc++] = extra[i];
	argv[argc] = NULL;
	d->pid = fork();
	HT_GE(d->pid, 0, "fork for hbd");
	if (d->pid == 0) {
		int e = open(d->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int o = open(d->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (state_dir)
			setenv("STATE_DIRECTORY", state_dir, 1);
		else
			unsetenv("STATE_DIRECTORY");
		if (e < 0 || o < 0 || chdir(cwd))
			_exit(126);
		dup2(e, STDERR_FILENO);
		dup2(o, STDOUT_FILENO);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	ht_track(d, true);
	for (deadline = ht_now_ms() + 20000; ht_now_ms() < deadline; ht_sleep_ms(10)) {
		if (ht_file_contains(d->err, "ready:", line, sizeof(line)) &&
		    (p = strstr(line, "port="))) {
			d->port = (uint16_t)atoi(p + 5);
			return 0;
		}
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		}
	}
	return -1;
}

/* Writes text to path (mode 0644). */
static void put_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	HT_TRUE(f != NULL, "create %s", path);
	fputs(text, f);
	HT_EQ(fclose(f), 0, "write %s", path);
}

static bool file_is(const char *path, const char *text)
{
	char buf[256] = "";
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = 0;
	return !strcmp(buf, text);
}

/* An attacker who can write the directory hbd starts in (or the sink's directory) plants a
 * symbolic link where the sink goes, to a file of the victim's whose last line has no newline:
 * the tail repair at start would cut that line off, and DATA lines would be appended to it.
 */
static void sink_symlink_refused(void **state)
{
	static const char victim_text[] = "root:x:0:0\nimportant line without a newline";
	char work[64], victim[96], link[96], cmd[256];
	const char *args[3] = { "--sink", link, NULL };
	struct ht_daemon d;
	int rc;

	(void)state;
	snprintf(work, sizeof(work), "/tmp/hbsink.XXXXXX");
	HT_TRUE(mkdtemp(work) != NULL, "scratch directory for the sink");
	snprintf(victim, sizeof(victim), "%s/victim", work);
	put_file(victim, victim_text);

	/* an explicit --sink that is a symbolic link */
	snprintf(link, sizeof(link), "%s/sink.jsonl", work);
	HT_EQ(symlink(victim, link), 0, "symlink %s -> %s", link, victim);
	rc = start_plain(&d, work, NULL, args);
	if (!rc)
		ht_stop(&d);
	HT_TRUE(file_is(victim, victim_text),
		"the victim file unchanged after hbd was started with --sink %s pointing at it",
		link);
	HT_EQ(rc, 3, "hbd's exit code with a sink that is a symbolic link (3: could not start)");
	HT_TRUE(ht_file_contains(d.err, "symbolic link", NULL, 0),
		"hbd's message says the sink is a symbolic link");
	ht_cleanup(&d);

	/* no --sink, started in a directory the attacker wrote: the default is not there */
	unlink(link);
	snprintf(link, sizeof(link), "%s/hbeat-data.jsonl", work);
	HT_EQ(symlink(victim, link), 0, "symlink %s -> %s", link, victim);
	snprintf(cmd, sizeof(cmd), "%s/state", work);
	HT_EQ(mkdir(cmd, 0700), 0, "mkdir %s", cmd);
	rc = start_plain(&d, work, cmd, NULL);
	if (!rc)
		HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_TRUE(file_is(victim, victim_text),
		"the victim file unchanged after hbd was started without --sink in %s, where "
		"hbeat-data.jsonl points at it",
		work);
	HT_EQ(rc, 0, "hbd started without --sink, STATE_DIRECTORY=%s", cmd);
	snprintf(cmd, sizeof(cmd), "%s/state/data.jsonl", work);
	HT_EQ(access(cmd, F_OK), 0, "the default sink %s (in $STATE_DIRECTORY)", cmd);
	ht_cleanup(&d);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", work);
	HT_EQ(system(cmd), 0, "%s", cmd);
}

/* ---- finding 7: a UDP rebind racing the session's end ---- */

/* NAT rebinding looks the session up in the table, then writes its kernel entry with the new
 * address. A kill (expiry, BYE, supersede, revocation) that runs between the two removes the
 * table entry and the kernel entry; the write must not create the kernel entry again, or XDP
 * answers that token's PINGs for as long as hbd lives while hbd never expires it, and the seen
 * slot it stamps belongs to whichever session takes the index next. Both steps run here as the
 * worker runs them, the kill injected between them.
 */
static void rebind_after_kill_leaves_no_entry(void **state)
{
	static const uint8_t a1[16] = { [10] = 0xff, [11] = 0xff, 10, 0, 0, 1 };
	static const uint8_t a2[16] = { [10] = 0xff, [11] = 0xff, 10, 0, 0, 2 };
	struct hbd_config cfg;
	struct hbd_daemon d;
	struct hbd_worker w;
	struct hb_ustats st[1];
	struct hbd_sess_view v;
	struct hb_session ent;
	struct hbd_sess snap, gone;
	struct hb_session_key key = { .token = 0x1122334455667788ull };
	uint32_t idx;

	(void)state;
	memset(&d, 0, sizeof(d));
	memset(&w, 0, sizeof(w));
	memset(st, 0, sizeof(st));
	hbd_config_defaults(&cfg);
	d.cfg = &cfg;
	hbd_maps_init(&d.kern.maps);
	d.kern.offload = true;
	d.kern.maps.sessions =
		bpf_map_create(BPF_MAP_TYPE_HASH, "hbt_sessions", sizeof(struct hb_session_key),
			       sizeof(struct hb_session), 16, NULL);
	HT_GE(d.kern.maps.sessions, 0, "a sessions map like the pinned one");
	HT_EQ(hbd_sessions_init(&d.sessions, 16), 0, "session table");
	w.d = &d;
	w.st = st;

	/* a live session of device 7 at a1, in the table and in the kernel */
	HT_EQ(hbd_sess_alloc(&d.sessions, 0, &idx), 0, "session index");
	d.sessions.s[idx].device_id = 7;
	memcpy(d.sessions.s[idx].addr, a1, 16);
	d.sessions.s[idx].port = htons(4000);
	HT_EQ(hbd_sess_publish(&d.sessions, idx, key.token), 0, "session published");
	ent = (struct hb_session){ .port = htons(4000), .state = HB_STATE_AUTHED, .device_id = 7 };
	memcpy(ent.addr, a1, 16);
	HT_EQ(hbd_maps_sess_put(&d.kern.maps, key.token, &ent), 0, "kernel entry written");

	/* a datagram from a2: the session moves; rebind's first step, the table copy */
	HT_EQ(hbd_sess_touch(&d.sessions, key.token, a2, htons(5000), 1, &v), 0, "touch from a2");
	HT_TRUE(v.rebound, "the session moved to a2");
	HT_EQ(hbd_sess_lookup(&d.sessions, key.token, &snap), 0, "rebind's table lookup");
	/* a rebind without a kill moves the kernel entry along */
	HT_EQ(hbd_udp_rebind_entry(&w, &snap, v.idx), 0, "rebind with the session alive");
	HT_EQ(bpf_map_lookup_elem(d.kern.maps.sessions, &key, &ent), 0, "kernel entry after it");
	HT_EQ(memcmp(ent.addr, a2, 16), 0, "the kernel entry names the new address");

	/* now the kill lands between the lookup and the write (hbd_udp_kill's table and map
	 * steps, on another worker) */
	HT_EQ(hbd_sess_get(&d.sessions, v.idx, v.gen, true, &gone), 0, "the kill unhashes it");
	HT_EQ(hbd_maps_sess_delete(&d.kern.maps, key.token), 0, "the kill deletes the entry");
	hbd_sess_release(&d.sessions, v.idx);
	hbd_udp_rebind_entry(&w, &snap, v.idx);
	HT_NE(bpf_map_lookup_elem(d.kern.maps.sessions, &key, &ent), 0,
	      "no kernel entry for the killed session after the rebind's write (one would be "
	      "AUTHED, answered by XDP and never expired: state %u, device %llu)",
	      ent.state, (unsigned long long)ent.device_id);
	close(d.kern.maps.sessions);
	hbd_sessions_free(&d.sessions);
}

/* ---- finding 6: a key rotation cuts the sessions of the old key ---- */

/* A TCP HELLO of device id signed with secret (len bytes): the connected fd, or -1 if refused. */
static int tcp_login_secret(uint16_t port, uint64_t id, const uint8_t *secret, size_t len)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	struct hb_hello h;
	int fd = ht_tcp(port, false);

	HT_GE(fd, 0, "connection for device %llu", (unsigned long long)id);
	HT_EQ(hb_hello_sign(&h, id, hb_realtime_ms(), secret, len), 0, "HELLO signed");
	HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0, "HELLO of device %llu sent",
	      (unsigned long long)id);
	if (ht_recv_frame(fd, buf, &f, HT_IO_MS) == 1 && f.type == HB_WELCOME)
		return fd;
	close(fd);
	return -1;
}

static void tcp_ping_ok(int fd, uint16_t seq, const char *who)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping p = { .ts = htobe64(seq) };
	struct hb_frame f;

	HT_EQ(ht_send_frame(fd, HB_PING, seq, &p, sizeof(p)), 0, "PING of %s sent", who);
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to the PING of %s", who);
	HT_EQ(f.type, HB_PONG, "the answer to the PING of %s", who);
}

/* The test key store with device 1's and 2's secrets and the range's master replaced (rotated
 * after a leak); devices 3..9 keep theirs. */
static void write_rotated_keys(const char *path, const uint8_t new1[16], const uint8_t new2[16])
{
	FILE *f = fopen(path, "w");

	HT_TRUE(f != NULL, "rewrite %s", path);
	for (uint64_t dev = 1; dev <= 9; dev++) {
		uint8_t sec[HB_SECRET_MAX];

		ht_secret(dev, sec);
		if (dev == 1)
			memcpy(sec, new1, 16);
		if (dev == 2)
			memcpy(sec, new2, 16);
		fprintf(f, "%llu ", (unsigned long long)dev);
		for (int i = 0; i < 16; i++)
			fprintf(f, "%02x", sec[i]);
		fprintf(f, "\n");
	}
	fprintf(f, "100-199 derive %s\n",
		"ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
	HT_EQ(fclose(f), 0, "rewrite %s", path);
}

/* A device's secret leaks; the operator gives it a new one (and rotates a derive range's
 * master) and reloads. The attacker's live sessions under the old keys must end with the
 * reload, not whenever the attacker chooses to leave; sessions of unchanged keys stay. */
static void key_rotation_cuts_old_sessions(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "2", NULL };
	uint8_t new1[16], new2[16], buf[HB_MAX_FRAME];
	char ctl[108], line[1024];
	struct ht_daemon d;
	struct hb_frame f;
	int t1, t3, t150, u2, again;
	uint64_t tok2;

	(void)state;
	for (int i = 0; i < 16; i++)
		new1[i] = (uint8_t)(0xa0 + i), new2[i] = (uint8_t)(0xb0 + i);
	HT_EQ(tc_start(&d, ctl, sizeof(ctl), false, NULL, args), 0, "hbd with a control socket");
	t1 = ht_tcp_login(d.port, 1, false, NULL);
	t3 = ht_tcp_login(d.port, 3, false, NULL);
	t150 = ht_tcp_login(d.port, 150, false, NULL);
	HT_TRUE(t1 >= 0 && t3 >= 0 && t150 >= 0, "TCP logins of devices 1, 3 and 150 (old keys)");
	u2 = ht_udp(false);
	tok2 = ht_udp_login(u2, d.port, false, 2);
	HT_NE(tok2, 0, "UDP login of device 2 (old key)");

	write_rotated_keys(d.keys, new1, new2);
	HT_EQ(tc_req(ctl, "reload\n", line, sizeof(line)), 0, "reply to reload");
	HT_TRUE(strstr(line, "\"ok\":true") != NULL, "reload accepted: %s", line);
	HT_TRUE(ht_expect(t1, HB_BYE, HB_BYE_REVOKED),
		"BYE(REVOKED) to device 1's session under its replaced secret");
	HT_TRUE(ht_expect(t150, HB_BYE, HB_BYE_REVOKED),
		"BYE(REVOKED) to device 150's session under the old master of its range");
	HT_EQ(ht_udp_recv(u2, buf, &f, HT_IO_MS), 1, "a datagram to device 2's UDP session");
	HT_TRUE(f.type == HB_BYE && f.len == 2 && be16toh(*(uint16_t *)f.payload) == HB_BYE_REVOKED,
		"BYE(REVOKED) to device 2's UDP session (type %u)", f.type);
	tcp_ping_ok(t3, 1, "device 3, whose key did not change");
	HT_EQ(tc_num(line, "rekeyed_sessions"), 3, "rekeyed_sessions in the reload reply: %s",
	      line);
	/* the new keys work, old ones no more, and a reload that changes nothing cuts nothing */
	HT_EQ(tcp_login_secret(d.port, 1,
			       (uint8_t[16]){ 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28,
					      29, 30, 31 },
			       16),
	      -1, "login of device 1 with its old secret");
	again = tcp_login_secret(d.port, 1, new1, 16);
	HT_GE(again, 0, "login of device 1 with its new secret");
	HT_EQ(tc_req(ctl, "reload\n", line, sizeof(line)), 0, "reply to a second reload");
	HT_EQ(tc_num(line, "rekeyed_sessions"), 0,
	      "rekeyed_sessions of a reload that changed "
	      "nothing: %s",
	      line);
	tcp_ping_ok(again, 2, "device 1 under its new secret, after a second reload");
	tcp_ping_ok(t3, 3, "device 3 after a second reload");
	close(t1);
	close(t3);
	close(t150);
	close(u2);
	close(again);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "revoked"), 3, "the revoked exit counter");
	tc_cleanup(&d);
}

/* ---- finding 8: bad HELLOs from a shared address lock its devices out ---- */

static int tcp_from(uint16_t port, const char *src)
{
	int fd = ht_tcp_from(port, src);

	HT_GE(fd, 0, "TCP connection from %s", src);
	return fd;
}

static int udp_from(const char *src)
{
	int fd = ht_udp(false);

	HT_GE(fd, 0, "UDP socket for %s", src);
	HT_EQ(ht_bind_src(fd, src), 0, "bind to %s", src);
	return fd;
}

/* Behind carrier-grade NAT (or spoofing the address over UDP), an attacker shares its source
 * address with real devices and spends that address's failed-HELLO budget with bad MACs. A
 * device that proves itself from there must still get in; the attacker's HELLOs stay refused,
 * over TCP with ERROR(RATE), over UDP without an answer. */
static void bad_hellos_do_not_lock_out_a_source(void **state)
{
	static const char *const args[] = {
		"--no-offload", "--auth-fail-rate", "0.01", "--auth-fail-burst", "3", NULL
	};
	uint8_t buf[HB_MAX_FRAME];
	struct ht_daemon d;
	struct hb_frame f;
	struct hb_hello h;
	int fd, u;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --auth-fail-burst 3 (refilled every 100 s)");
	/* the attacker spends 127.0.0.9's budget, over both transports */
	for (int i = 0; i < 5; i++) {
		fd = tcp_from(d.port, "127.0.0.9");
		ht_hello(&h, 1, 0);
		h.mac[0] ^= 1;
		HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0, "bad HELLO %d sent", i);
		HT_TRUE(ht_expect(fd, HB_ERROR, i < 3 ? HB_ERR_AUTH : HB_ERR_RATE),
			"ERROR(%s) for bad TCP HELLO %d from 127.0.0.9", i < 3 ? "AUTH" : "RATE",
			i + 1);
		close(fd);
	}
	u = udp_from("127.0.0.9");
	for (int i = 0; i < 3; i++) {
		ht_hello(&h, 2, 0);
		h.mac[0] ^= 1;
		HT_EQ(ht_udp_send(u, d.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0,
		      "bad UDP HELLO sent");
	}
	HT_NE(ht_udp_recv(u, buf, &f, 300), 1, "no answer to bad UDP HELLOs from a spent source");
	/* a real device behind the same address */
	fd = tcp_from(d.port, "127.0.0.9");
	ht_hello(&h, 3, 0);
	HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0, "good TCP HELLO sent");
	HT_TRUE(ht_expect(fd, HB_WELCOME, -1),
		"WELCOME to a good TCP HELLO from 127.0.0.9, whose failed-HELLO budget others spent");
	close(fd);
	HT_NE(ht_udp_login(u, d.port, false, 4), 0,
	      "UDP login of device 4 from 127.0.0.9, whose failed-HELLO budget others spent");
	close(u);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_GE(ht_exit_stat(&d, "auth_rate_limited"), 3, "the auth_rate_limited exit counter");
	ht_cleanup(&d);
}

/* ---- finding 14: a HELLO is bound to one server ---- */

static void bound_hello(struct hb_hello_bound *h, uint64_t dev, uint64_t server_id)
{
	uint8_t secret[HB_SECRET_MAX];
	int n = ht_secret(dev, secret);

	HT_GT(n, 0, "secret of device %llu", (unsigned long long)dev);
	HT_EQ(hb_hello_bound_sign(h, dev, hb_realtime_ms(), server_id, secret, (size_t)n), 0,
	      "signing a HELLO bound to server %llu", (unsigned long long)server_id);
}

/* Two servers of a fleet share one key store. A HELLO captured on its way to server A (here:
 * sent there, and answered with a WELCOME) is replayed to server B within the clock window,
 * over TCP and UDP: B must refuse it. Before the fix a HELLO named no server, so B admitted the
 * copy (and superseded the device's session there, had it one). */
static void hello_bound_to_one_server(void **state)
{
	static const char *const a_args[] = { "--no-offload", "--server-id", "1", NULL };
	static const char *const b_args[] = { "--no-offload", "--server-id", "2", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct ht_daemon a, b;
	struct hb_hello_bound h, h2;
	struct hb_frame f;
	struct hb_error e;
	int fd, u;

	(void)state;
	HT_EQ(ht_start(&a, a_args), 0, "server A (--server-id 1)");
	HT_EQ(ht_start(&b, b_args), 0, "server B (--server-id 2), the same key store");
	bound_hello(&h, 5, 1);
	fd = ht_tcp(a.port, false);
	HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0, "HELLO for A sent to A");
	HT_TRUE(ht_expect(fd, HB_WELCOME, -1), "A admits device 5's HELLO bound to A");
	close(fd);
	/* the copy, to B, over both transports */
	fd = ht_tcp(b.port, false);
	HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)), 0, "A's HELLO replayed to B");
	HT_TRUE(ht_expect(fd, HB_ERROR, HB_ERR_AUTH),
		"ERROR(AUTH) from B for the HELLO device 5 sent to A (TCP)");
	close(fd);
	u = ht_udp(false);
	HT_EQ(ht_udp_send(u, b.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0, "replay over UDP");
	HT_EQ(ht_udp_recv(u, buf, &f, HT_IO_MS), 1, "an answer from B over UDP");
	HT_EQ(f.type, HB_ERROR, "B answers A's HELLO over UDP with %s", hb_type_str(f.type));
	memcpy(&e, f.payload, sizeof(e));
	HT_EQ(ntohs(e.code), HB_ERR_AUTH, "the ERROR's code");
	/* the device itself gets into B with a HELLO bound to B; one bound to no server still
	 * works for devices that know no id */
	bound_hello(&h2, 5, 2);
	fd = ht_tcp(b.port, false);
	HT_EQ(ht_send_frame(fd, HB_HELLO, 1, &h2, sizeof(h2)), 0, "HELLO for B sent to B");
	HT_TRUE(ht_expect(fd, HB_WELCOME, -1), "B admits device 5's HELLO bound to B");
	close(fd);
	bound_hello(&h2, 6, 0);
	HT_EQ(ht_udp_send(u, b.port, false, HB_HELLO, 2, 0, &h2, sizeof(h2)), 0, "unbound HELLO");
	HT_EQ(ht_udp_recv(u, buf, &f, HT_IO_MS), 1, "an answer from B");
	HT_EQ(f.type, HB_WELCOME, "B answers a 64-byte HELLO bound to no server with %s",
	      hb_type_str(f.type));
	close(u);
	HT_EQ(ht_stop(&a), 0, "exit code of A");
	HT_EQ(ht_stop(&b), 0, "exit code of B");
	HT_EQ(ht_exit_stat(&b, "auth_fail"), 2, "B counted the two replays as failed HELLOs");
	ht_cleanup(&a);
	ht_cleanup(&b);
}

/* ---- a network namespace of the test's own (for the floods) ---- */

/* Loopback with a real MTU (on the default 64 KiB one the kernel would buffer a megabyte of
 * replies per socket before the daemon's own queues see any), and TCP send buffers of 4 KiB:
 * an attacker simply sends more until the kernel's ~80 KiB a socket are full too, the test
 * saves itself that time. hbd (ht_netns) and the test's sockets both live in it while the test
 * runs.
 */
static struct {
	char name[32];
	int home; /* this process's own netns */
} NS = { .home = -1 };

static void ns_leave(void)
{
	if (NS.home >= 0) {
		setns(NS.home, CLONE_NEWNET);
		close(NS.home);
		NS.home = -1;
	}
	ht_netns[0] = 0;
	if (NS.name[0]) {
		hbt_sh("ip netns del %s 2>/dev/null", NS.name);
		NS.name[0] = 0;
	}
}

static void ns_enter(void)
{
	char path[64];
	int fd;

	snprintf(NS.name, sizeof(NS.name), "hbsec%d", (int)getpid());
	hbt_sh("ip netns del %s 2>/dev/null", NS.name);
	HT_EQ(hbt_sh("ip netns add %s && ip -n %s link set lo mtu 1500 up && ip netns exec %s "
		     "sysctl -qw net.ipv4.tcp_wmem='4096 4096 4096'",
		     NS.name, NS.name, NS.name),
	      0, "network namespace %s with a 1500-byte loopback", NS.name);
	NS.home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/run/netns/%s", NS.name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	HT_TRUE(NS.home >= 0 && fd >= 0 && !setns(fd, CLONE_NEWNET), "into netns %s", NS.name);
	close(fd);
	snprintf(ht_netns, sizeof(ht_netns), "%s", NS.name);
}

static int ns_teardown(void **state)
{
	ht_reap(state);
	ns_leave();
	return 0;
}

/* ---- finding 3: unauthenticated peers exhaust the output buffers ---- */

#define SPAMMERS 2000

/* A connection that never reads, from one of 8 source addresses, with a small receive window
 * (set before connecting, so it is the one advertised); non-blocking. -1 if refused. */
static int non_reader(uint16_t port, int i)
{
	struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(port) };
	char src[32];
	int small = 2048, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	snprintf(src, sizeof(src), "127.0.1.%d", 1 + i % 8);
	s4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (ht_bind_src(fd, src) || connect(fd, (struct sockaddr *)&s4, sizeof(s4))) {
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, O_NONBLOCK);
	return fd;
}

/* Each non-reader sends frames it may not send before a HELLO (ECHO, 8 bytes each, each worth a
 * 10-byte ERROR(NOT_AUTHED)), all of them round-robin, until each sent `each` bytes or was
 * closed; bounded to 30 s. Returns how many bytes all of them sent. */
static size_t spam(int *fd, int n, size_t each)
{
	static uint8_t buf[8192];
	size_t *sent = calloc((size_t)n, sizeof(*sent)), total = 0;
	uint64_t until = ht_now_ms() + 30000;
	bool busy = true;

	HT_TRUE(sent != NULL, "memory for the counts");
	for (size_t off = 0; off + 8 <= sizeof(buf); off += 8)
		hb_encode(buf + off, 8, HB_TCP, HB_ECHO, (uint16_t)off, 0, NULL, 0);
	while (busy && ht_now_ms() < until) {
		busy = false;
		for (int i = 0; i < n; i++) {
			ssize_t k;

			if (fd[i] < 0 || sent[i] >= each)
				continue;
			k = send(fd[i], buf,
				 sizeof(buf) < each - sent[i] ? sizeof(buf) : each - sent[i],
				 MSG_NOSIGNAL | MSG_DONTWAIT);
			if (k > 0) {
				sent[i] += (size_t)k;
				total += (size_t)k;
				busy = true;
			} else if (k < 0 && errno != EAGAIN) {
				sent[i] = each; /* closed by the daemon: done */
			} else {
				busy = true; /* window full: the daemon reads on, try again */
			}
		}
		ht_sleep_ms(5);
	}
	free(sent);
	return total;
}

/* CPU time of a process so far, in clock ticks (-1 if unreadable). */
static long long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')'); /* fields 14 and 15, after the command name */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (long long)(ut + st);
}

/* Waits (at most ms) until hbd has worked through what it was sent: no CPU used for 300 ms. */
static void wait_idle(pid_t pid, int ms)
{
	uint64_t until = ht_now_ms() + (uint64_t)ms;
	long long last = cpu_ticks(pid), now;

	while (ht_now_ms() < until) {
		ht_sleep_ms(300);
		now = cpu_ticks(pid);
		if (now == last)
			return;
		last = now;
	}
}

/* A real device beside the flood: login, a PING, a DATA frame and its ACK. */
static void device_ok(uint16_t port, uint64_t dev)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	int fd = ht_tcp_login(port, dev, false, NULL);

	HT_GE(fd, 0, "login of device %llu beside the non-reading spammers",
	      (unsigned long long)dev);
	tcp_ping_ok(fd, 1, "a device beside the spammers");
	HT_EQ(ht_send_frame(fd, HB_DATA, 2, "reading", 7), 0, "DATA sent");
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to the DATA");
	HT_EQ(f.type, HB_ACK, "the ACK of the device's DATA (type %u)", f.type);
	close(fd);
}

/* Before a HELLO every PING, ECHO or DATA got its own ERROR(NOT_AUTHED): a peer that sends
 * them and never reads grew a --max-output queue (64 KiB, about 84 KiB of chunks) and held it
 * until its HELLO timeout; a few thousand such peers emptied the workers' chunk pools, after
 * which no WELCOME, ACK or DOWN could be queued for anyone. */
static void unauthed_output_is_bounded(void **state)
{
	/* a HELLO timeout longer than the daemon takes to read the flood on this machine */
	static const char *const args[] = { "--no-offload", "--hello-timeout", "30", NULL };
	static int fd[SPAMMERS];
	struct ht_daemon d;
	size_t total;
	int open_ok = 0;

	(void)state;
	ns_enter();
	HT_EQ(ht_start(&d, args), 0, "hbd in netns %s", NS.name);
	for (int i = 0; i < SPAMMERS; i++)
		open_ok += (fd[i] = non_reader(d.port, i)) >= 0;
	HT_EQ(open_ok, SPAMMERS, "connections of the non-reading spammers");
	/* just under what makes the daemon close one as a slow reader: 6000 replies each */
	total = spam(fd, SPAMMERS, 6000 * 8);
	wait_idle(d.pid, 30000);
	fprintf(stderr, "%d spammers sent %zu KiB of ECHOs before a HELLO; hbd has %d fds\n",
		SPAMMERS, total / 1024, ht_fd_count(d.pid));
	for (uint64_t dev = 1; dev <= 9; dev++)
		device_ok(d.port, dev);
	for (uint64_t dev = 100; dev < 120; dev++)
		device_ok(d.port, dev);
	/* each spammer got a few ERROR(NOT_AUTHED) and was closed (some, as the oldest without a
	 * HELLO, with an ERROR(FULL) or a BYE(EXPIRED) for it: --max-pending) */
	for (int i = 0; i < SPAMMERS; i++) {
		uint8_t buf[HB_MAX_FRAME];
		struct hb_frame f;
		int n = 0, rc;

		fcntl(fd[i], F_SETFL, 0);
		while ((rc = ht_recv_frame(fd[i], buf, &f, 2000)) == 1 && n < 100) {
			uint16_t code = f.len == 2 ? be16toh(*(uint16_t *)f.payload) : 0;

			HT_TRUE((f.type == HB_ERROR &&
				 (code == HB_ERR_NOT_AUTHED || code == HB_ERR_FULL)) ||
					(f.type == HB_BYE && code == HB_BYE_EXPIRED),
				"spammer %d: ERROR(NOT_AUTHED or FULL) or BYE(EXPIRED) (type %u code %u)",
				i, f.type, code);
			n++;
		}
		HT_LE(n, 4, "replies to spammer %d before its close", i);
		/* EOF, or a reset for the bytes it sent that hbd never read */
		HT_TRUE(rc == 0 || ht_eof(fd[i], 0),
			"spammer %d closed by hbd (still open after 2 s)", i);
		close(fd[i]);
	}
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "errors"), 0, "the errors exit counter (output buffers exhausted)");
	ht_cleanup(&d);
	ns_leave();
}

/* ---- finding 2: unauthenticated connections take every --max-clients slot ---- */

/* n idle connections (they never send a byte) from 10 addresses, 127.0.2.1..10. */
static void idle_flood(uint16_t port, int *fd, int n)
{
	for (int i = 0; i < n; i++) {
		char src[32];

		snprintf(src, sizeof(src), "127.0.2.%d", 1 + i % 10);
		fd[i] = ht_tcp_from(port, src);
		HT_GE(fd[i], 0, "idle connection %d from %s", i, src);
	}
}

/* Ten addresses that connect and never authenticate hold connections open (the HELLO timeout
 * is 10 s; reconnecting refills them). Before, each counted against --max-clients, so once they
 * held that many every real device got ERROR(FULL). */
static void idle_flood_leaves_room_for_devices(void **state)
{
	static const char *const args[] = { "--no-offload", "--max-clients", "200", NULL };
	static int fd[600];
	struct ht_daemon d;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --max-clients 200");
	idle_flood(d.port, fd, 600);
	ht_sleep_ms(200); /* every one accepted */
	for (uint64_t dev = 100; dev < 130; dev++) {
		int t = ht_tcp_login(d.port, dev, false, NULL);

		HT_GE(t, 0, "login of device %llu beside 600 idle connections (--max-clients 200)",
		      (unsigned long long)dev);
		tcp_ping_ok(t, 1, "a device beside the idle flood");
		close(t);
	}
	for (int i = 0; i < 600; i++)
		close(fd[i]);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
}

/* More idle connections than --max-pending: the oldest go (ERROR(FULL)), the devices get in,
 * and what the flood holds stays within the budget. */
static void idle_flood_beyond_the_pending_budget(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers",     "2",  "--max-clients",
					    "50",	    "--max-pending", "40", NULL };
	static int fd[400];
	struct ht_daemon d;
	int open_now = 0;

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --max-clients 50 --max-pending 40");
	idle_flood(d.port, fd, 400);
	/* every one accepted first: hbd orders pending connections by accept, so a device
	 * accepted while the flood's backlog is still being drained (slow under ASan) is older
	 * than the flood accepted after it, and is rightly the one evicted */
	ht_sleep_ms(500);
	for (uint64_t dev = 100; dev < 130; dev++) {
		int t = ht_tcp_login(d.port, dev, false, NULL);

		HT_GE(t, 0, "login of device %llu beside 400 idle connections (--max-pending 40)",
		      (unsigned long long)dev);
		tcp_ping_ok(t, 1, "a device beside the idle flood");
		close(t);
	}
	ht_sleep_ms(200);
	for (int i = 0; i < 400; i++) {
		struct pollfd p = { .fd = fd[i], .events = POLLIN };

		open_now += poll(&p, 1, 0) == 0; /* nothing to read: no ERROR, no close yet */
		close(fd[i]);
	}
	/* each worker's share is 20, and SO_REUSEPORT's spread is uneven */
	HT_LE(open_now, 45, "idle connections still open (--max-pending 40)");
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	/* most closed for newer ones; some, accepted under pressure, after their 2 s, and a few
	 * accepts of the burst found the workers' small slot tables full of closing ones */
	HT_GE(ht_exit_stat(&d, "pending_evicted"), 250, "the pending_evicted exit counter");
	ht_cleanup(&d);
}

/* Once a worker's share of --max-pending is half spent, a new connection has 2 s for its
 * HELLO, not --hello-timeout; the ones before keep theirs. */
static void hello_deadline_shrinks_under_pressure(void **state)
{
	static const char *const args[] = {
		"--no-offload", "--workers",	   "1",	 "--max-pending",
		"20",		"--hello-timeout", "10", NULL
	};
	struct ht_daemon d;
	uint64_t t0;
	int fd[15];

	(void)state;
	HT_EQ(ht_start(&d, args), 0, "hbd with --max-pending 20 --hello-timeout 10");
	t0 = ht_now_ms();
	idle_flood(d.port, fd, 15);
	for (int i = 10; i < 15; i++)
		HT_TRUE(ht_expect(fd[i], HB_BYE, HB_BYE_EXPIRED),
			"BYE(EXPIRED) to idle connection %d, accepted with 10 of 20 pending",
			i + 1);
	HT_LT(ht_now_ms() - t0, 2900, "those five closed within 2 s (and a tick)");
	HT_GE(ht_now_ms() - t0, 1900, "but not before their 2 s");
	for (int i = 0; i < 10; i++) {
		struct pollfd p = { .fd = fd[i], .events = POLLIN };

		HT_EQ(poll(&p, 1, 0), 0, "idle connection %d (before the pressure) still open",
		      i + 1);
	}
	for (int i = 0; i < 15; i++)
		close(fd[i]);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "hello_timeout"), 5, "the hello_timeout exit counter");
	ht_cleanup(&d);
}

/* ---- finding 11: the control socket ---- */

/* The maps hbd's offload mode opens, pinned in a scratch directory of the bpffs, so hbd
 * refreshes a liveness stamp the test can read (config.alive_ns). */
static char PINS[96];
static int CONFIG_FD = -1;

static void pins_down(void)
{
	if (PINS[0]) {
		hbt_sh("rm -rf %s", PINS);
		PINS[0] = 0;
	}
	if (CONFIG_FD >= 0)
		close(CONFIG_FD);
	CONFIG_FD = -1;
}

static void pins_up(void)
{
	LIBBPF_OPTS(bpf_map_create_opts, mm, .map_flags = BPF_F_MMAPABLE);
	char path[160];
	int conns, sessions;

	snprintf(PINS, sizeof(PINS), "/sys/fs/bpf/hbd-sec-%d", (int)getpid());
	hbt_sh("rm -rf %s", PINS);
	HT_EQ(mkdir(PINS, 0700), 0, "pin directory %s", PINS);
	conns = bpf_map_create(BPF_MAP_TYPE_HASH, HB_MAP_CONNS, sizeof(struct hb_conn_key),
			       sizeof(struct hb_conn), 64, NULL);
	sessions = bpf_map_create(BPF_MAP_TYPE_HASH, HB_MAP_SESSIONS, sizeof(struct hb_session_key),
				  sizeof(struct hb_session), 64, NULL);
	CONFIG_FD = bpf_map_create(BPF_MAP_TYPE_ARRAY, HB_MAP_CONFIG, sizeof(__u32),
				   sizeof(struct hb_config), 1, &mm);
	HT_TRUE(conns >= 0 && sessions >= 0 && CONFIG_FD >= 0, "the maps of the offload mode");
	snprintf(path, sizeof(path), "%s/%s", PINS, HB_MAP_CONNS);
	HT_EQ(bpf_obj_pin(conns, path), 0, "pin %s", path);
	snprintf(path, sizeof(path), "%s/%s", PINS, HB_MAP_SESSIONS);
	HT_EQ(bpf_obj_pin(sessions, path), 0, "pin %s", path);
	snprintf(path, sizeof(path), "%s/%s", PINS, HB_MAP_CONFIG);
	HT_EQ(bpf_obj_pin(CONFIG_FD, path), 0, "pin %s", path);
	close(conns);
	close(sessions);
}

static int pins_teardown(void **state)
{
	tc_reap(state);
	pins_down();
	return 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* How old hbd's liveness stamp is now, in ms. */
static uint64_t stamp_age_ms(void)
{
	struct hb_config c;
	__u32 zero = 0;
	uint64_t now;

	HT_EQ(bpf_map_lookup_elem(CONFIG_FD, &zero, &c), 0, "config entry");
	now = mono_ns();
	return c.alive_ns && now > c.alive_ns ? (now - c.alive_ns) / 1000000 : 0;
}

/* A client pipelines thousands of reloads. Before, the control thread worked through every
 * line it could read before it looked at anything else: no liveness stamp for seconds (past
 * --grace the kernel stops answering heartbeats; the systemd watchdog, petted from the same
 * loop, may kill hbd), and no other client answered. */
static void control_flood_keeps_the_stamp(void **state)
{
	char pinarg[96], ctl[108], line[512];
	const char *args[] = { "--pin-path", pinarg, "--grace", "1", "--workers", "1", NULL };
	static char flood[5000 * 7 + 1];
	struct ht_daemon d;
	uint64_t t0, sent, worst_stamp = 0, worst_ping = 0;
	int fl, other, replies = 0;

	(void)state;
	pins_up();
	snprintf(pinarg, sizeof(pinarg), "%s", PINS);
	HT_EQ(tc_start(&d, ctl, sizeof(ctl), false, NULL, args), 0, "hbd on the pinned maps");
	HT_TRUE(ht_file_contains(d.err, "mode=offload", NULL, 0), "hbd in offload mode");
	/* a fleet's key store: each reload reads 20000 lines */
	{
		FILE *f = fopen(d.keys, "a");

		HT_TRUE(f != NULL, "append to %s", d.keys);
		for (int i = 0; i < 20000; i++)
			fprintf(f, "%d 000102030405060708090a0b0c0d%04x\n", 100000 + i, i);
		HT_EQ(fclose(f), 0, "key store of 20000 more devices");
	}
	for (int i = 0; i < 5000; i++)
		memcpy(flood + 7 * i, "reload\n", 7);
	fl = tc_connect(ctl);
	other = tc_connect(ctl);
	HT_TRUE(fl >= 0 && other >= 0, "two control clients");
	HT_EQ(tc_write(fl, flood), 0, "5000 reloads written in one go");
	/* every 10 ms: the stamp's age, and the other client's ping, one at a time */
	for (t0 = ht_now_ms(), sent = 0; ht_now_ms() - t0 < 3000; ht_sleep_ms(10)) {
		struct pollfd p = { .fd = other, .events = POLLIN };
		uint64_t a = stamp_age_ms();

		if (a > worst_stamp)
			worst_stamp = a;
		if (!sent) {
			HT_EQ(tc_write(other, "ping\n"), 0, "ping from the other client");
			sent = ht_now_ms();
		} else if (poll(&p, 1, 0) == 1) {
			HT_EQ(tc_line(other, line, sizeof(line), 1000), 0, "reply to the ping");
			if (ht_now_ms() - sent > worst_ping)
				worst_ping = ht_now_ms() - sent;
			sent = 0;
			replies++;
		} else if (ht_now_ms() - sent > worst_ping) {
			worst_ping = ht_now_ms() - sent; /* still waiting */
		}
	}
	fprintf(stderr,
		"during the flood: stamp at most %llu ms old, pings answered in at most "
		"%llu ms (%d)\n",
		(unsigned long long)worst_stamp, (unsigned long long)worst_ping, replies);
	HT_LT(worst_stamp, 800,
	      "age of the liveness stamp (ms) while a client pipelines reloads "
	      "(refreshed every 250 ms; --grace 1 s)");
	HT_LT(worst_ping, 500, "time (ms) another client waited for a ping's reply meanwhile");
	close(fl);
	close(other);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	tc_cleanup(&d);
	pins_down();
}

struct ctl_try {
	const char *path;
	char reply[256];
	int fd; /* pipe for the reply */
};

/* As nobody: connects; a refusal comes at once, before any request. If none comes, asks for
 * the counters. Writes the line it got (or "") to the pipe. */
static int nobody_asks(void *arg)
{
	struct ctl_try *t = arg;
	char line[256] = "";
	int fd = tc_connect(t->path);

	if (fd >= 0 && tc_line(fd, line, sizeof(line), 500) &&
	    (tc_write(fd, "stats\n") || tc_line(fd, line, sizeof(line), 2000)))
		line[0] = 0;
	if (fd >= 0)
		close(fd);
	return write(t->fd, line, sizeof(line)) == sizeof(line) ? 0 : 1;
}

static void ask_as_nobody(const char *path, char reply[256])
{
	struct ctl_try t = { .path = path };
	int p[2];

	HT_EQ(pipe(p), 0, "pipe");
	t.fd = p[1];
	HT_EQ(as_nobody(nobody_asks, &t), 0, "the child that asks as nobody");
	close(p[1]);
	HT_EQ(read(p[0], reply, 256), 256, "the reply nobody got");
	close(p[0]);
	reply[255] = 0;
}

/* Whoever can open the control socket sends downlinks and reloads: a mode or directory set
 * wider than meant (or a socket passed on) must not be enough. hbd asks the kernel who is
 * connecting (SO_PEERCRED): root, hbd's own user and, with --control-group, that group. */
static void control_needs_a_permitted_peer(void **state)
{
	static const char *const plain[] = { "--no-offload", NULL };
	static const char *const grouped[] = { "--no-offload", "--control-group", "nogroup", NULL };
	char ctl[108], reply[256], line[512];
	struct ht_daemon d;

	(void)state;
	HT_EQ(tc_start(&d, ctl, sizeof(ctl), false, NULL, plain), 0, "hbd with a control socket");
	HT_EQ(chmod(ctl, 0666), 0, "the control socket opened to everyone (a mistake)");
	ask_as_nobody(ctl, reply);
	HT_TRUE(!strstr(reply, "\"ok\":true"), "nobody was answered: %s", reply);
	HT_TRUE(strstr(reply, "permission denied") != NULL, "why nobody was refused: '%s'", reply);
	HT_EQ(tc_req(ctl, "stats\n", line, sizeof(line)), 0, "root's stats");
	HT_TRUE(strstr(line, "\"ok\":true") != NULL, "root answered: %s", line);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	tc_cleanup(&d);

	/* --control-group: its members are let in (the socket is the group's, mode 0660) */
	HT_EQ(tc_start(&d, ctl, sizeof(ctl), false, NULL, grouped), 0,
	      "hbd with --control-group nogroup");
	{
		struct stat st;

		HT_EQ(stat(ctl, &st), 0, "stat %s", ctl);
		HT_EQ(st.st_gid, 65534, "group of the control socket (nogroup)");
		HT_EQ(st.st_mode & 0777, 0660, "mode of the control socket");
	}
	ask_as_nobody(ctl, reply);
	HT_TRUE(strstr(reply, "\"ok\":true") != NULL, "nobody, in nogroup, answered: '%s'", reply);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	tc_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(port_takeover_by_another_user, ht_reap),
		cmocka_unit_test_teardown(sink_symlink_refused, ht_reap),
		cmocka_unit_test(rebind_after_kill_leaves_no_entry),
		cmocka_unit_test_teardown(key_rotation_cuts_old_sessions, tc_reap),
		cmocka_unit_test_teardown(bad_hellos_do_not_lock_out_a_source, ht_reap),
		cmocka_unit_test_teardown(hello_bound_to_one_server, ht_reap),
		cmocka_unit_test_teardown(unauthed_output_is_bounded, ns_teardown),
		cmocka_unit_test_teardown(idle_flood_leaves_room_for_devices, ht_reap),
		cmocka_unit_test_teardown(idle_flood_beyond_the_pending_budget, ht_reap),
		cmocka_unit_test_teardown(hello_deadline_shrinks_under_pressure, ht_reap),
		cmocka_unit_test_teardown(control_flood_keeps_the_stamp, pins_teardown),
		cmocka_unit_test_teardown(control_needs_a_permitted_peer, tc_reap),
	};

	signal(SIGPIPE, SIG_IGN);
	/* HT_FILTER=name (a glob) runs only the matching tests */
	if (getenv("HT_FILTER"))
		cmocka_set_test_filter(getenv("HT_FILTER"));
	return cmocka_run_group_tests_name("security", tests, NULL, NULL);
}
