/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbload internals: run configuration, per-ring context, per-client record, counters.
 *
 * Layers, top to bottom. A file calls only files on the lines below its own (the files that
 * share a line never call each other), so there is no call cycle:
 *   main.c         configuration, key store, exit status
 *   opts.c report.c probe.c   the command line; the summary; the start-up kernel check
 *   run.c          the main thread of a run: ring threads, phases, windows, results
 *   ring.c         a ring's thread: setup, the event loop, teardown
 *   dispatch.c     what each completion means, for the wire and for the session
 *   mqtt.c         --proto mqtt: what the server's MQTT packets mean (CONNACK, PINGRESP...)
 *   sweep.c        passes over every client: storm, rate change, BYE
 *   replies.c      what a client does with each frame from the server
 *   session.c downs.c   session lifecycle: admission, HELLO, end, retry, BYE, wakeups;
 *                  the ACKs of downlinks (DOWN frames)
 *   beat.c         heartbeats on their fixed schedule
 *   tcp.c udp.c    transports: a session's wire I/O (SQEs, stream reassembly, the UDP pool)
 *   mqtt_wire.c    MQTT packets a client builds, MQTT stream reassembly
 *   uring.c        ring plumbing: SQEs, the provided receive-buffer ring, errno counts
 *   utilities      sbuf (send buffers), rand.h, wakeups (the wheel), tokmap, window;
 *                  user/common (clock.h, hbclient, proto, hist, auth, log)
 * Upward news (a connection opened, a frame arrived, the server closed) travels in
 * completions, and completions are read by dispatch.c, above both the transports and the
 * sessions: so nothing below ever calls up, with no callback table on the per-heartbeat path.
 *
 * Threads: one per ring. A ring owns its clients (every R-th client of the run, so --silent and
 * --source spread evenly), its fixed-file table, its provided-buffer ring, its send buffers,
 * its timing wheel and its counters. Rings share only the read-only configuration and the
 * atomics in struct hbl_shared written by the main thread (the phase and three times). The
 * main thread reads ring counters and histograms with relaxed atomic loads; rings store them
 * with relaxed atomic stores (single writer, no locked instructions).
 *
 * Waiting: a ring sleeps in io_uring_submit_and_wait_timeout until the exact due time of its
 * next wakeup (or a completion), not on fixed 1 ms IORING_OP_TIMEOUT ticks: a tick would hold
 * back every heartbeat by up to 1 ms, and that delay would land in the measured RTTs.
 */
#ifndef HBL_HBLOAD_H
#define HBL_HBLOAD_H

#include <liburing.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include "auth.h"
#include "hbclient.h"
#include "hist.h"
#include "opts.h"
#include "rand.h"
#include "sbuf.h"
#include "tokmap.h"
#include "wakeups.h"
#include "window.h"

_Static_assert(HBL_MAX_STEPS_OPT == HBL_MAX_STEPS, "one limit for --steps and the windows");

/* Regular fds a ring table leaves for everything else when sized against RLIMIT_NOFILE. */
#define HBL_FD_MARGIN 500
#define HBL_SQ_ENTRIES 4096
/* Work per loop iteration is bounded (wakeups, sweeps, CQEs) so that the completions one
 * iteration can post inline stay far below the CQ size: an overflowing CQ makes submit fail
 * with -EBUSY until we reap, and we only reap between iterations.
 */
#define HBL_CQ_ENTRIES 65536
#define HBL_WAKE_BATCH 2048 /* wheel entries handled per iteration */
#define HBL_SWEEP_BATCH 1024 /* clients visited per iteration by a storm or BYE sweep */
#define HBL_CQE_BATCH 4096 /* CQEs reaped per iteration */
#define HBL_RBUF_COUNT 1024 /* provided receive buffers per ring (power of two) */
#define HBL_RBUF_SIZE 2048 /* > HB_MAX_FRAME: a datagram is never truncated */
/* the largest MQTT packet a client accepts: a downlink PUBLISH of HB_MAX_PAYLOAD bytes */
#define HBL_MQTT_MAX_REMAIN (HB_MAX_PAYLOAD + 64)
#define HBL_MAX_INBOUND \
	(HBL_MQTT_MAX_REMAIN + 5 > HB_MAX_FRAME ? HBL_MQTT_MAX_REMAIN + 5 : HB_MAX_FRAME)
