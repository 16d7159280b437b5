// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Fleet mode's bookkeeping of its writes (presence, and DATA's batches where they share a
 * trap) and their acknowledgements, with the order of
 * those acknowledgements in the test's hands. The writes are real publishes through libnats to
 * a real nats-server (plain, on a free 127.0.0.1 port, ended by its PID), which the test reads
 * back with their headers; the acknowledgements JetStream would send are handed to
 * fleet_presence_ack in the order that breaks things. Without JetStream on that server and
 * without an acknowledgement handler, none comes by itself.
 *
 * js_PublishAsync is wrapped (-Wl,--wrap, Makefile) so that a test can run the admin thread's
 * reclaim at the one moment a publish has been counted and is not inside libnats yet, and
 * js_PublishAsyncGetPendingList so that one can make a write between the reclaim's listing of
 * libnats' pending writes and its use of what it found.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devices.h"
#include "events.h"
#include "fleet_impl.h"
#include "lib/ht_assert.h"
#include "lib/run_prog.h"
#include "lib/sock.h"

#define NODE "node-a"
#define DEVICE 4242
#define HDR_EXPECT "Nats-Expected-Last-Subject-Sequence"

static pid_t nats_pid;
static int nats_out = -1; /* its stdout: open until it ends */
static char nats_log[] = "/tmp/hbfp-nats.XXXXXX";
static natsConnection *nc;
static jsCtx *js;
static natsSubscription *sub; /* every presence write, as the server got it */

static struct hbd_daemon daemon_;
static struct hbd_fleet fleet;
/* hbd's defaults where the code reads them; a window no test fills */
static struct hbd_config config = { .nats = { .node_ttl_s = 2, .presence_window = 32768 } };

/* set by a test: the next js_PublishAsync first runs the reclaim, as the admin thread may */
static bool reclaim_on_publish;

natsStatus __real_js_PublishAsync(jsCtx *js, const char *subj, const void *data, int len,
				  jsPubOptions *opts);
natsStatus __wrap_js_PublishAsync(jsCtx *js, const char *subj, const void *data, int len,
				  jsPubOptions *opts);
natsStatus __wrap_js_PublishAsync(jsCtx *js, const char *subj, const void *data, int len,
				  jsPubOptions *opts)
{
	if (reclaim_on_publish) {
		reclaim_on_publish = false;
		__atomic_store_n(&fleet.pres_reclaim, 1,
				 __ATOMIC_RELEASE); /* as on a reconnection */
		fleet_presence_reclaim(&fleet);
	}
	return __real_js_PublishAsync(js, subj, data, len, opts);
}

/* set by a test: once a listing of pending writes finds none, device 4343 comes online here
 * before the reclaim that asked goes on, as a worker's event may */
static bool online_after_empty_listing;
static void event_for(uint64_t device, uint8_t kind, uint64_t session);

natsStatus __real_js_PublishAsyncGetPendingList(natsMsgList *pending, jsCtx *js);
natsStatus __wrap_js_PublishAsyncGetPendingList(natsMsgList *pending, jsCtx *js);
natsStatus __wrap_js_PublishAsyncGetPendingList(natsMsgList *pending, jsCtx *js)
{
	natsStatus s = __real_js_PublishAsyncGetPendingList(pending, js);

	if (s == NATS_NOT_FOUND && online_after_empty_listing) {
		online_after_empty_listing = false;
		event_for(DEVICE + 101, HBD_EV_ONLINE, 90);
	}
	return s;
}

