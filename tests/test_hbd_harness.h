/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Helpers for the hbd tests: run the built daemon, and a tiny blocking client on proto.h and
 * auth.h. Static functions in a header, because the Makefile builds only tests/test_*.c.
 *
 * The daemon is the real binary ($BUILD/hbd, found next to the test's own build directory),
 * started with --port 0; its "ready" line gives the port. HBD_WRAP="valgrind ..." runs it under
 * a wrapper. Every wait is bounded in time.
 */
#ifndef TEST_HBD_HARNESS_H
#define TEST_HBD_HARNESS_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "hbeat_abi.h"
#include "proto.h"

/* Devices the tests know: 1..9 have explicit secrets, 100..199 derived ones. */
#define HT_MASTER "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
/* Longest wait for an expected frame: 3 s, or 30 s when the daemon runs under HBD_WRAP
 * (valgrind makes the first HELLO's libcrypto set-up take seconds).
 */
#define HT_IO_MS (getenv("HBD_WRAP") && *getenv("HBD_WRAP") ? 30000 : 3000)

/* Where the clients below send IPv4 (host order; loopback unless a netns test sets the
 * server's address), and the network namespace ht_start() runs hbd in ("" = this one).
 */
static uint32_t ht_srv4 = INADDR_LOOPBACK;
static char ht_netns[64];

struct ht_daemon {
	pid_t pid;
	uint16_t port;
	char dir[64];
	char keys[96], sink[96], err[96], out[96];
};

/* Daemons started and not yet cleaned up, by value: a failed assertion longjmps out of a test
 * (and its stack), and ht_reap() in the test's teardown still finds and ends them.
 */
#define HT_MAX_LIVE 16
static struct ht_daemon ht_live[HT_MAX_LIVE];

static inline void ht_cleanup(struct ht_daemon *d);

static inline void ht_track(const struct ht_daemon *d, bool on)
{
	for (int i = 0; i < HT_MAX_LIVE; i++) {
		if (on && !ht_live[i].dir[0]) {
			ht_live[i] = *d;
			return;
		}
		if (!on && ht_live[i].dir[0] && !strcmp(ht_live[i].dir, d->dir)) {
			memset(&ht_live[i], 0, sizeof(ht_live[i]));
			return;
		}
	}
}

/* cmocka teardown: kills and removes whatever a failed test left behind. */
static inline int ht_reap(void **state)
{
	(void)state;
	for (int i = 0; i < HT_MAX_LIVE; i++) {
		if (ht_live[i].dir[0]) {
			struct ht_daemon d = ht_live[i];

			fprintf(stderr, "reaping hbd %d left by a failed test\n", (int)d.pid);
			ht_cleanup(&d);
		}
	}
	return 0;
}

static inline uint64_t ht_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void ht_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* The secret of a test device (16 bytes for 1..9, derived 32 for 100..199). */
static inline int ht_secret(uint64_t dev, uint8_t out[HB_SECRET_MAX])
{
	uint8_t master[32];

	if (dev >= 1 && dev <= 9) {
		for (int i = 0; i < 16; i++)
			out[i] = (uint8_t)(dev * 16 + i);
		return 16;
	}
	hb_hex_decode(HT_MASTER, master, sizeof(master));
	return hb_derive_secret(master, sizeof(master), dev, out) ? -1 : HB_MAC_LEN;
}

static inline int ht_write_keys(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	for (uint64_t d = 1; d <= 9; d++) {
		uint8_t s[HB_SECRET_MAX];

		ht_secret(d, s);
		fprintf(f, "%" PRIu64 " ", d);
		for (int i = 0; i < 16; i++)
			fprintf(f, "%02x", s[i]);
		fprintf(f, "\n");
	}
	fprintf(f, "100-199 derive %s\n", HT_MASTER);
	return fclose(f);
}

/* $BUILD/hbd: next to the tests directory this binary runs from, else $BUILD, else build. */
static inline void ht_hbd_path(char *out, size_t cap)
{
	char exe[PATH_MAX - 16];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *b = getenv("BUILD");

	if (n > 0) {
		char *slash;

		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0; /* .../tests */
			snprintf(out, cap, "%s/../hbd", exe);
			if (access(out, X_OK) == 0)
				return;
		}
	}
	snprintf(out, cap, "%s/hbd", b && *b ? b : "build");
}

