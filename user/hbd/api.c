// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Control socket server: line requests in, JSON lines out, non-blocking, in the control thread.
 *
 * Client life: accepted (at most HBD_API_MAX_CLIENTS) if the kernel says it is root, hbd's
 * user or in --control-group (peercred.c; anyone else is told so and closed) -> requests parsed
 * line by line as they arrive -> replies and events appended to its output buffer, written when
 * poll says it can -> closed on EOF, on a line too long, or when a subscriber falls so far
 * behind that its buffer passes OUT_MAX (it is told so first). A slot's generation moves on at
 * every close, so a downlink outcome for a client that left finds no one and is dropped.
 *
 * Work is bounded per pass of the control loop (hbd_api_handle): REQ_BUDGET requests over all
 * clients, a reload taking the rest (it reads the key store and waits for the workers), the
 * clients served in turn from where the last pass stopped. What a pipelining client sent beyond
 * that stays in its buffer for the next pass, so the loop's liveness stamp, the watchdog and
 * the other clients never wait for more than one reload.
 */
#include "api.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "downlink.h"
#include "json_out.h"
#include "log.h"
#include "peercred.h"
#include "pins.h"
#include "reload.h"
#include "worker.h"

#define LINE_MAX_BYTES 2048 /* "send" with a base64 payload of HB_MAX_PAYLOAD bytes fits */
#define OUT_MAX (4u << 20)
#define DOWN_TIMEOUT_MS 5000
#define DOWN_TIMEOUT_MAX_MS 600000
#define REQ_BUDGET 64 /* requests a pass of the control loop takes, a reload all that are left */

struct client {
	int fd; /* -1: free slot */
	uint32_t gen;
	uint32_t nreq;
	bool subscribed;
	bool closing; /* close once the output is written */
	size_t inlen;
	char in[LINE_MAX_BYTES];
	char *out;
	size_t outlen, outcap;
};

struct hbd_api {
	struct hbd_daemon *d;
	int lfd;
	unsigned budget; /* requests left in this pass (REQ_BUDGET) */
	unsigned next; /* the client served first in the next pass */
	uint64_t refused_log_ms; /* rate limit of the "refused" warning */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct client cl[HBD_API_MAX_CLIENTS];
};

static uint32_t client_id(const struct hbd_api *a, const struct client *c)
{
	return (c->gen << 8) | (uint32_t)(c - a->cl);
}

static void drop_client(struct hbd_api *a, struct client *c)
{
	uint32_t gen = c->gen;

	if (c->subscribed)
		__atomic_fetch_sub(&a->d->ctl.events.subscribers, 1, __ATOMIC_RELAXED);
	close(c->fd);
	free(c->out);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->gen = (gen + 1) & 0xffffff;
}

/* Room for n more bytes in the output buffer; false (the client is let go) if there is none. */
static bool out_reserve(struct client *c, size_t n)
{
	size_t cap;
	char *p;

	if (c->outlen + n <= c->outcap)
		return true;
	cap = c->outcap ? c->outcap * 2 : 4096;
	while (cap < c->outlen + n)
		cap *= 2;
	p = realloc(c->out, cap);
	if (!p) {
		c->closing = true;
		return false;
	}
	c->out = p;
	c->outcap = cap;
	return true;
}

/* Appends doc as one JSON line to the client's output and releases it. A doc that could not be
 * built (NULL: out of memory) loses the client a reply, so the client is let go. */
static void out_json(struct client *c, json_t *doc)
{
	size_t n;

	if (c->fd < 0 || c->closing || !doc) {
		if (!doc && c->fd >= 0)
			c->closing = true;
		json_decref(doc);
		return;
	}
	n = json_dumpb(doc, NULL, 0, HB_JSON_FLAGS);
	if (n && c->outlen + n + 1 > OUT_MAX) {
		/* a subscriber that does not read: say why, then let it go */
		json_decref(doc);
		doc = json_pack("{s:s,s:s}", "event", "overflow", "error", "client too slow");
		n = doc ? json_dumpb(doc, NULL, 0, HB_JSON_FLAGS) : 0;
		c->outlen = 0;
		c->closing = true;
		if (n + 1 > c->outcap)
			n = 0;
	} else if (!n || !out_reserve(c, n + 1)) {
		n = 0;
		c->closing = true;
	}
	if (n) {
		json_dumpb(doc, c->out + c->outlen, n, HB_JSON_FLAGS);
		c->outlen += n;
		c->out[c->outlen++] = '\n';
	}
	json_decref(doc);
}

