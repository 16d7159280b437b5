// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Presence in the hbeat_presence bucket: key = the device id in decimal, value
 * {"node","transport","state","since_ms","addr"}.
 *
 * Writes are asynchronous JetStream publishes on the bucket's subjects ($KV.hbeat_presence.ID),
 * so a reconnect storm costs no round trip per device. Which write wins:
 *   - online is written as it is: the newest session of a device is where it is;
 *   - an end (offline, expired, revoked, shutdown) is written only over this node's own last
 *     write (Nats-Expected-Last-Subject-Sequence = its revision), so it never hides a session
 *     the device opened meanwhile on another node: JetStream refuses the write then;
 *   - superseded is the end of a session a newer one replaced, and the newer one's online
 *     entry is already in the bucket: it is never written over it (that write is the refused
 *     kind above, whether the newer session is on this node or another).
 * An end whose online write is still unacknowledged waits for that acknowledgement (its
 * revision). An end another node wrote over a session this node still holds (its sweep took
 * this node for dead) is written over with online again. Fleet-wide supersede: when the watch
 * shows the device online on another node with a newer revision than our session's, our
 * session is cut with BYE(SUPERSEDED).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet_impl.h"
#include "json_out.h"
#include "log.h"
#include "worker.h"

#define SWEEP_MAX 65536 /* entries one sweep writes */
#define CATCH_UP_CHUNK 4096 /* writes one catch-up prepares under the lock at a time */
/* Presence writes in flight are given up (and made again) once no acknowledgement at all came
 * for this long, not --nats-timeout (DATA's, which a device waits on). Up to
 * PRESENCE_MAX_PENDING writes are in flight in a storm, seconds of JetStream's work: a shorter
 * wait fails writes JetStream made (their acknowledgements are only late), and making them
 * again is more of the same work.
 *
 * The wait is hbd's, not libnats's per-publish MaxWait: libnats 3.4 keeps every such publish on
 * a timeout list that its acknowledgement does not remove, and at the deadline its timer thread
 * makes a "timeout" message that a delivery thread hands to the acknowledgement path, which
 * drops it (nats.c issue 880, fixed after 3.4). A storm of 100,000 writes thus came back 30 s
 * later as 100,000 messages through three threads. */
#define PRESENCE_ACK_WAIT_MS 30000
/* --nats-presence-window: an end (offline, expired, ...) is published at once only while fewer
 * writes than this are in flight; past it, it is left marked for the catch-up, which also stops
 * at this many. In a reconnect storm JetStream falls behind, and most devices are back before
 * their end's turn comes: the reconnect makes that end moot, and one online write replaces two.
 * A device's offline is then not seen in the bucket, only its new session (since_ms). */
static bool end_window_full(const struct hbd_fleet *f)
{
	/* stopping, every end goes out: no catch-up comes after the last one */
	return f->pres_inflight >= f->cfg->presence_window &&
	       !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE);
}

int fleet_presence_json(char *buf, size_t cap, const char *node, bool udp, const char *state,
			uint64_t since_ms, const char *addr)
{
	int n = hb_json_line(buf, cap,
			     json_pack("{s:s,s:s,s:s,s:o,s:o}", "node", node, "transport",
				       udp ? "udp" : "tcp", "state", state, "since_ms",
				       hb_json_u64(since_ms), "addr", hb_json_str(addr)));

	return n > 0 ? n - 1 : -1; /* without the newline */
}

/* One write prepared under the lock and published after it. */
struct pres_write {
	uint64_t device;
	uint64_t expect; /* 0: unconditional */
	bool sweep; /* a sweep's: for a device this node did not hold when it was made */
	int len;
	char val[256];
};

/* Under the lock: s, the device's newest entry, is an end written over h's acknowledged online
 * write (not by us: our own ends are written only once h is gone). */
static bool ended_over(const struct fleet_held *h, const struct fleet_seen *s)
{
	return s && !s->online && !h->npend && h->rev && s->rev > h->rev;
}

/* Under the lock: h's state is to be written again by the catch-up, which walks the table only
 * while something is marked (f->dirty_any): the walk of 500k entries every 2 s is not free. */
static void mark_dirty(struct hbd_fleet *f, struct fleet_held *h)
{
	h->dirty = 1;
	f->dirty_any = true;
}