static int group_setup(void **state)
{
	char port[8], url[64];
	const char *argv[] = { "nats-server", "-a", "127.0.0.1", "-p", port, NULL };
	uint16_t p = ht_free_port();
	int fd = mkstemp(nats_log);

	(void)state;
	if (fd < 0 || !p)
		return -1;
	close(fd);
	snprintf(port, sizeof(port), "%u", p);
	nats_pid = hbt_spawn("nats-server", argv, &nats_out, nats_log);
	if (nats_pid < 0 || ht_wait_listening(p, 10000)) {
		fprintf(stderr, "nats-server did not start (scripts/deps.sh installs it): %s\n",
			nats_log);
		return -1;
	}
	snprintf(url, sizeof(url), "nats://127.0.0.1:%u", p);
	if (natsConnection_ConnectTo(&nc, url) != NATS_OK ||
	    natsConnection_JetStream(&js, nc, NULL) != NATS_OK ||
	    natsConnection_SubscribeSync(&sub, nc, FLEET_SUBJ_PRESENCE ">") != NATS_OK ||
	    natsConnection_Flush(nc) != NATS_OK)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	natsSubscription_Destroy(sub);
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	nats_Close();
	if (nats_pid > 0) {
		kill(nats_pid, SIGTERM);
		hbt_reap(nats_pid, time(NULL) + 5);
	}
	if (nats_out >= 0)
		close(nats_out);
	unlink(nats_log);
	return 0;
}

/* A fleet of one node (this one) on the test's connection, with nothing held or seen. */
static int fleet_setup(void **state)
{
	(void)state;
	memset(&fleet, 0, sizeof(fleet));
	memset(&daemon_, 0, sizeof(daemon_));
	if (hbd_devices_init(&daemon_.devices, 16) || hbd_events_init(&daemon_.fleet.q, 16) ||
	    fleet_map_init(&fleet.held, sizeof(struct fleet_held), 16) ||
	    fleet_map_init(&fleet.seen, sizeof(struct fleet_seen), 16))
		return -1;
	pthread_mutex_init(&fleet.lock, NULL);
	snprintf(fleet.node, sizeof(fleet.node), NODE);
	fleet.d = &daemon_;
	fleet.cfg = &config.nats;
	fleet.js = js;
	fleet.me = fleet_node_idx(&fleet, NODE);
	fleet.ready = fleet.connected = 1;
	return fleet.me == 0 ? 0 : -1;
}

static int fleet_teardown(void **state)
{
	natsMsg *m;

	(void)state;
	fleet_map_free(&fleet.held);
	fleet_map_free(&fleet.seen);
	pthread_mutex_destroy(&fleet.lock);
	hbd_devices_free(daemon_.devices);
	hbd_events_free(&daemon_.fleet.q);
	while (natsSubscription_NextMsg(&m, sub, 100) == NATS_OK) /* nothing left for the next */
		natsMsg_Destroy(m);
	return 0;
}

/* The next presence write the server got (within 2 s); fails the test if none came. */
static natsMsg *next_write(const char *what)
{
	natsMsg *m = NULL;

	HT_EQ(natsConnection_Flush(nc), NATS_OK, "flush before %s", what);
	HT_EQ(natsSubscription_NextMsg(&m, sub, 2000), NATS_OK, "%s reached nats-server", what);
	return m;
}

static void no_write(const char *what)
{
	natsMsg *m = NULL;

	HT_EQ(natsConnection_Flush(nc), NATS_OK, "flush before %s", what);
	HT_EQ(natsSubscription_NextMsg(&m, sub, 300), NATS_TIMEOUT, "%s", what);
	natsMsg_Destroy(m);
}

static bool has_state(natsMsg *m, const char *state)
{
	char want[32];
	int n = snprintf(want, sizeof(want), "\"state\":\"%s\"", state);

	return natsMsg_GetDataLength(m) > n &&
	       memmem(natsMsg_GetData(m), natsMsg_GetDataLength(m), want, (size_t)n) != NULL;
}

static void ack(natsMsg *m, uint64_t seq)
{
	jsPubAck pa = { .Stream = "KV_" FLEET_BUCKET_PRESENCE, .Sequence = seq };

	fleet_presence_ack(js, m, &pa, NULL, &fleet); /* takes m */
}

/* A worker's presence event: device's session came online or ended (kind) at a fixed time. */
static struct hbd_event event_of(uint64_t device, uint8_t kind, uint64_t session)
{
	return (struct hbd_event){ .kind = kind,
				   .device = device,
				   .session = session,
				   .ts_ms = 1700000000000ull };
}