static inline int ht_file_contains(const char *path, const char *needle, char *line, size_t cap)
{
	FILE *f = fopen(path, "r");
	char buf[4096];
	int found = 0;

	if (!f)
		return 0;
	while (fgets(buf, sizeof(buf), f)) {
		if (strstr(buf, needle)) {
			if (line && cap) {
				size_t l = strlen(buf) < cap - 1 ? strlen(buf) : cap - 1;

				memcpy(line, buf, l);
				line[l] = 0;
			}
			found = 1;
			break;
		}
	}
	fclose(f);
	return found;
}

/* Starts hbd with --keys/--sink/--port 0 and the extra arguments (NULL-terminated), waits for
 * its ready line. Returns 0 or -1 (and prints the daemon's log).
 */
static inline int ht_start(struct ht_daemon *d, const char *const *extra)
{
	char hbd[PATH_MAX], line[1024], *p;
	const char *argv[64];
	char *wrap = getenv("HBD_WRAP"), *wcopy = NULL;
	int argc = 0;
	uint64_t deadline;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/hbdtest.XXXXXX");
	if (!mkdtemp(d->dir))
		return -1;
	snprintf(d->keys, sizeof(d->keys), "%s/keys", d->dir);
	snprintf(d->sink, sizeof(d->sink), "%s/sink.jsonl", d->dir);
	snprintf(d->err, sizeof(d->err), "%s/hbd.err", d->dir);
	snprintf(d->out, sizeof(d->out), "%s/hbd.out", d->dir);
	if (ht_write_keys(d->keys))
		return -1;
	ht_hbd_path(hbd, sizeof(hbd));
	if (wrap && *wrap) {
		wcopy = strdup(wrap);
		for (char *t = strtok(wcopy, " "); t && argc < 16; t = strtok(NULL, " "))
			argv[argc++] = t;
	}
	argv[argc++] = hbd;
	argv[argc++] = "--keys";
	argv[argc++] = d->keys;
	argv[argc++] = "--sink";
	argv[argc++] = d->sink;
	argv[argc++] = "--port";
	argv[argc++] = "0";
	argv[argc++] = "--log-level";
	argv[argc++] = "debug";
	bool own_pins = false;
	for (int i = 0; extra && extra[i] && argc < 60; i++) {
		own_pins |= !strcmp(extra[i], "--pin-path");
		argv[argc++] = extra[i];
	}
	/* Never the default pin path: a test daemon must not adopt (and stamp, and count into)
	 * the maps of an hbeat that is really loaded on this machine, such as a running demo.
	 * The scratch dir holds no pins, so the daemon runs in userspace mode.
	 */
	if (!own_pins) {
		argv[argc++] = "--pin-path";
		argv[argc++] = d->dir;
	}
	argv[argc] = NULL;

	d->pid = fork();
	if (d->pid < 0) {
		free(wcopy);
		return -1;
	}
	if (d->pid == 0) {
		int e = open(d->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int o = open(d->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (ht_netns[0]) {
			char ns[96];
			int nfd;

			snprintf(ns, sizeof(ns), "/run/netns/%s", ht_netns);
			nfd = open(ns, O_RDONLY | O_CLOEXEC);
			if (nfd < 0 || setns(nfd, CLONE_NEWNET))
				_exit(126);
		}
		dup2(e, STDERR_FILENO);
		dup2(o, STDOUT_FILENO);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	free(wcopy);
	ht_track(d, true);
	deadline = ht_now_ms() + 20000;
	while (ht_now_ms() < deadline) {
		int st;

		if (ht_file_contains(d->err, "ready:", line, sizeof(line)) &&
		    (p = strstr(line, "port="))) {
			d->port = (uint16_t)atoi(p + 5);
			return 0;
		}
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			break;
		}
		ht_sleep_ms(10);
	}
	fprintf(stderr, "hbd did not become ready; its log:\n");
	snprintf(line, sizeof(line), "cat %s >&2", d->err);
	if (system(line)) {
	}
	ht_cleanup(d);
	return -1;
}

/* SIGTERM, then waits (bounded) for the exit; returns the exit code, or -1 if it had to be
 * killed or died of a signal.
 */
static inline int ht_stop(struct ht_daemon *d)
{
	uint64_t deadline = ht_now_ms() + 30000;
	int st;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, SIGTERM);
	while (ht_now_ms() < deadline) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			ht_track(d, false);
			ht_track(d, true); /* the files stay until ht_cleanup; the pid is gone */
			if (!WIFEXITED(st) || WEXITSTATUS(st)) {
				char cmd[160];

				snprintf(cmd, sizeof(cmd), "tail -n 40 %s >&2", d->err);
				if (system(cmd)) {
				}
			}
			return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		}
		ht_sleep_ms(10);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
	ht_track(d, false);
	ht_track(d, true);
	return -1;
}