/* A sweep's writes carry this header. Their acknowledgements are told apart by it, not by the
 * subject alone: the device may have come online here while one was in flight, and its
 * acknowledgement then is not the one its held entry waits for (counting it would let the
 * session's end be written over a revision older than its online write, which JetStream
 * refuses, and the entry would say online until the next sweep). */
#define FLEET_HDR_SWEEP "Hbeat-Sweep"

static bool from_sweep(natsMsg *msg)
{
	const char *v;

	return msg && natsMsgHeader_Get(msg, FLEET_HDR_SWEEP, &v) == NATS_OK;
}

/* Under the lock: a write of ours for device that is no longer in flight and did not land
 * (refused at the publish, or taken back) is to be made again: a sweep's by the next sweep,
 * else by the catch-up if the device is held. */
static void write_again(struct hbd_fleet *f, uint64_t device, bool sweep)
{
	struct fleet_held *h = sweep ? NULL : fleet_map_get(&f->held, device);

	if (!h) {
		f->sweep_again = true;
		return;
	}
	if (h->npend)
		h->npend--;
	mark_dirty(f, h);
	h->end_sent = 0;
}

/* The device a presence write is for, from its subject; 0 if it is not one. */
static uint64_t subject_device(const char *subj)
{
	size_t n = strlen(FLEET_SUBJ_PRESENCE);

	return subj && !strncmp(subj, FLEET_SUBJ_PRESENCE, n) ? strtoull(subj + n, NULL, 10) : 0;
}

static void publish(struct hbd_fleet *f, const struct pres_write *pw)
{
	jsPubOptions po;
	char subj[64];
	natsStatus s;

	jsPubOptions_Init(&po);
	po.ExpectLastSubjectSeq = pw->expect; /* no MaxWait: fleet_presence_reclaim waits */
	snprintf(subj, sizeof(subj), FLEET_SUBJ_PRESENCE "%" PRIu64, pw->device);
	/* counted before: its acknowledgement may come before js_PublishAsync returns */
	pthread_mutex_lock(&f->lock);
	if (!f->pres_inflight++)
		f->pres_progress_ms = fleet_now_ms();
	f->pres_entering++;
	f->pres_started++;
	pthread_mutex_unlock(&f->lock);
	if (pw->sweep) {
		natsMsg *m = NULL;

		s = natsMsg_Create(&m, subj, NULL, pw->val, pw->len);
		if (s == NATS_OK)
			s = natsMsgHeader_Set(m, FLEET_HDR_SWEEP, "1");
		/* takes m (and sets it NULL) if it succeeds: the destroy is then a no-op */
		if (s == NATS_OK)
			s = js_PublishMsgAsync(f->js, &m, &po);
		natsMsg_Destroy(m);
	} else {
		s = js_PublishAsync(f->js, subj, pw->val, pw->len, &po);
	}
	pthread_mutex_lock(&f->lock);
	f->pres_entering--;
	if (s == NATS_OK) {
		f->pres_js_used = true;
	} else {
		if (f->pres_inflight)
			f->pres_inflight--;
		f->count.pres_failed_pub++;
		write_again(f, pw->device, pw->sweep);
	}
	pthread_mutex_unlock(&f->lock);
}

/* Under the lock: the write of h's state, counted as pending. false if there is none to make
 * (not ready, or NATS away: the catch-up writes it once NATS is back; a publish made now would
 * only fill libnats' reconnect buffer, fail once it is full and be made again and again). */
static bool prepare(struct hbd_fleet *f, uint64_t device, struct fleet_held *h,
		    struct pres_write *pw)
{
	const char *state = h->gone ? hbd_ev_kind_str((enum hbd_ev_kind)h->end_kind) : "online";

	if (!__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE) ||
	    !__atomic_load_n(&f->connected, __ATOMIC_ACQUIRE)) {
		mark_dirty(f, h);
		return false;
	}
	pw->device = device;
	pw->expect = 0;
	pw->sweep = false;
	if (h->gone) {
		struct fleet_seen *s = fleet_map_get(&f->seen, device);

		pw->expect = h->rev;
		if (!pw->expect && s)
			pw->expect = s->rev; /* our online write never made it: the entry there */
		h->end_sent = 1;
	}
	pw->len = fleet_presence_json(pw->val, sizeof(pw->val), f->node, h->udp, state, h->since_ms,
				      h->addr);
	if (pw->len < 0)
		return false;
	h->npend++;
	h->dirty = 0;
	return true;
}

