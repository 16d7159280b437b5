// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl fleet: fleet mode as NATS holds it (hbd --nats, docs/FLEET.md).
 *
 *   status              the live nodes (hbeat_nodes) with their versions and device counts,
 *                       and the HBEAT_DATA stream's size
 *   presence [ID]       a device's entry in hbeat_presence; without ID every entry, one
 *                       JSON line each ({"device":ID, and the entry's members})
 *   send PAYLOAD ID...  a downlink request on hbeat.down.ID to each device in turn; one line
 *                       per device with the node's answer and the round trip as seen here
 *   data                every message of HBEAT_DATA read once: how many, how many distinct
 *                       (device, seq, payload) records, how many devices
 * Nothing of it needs the BPF side or root. An unreachable NATS server is a clear error (exit
 * 3), not a hang: one connection attempt, bounded by the connect timeout.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>

#include "clock.h"
#include "hbctl.h"
#include "json_out.h"

#define CONNECT_TIMEOUT_MS 2000
#define FLEET_WAIT_MS 10000 /* a busy cluster (a leader election) can pause a read this long */

struct fleet_conn {
	natsOptions *opts;
	natsConnection *nc;
	jsCtx *js;
};

static void fleet_close(struct fleet_conn *c)
{
	if (c->js)
		jsCtx_Destroy(c->js);
	if (c->nc)
		natsConnection_Destroy(c->nc);
	if (c->opts)
		natsOptions_Destroy(c->opts);
	nats_Close();
}

static int fleet_open(const struct hbctl_fleet_opts *o, struct fleet_conn *c)
{
	char *urls = strdup(o->nats), *save = NULL, why[512];
	const char *list[64];
	jsOptions jo;
	natsStatus s;
	int n = 0;

	memset(c, 0, sizeof(*c));
	if (!urls)
		return -ENOMEM;
	for (char *t = strtok_r(urls, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save))
		list[n++] = t;
	s = natsOptions_Create(&c->opts);
	if (s == NATS_OK)
		s = n ? natsOptions_SetServers(c->opts, list, n) : NATS_INVALID_ARG;
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(c->opts, CONNECT_TIMEOUT_MS);
	if (s == NATS_OK)
		s = natsOptions_SetAllowReconnect(c->opts, false);
	if (s != NATS_OK) {
		fprintf(stderr, "hbctl fleet: NATS options (--nats %s): %s\n", o->nats,
			natsStatus_GetText(s));
		free(urls);
		return -EINVAL;
	}
	if (hb_nats_auth_apply(c->opts, &o->auth, why, sizeof(why))) {
		fprintf(stderr, "hbctl fleet: %s\n", why);
		free(urls);
		return -EINVAL;
	}
	s = natsConnection_Connect(&c->nc, c->opts);
	free(urls);
	if (s != NATS_OK) {
		/* libnats' own words name a refused certificate or password as such */
		fprintf(stderr,
			"hbctl fleet: cannot reach NATS at %s: %s (is nats-server running there, "
			"with hbd --nats pointing at it?)\n",
			o->nats, hb_nats_last_error(natsStatus_GetText(s)));
		return -ECONNREFUSED;
	}
	jsOptions_Init(&jo);
	jo.Wait = FLEET_WAIT_MS;
	s = natsConnection_JetStream(&c->js, c->nc, &jo);
	if (s != NATS_OK) {
		fprintf(stderr, "hbctl fleet: JetStream: %s\n", natsStatus_GetText(s));
		return -EIO;
	}
	return 0;
}

static int bucket(struct fleet_conn *c, const char *name, kvStore **kv)
{
	natsStatus s = js_KeyValue(kv, c->js, name);

	if (s != NATS_OK) {
		fprintf(stderr,
			"hbctl fleet: no bucket %s (%s): no hbd --nats has used this NATS yet\n",
			name, natsStatus_GetText(s));
		return -ENOENT;
	}
	return 0;
}

static int do_status(const struct hbctl_fleet_opts *o, struct fleet_conn *c)
{
	json_t *nodes = json_array(), *doc;
	kvKeysList kl = { 0 };
	jsStreamInfo *si = NULL;
	uint64_t total = 0, msgs = 0, bytes = 0, presence_rev = 0;
	kvStore *kv = NULL;
	natsStatus s;

	if (bucket(c, "hbeat_nodes", &kv)) {
		json_decref(nodes);
		return HBCTL_FAIL;
	}
	s = kvStore_Keys(&kl, kv, NULL);
	for (int i = 0; s == NATS_OK && i < kl.Count; i++) {
		kvEntry *e = NULL;
		json_t *n;

		if (kvStore_Get(&e, kv, kl.Keys[i]) != NATS_OK)
			continue;
		n = json_loadb(kvEntry_Value(e), (size_t)kvEntry_ValueLen(e), 0, NULL);
		kvEntry_Destroy(e);
		if (!json_is_object(n)) {
			json_decref(n);
			continue;
		}
		total += (uint64_t)json_integer_value(json_object_get(n, "devices"));
		json_array_append_new(nodes, n);
	}
	if (s == NATS_OK)
		kvKeysList_Destroy(&kl);
	kvStore_Destroy(kv);
	if (js_GetStreamInfo(&si, c->js, "HBEAT_DATA", NULL, NULL) == NATS_OK) {
		msgs = si->State.Msgs;
		bytes = si->State.Bytes;
		jsStreamInfo_Destroy(si);
	}
	/* the presence bucket's last revision: how many presence writes there have been */
	if (js_GetStreamInfo(&si, c->js, "KV_hbeat_presence", NULL, NULL) == NATS_OK) {
		presence_rev = si->State.LastSeq;
		jsStreamInfo_Destroy(si);
	}
	if (o->json) {
		doc = json_pack("{s:o,s:o,s:o,s:o,s:o}", "nodes", nodes, "devices",
				hb_json_u64(total), "data_msgs", hb_json_u64(msgs), "data_bytes",
				hb_json_u64(bytes), "presence_rev", hb_json_u64(presence_rev));
		return hb_json_print(stdout, doc) ? HBCTL_FAIL : HBCTL_OK;
	}
	printf("%-24s %-28s %-20s %8s %8s\n", "NODE", "ADDR", "VERSION", "TCP", "UDP");
	for (size_t i = 0; i < json_array_size(nodes); i++) {
		json_t *n = json_array_get(nodes, i);

		printf("%-24s %-28s %-20s %8lld %8lld\n",
		       json_string_value(json_object_get(n, "node")) ?: "?",
		       json_string_value(json_object_get(n, "addr")) ?: "?",
		       json_string_value(json_object_get(n, "version")) ?: "?",
		       (long long)json_integer_value(json_object_get(n, "tcp")),
		       (long long)json_integer_value(json_object_get(n, "udp")));
	}
	printf("%zu nodes, %" PRIu64 " devices; HBEAT_DATA: %" PRIu64 " messages, %" PRIu64
	       " bytes; hbeat_presence at revision %" PRIu64 "\n",
	       json_array_size(nodes), total, msgs, bytes, presence_rev);
	json_decref(nodes);
	return HBCTL_OK;
}

static int parse_id(const char *s, uint64_t *id)
{
	char *end;

	errno = 0;
	*id = strtoull(s, &end, 10);
	if (!*s || *end || errno || !*id || s[0] == '-') {
		fprintf(stderr, "hbctl fleet: '%s' is not a nonzero decimal device id\n", s);
		return -EINVAL;
	}
	return 0;
}

/* Every entry, as the watch's first pass delivers them (one round trip, not one a key). */
static int dump_presence(struct fleet_conn *c)
{
	kvWatcher *w = NULL;
	kvStore *kv = NULL;
	int rc = HBCTL_OK;

	if (bucket(c, "hbeat_presence", &kv))
		return HBCTL_FAIL;
	if (kvStore_WatchAll(&w, kv, NULL) != NATS_OK) {
		fprintf(stderr, "hbctl fleet: cannot read hbeat_presence\n");
		kvStore_Destroy(kv);
		return HBCTL_FAIL;
	}
	for (;;) {
		kvEntry *e = NULL;
		uint64_t id = 0;
		json_t *v;

		if (kvWatcher_Next(&e, w, FLEET_WAIT_MS) != NATS_OK) {
			fprintf(stderr, "hbctl fleet: hbeat_presence: no end of the entries\n");
			rc = HBCTL_FAIL;
			break;
		}
		if (!e)
			break; /* every entry delivered */
		if (kvEntry_Operation(e) != kvOp_Put) {
			kvEntry_Destroy(e);
			continue;
		}
		id = strtoull(kvEntry_Key(e), NULL, 10);
		v = json_loadb(kvEntry_Value(e), (size_t)kvEntry_ValueLen(e), 0, NULL);
		kvEntry_Destroy(e);
		if (!json_is_object(v)) {
			json_decref(v);
			continue;
		}
		{
			json_t *line = json_pack("{s:o}", "device", hb_json_u64(id));

			json_object_update(line, v);
			json_decref(v);
			hb_json_print(stdout, line);
		}
	}
	kvWatcher_Destroy(w);
	kvStore_Destroy(kv);
	return rc;
}

static int do_presence(const struct hbctl_fleet_opts *o, struct fleet_conn *c, const char *arg)
{
	kvStore *kv = NULL;
	kvEntry *e = NULL;
	char key[24];
	uint64_t id;
	natsStatus s;
	int rc = HBCTL_OK;

	if (!arg)
		return dump_presence(c);
	if (parse_id(arg, &id))
		return HBCTL_USAGE;
	if (bucket(c, "hbeat_presence", &kv))
		return HBCTL_FAIL;
	snprintf(key, sizeof(key), "%" PRIu64, id);
	s = kvStore_Get(&e, kv, key);
	if (s == NATS_NOT_FOUND) {
		fprintf(stderr, "hbctl fleet: device %s has no presence entry\n", key);
		rc = HBCTL_FAIL;
	} else if (s != NATS_OK) {
		fprintf(stderr, "hbctl fleet: reading hbeat_presence: %s\n", natsStatus_GetText(s));
		rc = HBCTL_FAIL;
	} else if (o->json) {
		printf("%.*s\n", kvEntry_ValueLen(e), (const char *)kvEntry_Value(e));
	} else {
		json_t *v = json_loadb(kvEntry_Value(e), (size_t)kvEntry_ValueLen(e), 0, NULL);

		printf("device %s: %s on %s (%s%s%s), since %lld ms, revision %" PRIu64 "\n", key,
		       json_string_value(json_object_get(v, "state")) ?: "?",
		       json_string_value(json_object_get(v, "node")) ?: "?",
		       json_string_value(json_object_get(v, "transport")) ?: "?",
		       json_string_length(json_object_get(v, "addr")) ? " " : "",
		       json_string_value(json_object_get(v, "addr")) ?: "",
		       (long long)json_integer_value(json_object_get(v, "since_ms")),
		       kvEntry_Revision(e));
		json_decref(v);
	}
	if (e)
		kvEntry_Destroy(e);
	kvStore_Destroy(kv);
	return rc;
}

static int do_send(const struct hbctl_fleet_opts *o, struct fleet_conn *c, int argc, char **argv)
{
	int len = (int)strlen(argv[0]), fails = 0;

	if (len < 1 || len > HB_MAX_PAYLOAD) {
		fprintf(stderr, "hbctl fleet send: PAYLOAD must be 1..%d bytes\n", HB_MAX_PAYLOAD);
		return HBCTL_USAGE;
	}
	for (int i = 1; i < argc; i++) {
		char subj[48];
		natsMsg *reply = NULL;
		uint64_t id, t0;
		natsStatus s;
		json_t *doc;

		if (parse_id(argv[i], &id))
			return HBCTL_USAGE;
		snprintf(subj, sizeof(subj), "hbeat.down.%" PRIu64, id);
		t0 = hb_mono_ns();
		s = natsConnection_Request(&reply, c->nc, subj, argv[0], len, o->timeout_ms);
		t0 = hb_mono_ns() - t0;
		if (s == NATS_OK) {
			doc = json_loadb(natsMsg_GetData(reply),
					 (size_t)natsMsg_GetDataLength(reply), 0, NULL);
			natsMsg_Destroy(reply);
		} else {
			doc = json_pack("{s:o,s:s}", "device", hb_json_u64(id), "status",
					s == NATS_TIMEOUT ? "no_reply" : natsStatus_GetText(s));
		}
		if (!json_is_object(doc)) {
			json_decref(doc);
			doc = json_pack("{s:o,s:s}", "device", hb_json_u64(id), "status",
					"bad_reply");
		}
		if (strcmp(json_string_value(json_object_get(doc, "status")) ?: "", "delivered"))
			fails++;
		json_object_set_new(doc, "request_us", hb_json_u64(t0 / 1000));
		hb_json_print(stdout, doc);
	}
	return fails ? HBCTL_FAIL : HBCTL_OK;
}

struct rec {
	uint64_t h1, h2;
};

static int cmp_rec(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;

	if (x->h1 != y->h1)
		return x->h1 < y->h1 ? -1 : 1;
	return x->h2 < y->h2 ? -1 : x->h2 > y->h2;
}

/* FNV-1a over the record without its time: a resent frame is the same record. */
static struct rec rec_of(const char *p, int n)
{
	json_t *v = json_loadb(p, (size_t)n, 0, NULL);
	const char *pl = json_string_value(json_object_get(v, "payload")) ?: "";
	uint64_t dev = 0, h = 1469598103934665603ull;
	struct rec r;

	if (!json_is_object(v) || hb_json_to_u64(json_object_get(v, "device"), &dev))
		dev = 0; /* not a record of ours: counted under device 0 */
	r.h1 = dev << 16 | (uint64_t)json_integer_value(json_object_get(v, "seq"));
	for (; *pl; pl++)
		h = (h ^ (uint8_t)*pl) * 1099511628211ull;
	r.h2 = h;
	json_decref(v);
	return r;
}

/* A pull consumer of our own, acknowledged a batch at a time (AckAll): a push consumer
 * (ordered or not) stalled or crashed libnats here when a cluster server had just left. */
static int read_stream(struct fleet_conn *c, struct rec *recs, uint64_t want, uint64_t *got)
{
	natsSubscription *sub = NULL;
	char durable[48];
	jsSubOptions so;
	natsStatus s = NATS_ERR;
	uint64_t n = 0;

	snprintf(durable, sizeof(durable), "hbctl-data-%d", (int)getpid());
	jsSubOptions_Init(&so);
	so.Stream = "HBEAT_DATA";
	so.Config.AckPolicy = js_AckAll;
	so.Config.DeliverPolicy = js_DeliverAll;
	so.Config.MaxAckPending = 65536;
	/* a stream whose leader is being elected (a server just left) refuses for a moment */
	for (int i = 0; i < 10; i++) {
		s = js_PullSubscribe(&sub, c->js, "hbeat.data.>", durable, NULL, &so, NULL);
		if (s == NATS_OK)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = 500000000 }, NULL);
	}
	if (s != NATS_OK) {
		fprintf(stderr, "hbctl fleet: cannot read HBEAT_DATA: %s\n",
			nats_GetLastError(NULL) ?: natsStatus_GetText(s));
		return -EIO;
	}
	for (int empty = 0; n < want && empty < 3;) {
		natsMsgList list = { 0 };

		s = natsSubscription_Fetch(&list, sub, 512, 2000, NULL);
		if (s != NATS_OK || !list.Count) {
			empty++; /* nothing more comes: say what was read */
			natsMsgList_Destroy(&list);
			continue;
		}
		empty = 0;
		for (int i = 0; i < list.Count && n < want; i++)
			recs[n++] = rec_of(natsMsg_GetData(list.Msgs[i]),
					   natsMsg_GetDataLength(list.Msgs[i]));
		if (list.Count)
			natsMsg_Ack(list.Msgs[list.Count - 1], NULL);
		natsMsgList_Destroy(&list);
	}
	natsSubscription_Unsubscribe(sub); /* deletes the consumer it made */
	natsSubscription_Destroy(sub);
	*got = n;
	return 0;
}

