// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Fleet mode: the NATS connection, the fleet thread's loop over the workers' queue, and the
 * MSG_RING path back to the workers (fleet_impl.h says who does what). */
#include "fleet.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fleet_impl.h"
#include "log.h"
#include "worker.h"

#define FLEET_Q_MIN 16384
#define FLEET_Q_MAX 262144 /* events in flight; beyond, the catch-up compares with the table */
#define FLEET_EV_BATCH 256
#define FLEET_RING 256

/* The default node name: HOSTNAME-PORT, with what a bucket key may not hold made '_'. */
static void default_node(struct hbd_fleet *f)
{
	char host[FLEET_NODE_LEN - 8] = "hbd";

	if (gethostname(host, sizeof(host)))
		snprintf(host, sizeof(host), "hbd");
	host[sizeof(host) - 1] = 0;
	for (char *p = host; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=",
			    *p))
			*p = '_';
	snprintf(f->node, sizeof(f->node), "%s-%u", host, f->d->port);
}

int hbd_fleet_init(struct hbd_daemon *d, char *why, size_t whylen)
{
	unsigned cap = d->cfg->max_clients;
	struct hbd_fleet *f;

	if (cap < FLEET_Q_MIN)
		cap = FLEET_Q_MIN;
	if (cap > FLEET_Q_MAX)
		cap = FLEET_Q_MAX;
	d->fleet.batch_ready = calloc(d->plan.workers, 1);
	f = calloc(1, sizeof(*f));
	d->fleet.f = f;
	if (!f) {
		snprintf(why, whylen, "out of memory for the fleet");
		return -ENOMEM;
	}
	f->d = d;
	f->cfg = &d->cfg->nats;
	f->efd_stop = -1;
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->ring_lock, NULL);
	if (!d->fleet.batch_ready || hbd_events_init(&d->fleet.q, cap)) {
		snprintf(why, whylen, "out of memory for the fleet queue");
		return -ENOMEM;
	}
	f->batch = calloc(d->plan.workers, sizeof(*f->batch));
	if (!f->batch || fleet_map_init(&f->held, sizeof(struct fleet_held), cap) ||
	    fleet_map_init(&f->seen, sizeof(struct fleet_seen), cap)) {
		snprintf(why, whylen, "out of memory for the fleet's tables");
		return -ENOMEM;
	}
	if (io_uring_queue_init(FLEET_RING, &f->ring, 0)) {
		snprintf(why, whylen, "io_uring for the fleet thread: %s", strerror(errno));
		return -ENOMEM;
	}
	f->ring_ok = true;
	f->efd_stop = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->efd_stop < 0) {
		snprintf(why, whylen, "eventfd: %s", strerror(errno));
		return -errno;
	}
	d->fleet.on = true;
	return 0;
}

static void on_connected(natsConnection *nc, void *closure)
{
	struct hbd_fleet *f = closure;

	__atomic_store_n(&f->connected, 1, __ATOMIC_RELEASE);
	hb_info("fleet: connected to NATS");
}

static void on_disconnected(natsConnection *nc, void *closure)
{
	struct hbd_fleet *f = closure;

	__atomic_store_n(&f->connected, 0, __ATOMIC_RELEASE);
	if (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE))
		hb_warn("fleet: disconnected from NATS: heartbeats go on; DATA is not ACKed and "
			"presence waits until it is back");
}

static void on_reconnected(natsConnection *nc, void *closure)
{
	struct hbd_fleet *f = closure;

	__atomic_store_n(&f->connected, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&f->reconnected, 1, __ATOMIC_RELEASE);
	/* acknowledgements of what was in flight when the connection broke are lost */
	__atomic_store_n(&f->pres_reclaim, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&f->rejoined, 1, __ATOMIC_RELEASE);
	hb_info("fleet: reconnected to NATS: catching up on presence");
}

/* nats-server's asynchronous refusals (a permission this node's user lacks, a slow consumer):
 * counted, and logged once a second at most with the server's words, so that a node set up
 * with too few permissions says so instead of only failing its writes. */
static void on_nats_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *closure)
{
	struct hbd_fleet *f = closure;
	uint64_t now = fleet_now_ms(),
		 last = __atomic_load_n(&f->error_logged_ms, __ATOMIC_RELAXED);
	const char *text = NULL;

	(void)sub;
	__atomic_fetch_add(&f->nats_errors, 1, __ATOMIC_RELAXED);
	if (last && now - last < 1000)
		return;
	__atomic_store_n(&f->error_logged_ms, now, __ATOMIC_RELAXED);
	if (natsConnection_GetLastError(nc, &text) == NATS_OK || !text || !*text)
		text = natsStatus_GetText(err);
	hb_warn("fleet: NATS refused: %s%s", text,
		err == NATS_NOT_PERMITTED ? " (this node's NATS user lacks a permission: see "
					    "$HBEAT_NODE in contrib/nats/hbeat-permissions.conf)"
					  : "");
}