static void cut(struct hbd_fleet *f, uint64_t loc)
{
	f->count.superseded++;
	fleet_msg(f, hbd_loc_worker(loc),
		  hbd_ud(loc & HBD_LOC_UDP ? HBD_OP_MSG_KILL_UDP : HBD_OP_MSG_KILL_TCP,
			 hbd_loc_index(loc), hbd_loc_gen(loc), HB_BYE_SUPERSEDED),
		  0);
}

/* Under the lock: h is now the record of session loc, online since since_ms. What h counts of
 * writes still pending (npend) and its last revision stay: their acknowledgements are h's. */
static void hold_session(struct fleet_held *h, uint64_t loc, bool udp, uint64_t since_ms,
			 const char *addr)
{
	h->loc = loc;
	h->udp = udp;
	h->since_ms = since_ms;
	h->gone = h->end_sent = 0;
	h->other_rev = 0;
	snprintf(h->addr, sizeof(h->addr), "%s", addr);
}

void fleet_presence_event(struct hbd_fleet *f, const struct hbd_event *ev)
{
	struct pres_write pw;
	struct fleet_held *h;
	bool send = false;

	pthread_mutex_lock(&f->lock);
	if (ev->kind == HBD_EV_ONLINE) {
		h = fleet_map_put(&f->held, ev->device);
		if (!h) {
			__atomic_store_n(&f->table_resync, 1, __ATOMIC_RELEASE);
			goto out;
		}
		hold_session(h, ev->session, ev->udp, ev->ts_ms, ev->peer);
		h->from_table = 0; /* its event came after all: written now, with its start */
		send = prepare(f, ev->device, h, &pw);
	} else {
		h = fleet_map_get(&f->held, ev->device);
		/* not our current session of it: a newer one (here) already wrote online */
		if (!h || h->loc != ev->session || h->gone)
			goto out;
		h->gone = 1;
		h->end_kind = ev->kind;
		h->since_ms = ev->ts_ms;
		h->from_table = 0;
		if (ev->kind == HBD_EV_SUPERSEDED) {
			/* replaced by a session on another node, whose entry stands */
			fleet_map_del(&f->held, ev->device);
			goto out;
		}
		if (h->npend)
			goto out; /* written once the acknowledgement is in (fleet_presence_ack) */
		if (!end_window_full(f))
			send = prepare(f, ev->device, h, &pw);
		else
			mark_dirty(f, h);
	}
out:
	pthread_mutex_unlock(&f->lock);
	if (send)
		publish(f, &pw);
}

void fleet_presence_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	struct hbd_fleet *f = closure;
	uint64_t device = subject_device(natsMsg_GetSubject(msg)), cut_loc = 0;
	bool send = false, sweep = from_sweep(msg);
	struct pres_write pw;
	struct fleet_held *h;

	natsMsg_Destroy(msg);
	pthread_mutex_lock(&f->lock);
	if (f->pres_inflight)
		f->pres_inflight--;
	f->pres_progress_ms = fleet_now_ms();
	if (pa && !pae)
		f->count.pres_written++;
	h = sweep ? NULL : fleet_map_get(&f->held, device);
	if (!h) {
		/* a sweep's write, or a device no longer ours: a failed one is made again */
		if (!(pa && !pae) && !(pae && pae->ErrCode == JSStreamWrongLastSequenceErr))
			f->sweep_again = true;
		goto out;
	}
	if (h->npend)
		h->npend--;
	if (pa && !pae) {
		h->rev = pa->Sequence;
	} else if (pae && pae->ErrCode == JSStreamWrongLastSequenceErr) {
		/* someone wrote after us: the device is elsewhere now, nothing of ours stands */
		if (h->gone)
			fleet_map_del(&f->held, device);
		goto out;
	} else {
		if (pae && pae->Err == NATS_TIMEOUT) {
			f->count.pres_failed_timeout++;
		} else {
			f->count.pres_failed_js++;
			f->pres_last_js_err = pae ? (int)pae->ErrCode : 0;
		}
		mark_dirty(f, h);
		h->end_sent = 0;
		goto out;
	}
	if (h->npend)
		goto out;
	if (h->gone && h->end_sent) {
		fleet_map_del(&f->held, device); /* its last state is written */
	} else if (h->gone) {
		send = prepare(f, device, h, &pw);
	} else if (h->other_rev > h->rev) {
		cut_loc = h->loc; /* the device went online elsewhere after this session */
	} else if (ended_over(h, fleet_map_get(&f->seen, device))) {
		mark_dirty(f, h); /* see fleet_presence_seen */
	}