/* what an MQTT PUBLISH adds to a DATA frame's size at most: header, topic, packet id */
#define HBL_MQTT_OVERHEAD 64
#define HBL_CARRY_CAP (HBL_MAX_INBOUND + HBL_RBUF_SIZE) /* partial frame + one receive */
/* one heartbeat with its DATA and ECHO always fits one send buffer, or it could never leave */
_Static_assert(HB_PING_UDP_BYTES + 2 * (HB_TOKEN_LEN + 8 + HBL_MAX_PAYLOAD) <= HBL_SBUF_SIZE,
	       "a full heartbeat must fit a send buffer");
#define HBL_MAX_CATCHUP 4 /* overdue heartbeats sent at once after a stall */
#define HBL_BYE_WAIT_NS 1000000000ULL /* after BYE, wait this long for the server to close */

/* Phases, in order; the main thread moves them forward, rings follow. */
enum hbl_phase {
	HBL_PH_RUN = 0, /* connect, authenticate, heartbeat */
	HBL_PH_DRAIN, /* no new heartbeats or connections; wait for replies */
	HBL_PH_BYE, /* send BYE, wait for the server to close */
	HBL_PH_EXIT, /* tear down */
};

struct hbl_cfg {
	struct hbl_opts o;
	struct sockaddr_storage server;
	socklen_t server_len;
	int family;
	struct sockaddr_storage *src; /* --source addresses, port 0 (NULL: kernel chooses) */
	unsigned nsrc;
	socklen_t src_len;
	struct hb_keystore *ks;
	uint32_t rings;
	uint32_t slots; /* most sockets one ring's fixed-file table may hold */
	uint64_t t0_ns; /* CLOCK_MONOTONIC start of the run */
	uint64_t interval_ns;
	uint64_t hello_timeout_ns;
	uint64_t connect_timeout_ns;
	uint64_t storm_window_ns;
	struct hbc_backoff backoff;
};

struct hbl_shared {
	int phase; /* enum hbl_phase, atomic */
	uint64_t run_end_ns; /* heartbeats scheduled at or after this are not sent (atomic) */
	uint64_t storm_at_ns; /* TCP clients all drop at this time; UINT64_MAX: never (atomic) */
	uint64_t measure_from_ns; /* RTTs of PINGs scheduled earlier are not recorded (atomic) */
	uint64_t interval_ns; /* heartbeat interval now; a rate step changes it (atomic) */
	uint32_t rate_gen; /* bumped with every interval change: rings reschedule (atomic) */
	struct hbl_windows win; /* measurement windows (window.h) */
};