/* {"req":N,"ok":true}: the reply of the requests that have nothing more to say. */
static void reply_ok(struct client *c, uint32_t req)
{
	out_json(c, json_pack("{s:I,s:b}", "req", (json_int_t)req, "ok", 1));
}

/* err may hold any bytes (a file name, a line of the key store): the library escapes them, and
 * what is not UTF-8 becomes U+FFFD. */
static void reply_err(struct client *c, uint32_t req, const char *err)
{
	out_json(c, json_pack("{s:I,s:b,s:o}", "req", (json_int_t)req, "ok", 0, "error",
			      hb_json_bytes(err, strlen(err))));
}

/* Base64 payload -> bytes; -1 if not base64 or not 1..HB_MAX_PAYLOAD bytes. */
static int b64_decode(const char *s, uint8_t *out)
{
	size_t n = strlen(s);
	uint8_t tmp[(LINE_MAX_BYTES / 4 + 1) * 3];
	int len;

	if (!n || n % 4 || n > LINE_MAX_BYTES)
		return -1;
	len = EVP_DecodeBlock(tmp, (const unsigned char *)s, (int)n);
	if (len < 0)
		return -1;
	/* EVP_DecodeBlock counts the padding as zero bytes */
	if (s[n - 1] == '=')
		len--;
	if (s[n - 2] == '=')
		len--;
	if (len < 1 || len > HB_MAX_PAYLOAD)
		return -1;
	memcpy(out, tmp, (size_t)len);
	return len;
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || *end ? -1 : 0;
}

static void cmd_send(struct hbd_api *a, struct client *c, uint32_t req, char **arg, int nargs)
{
	struct hbd_down_req *r;
	uint64_t device, tmo = DOWN_TIMEOUT_MS;
	int len;

	if (nargs < 2 || nargs > 3 || parse_u64(arg[0], &device) || !device ||
	    (nargs == 3 && (parse_u64(arg[2], &tmo) || !tmo || tmo > DOWN_TIMEOUT_MAX_MS))) {
		reply_err(c, req, "usage: send DEVICE BASE64 [TIMEOUT_MS]");
		return;
	}
	r = malloc(sizeof(*r));
	if (!r) {
		reply_err(c, req, "out of memory");
		return;
	}
	len = b64_decode(arg[1], r->payload);
	if (len < 0 || (unsigned)len > a->d->cfg->max_payload) {
		char why[64];

		free(r);
		snprintf(why, sizeof(why), "payload must be base64 of 1..%u bytes",
			 a->d->cfg->max_payload);
		reply_err(c, req, why);
		return;
	}
	r->len = (uint16_t)len;
	r->device = device;
	r->client = client_id(a, c);
	r->req = req;
	r->timeout_ms = (uint32_t)tmo;
	hbd_down_submit(a->d, r); /* the outcome arrives as an event */
}

static void cmd_reload(struct hbd_api *a, struct client *c, uint32_t req)
{
	struct hbd_reload_result res;
	char why[512];

	if (hbd_keys_reload(a->d, &res, why, sizeof(why))) {
		reply_err(c, req, why);
		return;
	}
	out_json(c, json_pack("{s:I,s:b,s:I,s:I,s:I,s:I,s:I}", "req", (json_int_t)req, "ok", 1,
			      "devices", (json_int_t)res.devices, "ranges", (json_int_t)res.ranges,
			      "revoked", (json_int_t)res.revoked, "revoked_sessions",
			      (json_int_t)res.sessions_cut, "rekeyed_sessions",
			      (json_int_t)res.sessions_rekeyed));
}