out:
	pthread_mutex_unlock(&f->lock);
	if (send)
		publish(f, &pw);
	if (cut_loc)
		cut(f, cut_loc);
}

void fleet_presence_seen(struct hbd_fleet *f, uint64_t device, uint64_t rev, const char *val,
			 int len, bool deleted)
{
	json_t *doc = deleted ? NULL : json_loadb(val, (size_t)len, 0, NULL);
	const char *node = NULL, *state = NULL, *transport = NULL;
	json_int_t since = 0;
	uint64_t cut_loc = 0;
	struct fleet_seen *s;
	struct fleet_held *h;

	if (!deleted &&
	    (!doc || json_unpack(doc, "{s:s,s:s,s?s,s?I}", "node", &node, "state", &state,
				 "transport", &transport, "since_ms", &since))) {
		json_decref(doc);
		return; /* not ours to read: left alone */
	}
	pthread_mutex_lock(&f->lock);
	h = fleet_map_get(&f->held, device);
	if (h && h->gone)
		h = NULL; /* only a session this node holds now matters below */
	if (deleted) {
		fleet_map_del(&f->seen, device);
		if (h)
			mark_dirty(f, h); /* purged by hand: it is here, say so again */
		goto out;
	}
	s = fleet_map_put(&f->seen, device);
	if (!s)
		goto out;
	s->rev = rev;
	s->recv_ms = fleet_now_ms();
	s->node = fleet_node_idx(f, node);
	s->online = !strcmp(state, "online");
	s->udp = transport && !strcmp(transport, "udp");
	s->since_ms = since > 0 ? (uint64_t)since : 0;
	if (s->online && s->node < f->nnodes)
		f->nodes[s->node].last_online_ms = s->recv_ms;
	/* An end written over a session this node still holds: another node's sweep took this
	 * node for dead (its hbeat_nodes entry expired while NATS was away, say). The device is
	 * here, so the catch-up writes it online again; left alone, the entry would say offline
	 * for as long as the session lasts. */
	if (h && ended_over(h, s)) {
		mark_dirty(f, h); /* (with a write pending, its acknowledgement decides) */
		hb_dbg("fleet: device %" PRIu64 ": an end by %s written over its session here "
		       "(revision %" PRIu64 " over %" PRIu64 ")",
		       device, node, rev, h->rev);
	}
	if (!h || !s->online || s->node == f->me)
		goto out;
	if (h->rev && h->rev < rev && !h->npend)
		cut_loc = h->loc;
	else if (rev > h->other_rev)
		h->other_rev = rev; /* decided when our write's revision is known */
out:
	pthread_mutex_unlock(&f->lock);
	json_decref(doc);
	if (cut_loc)
		cut(f, cut_loc);
}

/* Under the lock: the nodes this sweep writes for (walk[i]), their number. This node, for
 * entries of its own it holds no session for (an earlier life's); the dead ones if this node is
 * the live one first in name order (one writer, not all). Only those that had an online entry
 * since their last walk. */
static unsigned sweep_nodes(struct hbd_fleet *f, bool *walk)
{
	bool leader = true;
	unsigned n = 0;

	for (unsigned i = 0; i < f->nnodes; i++)
		if (i != f->me && f->nodes[i].live && strcmp(f->nodes[i].name, f->node) < 0)
			leader = false;
	for (unsigned i = 0; i < f->nnodes; i++) {
		const struct fleet_node *nd = &f->nodes[i];

		walk[i] = (i == f->me || (leader && !nd->live && !nd->live_before)) &&
			  nd->last_online_ms >= nd->swept_ms;
		n += walk[i];
	}
	return n;
}