/* Removes the daemon's scratch directory (kills it first if still running). */
static inline void ht_cleanup(struct ht_daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = 0;
	}
	if (d->dir[0] && !getenv("HT_KEEP")) {
		unlink(d->keys);
		unlink(d->sink);
		unlink(d->err);
		unlink(d->out);
		rmdir(d->dir);
	}
	ht_track(d, false);
}

/* A counter from the JSON line hbd prints at exit (-1 if absent). */
static inline long long ht_exit_stat(const struct ht_daemon *d, const char *name)
{
	char line[4096], key[64], *p;

	if (!ht_file_contains(d->out, "\"pings_user\"", line, sizeof(line)))
		return -1;
	snprintf(key, sizeof(key), "\"%s\":", name);
	p = strstr(line, key);
	return p ? atoll(p + strlen(key)) : -1;
}

/* ---- TCP client ---------------------------------------------------------------------- */

static inline int ht_tcp(uint16_t port, bool v6)
{
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
	struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(port) };
	int rc;

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (v6) {
		s6.sin6_addr = in6addr_loopback;
		rc = connect(fd, (struct sockaddr *)&s6, sizeof(s6));
	} else {
		s4.sin_addr.s_addr = htonl(ht_srv4);
		rc = connect(fd, (struct sockaddr *)&s4, sizeof(s4));
	}
	if (rc) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Binds an IPv4 socket to a local source address (port chosen by the kernel). */
static inline int ht_bind_src(int fd, const char *src4)
{
	struct sockaddr_in s4 = { .sin_family = AF_INET };

	if (inet_pton(AF_INET, src4, &s4.sin_addr) != 1)
		return -1;
	return bind(fd, (struct sockaddr *)&s4, sizeof(s4));
}

