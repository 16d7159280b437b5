// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The fleet's admin thread: whatever waits for a NATS round trip, so the fleet thread never
 * does. Set-up of HBEAT_DATA and the buckets, this node's entry in hbeat_nodes, the list of
 * live nodes, the watch of hbeat_presence, and the catch-up after a reconnection.
 *
 * A node's death: its hbeat_nodes entry is refreshed every TTL/3 and expires TTL after the
 * last refresh (the bucket's max age). Every node watches the bucket and notes when each node's
 * refresh reached it; once a second it judges: a node not heard from for TTL (or whose entry
 * was deleted, as a node does at its stop) is not live, and one not live at two judgements in
 * a row is dead. The live node first in name order then marks each of the dead node's devices
 * offline in presence (only over the entry the dead node left, so a device that came back
 * elsewhere keeps its new entry). So a device of a node killed with -9 is shown offline at most
 * TTL + 2 s after the node's last refresh reached the others, TTL/3 earlier on average.
 *
 * Why a watch and not a listing of the bucket: NATS 2.9 sends nothing when an entry reaches
 * its max age, so the bucket's keys (which libnats reads through a consumer made and deleted
 * for each listing) were the only way to see an expiry, and a listing a second from every
 * node was most of what an idle fleet made nats-server do. The refreshes themselves are what
 * the watch delivers. The time a refresh is judged by is when this node received it, not the
 * server's timestamp, so no clocks are compared; a node that died before this one started
 * (its entry still in the bucket) is judged dead TTL after this one read the entry.
 *
 * An outage of NATS longer than TTL expires every entry, and the nodes reconnect one after
 * another: so a node back from one refreshes its own entry at once and judges the others only
 * on refreshes received after it. A node taken for dead all the same (a partition from NATS alone)
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
#define JUDGE_EVERY_MS 1000 /* which nodes live */
/* the longest the watch is waited on: flags other threads raise (a reconnection, a table to
 * compare after an upgrade) wait at most this for the loop; a presence event ends the wait at
 * once, and a stop too (it stops the watch) */
#define WATCH_WAIT_MAX_MS JUDGE_EVERY_MS
#define WATCH_BATCH 16384 /* entries taken before the timers are looked at */
#define NODES_BATCH 256 /* hbeat_nodes entries taken a judgement (FLEET_MAX_NODES and more) */
#define CATCH_UP_EVERY_MS 2000 /* writes that failed are made again at least this often */
#define CATCH_UP_FULL_MS 200 /* the next look when the last stopped at the window in flight */
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

/* As if every node had just refreshed its entry: one must then stay silent for TTL, at two
 * judgements, to be declared dead. */
static void trust_nodes(struct hbd_fleet *f)
{
	uint64_t now = fleet_now_ms();

	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < f->nnodes; i++) {
		f->nodes[i].live = true;
		f->nodes[i].heard_ms = now;
	}
	pthread_mutex_unlock(&f->lock);
}

/* The refreshes and deletions of hbeat_nodes that arrived since the last call; false if the
 * watch broke or cannot be made (nobody is judged then, and it is made again next time). */
static bool take_nodes(struct hbd_fleet *f)
{
	if (!f->nodes_watch) {
		if (kvStore_WatchAll(&f->nodes_watch, f->kv_nodes, NULL) != NATS_OK) {
			f->nodes_watch = NULL;
			return false;
		}
		f->nodes_synced = false;
		trust_nodes(f); /* only refreshes received from now on count */
	}
	for (int i = 0; i < NODES_BATCH; i++) {
		kvEntry *e = NULL;
		/* a timeout of 0 is refused: 1 ms for "what is there already" */
		natsStatus s = kvWatcher_Next(&e, f->nodes_watch, 1);
		const char *key;
		uint16_t k;

		if (s == NATS_TIMEOUT)
			return true;
		if (s != NATS_OK) {
			if (__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE))
				return false; /* stopping: hbd_fleet_stop destroys it */
			hb_warn("fleet: watch of %s: %s: watching again", FLEET_BUCKET_NODES,
				natsStatus_GetText(s));
			kvWatcher_Destroy(f->nodes_watch);
			f->nodes_watch = NULL;
			return false;
		}
		if (!e) {
			f->nodes_synced = true; /* every existing entry has been delivered */
			continue;
		}
		key = kvEntry_Key(e);
		pthread_mutex_lock(&f->lock);
		k = fleet_node_idx(f, key ? key : "");

		if (k < f->nnodes)
			f->nodes[k].heard_ms =
				kvEntry_Operation(e) == kvOp_Put ? fleet_now_ms() : 0;
		pthread_mutex_unlock(&f->lock);
		kvEntry_Destroy(e);
	}
	return true;
}