static int set_options(struct hbd_fleet *f, char *why, size_t whylen)
{
	const struct hbd_nats_config *c = f->cfg;
	char *urls = strdup(c->urls), *save = NULL, name[96];
	const char *list[64];
	int n = 0;
	natsStatus s;

	if (!urls)
		return -ENOMEM;
	for (char *t = strtok_r(urls, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save))
		list[n++] = t;
	snprintf(name, sizeof(name), "hbd %s", f->node);
	s = natsOptions_Create(&f->opts);
	if (s == NATS_OK)
		s = n ? natsOptions_SetServers(f->opts, list, n) : NATS_INVALID_ARG;
	free(urls);
	if (s == NATS_OK)
		s = natsOptions_SetName(f->opts, name);
	/* a NATS server that is not there yet is no reason not to serve: keep trying */
	if (s == NATS_OK)
		s = natsOptions_SetRetryOnFailedConnect(f->opts, true, on_connected, f);
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(f->opts, -1);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectWait(f->opts, 250);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(f->opts, 2000);
	/* A server that died without closing the socket is noticed within ~8 s (one that exits
	 * closes it: noticed at once). Tighter is worse: a busy server stalls its read loop for
	 * seconds (2.9 s logged by nats-server during a 500k reconnect storm on 2 vCPUs), and every
	 * disconnection fails every presence write in flight, to be made again. */
	if (s == NATS_OK)
		s = natsOptions_SetPingInterval(f->opts, 2000);
	if (s == NATS_OK)
		s = natsOptions_SetMaxPingsOut(f->opts, 3);
	if (s == NATS_OK)
		s = natsOptions_SetDisconnectedCB(f->opts, on_disconnected, f);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectedCB(f->opts, on_reconnected, f);
	if (s == NATS_OK)
		s = natsOptions_SetErrorHandler(f->opts, on_nats_error, f);
	if (s != NATS_OK) {
		snprintf(why, whylen, "NATS options (--nats %s): %s", c->urls,
			 natsStatus_GetText(s));
		return -EINVAL;
	}
	return hb_nats_auth_apply(f->opts, &c->auth, why, whylen);
}

/* The workers' queue: presence events and downlink outcomes; then the batches ready. */
static void drain_queue(struct hbd_fleet *f)
{
	struct hbd_daemon *d = f->d;
	struct hbd_event ev[FLEET_EV_BATCH];
	uint64_t dropped;
	uint32_t n;

	do {
		n = hbd_events_take(&d->fleet.q, ev, FLEET_EV_BATCH, &dropped);
		for (uint32_t i = 0; i < n; i++) {
			if (ev[i].kind == HBD_EV_DOWN_RESULT)
				fleet_down_result(f, &ev[i]);
			else
				fleet_presence_event(f, &ev[i]);
		}
		hbd_events_done(&d->fleet.q, n);
		if (dropped) {
			pthread_mutex_lock(&f->lock);
			f->count.events_lost += dropped;
			pthread_mutex_unlock(&f->lock);
			hb_warn("fleet: %llu presence events lost (queue full): comparing with the "
				"device table",
				(unsigned long long)dropped);
			__atomic_store_n(&f->table_resync, 1, __ATOMIC_RELEASE);
		}
	} while (n == FLEET_EV_BATCH);
	for (unsigned k = 0; k < d->plan.workers; k++)
		if (__atomic_exchange_n(&d->fleet.batch_ready[k], 0, __ATOMIC_ACQUIRE))
			fleet_data_publish(f, k);
}

static void *fleet_main(void *arg)
{
	struct hbd_fleet *f = arg;

	while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd pfd[2] = {
			{ .fd = f->d->fleet.q.efd, .events = POLLIN },
			{ .fd = f->efd_stop, .events = POLLIN },
		};
		int down = fleet_down_wait_ms(f), data = fleet_data_wait_ms(f);

		/* the workers and the downlink handler ring the queue's doorbell, stop has its
		 * own: a timeout only while something is due by a clock (a delayed "offline"
		 * answer to a downlink, a DATA batch's deadline). Idle, this thread sleeps: each
		 * wakeup of a thread costs tens of µs on this kind of VM, which is what fleet mode
		 * added to a node's heartbeats. */
		if (poll(pfd, 2, down < 0 || (data >= 0 && data < down) ? data : down) < 0 &&
		    errno != EINTR) {
			hb_err("fleet: poll: %s", strerror(errno));
			break;
		}
		drain_queue(f);
		fleet_data_expire(f);
		fleet_down_tick(f);
	}
	return NULL;
}

