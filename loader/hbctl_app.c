// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl send and events: an application's side of hbd's control socket (docs/CONTROL.md). */
#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "hbctl.h"
#include "hbeat_abi.h"
#include "log.h"

static int ctl_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/* Reads one line (without its newline) within timeout_ms (-1: forever). */
static int read_line(int fd, char *buf, size_t cap, size_t *have, char *line, size_t lcap,
		     int timeout_ms)
{
	for (;;) {
		char *nl = memchr(buf, '\n', *have);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (nl) {
			size_t n = (size_t)(nl - buf);

			snprintf(line, lcap, "%.*s", (int)n, buf);
			memmove(buf, nl + 1, *have - n - 1);
			*have -= n + 1;
			return 0;
		}
		if (*have == cap)
			return -EMSGSIZE;
		if (poll(&p, 1, timeout_ms) == 0)
			return -ETIMEDOUT;
		k = read(fd, buf + *have, cap - *have);
		if (k == 0)
			return -ECONNRESET;
		if (k < 0 && errno != EINTR)
			return -errno;
		if (k > 0)
			*have += (size_t)k;
	}
}

static int write_all(int fd, const char *s)
{
	size_t n = strlen(s);

	while (n) {
		ssize_t k = send(fd, s, n, MSG_NOSIGNAL);

		if (k < 0 && errno != EINTR)
			return -errno;
		if (k > 0) {
			s += k;
			n -= (size_t)k;
		}
	}
	return 0;
}

int hbctl_ctl_request(const char *path, const char *request, char *reply, size_t cap,
		      int timeout_ms)
{
	char buf[8192], req[4096];
	size_t have = 0;
	int fd = ctl_connect(path), rc;

	if (fd < 0)
		return fd;
	snprintf(req, sizeof(req), "%s\n", request);
	rc = write_all(fd, req);
	if (!rc)
		rc = read_line(fd, buf, sizeof(buf), &have, reply, cap, timeout_ms);
	close(fd);
	return rc;
}

static int payload(const struct hbctl_send_opts *o, const char *in, uint8_t *out)
{
	size_t n = strlen(in);
	int len;

	if (o->hex) {
		len = hb_hex_decode(in, out, HB_MAX_PAYLOAD);
	} else if (o->base64) {
		uint8_t tmp[(HB_MAX_PAYLOAD + 3) / 3 * 3 + 3];

		if (!n || n % 4 || n > (HB_MAX_PAYLOAD + 2) / 3 * 4)
			return -EINVAL;
		len = EVP_DecodeBlock(tmp, (const unsigned char *)in, (int)n);
		len -= (in[n - 1] == '=') + (in[n - 2] == '=');
		if (len > 0)
			memcpy(out, tmp, (size_t)len);
	} else {
		len = n <= HB_MAX_PAYLOAD ? (int)n : -1;
		memcpy(out, in, n <= HB_MAX_PAYLOAD ? n : 0);
	}
	return len >= 1 && len <= HB_MAX_PAYLOAD ? len : -EINVAL;
}

static void why_unreachable(const char *path, int rc)
{
	hb_err("cannot reach hbd at %s: %s%s", path, strerror(-rc),
	       rc == -ENOENT || rc == -ECONNREFUSED
		       ? " (is hbd running with --control? try --control PATH)"
		       : rc == -EACCES ? " (the socket is mode 0660: run as root or its group)" : "");
}

