/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Fleet mode's internals, for fleet_*.c only (fleet.h is what the life cycle calls).
 *
 * Threads. The workers never block on NATS: they hand over through fleet_q.h. Two threads of
 * ours and libnats' own ones share struct hbd_fleet under lock:
 *   fleet thread (fleet.c)     takes the workers' queue: presence events become asynchronous
 *                              JetStream publishes into hbeat_presence, DATA batches are
 *                              published to HBEAT_DATA, downlink outcomes become NATS replies;
 *   admin thread (fleet_admin.c) everything that waits for a NATS round trip: set-up of the
 *                              stream and buckets, the node's entry in hbeat_nodes, the watch
 *                              of hbeat_nodes (which nodes live), the watch of hbeat_presence
 *                              (supersede, a dead node's devices), the catch-up after a
 *                              reconnection;
 *   libnats' threads           publish acknowledgements (fleet_data.c, fleet_presence.c) and
 *                              downlink requests (fleet_down.c).
 * Messages to the workers (a batch answered, a downlink queued, a session cut) go through the
 * fleet's own io_uring by MSG_RING, under ring_lock.
 */
#ifndef HBD_FLEET_IMPL_H
#define HBD_FLEET_IMPL_H

#include <liburing.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "fleet.h"
#include "fleet_map.h"
#include "hbd.h"

#define FLEET_BUCKET_PRESENCE "hbeat_presence"
#define FLEET_BUCKET_NODES "hbeat_nodes"
#define FLEET_STREAM_DATA "HBEAT_DATA"
#define FLEET_SUBJ_DATA "hbeat.data."
#define FLEET_SUBJ_DOWN "hbeat.down."
#define FLEET_SUBJ_PRESENCE "$KV." FLEET_BUCKET_PRESENCE "."
#define FLEET_MAX_NODES 256
#define FLEET_NODE_LEN 64
#define FLEET_DOWN_MAX 4096 /* NATS downlinks in flight on a node */

/* A device this node holds (or held, until its last state is written). */
struct fleet_held {
	uint64_t loc; /* its session here */
	uint64_t rev; /* the presence revision of our last acknowledged write, 0: none yet */
	uint64_t other_rev; /* the newest online entry of another node seen meanwhile */
	uint64_t since_ms;
	uint16_t npend; /* our writes not acknowledged yet */
	uint8_t udp;
	uint8_t gone; /* the session ended: end_kind is to be written */
	uint8_t end_kind; /* enum hbd_ev_kind */
	uint8_t end_sent; /* the end write is out */
	uint8_t dirty; /* a write failed: the catch-up writes it again */
	/* taken from the device table after lost events: its own event may still be queued, and
	 * its write waits until the queue has passed table_mark */
	uint8_t from_table;
	char addr[HB_PEER_STR];
};

/* The newest presence entry of a device, from the watch. */
struct fleet_seen {
	uint64_t rev;
	uint64_t recv_ms; /* our monotonic clock when it arrived */
	uint64_t since_ms; /* the entry's since_ms: Unix time its state began; 0 if it had none */
	uint16_t node; /* index into nodes[] */
	uint8_t online;
	uint8_t udp;
};

struct fleet_node {
	char name[FLEET_NODE_LEN];
	bool live; /* at the last judgement: refreshed within the TTL */
	bool live_before; /* at the one before */
	/* when its last refresh of hbeat_nodes arrived (fleet_now_ms's clock); 0: its entry is
	 * not there (deleted, or never seen) */
	uint64_t heard_ms;
	/* the sweep walks the table only for a node (a dead one, or this one) that may have online
	 * entries to end: one received (last_online_ms) since its last walk's cut-off (swept_ms) */
	uint64_t last_online_ms, swept_ms;
};

struct fleet_down {
	char *reply; /* NULL: free */
	uint64_t device;
	uint16_t gen;
};

struct fleet_offline {
	char *reply;
	uint64_t device;
	uint64_t due_ms;
};

/* One worker's sink batch on its way to JetStream. */
struct fleet_batch {
	jsCtx *js; /* a context of its own: its acknowledgements are this worker's */
	uint32_t outstanding; /* publishes not answered yet */
	bool failed;
	bool busy;
	bool js_used; /* atomic: a publish went into js (fleet_take_pending) */
	uint64_t deadline_ms; /* a busy batch not answered by then failed (fleet_data_expire) */
};

struct hbd_fleet {
	struct hbd_daemon *d;
	const struct hbd_nats_config *cfg;
	char node[FLEET_NODE_LEN];
	char addr[HB_PEER_STR + 8];
	pthread_t thread, admin;
	bool thread_ok, admin_ok;
	int stop; /* atomic */
	int efd_stop; /* wakes the fleet thread for the stop */

	natsOptions *opts;
	natsConnection *nc;
	jsCtx *js; /* admin calls and presence writes */
	kvStore *kv_presence, *kv_nodes;
	kvWatcher *watch, *nodes_watch;
	natsSubscription *down_sub;
	int connected; /* atomic */
	int ready; /* atomic: stream and buckets are there, publishing may start */
	int reconnected; /* atomic: catch up on presence */
	int rejoined; /* atomic: back after an outage: refresh our hbeat_nodes entry at once */
	int table_resync; /* atomic: presence events were lost: compare with the device table */
	uint64_t adoptions_seen; /* admin thread: hbd_devices_adoptions at its last look */
	bool synced; /* the watch delivered every existing entry */
	bool nodes_synced; /* the same for the watch of hbeat_nodes */
	bool sweep_again; /* under the lock: a sweep's write failed: walk again for every node */
	uint64_t started_ms;

	pthread_mutex_t lock; /* everything below */
	struct fleet_map held, seen; /* device -> struct fleet_held / struct fleet_seen */
	bool dirty_any; /* an entry of held was marked dirty since the catch-up's last walk */
	uint64_t table_mark; /* the workers' queue when the device table was last compared */
	struct fleet_node nodes[FLEET_MAX_NODES];
	unsigned nnodes;
	uint16_t me; /* our index in nodes[] */
	struct fleet_down down[FLEET_DOWN_MAX];
	uint32_t down_next;
	struct fleet_offline offline[FLEET_DOWN_MAX]; /* "offline" answers waiting their grace */
	uint32_t offline_head, noffline;
	struct fleet_batch *batch; /* per worker */
	void *data_ctx; /* fleet_data.c: the acknowledgement handlers' closures */

	pthread_mutex_t ring_lock;
	struct io_uring ring;
	bool ring_ok;

	/* logged at the stop, read by hbd_fleet_stats (fleet.h): under the lock */
	struct hbd_fleet_counters count;
	int pres_last_js_err; /* JetStream's last refusal of a presence write: its error code */
	/* presence writes published and not acknowledged yet, and when that last changed for the
	 * better (a publish into none in flight, or an acknowledgement): under the lock */
	uint64_t pres_inflight, pres_progress_ms;
	/* of those, the ones counted whose publish call has not returned: libnats may hold them
	 * or not yet, so a listing of what it holds cannot tell (under the lock) */
	uint64_t pres_entering;
	uint64_t pres_started; /* presence publishes ever counted in flight (under the lock) */
	bool pres_js_used; /* a presence publish went into f->js (fleet_take_pending; the lock) */
	int pres_reclaim; /* atomic: take back every write in flight (NATS reconnected) */
	/* atomic: nats-server's asynchronous errors (a permission refused, say), and when one
	 * was last logged */
	uint64_t nats_errors, error_logged_ms;
};

/* The writes js holds unacknowledged, taken back (js_PublishAsyncGetPendingList), once a
 * publish has gone into js (published): before that, libnats 3.4 has no table of pending writes
 * and crashes listing it. NATS_NOT_FOUND when it holds none. */
static inline natsStatus fleet_take_pending(natsMsgList *out, jsCtx *js, bool published)
{
	return published ? js_PublishAsyncGetPendingList(out, js) : NATS_NOT_FOUND;
}

static inline uint64_t fleet_now_ms(void)
{
	return hb_mono_ms();
}

/* fleet_ring.c */
void fleet_msg(struct hbd_fleet *f, unsigned worker, uint64_t ud, int res);
/* the index of a node name in f->nodes (added if new), under f->lock; 0xffff if full */
uint16_t fleet_node_idx(struct hbd_fleet *f, const char *name);

/* fleet_presence.c: presence events from the workers, and the writes' acknowledgements */
void fleet_presence_event(struct hbd_fleet *f, const struct hbd_event *ev);
void fleet_presence_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure);
/* writes again what failed, what waited for room in flight, and what the device table says
 * that we lost (catch-up); true if it stopped with entries left because the writes in flight
 * reached their window: call again soon */
