// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The fleet's admin thread: whatever waits for a NATS round trip, so the fleet thread never
 * does. Set-up of HBEAT_DATA and the buckets, this node's entry in hbeat_nodes, the list of
 * live nodes, the watch of hbeat_presence, and the catch-up after a reconnection.
 *
 * A node's death: its hbeat_nodes entry is refreshed every TTL/3 and expires TTL after the
 * last refresh (the bucket's max age). Every node lists the bucket once a second; a node
 * missing from two listings in a row is dead, and the live node first in name order marks
 * each of its devices offline in presence (only over the entry the dead node left, so a device
 * that came back elsewhere keeps its new entry). So a device of a node killed with -9 is shown
 * offline at most TTL + 2 s after the node's last refresh, TTL/3 earlier on average.
 *
 * An outage of NATS longer than TTL expires every entry, and the nodes reconnect one after
 * another: so a node back from one refreshes its own entry at once and judges the others only
 * on listings made after it. A node taken for dead all the same (a partition from NATS alone)
 * writes its devices online again when it sees their entries ended (fleet_presence.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleet_impl.h"
#include "json_out.h"
#include "log.h"
#include "stats.h"
#include "version.h"
#include "worker.h"

#define PRESENCE_MAX_PENDING 262144
/* the longest the watch is waited on: flags other threads raise (a reconnection, a table to
 * compare after an upgrade, a stop) wait at most this for the loop; a presence event ends the
 * wait at once */
#define WATCH_WAIT_MAX_MS 500
#define WATCH_BATCH 16384 /* entries taken before the timers are looked at */
#define LIST_EVERY_MS 1000
#define CATCH_UP_EVERY_MS 2000 /* writes that failed are made again at least this often */
#define ADMIN_WAIT_MS 5000

static const char *const data_subjects[] = { FLEET_SUBJ_DATA ">" };

static int make_stream(struct hbd_fleet *f)
{
	jsStreamConfig sc;
	jsStreamInfo *si = NULL;
	jsErrCode jerr = 0;
	natsStatus s;

	jsStreamConfig_Init(&sc);
	sc.Name = FLEET_STREAM_DATA;
	sc.Subjects = (const char **)data_subjects;
	sc.SubjectsLen = 1;
	sc.Storage = js_FileStorage;
	sc.Replicas = f->cfg->replicas;
	s = js_AddStream(&si, f->js, &sc, NULL, &jerr);
	if (s != NATS_OK && jerr == JSStreamNameExistErr)
		s = js_GetStreamInfo(&si, f->js, FLEET_STREAM_DATA, NULL, &jerr);
	if (si)
		jsStreamInfo_Destroy(si);
	if (s != NATS_OK) {
		hb_warn("fleet: stream %s: %s (JetStream error %d)", FLEET_STREAM_DATA,
			natsStatus_GetText(s), (int)jerr);
		return -EIO;
	}
	return 0;
}

static int make_bucket(struct hbd_fleet *f, kvStore **kv, const char *name, int64_t ttl_ns)
{
	kvConfig kc;
	natsStatus s;

	kvConfig_Init(&kc);
	kc.Bucket = name;
	kc.History = 1;
	kc.TTL = ttl_ns; /* the stream's max age: ns */
	kc.Replicas = (int)f->cfg->replicas;
	kc.StorageType = js_FileStorage;
	s = js_CreateKeyValue(kv, f->js, &kc);
	if (s != NATS_OK) {
		const char *why = nats_GetLastError(NULL);
		char text[256];

		snprintf(text, sizeof(text), "%s", why ? why : natsStatus_GetText(s));
		s = js_KeyValue(kv, f->js, name); /* there already, made otherwise: use it */
		if (s != NATS_OK) {
			hb_warn("fleet: bucket %s: %s", name, text);
			return -EIO;
		}
	}
	return 0;
}

static void put_node(struct hbd_fleet *f)
{
	struct hbd_daemon *d = f->d;
	struct hb_ustats sum;
	char buf[512];
	int n;

	hbd_stats_sum(d->stats, HB_MAX_WORKERS, &sum);
	n = hb_json_line(buf, sizeof(buf),
			 json_pack("{s:s,s:s,s:s,s:i,s:o,s:o,s:o,s:o}", "node", f->node, "addr",
				   f->addr, "version", HBEAT_VERSION, "pid", (int)getpid(),
				   "started_ms",
				   hb_json_u64(hb_realtime_ms() - (fleet_now_ms() - f->started_ms)),
				   "tcp", hb_json_u64(sum.tcp_authed), "udp",
				   hb_json_u64(sum.udp_active), "devices",
				   hb_json_u64(sum.tcp_authed + sum.udp_active)));
	if (n > 0 && kvStore_Put(NULL, f->kv_nodes, f->node, buf, n - 1) != NATS_OK)
		hb_dbg("fleet: refreshing %s in %s failed", f->node, FLEET_BUCKET_NODES);
}

static int setup(struct hbd_fleet *f)
{
	jsOptions o;

	if (!f->js) {
		jsOptions_Init(&o);
		o.Wait = ADMIN_WAIT_MS;
		o.PublishAsync.MaxPending = PRESENCE_MAX_PENDING;
		o.PublishAsync.AckHandler = fleet_presence_ack;
		o.PublishAsync.AckHandlerClosure = f;
		if (natsConnection_JetStream(&f->js, f->nc, &o) != NATS_OK)
			return -ENOMEM;
	}
	if (make_stream(f) ||
	    (!f->kv_presence && make_bucket(f, &f->kv_presence, FLEET_BUCKET_PRESENCE, 0)) ||
	    (!f->kv_nodes && make_bucket(f, &f->kv_nodes, FLEET_BUCKET_NODES,
					 (int64_t)(f->cfg->node_ttl_s * 1e9))) ||
	    fleet_data_connect(f) || (!f->down_sub && fleet_down_subscribe(f)))
		return -EIO;
	if (!f->watch && kvStore_WatchAll(&f->watch, f->kv_presence, NULL) != NATS_OK) {
		hb_warn("fleet: cannot watch %s", FLEET_BUCKET_PRESENCE);
		return -EIO;
	}
	put_node(f);
	return 0;
}

/* The live nodes: the keys of hbeat_nodes (an expired entry is gone). */
static void list_nodes(struct hbd_fleet *f)
{
	kvKeysList kl = { 0 };
	natsStatus s = kvStore_Keys(&kl, f->kv_nodes, NULL);

	if (s != NATS_OK && s != NATS_NOT_FOUND)
		return; /* cannot tell: nobody is declared dead on a failed listing */
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < f->nnodes; i++) {
		f->nodes[i].live_before = f->nodes[i].live;
		f->nodes[i].live = i == f->me;
	}
	for (int i = 0; s == NATS_OK && i < kl.Count; i++) {
		uint16_t k = fleet_node_idx(f, kl.Keys[i]);

		if (k < f->nnodes)
			f->nodes[k].live = true;
	}
	pthread_mutex_unlock(&f->lock);
	if (s == NATS_OK)
		kvKeysList_Destroy(&kl);
}

/* As if every node had been in the last listing: one must be missing from two listings made
 * after this call to be declared dead. */
static void trust_nodes(struct hbd_fleet *f)
{
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < f->nnodes; i++)
		f->nodes[i].live = true;
	pthread_mutex_unlock(&f->lock);
}

