/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* One worker: its io_uring, listener, UDP socket, connection slots and wheels. */
#ifndef HBD_WORKER_H
#define HBD_WORKER_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "chunk.h"
#include "downlink.h"
#include "handoff.h"
#include "hbd.h"
#include "presence.h"
#include "ring.h"
#include "proto.h"
#include "sink.h"
#include "stats.h"
#include "timing.h"
#include "ud.h"
#include "hb_wheel.h"
#include "mqtt_sess.h"

/* TCP connection state; the lifecycle is written down in tcp.h. */
enum hbd_conn_state {
	CONN_FREE = 0,
	CONN_NEW, /* accepted, HELLO not verified yet */
	CONN_AUTHED,
	CONN_CLOSING, /* finishing: sink ACKs, final frame, output */
	CONN_SHUTDOWN, /* output done: waiting for the recv and cookie ops to end */
	CONN_CLOSED, /* close of the direct descriptor submitted */
	CONN_HANDED, /* handed to a new daemon (upgrade): our direct descriptor is being closed */
};

enum {
	CF_RECV = 1 << 0, /* multishot recv armed */
	CF_SEND = 1 << 1, /* a send is in flight */
	CF_DIRTY = 1 << 2, /* on the dirty list: has output to submit */
	CF_COOKIE = 1 << 3, /* SO_COOKIE getsockopt in flight */
	CF_REARM = 1 << 4, /* on the re-arm list (recv ended with ENOBUFS) */
	CF_CANCEL = 1 << 5, /* recv cancel submitted */
	CF_COUNTED = 1 << 6, /* counted in hbd_daemon.tcp_clients */
	CF_BROKEN = 1 << 7, /* output failed: drop whatever is queued */
	CF_INSERT = 1 << 8, /* joining the sockhash: output (the WELCOME) held until it has */
	CF_PENDING = 1 << 9, /* counted in w->pending and hbd_daemon.tcp_pending (no HELLO yet) */
	/* keepalive mode (tcp.h): the receive side is a multishot poll and, when it fires, one
	 * non-blocking recv at a time; CF_RECV is set while either is in flight */
	CF_KEEPALIVE = 1 << 10, /* authenticated, the kernel tracks its liveness: off the wheel */
	CF_POLL = 1 << 11, /* multishot poll armed */
	CF_READ = 1 << 12, /* one-shot recv in flight */
	CF_MORE = 1 << 13, /* read again: the poll fired meanwhile, or the last read had data */
	CF_MQTT = 1 << 14, /* accepted on the MQTT port: MQTT packets both ways (mqtt.c) */
};

/* Per-slot connection state: 40 bytes, plus 8 bytes of wheel links in a parallel array, for
 * every slot of the ring's direct-descriptor table (slots are handed out lowest first, so the
 * 8% spare ones are not touched until a storm cycles through them). Output and partial frames
 * live in chunks only while needed. Per client the daemon also keeps a device-table entry
 * (24 bytes at a load of ~3/4: ~35 bytes, devices.c) and, with per-source limits, 4 bytes of
 * source reference. Per ring: a 256-entry SQ, a 4096-entry CQ, 128 x 512 B TCP and
 * 64 x 1152 B UDP receive buffers. What that comes to per client in a running hbd is
 * measured by scripts/bench.sh (docs/BENCHMARKS.md).
 */
struct hbd_conn {
	uint64_t cookie; /* SO_COOKIE: the conns map key (offload mode) */
	uint64_t device_id; /* 0 until authenticated */
	uint32_t last_seen; /* worker clock ms of the last frame (wraps; compared by difference) */
	uint32_t partial; /* chunk with an incomplete frame, or HBD_NONE */
	uint32_t out; /* head of the output chunk queue, or HBD_NONE */
	uint16_t gen; /* bumped when the slot is freed; in user_data */
	uint16_t sink_pending; /* DATA frames awaiting their sink write and ACK */
	uint16_t flags; /* CF_* */
	uint8_t state; /* enum hbd_conn_state */
	uint8_t final_type; /* frame to send once the sink ACKs are out: HB_BYE, HB_ERROR or 0 */
	uint8_t final_code; /* its reason or error code */
	uint8_t noauth; /* ERROR(NOT_AUTHED) replies so far (before a HELLO; tcp_frames.c) */
	uint16_t pend_seq; /* while CF_PENDING: its place in the worker's accept order (wraps) */
};

