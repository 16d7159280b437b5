// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd's control socket writes valid JSON whatever bytes an error message or a peer address
 * carries (quotes, backslashes, control bytes, invalid UTF-8): the replies are read back with
 * json_loads. The API runs alone here, on a daemon struct with nothing else started. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "api.h"
#include "events.h"
#include "hbd.h"
#include "log.h"
#include "stats.h"

/* quotes, a backslash, control bytes, a lone continuation byte, a cut sequence, then UTF-8 */
#define EVIL "q\"b\\s\x01\x1f\n\x80\xc3(\xe2\x82\xac"
#define EVIL_READ "q\"b\\s\x01\x1f\n\xef\xbf\xbd\xef\xbf\xbd(\xe2\x82\xac"

struct fx {
	struct hbd_config cfg;
	struct hbd_daemon *d;
	struct hbd_api *api;
	char path[64];
	int cl; /* the client's end */
	char in[65536];
	size_t inlen;
};

/* Lets the API run until the client has a whole line, which it returns parsed. */
static json_t *next_reply(struct fx *fx)
{
	for (int round = 0; round < 200; round++) {
		struct pollfd pfd[HBD_API_MAX_CLIENTS + 1];
		char *nl = memchr(fx->in, '\n', fx->inlen);
		json_error_t err;
		ssize_t k;
		int n;

		if (nl) {
			size_t len = (size_t)(nl - fx->in);
			json_t *doc = json_loadb(fx->in, len, 0, &err);

			if (!doc)
				fail_msg("not JSON (%s): %.*s", err.text, (int)len, fx->in);
			memmove(fx->in, nl + 1, fx->inlen - len - 1);
			fx->inlen -= len + 1;
			return doc;
		}
		n = hbd_api_pollfds(fx->api, pfd, HBD_API_MAX_CLIENTS + 1);
		poll(pfd, (nfds_t)n, 10);
		hbd_api_handle(fx->api, pfd, n);
		k = recv(fx->cl, fx->in + fx->inlen, sizeof(fx->in) - fx->inlen, MSG_DONTWAIT);
		if (k > 0)
			fx->inlen += (size_t)k;
	}
	fail_msg("no reply from the control socket");
	return NULL;
}

static json_t *request(struct fx *fx, const char *line)
{
	assert_int_equal(send(fx->cl, line, strlen(line), MSG_NOSIGNAL), (ssize_t)strlen(line));
	return next_reply(fx);
}

static int setup(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct fx *fx = calloc(1, sizeof(*fx));
	char why[256];

	assert_non_null(fx);
	hb_log_set_level(HB_LOG_ERROR); /* the failing reload warns */
	/* a key store path that cannot exist, made of the bytes the reply must carry */
	fx->cfg.keys = "/nonexistent-hbeat-" EVIL "/keys";
	fx->d = calloc(1, sizeof(*fx->d));
	assert_non_null(fx->d);
	fx->d->cfg = &fx->cfg;
	fx->d->stats = aligned_alloc(64, HB_MAX_WORKERS * sizeof(struct hb_ustats));
	assert_non_null(fx->d->stats);
	memset(fx->d->stats, 0, HB_MAX_WORKERS * sizeof(struct hb_ustats));
	snprintf(fx->path, sizeof(fx->path), "/tmp/test_hbd_api_json.%d.sock", (int)getpid());
	assert_int_equal(hbd_api_open(&fx->api, fx->d, fx->path, why, sizeof(why)), 0);
	fx->cl = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fx->cl >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fx->path);
	assert_int_equal(connect(fx->cl, (struct sockaddr *)&sa, sizeof(sa)), 0);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	close(fx->cl);
	hbd_api_close(fx->api);
	free(fx->d->stats);
	free(fx->d);
	free(fx);
	return 0;
}

/* A failed reload names the key store file: the path comes back exactly, escaped by jansson,
 * with U+FFFD where it is not UTF-8. */