/* In a storm every worker is runnable, and at the same weight the scheduler gives the fleet
 * thread one share among dozens: its queue of presence events overflows, and each overflow
 * costs a comparison with the device table. --nats-priority N raises the fleet's threads by N
 * nice steps against that. It is off by default because raised threads also win against the
 * kernel's kworkers at nice 0: after a mass login they kept the one that sends the kernel
 * path's PONGs off its CPU for seconds (docs/FLEET.md). Linux keeps a nice value per thread and
 * a new thread inherits its creator's, so the calling thread runs N steps higher while it
 * creates libnats' threads and the fleet's, and goes back after (a higher nice value needs no
 * privilege). Without CAP_SYS_NICE or an RLIMIT_NICE that allows it, all keep the daemon's.
 * Returns the nice value to go back to, INT_MIN if there is none. */
static int fleet_nice_enter(unsigned steps)
{
	int before;

	errno = 0;
	before = getpriority(PRIO_PROCESS, 0); /* this thread */
	if (!steps || errno)
		return INT_MIN;
	if (setpriority(PRIO_PROCESS, 0, before - (int)steps)) {
		hb_warn("fleet: its threads keep the daemon's priority (nice %d not allowed: %s)",
			before - (int)steps, strerror(errno));
		return INT_MIN;
	}
	return before;
}

static void fleet_nice_leave(int before)
{
	if (before != INT_MIN && setpriority(PRIO_PROCESS, 0, before))
		hb_warn("fleet: nice %d back: %s", before, strerror(errno));
}

static int fleet_start(struct hbd_daemon *d, char *why, size_t whylen)
{
	struct hbd_fleet *f = d->fleet.f;
	natsStatus s;
	int rc;

	if (f->cfg->node)
		snprintf(f->node, sizeof(f->node), "%s", f->cfg->node);
	else
		default_node(f);
	f->me = fleet_node_idx(f, f->node);
	snprintf(f->addr, sizeof(f->addr), "%s:%u", d->cfg->bind ? d->cfg->bind : "::", d->port);
	f->started_ms = fleet_now_ms();
	rc = set_options(f, why, whylen);
	if (rc)
		return rc;
	rc = fleet_data_init(f);
	if (rc) {
		snprintf(why, whylen, "JetStream contexts: out of memory");
		return rc;
	}
	/* One attempt on its own first: a connect that goes on retrying keeps no reason for its
	 * failures, and a refused certificate or password should be said, not retried in
	 * silence. */
	s = natsOptions_SetRetryOnFailedConnect(f->opts, false, NULL, NULL);
	if (s == NATS_OK)
		s = natsConnection_Connect(&f->nc, f->opts);
	if (s != NATS_OK) {
		hb_warn("fleet: NATS (%s) not reachable yet (%s): serving heartbeats, retrying",
			f->cfg->urls, hb_nats_last_error(natsStatus_GetText(s)));
		s = natsOptions_SetRetryOnFailedConnect(f->opts, true, on_connected, f);
		if (s == NATS_OK)
			s = natsConnection_Connect(&f->nc, f->opts);
	}
	if (s == NATS_OK) {
		__atomic_store_n(&f->connected, 1, __ATOMIC_RELEASE);
	} else if (s != NATS_NOT_YET_CONNECTED) {
		snprintf(why, whylen, "NATS connect (%s): %s", f->cfg->urls, natsStatus_GetText(s));
		return -ECONNREFUSED;
	}
	/* named here, not by the threads themselves: they have their names (top -H, perf, the
	 * benches, the tests) before the daemon says it is ready */
	rc = -pthread_create(&f->thread, NULL, fleet_main, f);
	if (!rc) {
		f->thread_ok = true;
		pthread_setname_np(f->thread, "hbd-fleet");
		rc = -pthread_create(&f->admin, NULL, fleet_admin_main, f);
		f->admin_ok = !rc;
	}
	if (!rc)
		pthread_setname_np(f->admin, "hbd-fleet-adm");
	if (rc) {
		snprintf(why, whylen, "fleet threads: %s", strerror(-rc));
		return rc;
	}
	hb_info("fleet: node %s, NATS %s", f->node, f->cfg->urls);
	return 0;
}

int hbd_fleet_start(struct hbd_daemon *d, char *why, size_t whylen)
{
	int before = fleet_nice_enter(d->cfg->nats.priority);
	int rc = fleet_start(d, why, whylen);

	fleet_nice_leave(before);
	return rc;
}