/* Counters, one set per ring. The X-macro gives the struct and the names reports print. */
/* clang-format off */
#define HBL_STATS(X)                                                                              \
	X(attempts)		/* session attempts started (TCP connect or UDP HELLO) */           \
	X(connected)		/* clients that authenticated at least once */                      \
	X(authed)		/* WELCOMEs received (first sessions and reconnects) */             \
	X(connect_failed)	/* TCP connect chains or UDP socket setups that failed */           \
	X(auth_failed)		/* clients refused with ERROR(AUTH) (not retried) */               \
	X(timeouts)		/* HELLOs without WELCOME in time */                                \
	X(pings) X(pongs)                                                                        \
	X(beats)		/* BEATs sent (--beat): TCP's ACK is their answer */                \
	X(lost_closed)		/* PINGs outstanding when their session ended (part of lost) */    \
	X(stray)		/* replies matching nothing outstanding */                          \
	X(data_sent) X(data_acked) X(echo_sent) X(echo_ok)                                      \
	X(echo_bad)		/* ECHO replies whose payload differed */                           \
	X(expired)		/* TCP sessions the server ended with BYE(EXPIRED) */              \
	X(server_bye)		/* other BYEs from the server */                                    \
	X(server_closed)	/* connections the server closed or reset */                        \
	X(server_error)		/* ERROR frames other than AUTH */                                  \
	X(reconnects)		/* new sessions after a lost one */                                 \
	X(rehellos)		/* UDP sessions given up after --udp-rehello-after unanswered PINGs */ \
	X(errors)		/* local I/O errors, malformed frames, protocol violations */       \
	X(send_stalls)		/* a send waited: no free buffer or the previous one in flight */  \
	X(beats_skipped)	/* scheduled heartbeats dropped after a stall of > 4 intervals */   \
	X(recv_rearmed)		/* multishot receives that ended on a live connection, armed again */ \
	X(recv_nobufs)		/* of them: every receive buffer was lent out (-ENOBUFS) */        \
	X(recv_cancelled)	/* of them: cancelled (-ECANCELED), not by a close of ours */       \
	X(cq_overflow)		/* loop passes that found completions in the kernel's overflow list */ \
	X(cq_dropped)		/* loop passes told the kernel had dropped completions (-EBADR) */  \
	X(bye_sent)                                                                              \
	X(keepalive_devices)	/* devices with a session in keepalive mode (no PINGs), once each */ \
	X(downs_received)	/* DOWN frames (downlinks) from the server */                       \
	X(downs_acked)		/* ACKs of them sent (a DOWN is ACKed once it was taken) */         \
	X(downs_dropped)	/* DOWNs not ACKed: the session ended before the ACK could go */    \
	X(err_addrnotavail) X(err_connrefused) X(err_timeout) X(err_other)                      \
	X(storm_dropped) X(storm_back) X(storm_failures)                                        \
	X(usock_ready) X(usock_failed)	/* UDP pool sockets set up / failed */                   \
	X(authed_now)		/* gauge: sessions open now */                                      \
	X(open)			/* gauge: sockets this ring holds */                                \
	X(last_first_auth_ns)	/* when this ring's latest first authentication happened */         \
	X(storm_done_ns)	/* when the last storm-dropped client was back (0: not yet) */
/* clang-format on */

#define HBL_STAT_FIELD(name) uint64_t name;
struct hbl_stats {
	HBL_STATS(HBL_STAT_FIELD)
} __attribute__((aligned(64)));

#define HBL_ST_GET(st, f) __atomic_load_n(&(st)->f, __ATOMIC_RELAXED)
#define HBL_ST_SET(st, f, v) __atomic_store_n(&(st)->f, (v), __ATOMIC_RELAXED)
#define HBL_ST_ADD(st, f, n) HBL_ST_SET(st, f, (st)->f + (n))
#define HBL_INC(r, f) HBL_ST_ADD(&(r)->st, f, 1)

/* Where a client is in hbload's own lifecycle (its protocol state is in c.state). */
enum hbl_lstate {
	HBL_LS_WAIT = 0, /* in the admission queue, or in the wheel until its backoff ends */
	HBL_LS_CONNECTING, /* TCP connect chain or UDP HELLO slot pending */
	HBL_LS_HELLO, /* HELLO sent; wheel holds the deadline */
	HBL_LS_AUTHED, /* wheel holds the next heartbeat */
	HBL_LS_CLOSING, /* cancel + close submitted */
	HBL_LS_DONE, /* finished: refused, silent and expired, or the run ended */
};

enum hbl_sweep { HBL_SWEEP_NONE = 0, HBL_SWEEP_STORM, HBL_SWEEP_BYE, HBL_SWEEP_RATE };