static void event_for(uint64_t device, uint8_t kind, uint64_t session)
{
	struct hbd_event ev = event_of(device, kind, session);

	fleet_presence_event(&fleet, &ev);
}

static void event(uint8_t kind, uint64_t session)
{
	event_for(DEVICE, kind, session);
}

/* The race: an earlier life of this node left DEVICE online in the bucket (revision 5). The
 * sweep writes it offline; before that write is acknowledged, the device connects here (its
 * online write goes out) and leaves again. The sweep's acknowledgement (revision 6) comes
 * first. It is not the online write's: the session's end must wait for that one (revision 7)
 * and be written over it. Counted as the online write's, the end went out at once over
 * revision 6, which JetStream refuses because revision 7 is there, and the bucket would say
 * online for a device that left.
 */
static void sweep_ack_is_not_the_sessions(void **state)
{
	static const char stale[] = "{\"node\":\"" NODE "\",\"transport\":\"tcp\","
				    "\"state\":\"online\",\"since_ms\":1}";
	natsMsg *sweep, *online, *end;
	const char *v = NULL;

	(void)state;
	fleet_presence_seen(&fleet, DEVICE, 5, stale, (int)strlen(stale), false);
	fleet_presence_sweep(&fleet, fleet_now_ms() + 1);
	sweep = next_write("the sweep's offline write");
	HT_TRUE(has_state(sweep, "offline"), "the sweep writes offline");
	HT_EQ(natsMsgHeader_Get(sweep, HDR_EXPECT, &v), NATS_OK,
	      "the sweep's write is conditional");
	HT_TRUE(v && !strcmp(v, "5"), "over the stale entry's revision 5, not %s", v);

	event(HBD_EV_ONLINE, 77);
	online = next_write("the session's online write");
	HT_TRUE(has_state(online, "online"), "the session writes online");

	ack(sweep, 6);
	event(HBD_EV_OFFLINE, 77);
	no_write("no end written before the online write is acknowledged");

	ack(online, 7);
	end = next_write("the session's end");
	HT_TRUE(has_state(end, "offline"), "the end is offline");
	HT_EQ(natsMsgHeader_Get(end, HDR_EXPECT, &v), NATS_OK, "the end is conditional");
	HT_TRUE(v && !strcmp(v, "7"),
		"over the online write's revision 7, not %s (the sweep's is 6)", v);
	natsMsg_Destroy(end);
	pthread_mutex_lock(&fleet.lock);
	HT_EQ(fleet.pres_inflight, 1, "one write in flight: the end");
	pthread_mutex_unlock(&fleet.lock);
}

/* The same in the other order: the session's writes are acknowledged before the sweep's, which
 * then fails (someone wrote meanwhile). That failure is the sweep's business: it must not take
 * the held device's bookkeeping with it, nor make the sweep walk again. */
static void late_sweep_failure_leaves_session_alone(void **state)
{
	static const char stale[] = "{\"node\":\"" NODE "\",\"transport\":\"tcp\","
				    "\"state\":\"online\",\"since_ms\":1}";
	jsPubAckErr pae = { .Err = NATS_ERR, .ErrCode = JSStreamWrongLastSequenceErr };
	natsMsg *sweep, *online, *end;
	struct fleet_held *h;
	const char *v = NULL;

	(void)state;
	fleet_presence_seen(&fleet, DEVICE, 5, stale, (int)strlen(stale), false);
	fleet_presence_sweep(&fleet, fleet_now_ms() + 1);
	sweep = next_write("the sweep's offline write");
	event(HBD_EV_ONLINE, 78);
	online = next_write("the session's online write");
	ack(online, 6);
	pae.Msg = sweep;
	fleet_presence_ack(js, sweep, NULL, &pae, &fleet);
	pthread_mutex_lock(&fleet.lock);
	h = fleet_map_get(&fleet.held, DEVICE);
	HT_TRUE(h != NULL, "the device is still held");
	HT_EQ(h->rev, 6, "its revision is its online write's");
	HT_EQ(h->npend, 0, "nothing of it pending");
	HT_FALSE(fleet.sweep_again, "a write someone overtook is not made again");
	pthread_mutex_unlock(&fleet.lock);
	event(HBD_EV_OFFLINE, 78);
	end = next_write("the session's end");
	HT_EQ(natsMsgHeader_Get(end, HDR_EXPECT, &v), NATS_OK, "the end is conditional");
	HT_TRUE(v && !strcmp(v, "6"), "over the online write's revision 6, not %s", v);
	natsMsg_Destroy(end);
}