/* The offline entries the sweep writes, prepared under the lock. */
static size_t sweep_collect(struct hbd_fleet *f, struct pres_write *out, size_t max,
			    const bool *walk, uint64_t judged_before_ms)
{
	uint64_t key, now = hb_realtime_ms();
	size_t pos = 0, n = 0;
	struct fleet_seen *s;

	while (n < max && (s = fleet_map_next(&f->seen, &pos, &key))) {
		const struct fleet_node *nd;
		bool mine = s->node == f->me;

		if (!s->online || s->node >= f->nnodes)
			continue;
		nd = &f->nodes[s->node];
		if (!walk[s->node] ||
		    (mine ? fleet_map_get(&f->held, key) != NULL : s->recv_ms >= judged_before_ms))
			continue;
		if (mine && hbd_devices_loc(f->d->devices, key)) {
			/* a session this daemon took over (an upgrade's, a restart's) with no presence
			 * event: the entry is true; the catch-up's look at the table adopts it */
			__atomic_store_n(&f->table_resync, 1, __ATOMIC_RELEASE);
			continue;
		}
		out[n].device = key;
		out[n].expect = s->rev;
		out[n].sweep = true;
		out[n].len = fleet_presence_json(out[n].val, sizeof(out[n].val), nd->name, s->udp,
						 "offline", now, "");
		if (out[n].len > 0)
			n++;
		if (!mine)
			f->count.node_lost_marked++;
	}
	return n;
}

/* A walk of every entry seen (500k on a full node) is not free: it is made only for a node
 * that had an online entry since its last walk, not at every judgement. */
void fleet_presence_sweep(struct hbd_fleet *f, uint64_t judged_before_ms)
{
	bool walk[FLEET_MAX_NODES] = { false };
	struct pres_write *pw = NULL;
	size_t n = 0;

	pthread_mutex_lock(&f->lock);
	if (f->sweep_again) {
		for (unsigned i = 0; i < f->nnodes; i++)
			f->nodes[i].swept_ms = 0;
		f->sweep_again = false;
	}
	if (sweep_nodes(f, walk))
		pw = malloc(SWEEP_MAX * sizeof(*pw));
	if (pw) {
		n = sweep_collect(f, pw, SWEEP_MAX, walk, judged_before_ms);
		for (unsigned i = 0; i < f->nnodes && n < SWEEP_MAX; i++)
			if (walk[i]) /* (a full batch: the rest by the next walk) */
				f->nodes[i].swept_ms = judged_before_ms;
	}
	pthread_mutex_unlock(&f->lock);
	if (!pw)
		return;
	if (n)
		hb_dbg("fleet: sweep: %zu entries written offline", n);
	for (size_t i = 0; i < n; i++)
		publish(f, &pw[i]);
	free(pw);
}

struct ids {
	uint64_t *v;
	size_t n, cap;
};

static void collect_id(void *ctx, uint64_t id, uint64_t last_ts_ms)
{
	struct ids *ids = ctx;

	if (ids->n == ids->cap) {
		size_t cap = ids->cap ? ids->cap * 2 : 4096;
		uint64_t *v = realloc(ids->v, cap * sizeof(*v));

		if (!v)
			return;
		ids->v = v;
		ids->cap = cap;
	}
	ids->v[ids->n++] = id;
}