static int do_data(const struct hbctl_fleet_opts *o, struct fleet_conn *c)
{
	jsStreamInfo *si = NULL;
	struct rec *recs = NULL;
	uint64_t want, n = 0, uniq = 0, devices = 0;

	if (js_GetStreamInfo(&si, c->js, "HBEAT_DATA", NULL, NULL) != NATS_OK) {
		fprintf(stderr, "hbctl fleet: no stream HBEAT_DATA\n");
		return HBCTL_FAIL;
	}
	want = si->State.Msgs;
	jsStreamInfo_Destroy(si);
	recs = calloc(want + 1, sizeof(*recs));
	if (!recs || read_stream(c, recs, want, &n)) {
		free(recs);
		return HBCTL_FAIL;
	}
	qsort(recs, n, sizeof(*recs), cmp_rec);
	for (uint64_t i = 0; i < n; i++) {
		if (i && !cmp_rec(&recs[i], &recs[i - 1]))
			continue;
		uniq++;
		if (!i || recs[i].h1 >> 16 != recs[i - 1].h1 >> 16)
			devices++;
	}
	free(recs);
	if (o->json)
		return hb_json_print(stdout,
				     json_pack("{s:o,s:o,s:o,s:o}", "messages", hb_json_u64(n),
					       "distinct", hb_json_u64(uniq), "devices",
					       hb_json_u64(devices), "stream_msgs",
					       hb_json_u64(want)))
			       ? HBCTL_FAIL
			       : HBCTL_OK;
	printf("HBEAT_DATA: %" PRIu64 " messages read of %" PRIu64 ", %" PRIu64
	       " distinct (device, seq, payload), %" PRIu64 " devices\n",
	       n, want, uniq, devices);
	return n == want ? HBCTL_OK : HBCTL_FAIL;
}