/* An IPv4 TCP connection to 127.0.0.1:port from the loopback source src4 (e.g. 127.0.0.2). */
static inline int ht_tcp_from(uint16_t port, const char *src4)
{
	struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(ht_srv4) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (ht_bind_src(fd, src4) || connect(fd, (struct sockaddr *)&s4, sizeof(s4))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Open regular file descriptors of a process (/proc/PID/fd), -1 if unreadable. */
static inline int ht_fd_count(pid_t pid)
{
	char path[64], cmd[96], line[32];
	FILE *p;
	int n = -1;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	snprintf(cmd, sizeof(cmd), "ls %s 2>/dev/null | wc -l", path);
	p = popen(cmd, "r");
	if (p && fgets(line, sizeof(line), p))
		n = atoi(line);
	if (p)
		pclose(p);
	return n;
}

static inline int ht_send_all(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static inline int ht_send_frame(int fd, uint8_t type, uint16_t seq, const void *payload,
				uint16_t len)
{
	uint8_t buf[HB_MAX_FRAME];
	size_t n = hb_encode(buf, sizeof(buf), HB_TCP, type, seq, 0, payload, len);

	return n ? ht_send_all(fd, buf, n) : -1;
}

/* Reads exactly n bytes within ms; returns n, 0 on EOF, -1 on timeout/error. */
static inline ssize_t ht_read_full(int fd, void *buf, size_t n, int ms)
{
	uint8_t *p = buf;
	size_t got = 0;
	uint64_t deadline = ht_now_ms() + (uint64_t)ms;

	while (got < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int left = (int)(deadline > ht_now_ms() ? deadline - ht_now_ms() : 0);
		ssize_t k;

		if (poll(&pfd, 1, left) <= 0)
			return -1;
		k = recv(fd, p + got, n - got, 0);
		if (k == 0)
			return 0;
		if (k < 0)
			return -1;
		got += (size_t)k;
	}
	return (ssize_t)n;
}

/* One frame: returns 1 (frame in f, payload in buf), 0 on EOF, -1 on timeout or bad frame. */
static inline int ht_recv_frame(int fd, uint8_t *buf, struct hb_frame *f, int ms)
{
	ssize_t k = ht_read_full(fd, buf, sizeof(struct hb_hdr), ms);
	int rc;

	if (k <= 0)
		return (int)k;
	rc = hb_decode_stream(buf, sizeof(struct hb_hdr), f);
	if (rc < 0)
		return -1;
	if (rc == HB_DECODE_MORE) {
		k = ht_read_full(fd, buf + sizeof(struct hb_hdr), f->size - sizeof(struct hb_hdr), ms);
		if (k <= 0)
			return -1;
		if (hb_decode_stream(buf, f->size, f))
			return -1;
	}
	return 1;
}

/* True if the peer closes (EOF or reset) within ms without sending anything else. */
static inline bool ht_eof(int fd, int ms)
{
	uint8_t b;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	if (poll(&pfd, 1, ms) <= 0)
		return false;
	return recv(fd, &b, 1, 0) <= 0;
}

/* A signed HELLO payload for dev at ts_ms (0 = now). */
static inline void ht_hello(struct hb_hello *h, uint64_t dev, uint64_t ts_ms)
{
	uint8_t s[HB_SECRET_MAX];
	int n = ht_secret(dev, s);
	struct timespec now;

	if (!ts_ms) {
		clock_gettime(CLOCK_REALTIME, &now);
		ts_ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
	}
	hb_hello_sign(h, dev, ts_ms, s, (size_t)n);
}

/* Connects and authenticates dev; returns the fd (WELCOME in *wel if given) or -1. */
static inline int ht_tcp_login(uint16_t port, uint64_t dev, bool v6, struct hb_welcome *wel)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_hello h;
	struct hb_frame f;
	int fd = ht_tcp(port, v6);

	if (fd < 0)
		return -1;
	ht_hello(&h, dev, 0);
	if (ht_send_frame(fd, HB_HELLO, 1, &h, sizeof(h)) ||
	    ht_recv_frame(fd, buf, &f, HT_IO_MS) != 1 || f.type != HB_WELCOME) {
		close(fd);
		return -1;
	}
	if (wel)
		memcpy(wel, f.payload, sizeof(*wel));
	return fd;
}

/* Expects one frame of type (and, for ERROR/BYE, the code/reason; -1 = any). */
static inline bool ht_expect(int fd, uint8_t type, int code)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;

	if (ht_recv_frame(fd, buf, &f, HT_IO_MS) != 1) {
		fprintf(stderr, "expected %s, got nothing\n", hb_type_str(type));
		return false;
	}
	if (f.type != type) {
		fprintf(stderr, "expected %s, got %s\n", hb_type_str(type), hb_type_str(f.type));
		return false;
	}
	if (code >= 0 && (type == HB_ERROR || type == HB_BYE)) {
		uint16_t c = (uint16_t)(f.payload[0] << 8 | f.payload[1]);

		if (c != code) {
			fprintf(stderr, "expected %s %d, got %u\n", hb_type_str(type), code, c);
			return false;
		}
	}
	return true;
}

/* ---- UDP client ---------------------------------------------------------------------- */

static inline int ht_udp(bool v6)
{
	return socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
}

static inline int ht_udp_send(int fd, uint16_t port, bool v6, uint8_t type, uint16_t seq,
			      uint64_t token, const void *payload, uint16_t len)
{
	uint8_t buf[HB_MAX_FRAME];
	size_t n = hb_encode(buf, sizeof(buf), HB_UDP, type, seq, token, payload, len);
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(port),
				   .sin6_addr = in6addr_loopback };
	struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(ht_srv4) };

	if (!n)
		return -1;
	if (v6)
		return sendto(fd, buf, n, 0, (struct sockaddr *)&s6, sizeof(s6)) == (ssize_t)n ? 0
											: -1;
	return sendto(fd, buf, n, 0, (struct sockaddr *)&s4, sizeof(s4)) == (ssize_t)n ? 0 : -1;
}

static inline int ht_udp_send_raw(int fd, uint16_t port, const void *buf, size_t n)
{
	struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(ht_srv4) };

	return sendto(fd, buf, n, 0, (struct sockaddr *)&s4, sizeof(s4)) == (ssize_t)n ? 0 : -1;
}

/* One datagram within ms, decoded: 1, or -1 on timeout / undecodable. */
static inline int ht_udp_recv(int fd, uint8_t *buf, struct hb_frame *f, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (poll(&pfd, 1, ms) <= 0)
		return -1;
	n = recv(fd, buf, HB_MAX_FRAME, 0);
	if (n <= 0 || hb_decode_dgram(buf, (size_t)n, f))
		return -1;
	return 1;
}

/* HELLO over UDP; returns the session token (0 on failure). */
static inline uint64_t ht_udp_login(int fd, uint16_t port, bool v6, uint64_t dev)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_hello h;
	struct hb_frame f;

	ht_hello(&h, dev, 0);
	if (ht_udp_send(fd, port, v6, HB_HELLO, 1, 0, &h, sizeof(h)) ||
	    ht_udp_recv(fd, buf, &f, HT_IO_MS) != 1 || f.type != HB_WELCOME)
		return 0;
	if (hb_get_be64(f.payload) != f.token)
		return 0;
	return f.token;
}

#endif