_Static_assert(sizeof(struct hbd_conn) == 40,
	       "per-slot state: keep it compact (every slot of every ring has one)");

#define HBD_ACCEPTS 32 /* single-shot accepts in flight per worker (accept.c) */

/* A worker's accepts: address buffers, and its share of --accept-rate as a token bucket. */
struct hbd_acceptq {
	struct sockaddr_in6 addr[HBD_ACCEPTS];
	socklen_t len[HBD_ACCEPTS];
	uint32_t idle; /* bitmap: buffers with no accept in flight */
	unsigned armed;
	double tokens, cap, per_ms; /* per_ms 0: no rate limit */
	uint64_t refill_ms;
	bool paused; /* out of tokens (counted once per pause) */
	bool retry; /* an unexpected error: arm again at the next tick */
	bool stopped; /* drain or handoff: arm nothing more */
};

#define HBD_DUE_BATCH 256
#define HBD_UDP_BUF_SIZE 1152 /* recvmsg header + sockaddr_in6 + the largest valid datagram */
#define HBD_UDP_BUFS 64
#define HBD_BGID_TCP 0
#define HBD_BGID_UDP 1

struct hbd_worker {
	struct hbd_daemon *d;
	unsigned id;
	int cpu; /* the one it runs on (--cpus), -1: any */
	pthread_t thread; /* valid where group_n > 0 */
	/* --ring-threads: this worker's thread runs workers id..id+group_n-1; 0 if another's
	 * thread runs this one */
	unsigned group_n;
	struct hb_ustats *st; /* this worker's counter slot */
	struct io_uring ring;
	bool ring_ok;
	/* the CQE handler (worker.c); ring.c hands it messages this worker sends itself */
	void (*dispatch)(struct hbd_worker *w, struct io_uring_cqe *cqe);
	int lfd, ufd; /* listener and UDP socket (regular fds, owned by the daemon) */
	int mlfd; /* the MQTT listener (hbd --mqtt-port), -1 if none */
	struct hbd_mqtt_sess *mq; /* per slot: MQTT session state, NULL without --mqtt-port */

	/* TCP: one entry per direct-descriptor slot */
	struct hbd_conn *conns;
	struct hb_wlink *links;
	uint32_t *src; /* per slot: its source's entry in d->sources (only if track_sources) */
	struct hbd_acceptq acc;
	uint32_t nslots;
	uint32_t nconns; /* slots not FREE */
	uint32_t
		pending; /* connections without a HELLO (CF_PENDING), at most lim.pending_per_worker */
	uint32_t pend_scan; /* where the search for the oldest of them goes on (tcp_open.c) */
	uint16_t pend_next; /* the next pend_seq */
	struct hb_wheel tcp_wheel;
	uint32_t *dirty, ndirty; /* connections with output to submit */
	uint32_t *rearm, nrearm; /* connections whose recv must be re-armed */

	/* UDP: sessions this worker owns are on its wheel */
	struct hb_wheel udp_wheel;
	struct msghdr udp_msg; /* recvmsg template: name length only */
	uint32_t udp_inflight; /* datagram sends in flight */

	/* provided buffer rings: TCP recv and UDP recvmsg */
	struct io_uring_buf_ring *rx_br, *ux_br;
	uint8_t *rx_mem, *ux_mem;
	uint32_t rx_count, rx_size, ux_count;
	unsigned rx_ret, ux_ret; /* buffers given back since the last advance */

	struct hbd_chunks chunks;
	struct hbd_sink sink;
	struct hbd_ho_worker ho; /* upgrade handoff (handoff.c) */

	bool udp_armed;
	bool udp_retry; /* re-arm at the next tick (after an unexpected error) */
	bool draining;
	bool tick_armed;
	struct __kernel_timespec tick_ts;
	uint64_t drain_deadline;
	uint64_t now_ms; /* worker clock, ms since the daemon started */
	uint64_t next_tick;
	uint32_t due[HBD_DUE_BATCH];
	struct {
		uint64_t since_ms, cqes; /* completions in the window that began then */
		bool on; /* atomic: use the --batch-wait timed wait (worker.c batch_gate) */
	} gate;