void hbd_fleet_stop(struct hbd_daemon *d)
{
	struct hbd_fleet *f = d->fleet.f;
	uint64_t one = 1, pres_failed;

	if (!f || !d->fleet.on)
		return;
	/* the workers are gone: their last presence events (shutdown) go out now */
	if (f->thread_ok) {
		__atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
		if (write(f->efd_stop, &one, sizeof(one)) < 0) {
		}
		pthread_join(f->thread, NULL);
		f->thread_ok = false;
		drain_queue(f);
	}
	/* The admin thread sees the stop within one wait on the watch (at most a second). Its
	 * watches are stopped only after it has left them: libnats 3.4.1's kvWatcher_Next drops
	 * an entry it had already taken when kvWatcher_Stop comes meanwhile, and never frees it
	 * (a leak at every stop that met an entry on its way: the node's own last writes). */
	__atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
	if (f->admin_ok) {
		pthread_join(f->admin, NULL);
		f->admin_ok = false;
	}
	if (f->watch)
		kvWatcher_Stop(f->watch);
	if (f->nodes_watch)
		kvWatcher_Stop(f->nodes_watch);
	if (f->nc && __atomic_load_n(&f->connected, __ATOMIC_ACQUIRE)) {
		jsPubOptions po;

		/* the ends that waited for room in flight (--nats-presence-window) */
		if (f->synced)
			fleet_presence_catch_up(f, false);
		jsPubOptions_Init(&po);
		po.MaxWait = 2000; /* the last presence writes: not forever if NATS went away */
		if (f->js)
			js_PublishAsyncComplete(f->js, &po);
		if (f->kv_nodes)
			kvStore_Delete(f->kv_nodes, f->node);
		natsConnection_FlushTimeout(f->nc, 1000);
	}
	pres_failed =
		f->count.pres_failed_pub + f->count.pres_failed_timeout + f->count.pres_failed_js;
	hb_info("fleet: presence writes %llu (failed %llu, taken back and made again %llu), DATA "
		"published %llu (failed %llu), "
		"downlinks %llu (answered %llu), superseded fleet-wide %llu, dead nodes' devices "
		"marked offline %llu",
		(unsigned long long)f->count.pres_written, (unsigned long long)pres_failed,
		(unsigned long long)f->count.pres_taken_back,
		(unsigned long long)f->count.data_published,
		(unsigned long long)f->count.data_failed, (unsigned long long)f->count.down_in,
		(unsigned long long)f->count.down_replied, (unsigned long long)f->count.superseded,
		(unsigned long long)f->count.node_lost_marked);
	if (pres_failed)
		hb_info("fleet: failed presence writes: %llu at the publish, %llu not acknowledged "
			"in time, %llu refused by JetStream (last error code %d)",
			(unsigned long long)f->count.pres_failed_pub,
			(unsigned long long)f->count.pres_failed_timeout,
			(unsigned long long)f->count.pres_failed_js, f->pres_last_js_err);
}

bool hbd_fleet_stats(struct hbd_daemon *d, struct hbd_fleet_stats *s)
{
	struct hbd_fleet *f = d->fleet.f;

	memset(s, 0, sizeof(*s));
	if (!f || !d->fleet.on)
		return false;
	s->connected = __atomic_load_n(&f->connected, __ATOMIC_ACQUIRE) &&
		       __atomic_load_n(&f->ready, __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < f->nnodes; i++)
		s->nodes_live += f->nodes[i].live;
	s->held = f->held.count;
	s->pres_inflight = f->pres_inflight;
	s->count = f->count;
	pthread_mutex_unlock(&f->lock);
	s->nats_errors = __atomic_load_n(&f->nats_errors, __ATOMIC_RELAXED);
	return true;
}

void hbd_fleet_free(struct hbd_daemon *d)
{
	struct hbd_fleet *f = d->fleet.f;

	if (f) {
		if (f->thread_ok || f->admin_ok)
			hbd_fleet_stop(d);
		if (f->down_sub)
			natsSubscription_Destroy(f->down_sub);
		if (f->watch)
			kvWatcher_Destroy(f->watch);
		if (f->nodes_watch)
			kvWatcher_Destroy(f->nodes_watch);
		if (f->kv_presence)
			kvStore_Destroy(f->kv_presence);
		if (f->kv_nodes)
			kvStore_Destroy(f->kv_nodes);
		fleet_data_free(f);
		if (f->js)
			jsCtx_Destroy(f->js);
		if (f->nc) {
			natsConnection_Close(f->nc);
			natsConnection_Destroy(f->nc);
		}
		if (f->opts)
			natsOptions_Destroy(f->opts);
		nats_CloseAndWait(2000);
		fleet_down_free(f);
		fleet_map_free(&f->held);
		fleet_map_free(&f->seen);
		free(f->batch);
		if (f->ring_ok)
			io_uring_queue_exit(&f->ring);
		if (f->efd_stop >= 0)
			close(f->efd_stop);
		pthread_mutex_destroy(&f->lock);
		pthread_mutex_destroy(&f->ring_lock);
		free(f);
	}
	d->fleet.f = NULL;
	hbd_events_free(&d->fleet.q);
	free(d->fleet.batch_ready);
	d->fleet.batch_ready = NULL;
}