void fleet_nodes_judge(struct hbd_fleet *f, uint64_t now)
{
	const uint64_t ttl_ms = (uint64_t)(f->cfg->node_ttl_s * 1000);

	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < f->nnodes; i++) {
		struct fleet_node *nd = &f->nodes[i];
		/* a refresh taken after now was read is heard "in the future": just now, not
		 * 2^64 ms ago (which took a live node for dead) */
		uint64_t age = nd->heard_ms > now ? 0 : now - nd->heard_ms;

		nd->live_before = nd->live;
		nd->live = i == f->me || (nd->heard_ms && age < ttl_ms);
		if (nd->live && !nd->live_before)
			hb_info("fleet: node %s is live", nd->name);
		else if (!nd->live && nd->live_before && nd->heard_ms)
			hb_info("fleet: node %s is silent (last heard %llu ms ago): not live",
				nd->name, (unsigned long long)age);
		else if (!nd->live && nd->live_before)
			hb_info("fleet: node %s left hbeat_nodes: not live", nd->name);
	}
	pthread_mutex_unlock(&f->lock);
}

/* Which nodes live now, from when their refreshes arrived; false if it cannot be told (NATS
 * away, or the watch not yet through the bucket): nobody is declared dead then. */
static bool judge_nodes(struct hbd_fleet *f)
{
	if (!take_nodes(f) || !f->nodes_synced || !__atomic_load_n(&f->connected, __ATOMIC_ACQUIRE))
		return false;
	fleet_nodes_judge(f, fleet_now_ms()); /* after the refreshes take_nodes stamped */
	return true;
}

/* Entries from the watch until it is quiet, the first waited for up to wait_ms; false if the
 * watch broke (made again later). */
static bool take_watch(struct hbd_fleet *f, int64_t wait_ms)
{
	for (int i = 0; i < WATCH_BATCH && !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE); i++) {
		kvEntry *e = NULL;
		/* a timeout of 0 is refused: 1 ms for "what is there already" */
		natsStatus s = kvWatcher_Next(&e, f->watch, i ? 1 : wait_ms);
		const char *key;

		if (s == NATS_TIMEOUT)
			return true;
		if (s != NATS_OK) {
			if (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE))
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
	uint64_t next_put = 0, next_judge = 0, judged_before = 0, judged_last = 0, next_catch = 0;
	const uint64_t put_every = (uint64_t)(f->cfg->node_ttl_s * 1000 / 3);
	/* The refresh and the catch-up are run early, at a wakeup that comes at most half a
	 * judgement before they are due: so they fall on the judgements' wakeups, and an idle
	 * node wakes about once a second, not once for each task. Each wakeup of a thread costs
	 * tens of µs on this kind of VM, and was most of what fleet mode added to a node's
	 * heartbeats. Never more than half their period early, so neither comes more often. */
	const uint64_t put_slack =
		put_every / 2 < JUDGE_EVERY_MS / 2 ? put_every / 2 : JUDGE_EVERY_MS / 2;
	const uint64_t catch_slack = JUDGE_EVERY_MS / 2;
	/* the last catch-up stopped at the window in flight: the next is not run early */
	bool catch_full = false;

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
		due = next_put < next_judge ? next_put : next_judge;
		if (f->synced && next_catch < due)
			due = next_catch;
		wait_ms = due > now ? due - now : 1;
		if (!take_watch(f, wait_ms < WATCH_WAIT_MAX_MS ? (int64_t)wait_ms
							       : WATCH_WAIT_MAX_MS)) {
			if (__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE))
				break; /* stopping: hbd_fleet_stop has the watch */
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
			 * back at once, and no other node is judged on refreshes received before. */
			trust_nodes(f);
			next_put = now;
		}
		if (now + put_slack >= next_put) {
			put_node(f);
			next_put = now + put_every;
		}
		if (now >= next_judge) {
			next_judge = now + JUDGE_EVERY_MS;
			if (judge_nodes(f)) {
				judged_before = judged_last;
				judged_last = now;
				if (f->synced && judged_before)
					fleet_presence_sweep(f, judged_before);
			}
		}
		fleet_presence_adoptions(f);
		if (f->synced && (__atomic_exchange_n(&f->reconnected, 0, __ATOMIC_ACQ_REL) |
				  __atomic_load_n(&f->table_resync, __ATOMIC_ACQUIRE) |
				  (now + (catch_full ? 0 : catch_slack) >= next_catch))) {
			bool table = __atomic_exchange_n(&f->table_resync, 0, __ATOMIC_ACQ_REL);

			fleet_presence_reclaim(f); /* first, so the catch-up writes what it took */
			catch_full = fleet_presence_catch_up(f, table);
			next_catch = now + (catch_full ? CATCH_UP_FULL_MS : CATCH_UP_EVERY_MS);
		}
	}
	return NULL;
}