/* Presence events were lost: the device table is the truth about what this node holds. */
static void compare_table(struct hbd_fleet *f)
{
	struct ids ids = { 0 };
	uint64_t key, mark, now = hb_realtime_ms();
	unsigned taken = 0, added = 0, marked = 0, ended = 0;
	struct fleet_held *h;
	size_t pos = 0;

	hbd_devices_foreach(f->d->devices, collect_id, &ids);
	for (size_t i = 0; i < ids.n; i++) {
		uint64_t loc = hbd_devices_loc(f->d->devices, ids.v[i]);

		if (!loc)
			continue;
		pthread_mutex_lock(&f->lock);
		h = fleet_map_get(&f->held, ids.v[i]);
		if (h && h->loc != loc) {
			/* a later session than h's, its event lost: the end of h's may be in
			 * flight, and its acknowledgement is h's (npend), not the new session's
			 * (counted as the new one's, the end stood over a device that is here).
			 * Taken over as its online event would, written after what is pending. */
			hold_session(h, loc, !!(loc & HBD_LOC_UDP), now, "");
			h->from_table = 1;
			mark_dirty(f, h);
			taken++;
		} else if (!h) {
			struct fleet_seen *s = fleet_map_get(&f->seen, ids.v[i]);

			h = fleet_map_put(&f->held, ids.v[i]);
			if (h) {
				added++;
				memset(h, 0, sizeof(*h));
				h->loc = loc;
				h->udp = !!(loc & HBD_LOC_UDP);
				h->since_ms = now;
				if (s && s->online && s->node == f->me) {
					/* already says so (a session taken over from the daemon
					 * before): nothing to write, its revision is ours */
					h->rev = s->rev;
					if (s->since_ms)
						h->since_ms = s->since_ms;
				} else {
					h->from_table = 1;
					mark_dirty(f, h);
					marked++;
				}
			}
		}
		pthread_mutex_unlock(&f->lock);
	}
	free(ids.v);
	/* The events of the sessions just found may still be in the queue (it holds up to
	 * hundreds of thousands in a storm, and the comparison runs on another thread than the
	 * one that empties it): their entries are written once the queue has passed this point,
	 * by then only for the sessions whose event was lost. Written at once, the queued events
	 * wrote them a second time. */
	mark = hbd_events_mark(&f->d->fleet.q);
	pthread_mutex_lock(&f->lock);
	f->table_mark = mark;
	while ((h = fleet_map_next(&f->held, &pos, &key))) {
		if (!h->gone && hbd_devices_loc(f->d->devices, key) != h->loc) {
			h->gone = 1;
			h->end_kind = HBD_EV_OFFLINE;
			h->since_ms = now;
			mark_dirty(f, h);
			h->end_sent = 0;
			ended++;
		}
	}
	pthread_mutex_unlock(&f->lock);
	hb_dbg("fleet: device table compared: %u sessions taken over, %u added (%u to write), %u "
	       "ended",
	       taken, added, marked, ended);
}

void fleet_presence_adoptions(struct hbd_fleet *f)
{
	uint64_t n = hbd_devices_adoptions(f->d->devices);

	/* Not left to the sweep, which compares only when it finds an entry of this node's that
	 * says online: another node may have ended them all meanwhile (it took this one for
	 * dead while the upgrade kept it from refreshing its hbeat_nodes entry), and the
	 * devices stayed offline in presence for as long as they stayed connected. */
	if (n != f->adoptions_seen) {
		f->adoptions_seen = n;
		__atomic_store_n(&f->table_resync, 1, __ATOMIC_RELEASE);
	}
}

void fleet_presence_reclaim(struct hbd_fleet *f)
{
	bool reconnected = __atomic_exchange_n(&f->pres_reclaim, 0, __ATOMIC_ACQ_REL);
	natsMsgList back = { 0 };
	uint64_t entering, started;
	bool due, published;

	pthread_mutex_lock(&f->lock);
	due = f->pres_inflight &&
	      (reconnected || fleet_now_ms() - f->pres_progress_ms >= PRESENCE_ACK_WAIT_MS);
	published = f->pres_js_used;
	entering = f->pres_entering;
	started = f->pres_started;
	pthread_mutex_unlock(&f->lock);
	/* every write in flight, answered or not: an acknowledgement that arrives after this is
	 * dropped by libnats (the write is no longer its), so each is counted exactly once */
	if (!due)
		return;
	if (fleet_take_pending(&back, f->js, published) == NATS_NOT_FOUND) {
		pthread_mutex_lock(&f->lock);
		/* libnats held none when it was asked: the writes that were inside it before
		 * were answered. Not so those still entering it then, nor those counted since
		 * (they may have gone in after the listing): they stay counted, because an
		 * acknowledgement may never come for them. The next look finds them; counted as
		 * answered, one never answered would never be written again. */
		f->pres_inflight = entering + (f->pres_started - started);
		f->pres_progress_ms = fleet_now_ms();
		pthread_mutex_unlock(&f->lock);
		return;
	}
	if (!back.Count)
		return;
	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < back.Count; i++) {
		f->count.pres_taken_back++;
		if (f->pres_inflight)
			f->pres_inflight--;
		write_again(f, subject_device(natsMsg_GetSubject(back.Msgs[i])),
			    from_sweep(back.Msgs[i]));
	}
	f->pres_progress_ms = fleet_now_ms();
	pthread_mutex_unlock(&f->lock);
	hb_info("fleet: %d presence writes not acknowledged (for %d s, or across a reconnection): "
		"writing them again",
		back.Count, PRESENCE_ACK_WAIT_MS / 1000);
	natsMsgList_Destroy(&back);
}