/* What a TCP close (or a UDP session end) leads to. */
enum hbl_after_close {
	HBL_AFTER_RETRY = 0, /* an established session ended: reconnect after a backoff */
	HBL_AFTER_FAILED, /* an attempt failed before WELCOME: counted, retried after a backoff */
	HBL_AFTER_STORM, /* storm drop: reconnect at a random moment of the storm window */
	HBL_AFTER_DONE, /* the client is finished */
};

#define HBL_F_SILENT 0x01 /* never heartbeats */
#define HBL_F_EVER 0x02 /* authenticated at least once */
#define HBL_F_OPEN 0x04 /* TCP: the fixed slot holds a socket */
#define HBL_F_SENDING 0x08 /* TCP: a send is in flight (one at a time keeps frames whole) */
#define HBL_F_STORM 0x10 /* dropped by the storm, not back yet */
#define HBL_F_INFLIGHT 0x20 /* counted in the ring's connects+HELLOs in flight */
#define HBL_F_QUEUED 0x40 /* in the admission queue */
#define HBL_F_KA_SEEN 0x80 /* had a session in keepalive mode (counted in keepalive_devices) */

/* One simulated device. A ring holds one per client (with its wheel entry), so every field
 * counts at a million clients: keep it small.
 */
struct hbl_client {
	struct hbc c;
	uint64_t beat_ns; /* scheduled time of the next heartbeat: the fixed schedule */
	uint64_t last_ns; /* since when the server has heard nothing: WELCOME, then each PING */
	uint8_t *carry; /* TCP: bytes of a partial frame (allocated only while one is pending) */
	uint32_t beats; /* heartbeats sent (DATA/ECHO every N of them) */
	uint16_t carry_len;
	uint16_t gen; /* connection generation: CQEs of older connections are stale */
	uint16_t sock; /* UDP: the pool socket of the session; TCP: the send buffer in flight */
	uint8_t ls; /* enum hbl_lstate */
	uint8_t flags; /* HBL_F_* */
	uint8_t after; /* enum hbl_after_close: what to do when the close completes */
	uint8_t unanswered; /* PINGs sent since the server last answered this session */
};

/* UDP pool socket. */
struct hbl_usock {
	uint32_t pending; /* client whose HELLO went out through this socket, or HBL_NIL */
	uint64_t blocked_until; /* after a HELLO timeout: a late WELCOME may still come */
	uint8_t resolved; /* its setup chain completed, well or not */
	uint8_t ready; /* socket created, bound, connected, recv armed */
	uint8_t recv; /* multishot recv armed */
};

/* user_data bit-packing, one layout for every SQE a ring submits:
 *   bits 63..56  op (enum hbl_op)
 *   bits 55..40  send buffer id (HBL_OP_*_SEND only)
 *   bits 39..24  connection generation of the client (stale-CQE filter)
 *   bits 23..0   client index in the ring, or UDP pool socket index (HBL_OP_U*_SOCK ops)
 */
enum hbl_op {
	HBL_OP_IGNORE = 0, /* completions with nothing to do */
	HBL_OP_TCP_STEP, /* socket / setsockopt / bind of a connect chain (errors only) */
	HBL_OP_TCP_CONNECT, /* the chain's last step: its CQE decides */
	HBL_OP_TCP_TIMEOUT, /* the chain's link timeout */
	HBL_OP_TCP_RECV, /* multishot recv, provided buffers */
	HBL_OP_TCP_SEND,
	HBL_OP_TCP_CLOSE, /* cancel + close of the slot (the close's CQE) */
	HBL_OP_USOCK_STEP, /* UDP pool socket: socket / bind */
	HBL_OP_USOCK_CONNECT,
	HBL_OP_USOCK_RECV, /* multishot recv on a pool socket */
	HBL_OP_UDP_SEND, /* index: the client */
};