/* A context of the test's own for fleet (the other tests' writes stay pending in the shared
 * one), with the online write of session 79 published through it, and the reclaim run inside
 * that publish. */
static jsCtx *online_with_reclaim_inside(void)
{
	natsMsg *online;
	jsCtx *own = NULL;

	HT_EQ(natsConnection_JetStream(&own, nc, NULL), NATS_OK, "a JetStream context");
	fleet.js = own;
	reclaim_on_publish = true;
	event(HBD_EV_ONLINE, 79);
	HT_FALSE(reclaim_on_publish, "the reclaim ran inside the publish");
	online = next_write("the online write");
	HT_TRUE(has_state(online, "online"), "it is the online write");
	natsMsg_Destroy(online);
	return own;
}

static void drop_context(jsCtx *own)
{
	natsMsgList left = { 0 };

	if (js_PublishAsyncGetPendingList(&left, own) == NATS_OK)
		natsMsgList_Destroy(&left);
	jsCtx_Destroy(own);
}

/* The reclaim (NATS reconnected) runs before the first presence write has entered libnats:
 * libnats has no table of pending writes yet, and listing it crashed the daemon. */
static void reclaim_before_the_first_write_enters_libnats(void **state)
{
	jsCtx *own;

	(void)state;
	own = online_with_reclaim_inside();
	pthread_mutex_lock(&fleet.lock);
	HT_EQ(fleet.pres_inflight, 1, "the online write is in flight");
	HT_EQ(fleet.count.pres_taken_back, 0, "nothing was taken back");
	pthread_mutex_unlock(&fleet.lock);
	drop_context(own);
}

/* The reclaim runs while the device's online write is counted but not yet inside libnats, which
 * therefore holds none. That write then never gets an acknowledgement (the connection it went
 * out on is gone, say). It must still be counted in flight, so that the next reclaim takes it
 * back and writes it again; counted as answered, it was never made again, and the device's end
 * could never be written either (it waits for that write). */
static void reclaim_while_a_write_enters_libnats(void **state)
{
	natsMsg *again;
	jsCtx *own;

	(void)state;
	own = online_with_reclaim_inside(); /* libnats' table of pending writes exists now */
	__atomic_store_n(&fleet.pres_reclaim, 1, __ATOMIC_RELEASE);
	fleet_presence_reclaim(&fleet);
	pthread_mutex_lock(&fleet.lock);
	HT_EQ(fleet.count.pres_taken_back, 1, "the reclaim took the unanswered write back");
	HT_EQ(fleet.pres_inflight, 0, "nothing is in flight");
	pthread_mutex_unlock(&fleet.lock);

	reclaim_on_publish = true; /* libnats now holds none, and the write is made again */
	fleet_presence_catch_up(&fleet, false);
	HT_FALSE(reclaim_on_publish, "the reclaim ran inside the write made again");
	again = next_write("the online write made again");
	HT_TRUE(has_state(again, "online"), "the write made again is the online one");
	natsMsg_Destroy(again);
	pthread_mutex_lock(&fleet.lock);
	HT_EQ(fleet.pres_inflight, 1,
	      "the write that entered libnats after the reclaim is counted");
	pthread_mutex_unlock(&fleet.lock);

	__atomic_store_n(&fleet.pres_reclaim, 1, __ATOMIC_RELEASE);
	fleet_presence_reclaim(&fleet);
	pthread_mutex_lock(&fleet.lock);
	HT_EQ(fleet.count.pres_taken_back, 2, "the next reclaim took it back too");
	pthread_mutex_unlock(&fleet.lock);
	fleet_presence_catch_up(&fleet, false);
	again = next_write("the online write made a third time");
	HT_TRUE(has_state(again, "online"), "the online write, again");
	natsMsg_Destroy(again);
	drop_context(own);
}