	/* the application side: downlinks, the key reload epoch, timings for /metrics */
	struct hbd_downlink down;
	uint64_t epoch; /* atomic: the key reload epoch this loop has seen (reload.c) */
	bool exited; /* atomic: its loop is over (with --ring-threads its thread may run others) */
	uint64_t sink_t0_ns; /* when the in-flight sink batch was submitted */
	struct hbd_timing t_sink, t_down;
};

/* An old daemon's worker during an upgrade: no new work, no expiry of UDP sessions (they
 * are the successor's), no drain.
 */
static inline bool hbd_handing_off(const struct hbd_worker *w)
{
	return !w->d->upg.successor &&
	       __atomic_load_n(&w->d->upg.phase, __ATOMIC_ACQUIRE) != HBD_HO_PHASE_NONE;
}

/* Slots in the seen array (bpf/hbeat_abi.h): TCP connections first, by worker and slot, then
 * UDP sessions by index. 0 (no slot) where the array is absent or too small.
 */
static inline uint32_t hbd_seen_tcp(const struct hbd_worker *w, uint32_t slot)
{
	uint64_t k = 1 + (uint64_t)w->id * w->d->plan.slots + slot;

	return k < w->d->kern.maps.seen_n ? (uint32_t)k : 0;
}

static inline uint64_t hbd_seen_udp_base(const struct hbd_daemon *d)
{
	return 1 + (uint64_t)d->plan.workers * d->plan.slots;
}

static inline uint32_t hbd_seen_udp(const struct hbd_daemon *d, uint32_t idx)
{
	uint64_t k = hbd_seen_udp_base(d) + idx;

	return k < d->kern.maps.seen_n ? (uint32_t)k : 0;
}

/* The later of last (a worker clock ms, wrapping) and a kernel CLOCK_MONOTONIC stamp; stamps
 * from before this daemon started (or none, 0) leave last as it is: expiry's reads, where such a
 * stamp is a slot's leftover or was taken in at adoption already (hbd_adopt_seen). */
static inline uint32_t hbd_seen_later(const struct hbd_daemon *d, uint64_t ns, uint32_t last)
{
	uint32_t t;

	if (ns <= d->mono0_ns)
		return last;
	t = (uint32_t)((ns - d->mono0_ns) / 1000000);
	return (int32_t)(t - last) > 0 ? t : last;
}

/* As hbd_seen_later, for the kernel's last heartbeat of a device this daemon adopts (upgrade,
 * restart): that one is often older than our start, and must count all the same, as the past
 * time it is on the wrapping clock. Older than a timeout before our start is silence enough; one
 * ahead of now is taken as now.
 */
static inline uint32_t hbd_adopt_seen(const struct hbd_daemon *d, uint64_t ns, uint32_t last)
{
	uint64_t now = hb_mono_ns();
	int64_t ms;
	uint32_t t;

	if (!ns)
		return last;
	ms = ((int64_t)(ns < now ? ns : now) - (int64_t)d->mono0_ns) / 1000000;
	if (ms < -(int64_t)d->lim.timeout_ms)
		ms = -(int64_t)d->lim.timeout_ms;
	t = (uint32_t)ms;
	return (int32_t)(t - last) > 0 ? t : last;
}

/* ms since last by the worker's clock. Another worker or the kernel may have seen the device
 * after our clock reading: a negative silence is none. */
static inline uint32_t hbd_silence(const struct hbd_worker *w, uint32_t last)
{
	uint32_t now = (uint32_t)w->now_ms;

	return (int32_t)(now - last) > 0 ? now - last : 0;
}

/* worker.c: the thread and its loop; it dispatches every CQE (accept.h, tcp.h, udp.h,
 * handoff.h, downlink.h) */
void *hbd_worker_main(void *arg);
void hbd_worker_free(struct hbd_worker *w);

#define HBD_NO_BYE 0xff /* aux of a kill message: end the session without a BYE */

#endif
