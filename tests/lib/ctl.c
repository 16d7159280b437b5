// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The control-socket and metrics helpers of the application-side hbd tests. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ctl.h"

/* Control sockets made by tc_start: hbd removes its own at exit, but not when a failed test
 * had to kill it. tc_reap (a cmocka teardown) removes what is left. */
static char tc_socks[16][108];

void tc_bin(const char *name, char *out, size_t cap)
{
	char hbd[PATH_MAX];

	ht_hbd_path(hbd, sizeof(hbd)); /* .../hbd */
	*strrchr(hbd, '/') = 0;
	if ((size_t)snprintf(out, cap, "%s/%s", hbd, name) >= cap)
		out[0] = 0;
}

int tc_reap(void **state)
{
	ht_reap(state);
	for (int i = 0; i < 16; i++)
		if (tc_socks[i][0]) {
			unlink(tc_socks[i]);
			tc_socks[i][0] = 0;
		}
	return 0;
}

void tc_cleanup(struct ht_daemon *d)
{
	char dir[sizeof(d->dir)], cmd[sizeof(d->dir) + 16];

	snprintf(dir, sizeof(dir), "%s", d->dir);
	ht_cleanup(d);
	if (!strncmp(dir, "/tmp/hbdtest.", 13) && !getenv("HT_KEEP")) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd)) {
		}
	}
}

void tc_track_sock(const char *path)
{
	for (int i = 15; i >= 0; i--)
		if (!tc_socks[i][0]) {
			snprintf(tc_socks[i], sizeof(tc_socks[0]), "%s", path);
			return;
		}
}

int tc_start(struct ht_daemon *d, char *ctl, size_t cap, bool metrics, uint16_t *mport,
	     const char *const *extra)
{
	static int n;
	const char *args[40];
	int k = 0;
	char line[1024], *p;

	/* the scratch dir is made by ht_start: the socket lives beside it, removed by hbd */
	snprintf(ctl, cap, "/tmp/hbo-ctl-%d-%d.sock", (int)getpid(), n);
	snprintf(tc_socks[n % 16], sizeof(tc_socks[0]), "%s", ctl);
	n++;
	args[k++] = "--control";
	args[k++] = ctl;
	if (metrics) {
		args[k++] = "--metrics";
		args[k++] = "127.0.0.1:0";
	}
	for (int i = 0; extra && extra[i] && k < 38; i++)
		args[k++] = extra[i];
	args[k] = NULL;
	if (ht_start(d, args))
		return -1;
	if (mport) {
		*mport = 0;
		if (ht_file_contains(d->err, "ready:", line, sizeof(line)) &&
		    (p = strstr(line, "metrics_port=")))
			*mport = (uint16_t)atoi(p + 13);
	}
	return 0;
}

int tc_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (strlen(path) < sizeof(sa.sun_path))
		memcpy(sa.sun_path, path, strlen(path) + 1);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

int tc_write(int fd, const char *line)
{
	return ht_send_all(fd, line, strlen(line));
}

/* Reads a byte at a time: the tests read few lines, and nothing past the line is consumed. */
int tc_line(int fd, char *out, size_t cap, int ms)
{
	size_t n = 0;

	while (n + 1 < cap) {
		if (ht_read_full(fd, out + n, 1, ms) != 1)
			return -1;
		if (out[n] == '\n')
			break;
		n++;
	}
	out[n] = 0;
	return 0;
}

int tc_req(const char *path, const char *req, char *out, size_t cap)
{
	int fd = tc_connect(path), rc = -1;

	if (fd >= 0 && !tc_write(fd, req))
		rc = tc_line(fd, out, cap, HT_IO_MS);
	if (fd >= 0)
		close(fd);
	return rc;
}

long long tc_num(const char *json, const char *key)
{
	char k[96];
	const char *p;

	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(json, k);
	return p ? atoll(p + strlen(k)) : -1;
}

void tc_b64(const void *in, int len, char *out)
{
	EVP_EncodeBlock((unsigned char *)out, in, len);
}

long long tc_metric(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (!strncmp(p, series, n) && p[n] == ' ')
			return atoll(p + n + 1);
	}
	return -1;
}

char *tc_curl(uint16_t port, const char *path, int *status)
{
	char cmd[256], *buf = NULL;
	size_t cap = 0, len = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "curl -sS --max-time 5 -w '\\n%%{http_code}' http://127.0.0.1:%u%s", port, path);
	p = popen(cmd, "r");
	if (!p)
		return NULL;
	for (;;) {
		if (len + 4096 > cap) {
			cap = cap ? cap * 2 : 65536;
			buf = realloc(buf, cap);
		}
		size_t k = fread(buf + len, 1, cap - len - 1, p);

		if (!k)
			break;
		len += k;
	}
	pclose(p);
	if (!buf)
		return NULL;
	buf[len] = 0;
	char *last = strrchr(buf, '\n');
	*status = last ? atoi(last + 1) : 0;
	if (last)
		*last = 0;
	return buf;
}
