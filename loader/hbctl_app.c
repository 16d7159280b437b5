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
#include "json_out.h"
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
	       : rc == -EACCES ? " (the socket is mode 0660: run as root or its group)"
			       : "");
}

int hbctl_do_send(const void *opts, int argc, char **argv)
{
	const struct hbctl_send_opts *o = opts;
	const char *path = o->control;
	uint8_t data[HB_MAX_PAYLOAD];
	char b64[(HB_MAX_PAYLOAD + 2) / 3 * 4 + 1], req[1500], reply[1024], *end;
	unsigned long long dev;
	long tmo = o->timeout_ms;
	const char *status;
	json_t *doc;
	bool ok;
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
			o->hex	    ? " of hex"
			: o->base64 ? " of base64"
				    : "");
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
	doc = json_loads(reply, 0, NULL);
	if (!json_is_object(doc)) {
		hb_err("hbd answered with something that is not a JSON object: %s", reply);
		json_decref(doc);
		return HBCTL_FAIL;
	}
	ok = json_is_true(json_object_get(doc, "ok"));
	status = json_string_value(json_object_get(doc, "status"));
	if (o->json) {
		json_incref(doc);
		hb_json_print(stdout, doc);
	} else if (status && !strcmp(status, "delivered")) {
		json_t *seq = json_object_get(doc, "seq"), *rtt = json_object_get(doc, "rtt_us");

		printf("delivered to device %llu (%d bytes, seq %lld, acknowledged after %.3f "
		       "ms)\n",
		       dev, len, (long long)json_integer_value(seq),
		       (double)json_integer_value(rtt) / 1000);
	} else if (status) {
		hb_err("not delivered to device %llu: %s", dev,
		       !strcmp(status, "offline")   ? "offline (no open session)"
		       : !strcmp(status, "timeout") ? "no ACK in time"
		       : !strcmp(status, "closed")  ? "its session ended before the ACK"
						    : status);
	} else {
		hb_err("hbd refused the request: %s", reply);
	}
	json_decref(doc);
	return ok ? HBCTL_OK : HBCTL_FAIL;
}

/* {"event":"online","device":42,...} -> "12:00:01.234 online      device 42 tcp ..." */
static void print_event(const json_t *ev, const char *line)
{
	const char *kind = json_string_value(json_object_get(ev, "event"));
	const char *transport = json_string_value(json_object_get(ev, "transport"));
	const char *peer = json_string_value(json_object_get(ev, "peer"));
	uint64_t dev = 0, ts = 0;
	time_t t;
	struct tm tm;

	hb_json_to_u64(json_object_get(ev, "device"), &dev);
	hb_json_to_u64(json_object_get(ev, "ts_ms"), &ts);
	if (!kind)
		kind = "?";
	if (!strcmp(kind, "lost") || !strcmp(kind, "overflow")) {
		printf("(%s)\n", line);
		return;
	}
	t = (time_t)(ts / 1000);
	localtime_r(&t, &tm);
	printf("%02d:%02d:%02d.%03llu %-10s device %llu %s %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
	       (unsigned long long)(ts % 1000), kind, (unsigned long long)dev,
	       transport ? transport : "", peer ? peer : "");
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
	json_t *ev;
	bool ok;

	if (fd < 0) {
		why_unreachable(path, fd);
		return HBCTL_FAIL;
	}
	rc = write_all(fd, "subscribe\n");
	if (!rc)
		rc = read_line(fd, buf, sizeof(buf), &have, line, sizeof(line), 5000);
	ev = rc ? NULL : json_loads(line, 0, NULL);
	ok = json_is_true(json_object_get(ev, "ok"));
	json_decref(ev);
	if (!ok) {
		hb_err("subscribing at %s: %s", path, rc ? strerror(-rc) : line);
		close(fd);
		return HBCTL_FAIL;
	}
	setvbuf(stdout, NULL, _IOLBF, 0); /* one event a line, as it happens, also into a pipe */
	while (count <= 0 || seen < count) {
		rc = read_line(fd, buf, sizeof(buf), &have, line, sizeof(line), -1);
		if (rc)
			break;
		ev = json_loads(line, 0, NULL);
		if (!json_is_object(ev)) {
			hb_warn("hbd sent a line that is not a JSON object, skipped: %s", line);
			json_decref(ev);
			continue;
		}
		if (json) {
			json_incref(ev);
			hb_json_print(stdout, ev);
		} else {
			print_event(ev, line);
		}
		json_decref(ev);
		seen++;
	}
	close(fd);
	if (rc && rc != -ECONNRESET) {
		hb_err("reading events: %s", strerror(-rc));
		return HBCTL_FAIL;
	}
	return HBCTL_OK;
}