static inline uint64_t hbl_ud(enum hbl_op op, uint16_t buf, uint16_t gen, uint32_t idx)
{
	return (uint64_t)op << 56 | (uint64_t)buf << 40 | (uint64_t)gen << 24 | (idx & 0xffffff);
}
static inline enum hbl_op hbl_ud_op(uint64_t ud)
{
	return (enum hbl_op)(ud >> 56);
}
static inline uint16_t hbl_ud_buf(uint64_t ud)
{
	return (uint16_t)(ud >> 40);
}
static inline uint16_t hbl_ud_gen(uint64_t ud)
{
	return (uint16_t)(ud >> 24);
}
static inline uint32_t hbl_ud_idx(uint64_t ud)
{
	return (uint32_t)(ud & 0xffffff);
}

/* An ACK owed for a downlink: the client, its connection generation, the DOWN's seq. */
struct hbl_ack {
	uint32_t l;
	uint16_t gen, seq;
};

/* One ring and the thread that drives it. */
struct hbl_ring {
	unsigned id;
	const struct hbl_cfg *cfg;
	struct hbl_shared *sh;
	pthread_t thread;
	int started; /* thread created */
	int init_rc; /* 0 once the ring is set up; negative errno if setup failed */
	char init_err[160];

	struct io_uring ring;
	int ring_ok;
	struct io_uring_buf_ring *br;
	size_t br_bytes;
	uint8_t *rbufs;
	unsigned rbuf_returns; /* buffers added since the last advance */
	struct hbl_sbufs sb;

	uint32_t n; /* clients in this ring */
	struct hbl_client *cl;
	struct hbl_wheel wheel;
	uint32_t *queue; /* admission FIFO of client indexes (each at most once) */
	uint32_t qhead, qlen;
	uint32_t inflight, inflight_max;
	double tokens; /* --connect-rate bucket */
	uint64_t tokens_ns;
	uint64_t rng; /* hbl_rand() state */
	int phase; /* the phase this ring has acted on */
	int stormed;
	int sweep; /* enum hbl_sweep: a pass over every client, HBL_SWEEP_BATCH at a time */
	uint32_t rate_gen; /* the interval change this ring has acted on */
	int rate_pending; /* an interval change waits for another sweep to finish */
	uint64_t sched_iv_ns; /* the interval this ring's schedule follows (0: --interval) */
	uint64_t sweep_from_iv_ns, sweep_to_iv_ns; /* the change a rate sweep applies */
	uint32_t sweep_pos;
	uint64_t bye_deadline;

	/* UDP */
	struct hbl_usock *us;
	uint32_t nsock, nsock_ready;
	uint32_t *ufree; /* pool sockets with no HELLO pending (stack) */
	uint32_t nufree;
	uint32_t *ublocked; /* FIFO of sockets blocked after a HELLO timeout */
	uint32_t ubhead, ublen;
	struct hbl_tokmap tm;
	struct __kernel_timespec connect_ts; /* link timeout; read at submit */
	int warned_key; /* logged once: a device missing from the key store */
	int warned_sock; /* logged once: a UDP pool socket could not be set up */

	/* ACKs of downlinks waiting for the connection (a TCP send in flight) or a buffer: a
	 * FIFO that grows as needed (downs.c) */
	struct hbl_ack *acks;
	uint32_t ack_head, ack_len, ack_cap;

	struct hbl_stats st;
	struct hb_hist rtt;
	struct hb_hist lag; /* how late each PING left after its scheduled time (us) */
	struct hbl_wstats win[HBL_MAX_WINDOWS]; /* per measurement window (window.h) */
};

static inline int hbl_is_tcp(const struct hbl_ring *r)
{
	return r->cfg->o.proto == HB_TCP;
}

static inline int hbl_is_mqtt(const struct hbl_ring *r)
{
	return r->cfg->o.mqtt;
}