int hbctl_do_fleet(const void *opts, int argc, char **argv)
{
	const struct hbctl_fleet_opts *o = opts;
	const char *what = argv[0], *why;
	struct fleet_conn c;
	int rc;

	if (strcmp(what, "status") && strcmp(what, "presence") && strcmp(what, "send") &&
	    strcmp(what, "data")) {
		fprintf(stderr,
			"hbctl fleet: unknown subcommand '%s' (status, presence, send, data)\n",
			what);
		return HBCTL_USAGE;
	}
	if ((!strcmp(what, "presence") && argc > 2) || (!strcmp(what, "send") && argc < 3) ||
	    ((!strcmp(what, "status") || !strcmp(what, "data")) && argc != 1)) {
		fprintf(stderr, "hbctl fleet: usage: status | presence [ID] | send PAYLOAD ID... | "
				"data\n");
		return HBCTL_USAGE;
	}
	if ((why = hb_nats_auth_check(&o->auth))) {
		fprintf(stderr, "hbctl fleet: %s\n", why);
		return HBCTL_USAGE;
	}
	if (fleet_open(o, &c)) {
		fleet_close(&c);
		return HBCTL_FAIL;
	}
	if (!strcmp(what, "status"))
		rc = do_status(o, &c);
	else if (!strcmp(what, "presence"))
		rc = do_presence(o, &c, argc == 2 ? argv[1] : NULL);
	else if (!strcmp(what, "send"))
		rc = do_send(o, &c, argc - 1, argv + 1);
	else
		rc = do_data(o, &c);
	fleet_close(&c);
	return rc;
}