/* The reclaim finds libnats holding none of the writes (the online write made again is still
 * entering it), and before it takes that as its count, another device's online write is
 * published and goes into libnats. The online write is then acknowledged; the other never is
 * (its connection went, say). The other must still be counted in flight so that the next
 * reclaim takes it back: counted from the writes entering libnats after the listing alone,
 * nothing was in flight, no reclaim was due, and the other device stayed out of the bucket. */
static void a_write_entering_libnats_after_an_empty_listing(void **state)
{
	natsMsg *again, *other;
	jsCtx *own;

	(void)state;
	own = online_with_reclaim_inside();
	__atomic_store_n(&fleet.pres_reclaim, 1, __ATOMIC_RELEASE);
	fleet_presence_reclaim(&fleet); /* takes the online write back: libnats holds none */
	reclaim_on_publish = online_after_empty_listing = true;
	fleet_presence_catch_up(&fleet,
				false); /* the online write made again, the reclaim inside */
	HT_FALSE(reclaim_on_publish, "the reclaim ran inside the write made again");
	HT_FALSE(online_after_empty_listing, "its listing found none, and the other device came");
	other = next_write("the other device's online write");
	again = next_write("the online write made again");
	if (strstr(natsMsg_GetSubject(other), "4242")) { /* in the order the server got them */
		natsMsg *t = other;

		other = again;
		again = t;
	}
	HT_TRUE(has_state(again, "online") && has_state(other, "online"), "two online writes");
	pthread_mutex_lock(&fleet.lock);
	HT_EQ(fleet.pres_inflight, 2, "both writes in flight after the reclaim");
	pthread_mutex_unlock(&fleet.lock);
	ack(again, 7);
	natsMsg_Destroy(other);

	__atomic_store_n(&fleet.pres_reclaim, 1, __ATOMIC_RELEASE);
	fleet_presence_reclaim(&fleet);
	pthread_mutex_lock(&fleet.lock);
	HT_EQ(fleet.count.pres_taken_back, 3,
	      "the reclaim took back the other device's write (and the acknowledged one, which "
	      "libnats still holds: no acknowledgement reached it)");
	pthread_mutex_unlock(&fleet.lock);
	drop_context(own);
}

/* In a storm the device's session ends (its end is written, not acknowledged yet) and it comes
 * back at once, but the new session's event is lost in a full queue, so the catch-up compares
 * with the device table and finds the device there under a session it does not know. The
 * end's acknowledgement then comes: it is the old session's, and the device must still be
 * written online. It was not: the record was cleared for the new session (its count of writes
 * pending with it), the watch still said online here, so nothing was written, and the end's
 * acknowledgement was taken as the new session's own write; the bucket said offline for as
 * long as the device stayed (5 of 500,000 after a storm of scripts/fleet-storm.sh). */