static void cmd_stats(struct hbd_api *a, struct client *c, uint32_t req)
{
	struct hb_ustats u;

	hb_ustats_sum(a->d->stats, HB_MAX_WORKERS, &u);
	out_json(c, json_pack("{s:I,s:b,s:o,s:i}", "req", (json_int_t)req, "ok", 1, "stats",
			      hbd_stats_obj(&u), "subscribers",
			      __atomic_load_n(&a->d->ctl.events.subscribers, __ATOMIC_RELAXED)));
}

static void request(struct hbd_api *a, struct client *c, char *line)
{
	char *arg[8], *save = NULL, *tok;
	uint32_t req = ++c->nreq;
	int n = 0;

	for (tok = strtok_r(line, " \t\r", &save); tok && n < 8;
	     tok = strtok_r(NULL, " \t\r", &save))
		arg[n++] = tok;
	if (!n) {
		c->nreq--; /* blank lines are not requests */
		return;
	}
	if (!strcmp(arg[0], "send")) {
		cmd_send(a, c, req, arg + 1, n - 1);
	} else if (!strcmp(arg[0], "subscribe") && n == 1) {
		if (!c->subscribed) {
			c->subscribed = true;
			__atomic_fetch_add(&a->d->ctl.events.subscribers, 1, __ATOMIC_RELAXED);
		}
		reply_ok(c, req);
	} else if (!strcmp(arg[0], "reload") && n == 1) {
		a->budget = 0; /* the rest of this pass: a reload is the expensive request */
		cmd_reload(a, c, req);
	} else if (!strcmp(arg[0], "stats") && n == 1) {
		cmd_stats(a, c, req);
	} else if (!strcmp(arg[0], "ping") && n == 1) {
		reply_ok(c, req);
	} else {
		reply_err(c, req, "unknown request; try: send, subscribe, reload, stats, ping");
	}
}

/* A whole line waits in the client's buffer. */
static bool has_line(const struct client *c)
{
	return c->fd >= 0 && !c->closing && memchr(c->in, '\n', c->inlen);
}

/* The complete lines in the buffer, as far as the pass's budget goes. */
static void take_lines(struct hbd_api *a, struct client *c)
{
	char *nl;

	while (a->budget && has_line(c)) {
		size_t used;

		nl = memchr(c->in, '\n', c->inlen);
		used = (size_t)(nl - c->in) + 1;
		*nl = 0;
		a->budget--;
		request(a, c, c->in);
		memmove(c->in, c->in + used, c->inlen - used);
		c->inlen -= used;
	}
}

/* Reads only while the buffered lines are done: what a client pipelines waits in its socket. */
static void on_readable(struct hbd_api *a, struct client *c)
{
	for (;;) {
		ssize_t k;

		take_lines(a, c);
		if (c->fd < 0 || c->closing || has_line(c))
			return;
		if (c->inlen == sizeof(c->in)) {
			reply_err(c, c->nreq + 1, "line too long");
			c->closing = true;
			c->inlen = 0;
			return;
		}
		k = read(c->fd, c->in + c->inlen, sizeof(c->in) - c->inlen);
		if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
			drop_client(a, c);
			return;
		}
		if (k < 0)
			return;
		c->inlen += (size_t)k;
	}
}