static void reload_error_is_escaped(void **state)
{
	struct fx *fx = *state;
	json_t *r = request(fx, "reload\n");
	const char *err = json_string_value(json_object_get(r, "error"));

	assert_int_equal(json_integer_value(json_object_get(r, "req")), 1);
	assert_true(json_is_false(json_object_get(r, "ok")));
	assert_non_null(err);
	assert_non_null(strstr(err, "/nonexistent-hbeat-" EVIL_READ "/keys: "));
	assert_non_null(strstr(err, strerror(ENOENT)));
	json_decref(r);
}

/* Presence events carry the device's address; whatever bytes it holds, the line is JSON. */
static void peer_is_escaped(void **state)
{
	struct fx *fx = *state;
	struct hbd_event ev = {
		.kind = HBD_EV_ONLINE,
		.udp = 1,
		.device = UINT64_MAX,
		.session = 0xabc,
		.ts_ms = 1700000000123ull,
	};
	const char *key;
	json_t *r, *v;
	int i = 0;
	static const char *const order[] = { "event",	"device", "transport",
					     "session", "ts_ms",  "peer" };

	r = request(fx, "subscribe\n");
	assert_true(json_is_true(json_object_get(r, "ok")));
	json_decref(r);
	snprintf(ev.peer, sizeof(ev.peer), "%s", EVIL);
	hbd_api_event(fx->api, &ev);
	r = next_reply(fx);
	json_object_foreach(r, key, v)
	{
		assert_true(i < 6);
		assert_string_equal(key, order[i]);
		i++;
	}
	assert_int_equal(i, 6);
	assert_string_equal(json_string_value(json_object_get(r, "event")), "online");
	/* above INT64_MAX a device id is a string of its digits (json_out.h) */
	assert_string_equal(json_string_value(json_object_get(r, "device")),
			    "18446744073709551615");
	assert_string_equal(json_string_value(json_object_get(r, "session")), "0000000000000abc");
	assert_int_equal(json_integer_value(json_object_get(r, "ts_ms")), 1700000000123ll);
	assert_string_equal(json_string_value(json_object_get(r, "peer")), EVIL_READ);
	json_decref(r);

	/* no peer: no key */
	ev.peer[0] = 0;
	ev.udp = 0;
	ev.device = 42;
	hbd_api_event(fx->api, &ev);
	r = next_reply(fx);
	assert_null(json_object_get(r, "peer"));
	assert_int_equal(json_integer_value(json_object_get(r, "device")), 42);
	assert_string_equal(json_string_value(json_object_get(r, "transport")), "tcp");
	json_decref(r);

	hbd_api_lost(fx->api, 3);
	r = next_reply(fx);
	assert_string_equal(json_string_value(json_object_get(r, "event")), "lost");
	assert_int_equal(json_integer_value(json_object_get(r, "count")), 3);
	json_decref(r);
}

/* The other replies keep their keys, in their order. */
static void replies_keep_their_keys(void **state)
{
	struct fx *fx = *state;
	json_t *r;
	char *s;

	r = request(fx, "ping\n");
	s = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
	assert_string_equal(s, "{\"req\":1,\"ok\":true}");
	free(s);
	json_decref(r);
	r = request(fx, "nonsense\n");
	s = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
	assert_string_equal(s, "{\"req\":2,\"ok\":false,\"error\":\"unknown request; try: send, "
			       "subscribe, reload, stats, ping\"}");
	free(s);
	json_decref(r);
	HBD_STAT_ADD(&fx->d->stats[3], pings_user, 7);
	r = request(fx, "stats\n");
	assert_int_equal(json_integer_value(
				 json_object_get(json_object_get(r, "stats"), "pings_user")),
			 7);
	assert_int_equal(json_integer_value(json_object_get(r, "subscribers")), 0);
	assert_int_equal(json_object_size(json_object_get(r, "stats")), HB_USTATS_N);
	json_decref(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(reload_error_is_escaped, setup, teardown),
		cmocka_unit_test_setup_teardown(peer_is_escaped, setup, teardown),
		cmocka_unit_test_setup_teardown(replies_keep_their_keys, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