static void new_session_found_in_the_table_while_the_end_is_in_flight(void **state)
{
	uint64_t first = hbd_loc(0, 0, 1, 5), second = hbd_loc(0, 0, 2, 5);
	natsMsg *online, *end, *again;
	struct fleet_held *h;
	char end_val[512];
	int end_len;

	(void)state;
	HT_EQ(hbd_devices_adopt(daemon_.devices, DEVICE, 1700000000000ull, first), 0,
	      "the device's first session in the table");
	event(HBD_EV_ONLINE, first);
	online = next_write("the online write");
	fleet_presence_seen(&fleet, DEVICE, 10, natsMsg_GetData(online),
			    natsMsg_GetDataLength(online), false); /* the watch has it */
	ack(online, 10);
	hbd_devices_release(daemon_.devices, DEVICE, first);
	event(HBD_EV_OFFLINE, first);
	end = next_write("the session's end");
	HT_TRUE(has_state(end, "offline"), "it is the end");
	HT_EQ(hbd_devices_adopt(daemon_.devices, DEVICE, 1700000001000ull, second), 0,
	      "the second session in the table, its event lost");
	fleet_presence_catch_up(&fleet, true); /* events were lost: the table is compared */
	no_write("nothing written while the end is not acknowledged");
	/* the acknowledgement first, then the watch's copy of the end: JetStream answers the
	 * publisher before the watch delivers (ack takes the message: the copy is read first) */
	HT_TRUE(natsMsg_GetDataLength(end) < (int)sizeof(end_val), "the end's value fits");
	end_len = natsMsg_GetDataLength(end);
	memcpy(end_val, natsMsg_GetData(end), (size_t)end_len);
	ack(end, 11);
	fleet_presence_seen(&fleet, DEVICE, 11, end_val, end_len, false);
	fleet_presence_catch_up(&fleet, false);
	again = next_write("the device's online write after its end");
	HT_TRUE(has_state(again, "online"), "the device is written online again");
	natsMsg_Destroy(again);
	pthread_mutex_lock(&fleet.lock);
	h = fleet_map_get(&fleet.held, DEVICE);
	HT_TRUE(h && h->loc == second && !h->gone, "held under its second session");
	pthread_mutex_unlock(&fleet.lock);
	hbd_devices_release(daemon_.devices, DEVICE, second);
}

/* An upgrade kept this node from refreshing its hbeat_nodes entry for longer than the TTL:
 * another node took it for dead and ended its devices' entries. The successor took the
 * sessions over with no presence event, and its watch read those ends. It must write the
 * devices online again once it sees it adopted them; it did not (it waited for an entry of its
 * own saying online, and there was none left), and they stayed offline while connected. */
static void sessions_taken_over_after_another_node_ended_them(void **state)
{
	const char ended[] = "{\"node\":\"node-a\",\"state\":\"offline\",\"since_ms\":5}";
	const char here[] = "{\"node\":\"" NODE "\",\"state\":\"online\",\"since_ms\":5}";
	uint64_t loc = hbd_loc(1, 0, 1, 7), other = hbd_loc(1, 0, 1, 8);
	natsMsg *m;

	(void)state;
	fleet_presence_seen(&fleet, DEVICE, 20, ended, (int)strlen(ended), false);
	fleet_presence_seen(&fleet, DEVICE + 1, 21, here, (int)strlen(here), false);
	fleet_presence_adoptions(&fleet);
	HT_EQ(fleet.table_resync, 0, "nothing taken over: no comparison with the table");
	HT_EQ(hbd_devices_adopt(daemon_.devices, DEVICE, 1700000000000ull, loc), 0,
	      "a session taken over, its entry ended by another node");
	HT_EQ(hbd_devices_adopt(daemon_.devices, DEVICE + 1, 1700000000000ull, other), 0,
	      "and one whose entry says online here");
	fleet_presence_adoptions(&fleet);
	HT_EQ(fleet.table_resync, 1, "sessions taken over: the table is compared");
	/* as the admin thread takes the flag */
	fleet_presence_catch_up(&fleet,
				__atomic_exchange_n(&fleet.table_resync, 0, __ATOMIC_ACQ_REL));
	m = next_write("the taken-over device's write");
	HT_EQ(strcmp(natsMsg_GetSubject(m), FLEET_SUBJ_PRESENCE "4242"), 0,
	      "for the device whose entry was ended, not %s", natsMsg_GetSubject(m));
	HT_TRUE(has_state(m, "online"), "it is written online again");
	natsMsg_Destroy(m);
	no_write("nothing for the device whose entry already says online here");
	fleet_presence_adoptions(&fleet);
	HT_EQ(fleet.table_resync, 0, "no comparison again until another session is taken over");
	hbd_devices_release(daemon_.devices, DEVICE, loc);
	hbd_devices_release(daemon_.devices, DEVICE + 1, other);
}