/* Client l of a ring is client l * rings + id of the run. */
static inline uint64_t hbl_global_index(const struct hbl_ring *r, uint32_t l)
{
	return (uint64_t)l * r->cfg->rings + r->id;
}

/* Prototypes by file, top layer first (see the top of this file). */

/* ring.c */
void *hbl_ring_main(void *arg);

/* dispatch.c */
void hbl_dispatch(struct hbl_ring *r, const struct io_uring_cqe *cqe, uint64_t now);

/* sweep.c: passes over all clients (storm, rate change, BYE) */
void hbl_phase_change(struct hbl_ring *r, int phase, uint64_t now);
void hbl_storm(struct hbl_ring *r, uint64_t now);
void hbl_rate_change(struct hbl_ring *r);
void hbl_sweep(struct hbl_ring *r, uint64_t now);

/* mqtt.c: the bytes of one receive on an MQTT client's connection */
void hbl_mqtt_bytes(struct hbl_ring *r, uint32_t l, const uint8_t *data, size_t n, uint64_t now);

/* replies.c */
void hbl_frame(struct hbl_ring *r, uint32_t l, const struct hb_frame *f, uint64_t now);
/* The session is open (WELCOME, or an MQTT CONNACK 0): start the heartbeat schedule. */
void hbl_session_open(struct hbl_ring *r, uint32_t l, uint64_t now);
/* An answered PING scheduled at ts; measured: rtt_ns is known and goes into the histograms. */
void hbl_count_pong(struct hbl_ring *r, uint64_t ts, uint64_t rtt_ns, int measured);

/* session.c: transport-independent client logic */
void hbl_admit(struct hbl_ring *r, uint32_t l);
void hbl_admit_run(struct hbl_ring *r, uint64_t now);
void hbl_set_ls(struct hbl_ring *r, uint32_t l, enum hbl_lstate ls);
void hbl_wake(struct hbl_ring *r, uint32_t l, uint64_t now);
void hbl_tcp_connect_done(struct hbl_ring *r, uint32_t l, int res, uint64_t now);
void hbl_send_bye(struct hbl_ring *r, uint32_t l, uint64_t now);
void hbl_session_lost(struct hbl_ring *r, uint32_t l, uint64_t now, int failed);
void hbl_end_session(struct hbl_ring *r, uint32_t l, uint64_t now, enum hbl_after_close after);
void hbl_tcp_close(struct hbl_ring *r, uint32_t l, enum hbl_after_close after);
void hbl_closed(struct hbl_ring *r, uint32_t l, uint64_t now);

/* downs.c: ACKs of downlinks, at once or as soon as the connection can take them */
void hbl_downs_free(struct hbl_ring *r);
void hbl_down(struct hbl_ring *r, uint32_t l, uint16_t seq);
void hbl_downs_run(struct hbl_ring *r);

/* beat.c: what a client sends on its own schedule */
int hbl_keepalive(const struct hbl_ring *r, const struct hbl_client *c);
int hbl_beats(const struct hbl_ring *r, const struct hbl_client *c);
uint64_t hbl_interval_ns(const struct hbl_ring *r);
void hbl_beat(struct hbl_ring *r, uint32_t l, uint64_t now);
int hbl_send(struct hbl_ring *r, uint32_t l, int id, unsigned len);
void hbl_pattern(uint8_t *p, unsigned len, uint64_t dev, uint16_t seq);

/* tcp.c */
void hbl_tcp_connect(struct hbl_ring *r, uint32_t l);
void hbl_tcp_arm_recv(struct hbl_ring *r, uint32_t l);
int hbl_tcp_send(struct hbl_ring *r, uint32_t l, int buf, unsigned len);
/* Cancels what is armed on the slot and closes it; the close's CQE ends the connection. */
void hbl_tcp_submit_close(struct hbl_ring *r, uint32_t l);
/* The close completed: the slot, its send flag and any partial frame are released. */
void hbl_tcp_close_done(struct hbl_ring *r, uint32_t l);
/* Reassembly of one receive: begin with its bytes, then take frames until next returns 0 (the
 * rest, a partial frame, is kept for the next receive) or a negative errno (the carry would
 * overflow, a malformed frame, no memory): the stream cannot go on. Stop early, without
 * calling next again, when a frame ended the connection.
 */