/* Writes again what is marked dirty, CATCH_UP_CHUNK entries at a time: each chunk is
 * prepared under the lock and published after it, so the acknowledgements (which take the lock)
 * go on meanwhile and the memory is bounded however many devices the node holds. The walk
 * resumes at its position in the table after each chunk; an entry the table moved meanwhile (a
 * deletion's backward shift, a growth) may be missed by this pass and is written by the next
 * one (every CATCH_UP_EVERY_MS). No walk at all while nothing is marked (f->dirty_any), and no
 * write while NATS is away (prepare). A chunk starts only while the writes in flight are below
 * the window (end_window_full): the rest wait for the next walk, so an end deferred there is
 * still moot if its device comes back first. */
bool fleet_presence_catch_up(struct hbd_fleet *f, bool with_table)
{
	struct pres_write *pw;
	uint64_t key, *cuts;
	size_t pos = 0;
	bool more = true, any, queue_passed, full = false;
	size_t written = 0;

	if (with_table)
		compare_table(f);
	pthread_mutex_lock(&f->lock);
	any = f->dirty_any;
	pthread_mutex_unlock(&f->lock);
	if (!any)
		return false; /* the usual case every CATCH_UP_EVERY_MS: no buffers to allocate */
	pw = malloc(CATCH_UP_CHUNK * sizeof(*pw));
	cuts = malloc(CATCH_UP_CHUNK * sizeof(*cuts));
	while (pw && cuts && more && __atomic_load_n(&f->connected, __ATOMIC_ACQUIRE)) {
		size_t n = 0, ncut = 0;
		struct fleet_held *h;

		pthread_mutex_lock(&f->lock);
		if (!pos) {
			if (!f->dirty_any) {
				pthread_mutex_unlock(&f->lock);
				break; /* nothing marked since the last complete walk */
			}
			f->dirty_any = false; /* marks from now on are seen by the next walk */
		}
		if (end_window_full(f)) {
			f->dirty_any = true; /* the rest, once acknowledgements made room */
			pthread_mutex_unlock(&f->lock);
			full = true;
			break;
		}
		queue_passed = hbd_events_passed(&f->d->fleet.q, f->table_mark);
		while (n < CATCH_UP_CHUNK && ncut < CATCH_UP_CHUNK) {
			struct fleet_seen *s;

			h = fleet_map_next(&f->held, &pos, &key);
			if (!h) {
				more = false;
				break;
			}
			if (!h->dirty)
				continue;
			if (h->npend || (h->from_table && !queue_passed)) {
				/* its turn comes after the acknowledgement, or once its own event
				 * can no longer be in the queue */
				f->dirty_any = true;
				continue;
			}
			h->from_table = 0;
			s = fleet_map_get(&f->seen, key);
			/* our online never made it, and the device is online elsewhere in a session
			 * that began after ours: that one stands. One that began before ours is the
			 * device's past (a dead node's entry the sweep has not ended yet, say): ours
			 * is written over it. */
			if (!h->gone && !h->rev && s && s->online && s->node != f->me &&
			    s->since_ms > h->since_ms) {
				cuts[ncut++] = h->loc;
				h->dirty = 0;
				continue;
			}
			if (prepare(f, key, h, &pw[n]))
				n++;
		}
		/* the table may change while the lock is not held: an entry it moves behind pos
		 * is missed by this walk, so a walk in more than one chunk is made again */
		if (more)
			f->dirty_any = true;
		pthread_mutex_unlock(&f->lock);
		written += n;
		for (size_t i = 0; i < n; i++)
			publish(f, &pw[i]);
		for (size_t i = 0; i < ncut; i++)
			cut(f, cuts[i]);
	}
	free(pw);
	free(cuts);
	if (written)
		hb_dbg("fleet: catch-up: %zu entries written again%s", written,
		       full ? ", the rest once fewer are in flight" : "");
	return full;
}