/* Entries from the watch until it is quiet, the first waited for up to wait_ms; false if the
 * watch broke (made again later). */
static bool take_watch(struct hbd_fleet *f, int64_t wait_ms)
{
	for (int i = 0; i < WATCH_BATCH; i++) {
		kvEntry *e = NULL;
		/* a timeout of 0 is refused: 1 ms for "what is there already" */
		natsStatus s = kvWatcher_Next(&e, f->watch, i ? 1 : wait_ms);
		const char *key;

		if (s == NATS_TIMEOUT)
			return true;
		if (s != NATS_OK) {
			hb_warn("fleet: watch of %s: %s", FLEET_BUCKET_PRESENCE,
				natsStatus_GetText(s));
			return false;
		}
		if (!e) {
			/* every existing entry has been delivered */
			if (!f->synced)
				hb_info("fleet: %s read (%zu entries)", FLEET_BUCKET_PRESENCE,
					f->seen.count);
			f->synced = true;
			__atomic_store_n(&f->reconnected, 1, __ATOMIC_RELEASE);
			continue;
		}
		key = kvEntry_Key(e);
		fleet_presence_seen(f, strtoull(key ? key : "0", NULL, 10), kvEntry_Revision(e),
				    (const char *)kvEntry_Value(e), kvEntry_ValueLen(e),
				    kvEntry_Operation(e) != kvOp_Put);
		kvEntry_Destroy(e);
	}
	return true;
}