/* Queues a presence event as a worker does, for the fleet thread to take later. */
static void queue_event(uint64_t device, uint8_t kind, uint64_t session)
{
	struct hbd_event ev = event_of(device, kind, session);

	hbd_events_push(&daemon_.fleet.q, &ev);
}

/* The fleet thread's turn: everything queued is taken and handled. */
static void take_queued(void)
{
	struct hbd_event ev[8];
	uint64_t dropped;
	uint32_t n = hbd_events_take(&daemon_.fleet.q, ev, 8, &dropped);

	for (uint32_t i = 0; i < n; i++)
		fleet_presence_event(&fleet, &ev[i]);
	hbd_events_done(&daemon_.fleet.q, n);
}

/* A storm: the queue overflowed, so the device table is compared, while the queue still
 * holds the online events of sessions the comparison finds. Each such session is written once,
 * by its own event (with its start), not also by the comparison: 500,000 logins made 727,000
 * presence writes that way, and the bucket lagged the devices by tens of seconds. */
static void session_found_in_the_table_while_its_event_is_queued(void **state)
{
	static const char start[] = "\"since_ms\":1700000000000";
	uint64_t loc = hbd_loc(0, 0, 1, 9);
	natsMsg *m;

	(void)state;
	HT_EQ(hbd_devices_adopt(daemon_.devices, DEVICE, 1700000000000ull, loc), 0,
	      "the device's session in the table");
	queue_event(DEVICE, HBD_EV_ONLINE, loc);
	fleet_presence_catch_up(&fleet, true); /* events were lost elsewhere: the comparison */
	no_write("nothing written for the session while its own event is still queued");
	take_queued();
	m = next_write("the session's online write, from its event");
	HT_TRUE(has_state(m, "online"), "it says online");
	HT_TRUE(memmem(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), start,
		       sizeof(start) - 1) != NULL,
		"with the start its event gave: %.*s", natsMsg_GetDataLength(m),
		natsMsg_GetData(m));
	natsMsg_Destroy(m);
	fleet_presence_catch_up(&fleet, false);
	no_write("no second write for the session from the comparison");
	hbd_devices_release(daemon_.devices, DEVICE, loc);
}

/* The same comparison for a session whose event was lost: it is written once the queue has
 * passed the comparison, and only once. */
static void lost_event_written_once_the_queue_passed(void **state)
{
	uint64_t lost = hbd_loc(0, 0, 1, 10), queued = hbd_loc(0, 0, 1, 11);
	natsMsg *m;

	(void)state;
	HT_EQ(hbd_devices_adopt(daemon_.devices, DEVICE, 1700000000000ull, lost), 0,
	      "a session whose event was lost");
	HT_EQ(hbd_devices_adopt(daemon_.devices, DEVICE + 1, 1700000000000ull, queued), 0,
	      "and one whose event is queued");
	queue_event(DEVICE + 1, HBD_EV_ONLINE, queued);
	fleet_presence_catch_up(&fleet, true);
	no_write("nothing written while the queue may hold either's event");
	take_queued();
	m = next_write("the queued session's write");
	HT_EQ(strcmp(natsMsg_GetSubject(m), FLEET_SUBJ_PRESENCE "4243"), 0,
	      "for the device whose event was queued, not %s", natsMsg_GetSubject(m));
	natsMsg_Destroy(m);
	fleet_presence_catch_up(&fleet, false);
	m = next_write("the lost session's write, once the queue passed the comparison");
	HT_EQ(strcmp(natsMsg_GetSubject(m), FLEET_SUBJ_PRESENCE "4242"), 0,
	      "for the device whose event was lost, not %s", natsMsg_GetSubject(m));
	HT_TRUE(has_state(m, "online"), "it says online");
	natsMsg_Destroy(m);
	fleet_presence_catch_up(&fleet, false);
	no_write("each written once");
	hbd_devices_release(daemon_.devices, DEVICE, lost);
	hbd_devices_release(daemon_.devices, DEVICE + 1, queued);
}