static void on_writable(struct hbd_api *a, struct client *c)
{
	while (c->outlen) {
		ssize_t k = send(c->fd, c->out, c->outlen, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (k < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			drop_client(a, c);
			return;
		}
		memmove(c->out, c->out + k, c->outlen - (size_t)k);
		c->outlen -= (size_t)k;
	}
	if (c->closing)
		drop_client(a, c);
}

/* Tells a client one thing and lets it go (best effort: the socket is non-blocking). What it
 * sent already is read and dropped first: a UNIX socket closed with unread data resets its
 * peer, who would then never read why. */
static void refuse(int fd, const char *error)
{
	json_t *doc = json_pack("{s:b,s:s}", "ok", 0, "error", error);
	char line[256];
	int n = hb_json_line(line, sizeof(line), doc);

	if (n > 0 && send(fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
	}
	for (int i = 0; i < 16 && recv(fd, line, sizeof(line), MSG_DONTWAIT) > 0; i++)
		;
	close(fd);
}

static void on_accept(struct hbd_api *a)
{
	const struct hbd_config *cfg = a->d->cfg;

	for (;;) {
		int fd = accept4(a->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct client *c = NULL;
		char why[160];

		if (fd < 0)
			return;
		if (!hbd_peer_permitted(fd, cfg->control_group != NULL, (gid_t)cfg->control_gid,
					why, sizeof(why))) {
			if (hbd_log_due(&a->refused_log_ms, hb_mono_ms(), 10000))
				hb_warn("control socket: refused a client: %s (logged once per 10 s)",
					why);
			refuse(fd, "permission denied: not root, hbd's user or in --control-group");
			continue;
		}
		for (int i = 0; i < HBD_API_MAX_CLIENTS; i++)
			if (a->cl[i].fd < 0) {
				c = &a->cl[i];
				break;
			}
		if (!c) {
			refuse(fd, "too many clients");
			continue;
		}
		c->fd = fd;
	}
}

int hbd_api_open(struct hbd_api **out, struct hbd_daemon *d, const char *path, char *why,
		 size_t whylen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct hbd_api *a;
	struct stat st;
	int rc;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(why, whylen, "%s: path longer than %zu bytes", path,
			 sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->d = d;
	for (int i = 0; i < HBD_API_MAX_CLIENTS; i++)
		a->cl[i].fd = -1;
	strcpy(sa.sun_path, path);
	strcpy(a->path, path);
	a->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (a->lfd < 0)
		goto fail;
	if (!lstat(path, &st)) {
		int probe;

		if (!S_ISSOCK(st.st_mode)) {
			errno = EEXIST;
			snprintf(why, whylen, "%s exists and is not a socket", path);
			goto fail_why;
		}
		/* a socket someone still accepts on belongs to a live hbd: never steal it */
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		rc = probe >= 0 ? connect(probe, (struct sockaddr *)&sa, sizeof(sa)) : -1;
		if (probe >= 0)
			close(probe);
		if (!rc) {
			errno = EADDRINUSE;
			snprintf(why, whylen, "%s: another hbd is listening there", path);
			goto fail_why;
		}
		unlink(path);
	}
	/* 0660 from the start: no window in which anyone else could connect */
	mode_t old = umask(0117);
	rc = bind(a->lfd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc)
		goto fail;
	/* the group's members get in through the file's mode as well (peercred.c checks both) */
	if (d->cfg->control_group && chown(path, (uid_t)-1, (gid_t)d->cfg->control_gid)) {
		snprintf(why, whylen, "%s: giving it to group %s: %s", path, d->cfg->control_group,
			 strerror(errno));
		goto fail_why;
	}
	if (listen(a->lfd, 16))
		goto fail;
	*out = a;
	return 0;
fail:
	snprintf(why, whylen, "%s: %s", path, strerror(errno));
fail_why:
	rc = -errno;
	if (a->lfd >= 0)
		close(a->lfd);
	free(a);
	return rc;
}

void hbd_api_close(struct hbd_api *a)
{
	if (!a)
		return;
	for (int i = 0; i < HBD_API_MAX_CLIENTS; i++) {
		struct client *c = &a->cl[i];

		if (c->fd < 0)
			continue;
		/* last words are best effort: the socket is non-blocking */
		if (c->outlen && send(c->fd, c->out, c->outlen, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		}
		drop_client(a, c);
	}
	close(a->lfd);
	unlink(a->path);
	free(a);
}

int hbd_api_pollfds(struct hbd_api *a, struct pollfd *pfd, int max)
{
	int n = 0;

	if (n < max)
		pfd[n++] = (struct pollfd){ .fd = a->lfd, .events = POLLIN };
	for (int i = 0; i < HBD_API_MAX_CLIENTS && n < max; i++) {
		struct client *c = &a->cl[i];

		if (c->fd < 0)
			continue;
		pfd[n++] = (struct pollfd){
			.fd = c->fd,
			.events = (short)((c->closing ? 0 : POLLIN) | (c->outlen ? POLLOUT : 0)),
		};
	}
	return n;
}

bool hbd_api_busy(const struct hbd_api *a)
{
	for (int i = 0; i < HBD_API_MAX_CLIENTS; i++)
		if (has_line(&a->cl[i]))
			return true;
	return false;
}

void hbd_api_handle(struct hbd_api *a, const struct pollfd *pfd, int n)
{
	a->budget = REQ_BUDGET;
	for (int i = 0; i < n; i++) {
		if (pfd[i].fd == a->lfd && pfd[i].revents)
			on_accept(a);
	}
	/* in turn from where the last pass stopped: a busy client cannot always go first */
	for (int k = 0; k < HBD_API_MAX_CLIENTS; k++) {
		struct client *c = &a->cl[(a->next + k) % HBD_API_MAX_CLIENTS];
		short ev = 0;

		if (c->fd < 0)
			continue;
		for (int i = 0; i < n; i++)
			if (pfd[i].fd == c->fd)
				ev = pfd[i].revents;
		if (!a->budget) {
			a->next = (unsigned)(c - a->cl);
			break;
		}
		if ((ev & (POLLIN | POLLHUP | POLLERR)) || has_line(c))
			on_readable(a, c);
		if (c->fd >= 0 && (ev & POLLOUT))
			on_writable(a, c);
	}
	/* replies produced above go out now if the socket takes them */
	for (int i = 0; i < HBD_API_MAX_CLIENTS; i++)
		if (a->cl[i].fd >= 0 && (a->cl[i].outlen || a->cl[i].closing))
			on_writable(a, &a->cl[i]);
}

/* {"event":"online","device":ID,"transport":"udp","session":"%016x","ts_ms":T,"peer":"..."} */
static json_t *presence_json(const struct hbd_event *ev)
{
	char session[17];
	json_t *o;

	snprintf(session, sizeof(session), "%016" PRIx64, ev->session);
	o = json_pack("{s:s,s:o,s:s,s:s,s:o}", "event", hbd_ev_kind_str((enum hbd_ev_kind)ev->kind),
		      "device", hb_json_u64(ev->device), "transport", ev->udp ? "udp" : "tcp",
		      "session", session, "ts_ms", hb_json_u64(ev->ts_ms));
	if (o && ev->peer[0] &&
	    json_object_set_new(o, "peer",
				hb_json_bytes(ev->peer, strnlen(ev->peer, sizeof(ev->peer))))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static void presence(struct hbd_api *a, const struct hbd_event *ev)
{
	json_t *doc = NULL;

	for (int i = 0; i < HBD_API_MAX_CLIENTS; i++) {
		struct client *c = &a->cl[i];

		if (c->fd < 0 || !c->subscribed)
			continue;
		if (!doc)
			doc = presence_json(ev);
		out_json(c, json_incref(doc));
	}
	json_decref(doc);
}

/* {"req":N,"ok":B,"status":"delivered","device":ID,"seq":S[,"rtt_us":R]} to the requester */
void hbd_api_event(struct hbd_api *a, const struct hbd_event *ev)
{
	bool delivered = ev->status == HBD_DOWN_DELIVERED;
	struct client *c;
	json_t *doc;

	if (ev->kind != HBD_EV_DOWN_RESULT) {
		presence(a, ev);
		return;
	}
	c = &a->cl[ev->client & 0xff];
	if ((ev->client & 0xff) >= HBD_API_MAX_CLIENTS || c->fd < 0 || c->gen != ev->client >> 8)
		return; /* the requester left */
	doc = json_pack("{s:I,s:b,s:s,s:o,s:i}", "req", (json_int_t)ev->req, "ok", delivered,
			"status", hbd_down_status_str((enum hbd_down_status)ev->status), "device",
			hb_json_u64(ev->device), "seq", (int)ev->seq);
	if (doc && delivered &&
	    json_object_set_new(doc, "rtt_us", json_integer((json_int_t)ev->rtt_us))) {
		json_decref(doc);
		doc = NULL;
	}
	out_json(c, doc);
}

void hbd_api_lost(struct hbd_api *a, uint64_t n)
{
	for (int i = 0; i < HBD_API_MAX_CLIENTS; i++)
		if (a->cl[i].fd >= 0 && a->cl[i].subscribed)
			out_json(&a->cl[i],
				 json_pack("{s:s,s:o}", "event", "lost", "count", hb_json_u64(n)));
}