int hbctl_do_send(const void *opts, int argc, char **argv)
{
	const struct hbctl_send_opts *o = opts;
	const char *path = o->control;
	uint8_t data[HB_MAX_PAYLOAD];
	char b64[(HB_MAX_PAYLOAD + 2) / 3 * 4 + 1], req[1500], reply[1024], *end;
	unsigned long long dev;
	long tmo = o->timeout_ms;
	int len, rc;

	errno = 0;
	dev = strtoull(argv[0], &end, 10);
	if (!*argv[0] || *end || errno || !dev || argv[0][0] == '-') {
		fprintf(stderr, "hbctl send: DEVICE must be a nonzero decimal device id\n");
		return HBCTL_USAGE;
	}
	len = payload(o, argv[1], data);
	if (len < 0) {
		fprintf(stderr, "hbctl send: PAYLOAD must be 1..%d bytes%s\n", HB_MAX_PAYLOAD,
			o->hex ? " of hex" : o->base64 ? " of base64" : "");
		return HBCTL_USAGE;
	}
	EVP_EncodeBlock((unsigned char *)b64, data, len);
	snprintf(req, sizeof(req), "send %llu %s %ld", dev, b64, tmo);
	/* hbd answers once the device ACKed, or at the timeout: wait a little longer than that */
	rc = hbctl_ctl_request(path, req, reply, sizeof(reply), (int)tmo + 5000);
	if (rc) {
		why_unreachable(path, rc);
		return HBCTL_FAIL;
	}
	if (o->json) {
		printf("%s\n", reply);
	} else if (strstr(reply, "\"status\":\"delivered\"")) {
		const char *r = strstr(reply, "\"rtt_us\":"), *s = strstr(reply, "\"seq\":");

		printf("delivered to device %llu (%d bytes, seq %lu, acknowledged after %.3f ms)\n",
		       dev, len, s ? strtoul(s + 6, NULL, 10) : 0, r ? atof(r + 9) / 1000 : 0.0);
	} else {
		const char *st = strstr(reply, "\"status\":\"");

		if (st) {
			char status[32];

			sscanf(st + 10, "%31[^\"]", status);
			hb_err("not delivered to device %llu: %s", dev,
			       !strcmp(status, "offline")   ? "offline (no open session)"
			       : !strcmp(status, "timeout") ? "no ACK in time"
			       : !strcmp(status, "closed")  ? "its session ended before the ACK"
							    : status);
		} else {
			hb_err("hbd refused the request: %s", reply);
		}
	}
	return strstr(reply, "\"ok\":true") ? HBCTL_OK : HBCTL_FAIL;
}

/* {"event":"online","device":42,...} -> "12:00:01.234 online      device 42 tcp ..." */
static void print_event(const char *line)
{
	char kind[24] = "?", transport[8] = "", peer[64] = "";
	const char *p;
	unsigned long long dev = 0, ts = 0;
	time_t t;
	struct tm tm;

	if ((p = strstr(line, "\"event\":\"")))
		sscanf(p + 9, "%23[^\"]", kind);
	if ((p = strstr(line, "\"device\":")))
		dev = strtoull(p + 9, NULL, 10);
	if ((p = strstr(line, "\"transport\":\"")))
		sscanf(p + 13, "%7[^\"]", transport);
	if ((p = strstr(line, "\"peer\":\"")))
		sscanf(p + 8, "%63[^\"]", peer);
	if ((p = strstr(line, "\"ts_ms\":")))
		ts = strtoull(p + 8, NULL, 10);
	if (!strcmp(kind, "lost") || !strcmp(kind, "overflow")) {
		printf("(%s)\n", line);
		return;
	}
	t = (time_t)(ts / 1000);
	localtime_r(&t, &tm);
	printf("%02d:%02d:%02d.%03llu %-10s device %llu %s %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
	       ts % 1000, kind, dev, transport, peer);
}

int hbctl_do_events(const void *opts, int argc, char **argv)
{
	const struct hbctl_events_opts *o = opts;
	const char *path = o->control;
	long count = o->count, seen = 0;
	bool json = o->json;
	char buf[65536], line[4096];
	size_t have = 0;
	int fd = ctl_connect(path), rc;

	if (fd < 0) {
		why_unreachable(path, fd);
		return HBCTL_FAIL;
	}
	rc = write_all(fd, "subscribe\n");
	if (!rc)
		rc = read_line(fd, buf, sizeof(buf), &have, line, sizeof(line), 5000);
	if (rc || !strstr(line, "\"ok\":true")) {
		hb_err("subscribing at %s: %s", path, rc ? strerror(-rc) : line);
		close(fd);
		return HBCTL_FAIL;
	}
	setvbuf(stdout, NULL, _IOLBF, 0); /* one event a line, as it happens, also into a pipe */
	while (count <= 0 || seen < count) {
		rc = read_line(fd, buf, sizeof(buf), &have, line, sizeof(line), -1);
		if (rc)
			break;
		if (json)
			printf("%s\n", line);
		else
			print_event(line);
		seen++;
	}
	close(fd);
	if (rc && rc != -ECONNRESET) {
		hb_err("reading events: %s", strerror(-rc));
		return HBCTL_FAIL;
	}
	return HBCTL_OK;
}