bool fleet_presence_catch_up(struct hbd_fleet *f, bool with_table);
/* an entry from the watch of hbeat_presence */
void fleet_presence_seen(struct hbd_fleet *f, uint64_t device, uint64_t rev, const char *val,
			 int len, bool deleted);
/* our stale entries (a previous life of this node) and those of dead nodes become offline */
void fleet_presence_sweep(struct hbd_fleet *f, uint64_t judged_before_ms);
/* sessions taken over from an earlier daemon since the last call (they come with no presence
 * event): the next catch-up compares with the device table */
void fleet_presence_adoptions(struct hbd_fleet *f);
/* writes in flight whose acknowledgement is not coming (none for PRESENCE_ACK_WAIT_MS, or NATS
 * reconnected meanwhile) are taken back from libnats and marked to be made again */
void fleet_presence_reclaim(struct hbd_fleet *f);

/* fleet_data.c */
int fleet_data_init(struct hbd_fleet *f);
int fleet_data_connect(struct hbd_fleet *f); /* once connected: the workers' contexts */
void fleet_data_free(struct hbd_fleet *f);
void fleet_data_publish(struct hbd_fleet *f, unsigned worker);
/* batches past their deadline: what libnats still holds of them is taken back, they fail */
void fleet_data_expire(struct hbd_fleet *f);
int fleet_data_wait_ms(struct hbd_fleet *f); /* until the first busy batch's deadline; -1: none */

/* fleet_down.c */
int fleet_down_subscribe(struct hbd_fleet *f);
void fleet_down_result(struct hbd_fleet *f, const struct hbd_event *ev);
void fleet_down_tick(struct hbd_fleet *f); /* fleet thread: the "offline" answers due */
int fleet_down_wait_ms(struct hbd_fleet *f); /* until the first of them is due; -1: none */
void fleet_down_free(struct hbd_fleet *f);

/* fleet_admin.c */
void *fleet_admin_main(void *arg);
/* Which nodes live at now, from when their refreshes arrived (heard_ms): the judgement once a
 * second, and the one before it kept (live_before) */
void fleet_nodes_judge(struct hbd_fleet *f, uint64_t now);

/* A presence value: {"node","transport","state","since_ms","addr"} into buf; its length or
 * -1. */
int fleet_presence_json(char *buf, size_t cap, const char *node, bool udp, const char *state,
			uint64_t since_ms, const char *addr);

#endif