struct hbl_tcp_rx {
	const uint8_t *p; /* the receive buffer, or the carry when a partial frame was pending */
	size_t avail, off;
};
int hbl_tcp_rx_begin(struct hbl_ring *r, uint32_t l, const uint8_t *data, size_t n,
		     struct hbl_tcp_rx *rx);
int hbl_tcp_rx_next(struct hbl_ring *r, uint32_t l, struct hbl_tcp_rx *rx, struct hb_frame *f);
/* The end of a receive's reassembly, for every TCP protocol: what is left from rx->off on (a
 * partial frame or packet) goes to the client's carry; 0 or -ENOMEM. */
int hbl_tcp_rx_keep_rest(struct hbl_client *c, const struct hbl_tcp_rx *rx);

/* mqtt_wire.c: builders return the packet's size or a negative errno */
struct hb_mqtt_pkt;
uint16_t hbl_mqtt_keepalive(const struct hbl_opts *o);
int hbl_mqtt_connect(struct hbl_ring *r, uint32_t l, uint8_t *buf, size_t cap);
int hbl_mqtt_ping(struct hbl_client *c, uint8_t *buf, size_t cap, uint64_t ts);
uint64_t hbl_mqtt_pong(struct hbl_client *c);
int hbl_mqtt_publish(struct hbl_ring *r, struct hbl_client *c, uint8_t *buf, size_t cap,
		     const uint8_t *payload, size_t len);
int hbl_mqtt_disconnect(struct hbl_client *c, uint8_t *buf, size_t cap);
int hbl_mqtt_puback(struct hbl_client *c, uint8_t *buf, size_t cap, uint16_t packet_id);
int hbl_mqtt_rx_next(struct hbl_ring *r, uint32_t l, struct hbl_tcp_rx *rx, struct hb_mqtt_pkt *p);

/* udp.c */
int hbl_udp_init(struct hbl_ring *r);
/* Client l of a UDP run speaks the --udp-version (version 2 unless 1 is asked for). */
void hbl_udp_client_init(struct hbl_ring *r, uint32_t l);
void hbl_udp_free(struct hbl_ring *r);
void hbl_udp_open_sockets(struct hbl_ring *r);
void hbl_udp_arm_recv(struct hbl_ring *r, uint32_t s);
void hbl_udp_socket_ready(struct hbl_ring *r, uint32_t s, int res);
void hbl_udp_claim(struct hbl_ring *r, uint32_t l);
void hbl_udp_release(struct hbl_ring *r, uint32_t l, uint64_t now, int timed_out);
int hbl_udp_send(struct hbl_ring *r, uint32_t l, int buf, unsigned len);
uint32_t hbl_udp_match(struct hbl_ring *r, uint32_t s, const uint8_t *p, size_t n,
		       struct hb_frame *f);
void hbl_udp_tick(struct hbl_ring *r, uint64_t now);

/* uring.c: ring plumbing */
struct io_uring_sqe *hbl_sqe(struct hbl_ring *r);
void hbl_sq_reserve(struct hbl_ring *r, unsigned n);
int hbl_rbufs_setup(struct hbl_ring *r);
void hbl_rbufs_free(struct hbl_ring *r);
uint8_t *hbl_rbuf(struct hbl_ring *r, unsigned bid);
void hbl_rbuf_return(struct hbl_ring *r, unsigned bid);
void hbl_count_errno(struct hbl_ring *r, int res);

/* probe.c: the kernel has what hbload needs (logs what is missing) */
int hbl_probe_kernel(const struct hbl_cfg *cfg);

#endif