void *fleet_admin_main(void *arg)
{
	struct hbd_fleet *f = arg;
	uint64_t next_put = 0, next_list = 0, listed_before = 0, listed_last = 0, next_catch = 0;
	const uint64_t put_every = (uint64_t)(f->cfg->node_ttl_s * 1000 / 3);

	while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
		uint64_t now = fleet_now_ms(), due, wait_ms;

		if (!__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE)) {
			if (__atomic_load_n(&f->connected, __ATOMIC_ACQUIRE) && !setup(f)) {
				hb_info("fleet: %s, %s and %s ready (replicas %u)",
					FLEET_STREAM_DATA, FLEET_BUCKET_PRESENCE,
					FLEET_BUCKET_NODES, f->cfg->replicas);
				__atomic_store_n(&f->ready, 1, __ATOMIC_RELEASE);
				next_put = now + put_every;
				continue;
			}
			usleep(200 * 1000);
			continue;
		}
		/* until the next scheduled task: an idle node wakes a few times a second, not at
		 * every short poll (each wakeup is a round of libnats's locks and condition
		 * variables) */
		due = next_put < next_list ? next_put : next_list;
		if (f->synced && next_catch < due)
			due = next_catch;
		wait_ms = due > now ? due - now : 1;
		if (!take_watch(f, wait_ms < WATCH_WAIT_MAX_MS ? (int64_t)wait_ms
							       : WATCH_WAIT_MAX_MS)) {
			hb_warn("fleet: the watch of %s broke: watching again",
				FLEET_BUCKET_PRESENCE);
			kvWatcher_Destroy(f->watch);
			f->watch = NULL;
			f->synced = false;
			if (kvStore_WatchAll(&f->watch, f->kv_presence, NULL) != NATS_OK) {
				f->watch = NULL;
				__atomic_store_n(&f->ready, 0, __ATOMIC_RELEASE);
			}
			continue;
		}
		now = fleet_now_ms();
		if (__atomic_exchange_n(&f->rejoined, 0, __ATOMIC_ACQ_REL)) {
			/* Every node's entry may have expired during the outage, ours too: ours is
			 * back at once, and no other node is judged on what was listed before. */
			trust_nodes(f);
			next_put = now;
		}
		if (now >= next_put) {
			put_node(f);
			next_put = now + put_every;
		}
		if (now >= next_list) {
			list_nodes(f);
			listed_before = listed_last;
			listed_last = now;
			next_list = now + LIST_EVERY_MS;
			if (f->synced && listed_before)
				fleet_presence_sweep(f, listed_before);
		}
		if (f->synced &&
		    (__atomic_exchange_n(&f->reconnected, 0, __ATOMIC_ACQ_REL) |
		     __atomic_load_n(&f->table_resync, __ATOMIC_ACQUIRE) | (now >= next_catch))) {
			bool table = __atomic_exchange_n(&f->table_resync, 0, __ATOMIC_ACQ_REL);

			fleet_presence_reclaim(f); /* first, so the catch-up writes what it took */
			fleet_presence_catch_up(f, table);
			next_catch = now + CATCH_UP_EVERY_MS;
		}
	}
	return NULL;
}