/* Refreshes taken from the watch during a judgement are stamped after the time it judges by:
 * such a node was heard just now. The unsigned age wrapped, and the node was taken for dead
 * (twice in a row, a live node's devices were all marked offline by the others). */
static void node_heard_during_the_judgement_lives(void **state)
{
	uint64_t now = 1000000;
	uint16_t b, c;

	(void)state;
	pthread_mutex_lock(&fleet.lock);
	b = fleet_node_idx(&fleet, "node-b");
	c = fleet_node_idx(&fleet, "node-c");
	fleet.nodes[b].live = fleet.nodes[c].live = true;
	fleet.nodes[b].heard_ms = now + 1;
	fleet.nodes[c].heard_ms = now - 2500;
	pthread_mutex_unlock(&fleet.lock);
	fleet_nodes_judge(&fleet, now);
	fleet_nodes_judge(&fleet, now);
	HT_TRUE(fleet.nodes[b].live && fleet.nodes[b].live_before,
		"node-b, heard 1 ms after the judgement's time, lives at both judgements");
	HT_TRUE(!fleet.nodes[c].live && !fleet.nodes[c].live_before,
		"node-c, silent for longer than the TTL, is not live");
	HT_TRUE(fleet.nodes[fleet.me].live, "this node lives");
}

/* A worker has marked its DATA batch busy and its first publish has not entered libnats yet
 * (the worker is slow to get there, longer than the batch's deadline): the expiry must wait
 * for it, not list libnats' pending writes of a context that never had one (a crash). */
static void data_expiry_before_the_first_publish(void **state)
{
	struct fleet_batch fb = { .outstanding = 3, .busy = true, .deadline_ms = 0 };

	(void)state;
	HT_EQ(natsConnection_JetStream(&fb.js, nc, NULL), NATS_OK, "a JetStream context");
	daemon_.plan.workers = 1;
	fleet.batch = &fb;
	fleet_data_expire(&fleet);
	HT_TRUE(fb.busy, "the batch is still the worker's");
	HT_EQ(fb.outstanding, 3, "none of its publishes counted as failed");
	HT_EQ(fleet.count.data_failed, 0, "no failure counted");
	fleet.batch = NULL;
	jsCtx_Destroy(fb.js);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(sweep_ack_is_not_the_sessions, fleet_setup,
						fleet_teardown),
		cmocka_unit_test_setup_teardown(late_sweep_failure_leaves_session_alone,
						fleet_setup, fleet_teardown),
		cmocka_unit_test_setup_teardown(reclaim_before_the_first_write_enters_libnats,
						fleet_setup, fleet_teardown),
		cmocka_unit_test_setup_teardown(reclaim_while_a_write_enters_libnats, fleet_setup,
						fleet_teardown),
		cmocka_unit_test_setup_teardown(a_write_entering_libnats_after_an_empty_listing,
						fleet_setup, fleet_teardown),
		cmocka_unit_test_setup_teardown(
			new_session_found_in_the_table_while_the_end_is_in_flight, fleet_setup,
			fleet_teardown),
		cmocka_unit_test_setup_teardown(sessions_taken_over_after_another_node_ended_them,
						fleet_setup, fleet_teardown),
		cmocka_unit_test_setup_teardown(
			session_found_in_the_table_while_its_event_is_queued, fleet_setup,
			fleet_teardown),
		cmocka_unit_test_setup_teardown(lost_event_written_once_the_queue_passed,
						fleet_setup, fleet_teardown),
		cmocka_unit_test_setup_teardown(node_heard_during_the_judgement_lives, fleet_setup,
						fleet_teardown),
		cmocka_unit_test_setup_teardown(data_expiry_before_the_first_publish, fleet_setup,
						fleet_teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("fleet_presence", tests, group_setup, group_teardown);
}
