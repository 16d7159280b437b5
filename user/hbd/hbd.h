/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbd: configuration, the state shared by all workers, and the entry points main.c uses.
 *
 * hbd in layers. A file calls functions of its own layer or of the layers below it, never of
 * one above (callcycles.py over user/hbd and user/common finds no cycle):
 *
 *   life cycle     main, opts (the command line), daemon (start, stop), control (the control
 *                  thread's loop: signals drive reload, upgrade and drain), upgrade, restart
 *   control plane  services (opens the control socket and /metrics), api, metrics, reload,
 *                  notify (systemd); fleet mode (--nats): fleet > fleet_admin > fleet_presence,
 *                  fleet_data, fleet_down > fleet_ring, fleet_map (fleet_impl.h)
 *   data plane     worker (the loop; it dispatches every CQE) > handoff > accept > tcp_*
 *                  and mqtt (tcp.h orders them) and udp > udp_v2 > udp_tx, hello,
 *                  presence, downlink
 *   ring plumbing  ring: SQEs, MSG_RING from a worker or from the control thread
 *   core state     devices, sessions, keytab, sink, events, stats, maps, chunk, reasm,
 *                  sockets, placement (--cpus), nicwatch, mqtt_sess, fleet_q.h (what the
 *                  workers hand the fleet thread); below them user/common (clock, log, proto,
 *                  auth, mqtt, cpus, ...)
 *
 * The one call up goes through a pointer: ring.c hands a message a worker sends itself to
 * that worker's CQE dispatch (w->dispatch), as if it had come through the ring.
 *
 * Headers: this one and the core state's may be included anywhere; ring.h from the data plane
 * up; worker.h (a worker's state) by the data plane and by the layers above, which read it; a
 * data-plane module's header (accept.h, tcp.h, udp.h, udp_v2.h, udp_tx.h, hello.h, presence.h,
 * downlink.h, handoff.h) by the files above that module; tcp_impl.h by tcp_*.c only; the headers of the
 * control plane and the life cycle (services.h, api.h, metrics.h, reload.h, notify.h,
 * control.h, upgrade.h, restart.h) only within those two layers.
 */
#ifndef HBD_H
#define HBD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <liburing.h>

#include "auth.h"
#include "clock.h"
#include "cpus.h"
#include "devices.h"
#include "events.h"
#include "fleet_q.h"
#include "hbeat_abi.h"
#include "keytab.h"
#include "maps.h"
#include "nats_auth.h"
#include "nicwatch.h"
#include "sessions.h"

/* Exit codes of hbd. */
enum hbd_exit {
	HBD_EXIT_OK = 0, /* clean shutdown (SIGTERM/SIGINT drained) */
	HBD_EXIT_FAIL = 1, /* runtime failure */
	HBD_EXIT_USAGE = 2, /* bad command line */
	HBD_EXIT_SETUP = 3, /* could not start: keys, sink, sockets, io_uring */
};

struct hbd_config {
	const char *bind; /* NULL: "::" dual-stack */
	uint16_t port;
	uint16_t mqtt_port; /* 0: no MQTT listener */
	const char *mqtt_realm; /* the realm MQTT passwords are bound to */
	unsigned mqtt_max_days; /* the longest validity an MQTT password may claim */
	unsigned workers; /* 0: one per CPU (of --cpus, if given) */
	unsigned ring_threads; /* threads that run the rings; 0: one per ring */
	cpu_set_t cpus; /* --cpus (empty: not given): workers pinned to these, sockets steered */
	unsigned max_clients; /* authenticated TCP connections, and separately UDP sessions */
	unsigned max_pending; /* TCP connections without a HELLO yet (0 in the defaults: the
			       * parser fills in its share of max_clients) */
	const char *keys;
	double clock_window_s;
	uint64_t server_id; /* this server's id for bound HELLOs, 0: none */
	bool require_udp_mac; /* UDP only in protocol version 2 (per-frame MAC) */
	double interval_s;
	double expiry_mult;
	unsigned keepalive_probes; /* hbctl load --tcp keepalive: unanswered probes before a kill */
	double grace_s;
	double drain_s; /* longest a SIGTERM drain may take */
	const char *sink; /* --sink, or sink_default */
	bool sink_fsync;
	const char *pin_path;
	bool no_offload;
	bool no_defer_taskrun; /* worker rings set up the way kernels before 6.1 get them */
	unsigned batch_wait_us; /* a busy worker's wait for more completions (0: wake at one) */
	int log_level;
	unsigned rx_buffers; /* per worker, TCP provided buffers */
	unsigned rx_buf_size;
	/* limits (docs/RELIABILITY.md): each refusal is counted in a ustats field of its own */
	unsigned max_per_source; /* live TCP connections from one address (0: no limit) */
	double accept_rate; /* new TCP connections a second, whole daemon (0: no limit) */
	double hello_timeout_s; /* a connection must authenticate within this */
	double auth_fail_rate; /* failed HELLOs a second a source may make, after... */
	unsigned auth_fail_burst; /* ...this many at once */
	double data_rate; /* DATA frames a second a device may send, after... */
	unsigned data_burst; /* ...this many at once */
	unsigned max_payload; /* largest DATA/ECHO payload taken (<= HB_MAX_PAYLOAD) */
	unsigned max_output; /* unsent reply bytes a TCP connection may have queued */
	bool map_full_refuse; /* a client the kernel map has no room for is refused, not served in
			       * userspace */
	const char *control; /* control socket path (api.h), NULL: none */
	const char *control_group; /* its clients besides root and hbd's user, NULL: none */
	uint32_t control_gid; /* that group's gid */
	const char *metrics; /* ADDR:PORT for /metrics, NULL: none */
	/* fleet mode (fleet_*.c, docs/FLEET.md): NULL nats is the single-node default */
	struct hbd_nats_config {
		const char *urls; /* --nats URL[,URL...] */
		struct hb_nats_auth auth; /* --nats-creds, --nats-user, TLS (nats_auth.h) */
		const char *node; /* this node's name in hbeat_nodes and presence */
		unsigned replicas; /* of the stream and the buckets hbd creates */
		double node_ttl_s; /* hbeat_nodes TTL: a node silent this long is dead */
		double timeout_s; /* a publish not acknowledged by then failed */
		double down_timeout_s; /* a NATS downlink not ACKed by its device by then: timeout */
		unsigned priority; /* nice steps the fleet's threads run above the daemon's */
		unsigned presence_window; /* presence writes in flight before ends wait */
	} nats;
	char *const *argv; /* as started: an upgrade (SIGUSR2) starts exe with them again */
	char exe[4096];
	char sink_default[4096]; /* in the state directory (opts.c) */
};

void hbd_config_defaults(struct hbd_config *c);
/* Parses argv into c. Returns 0, 1 if --help was printed, or -EINVAL (message printed). */
int hbd_parse_args(int argc, char **argv, struct hbd_config *c);

/* How many rings and how many direct-descriptor slots each: every ring's table is capped at
 * RLIMIT_NOFILE, so max_clients beyond that needs more rings. 8% spare because SO_REUSEPORT
 * spreads connections unevenly.
 */
struct hbd_plan {
	unsigned workers;
	uint32_t slots; /* per ring */
	unsigned threads; /* that run the rings (--ring-threads) */
	unsigned per_thread; /* rings a thread runs: workers i..i+per_thread-1 share one */
};
int hbd_plan_workers(unsigned max_clients, unsigned want_workers, unsigned ncpu, uint64_t nofile,
		     struct hbd_plan *p);
/* The threads that run p's rings (--ring-threads N; 0: a thread a ring). */
void hbd_plan_threads(struct hbd_plan *p, unsigned ring_threads);
#define HBD_SLOT_RESERVE 256 /* below RLIMIT_NOFILE: regular fds the process still needs */
/* The HELLO deadline of a connection accepted while its worker's share of --max-pending is half
 * spent (or --hello-timeout if shorter): a device sends its HELLO right after connecting, and
 * 2 s are many round trips even on a slow cellular link. */
#define HBD_HELLO_BUSY_MS 2000
#define HBD_MAX_RINGS 1024

struct hbd_worker;
struct hbd_api;
struct hbd_metrics;

/* Keepalive mode's probe period, in whole seconds (TCP_KEEPIDLE's unit), for --interval.
 * The kernel kills a silent connection at the keepalive timer's (probes + 1)-th firing after
 * the last packet, and each firing may come up to an eighth of its timeout late (the timer
 * wheel's granularity, which grows with the timeout): a period of at most 8/9 of the interval
 * keeps the kill within interval x (probes + 1) of the last packet. Never below 1 s, so under
 * a 2 s interval the bound can still be exceeded by that slack. */
static inline uint32_t hbd_keepalive_period_s(uint64_t interval_ms)
{
	uint32_t p = (uint32_t)(interval_ms * 8 / 9 / 1000); /* --interval is at most a day */

	return p ? p : 1;
}

/* The daemon's state, grouped by concern. Written by the control thread while it sets up,
 * read by every worker; what changes while workers run is atomic or under a lock.
 */
struct hbd_daemon {
	const struct hbd_config *cfg;
	/* the configuration in the units the workers use */
	struct hbd_limits {
		uint64_t interval_ms, timeout_ms, window_ms, tick_ms, hello_timeout_ms;
		uint64_t server_id; /* --server-id: bound HELLOs must name it */
		uint64_t hello_busy_ms; /* the HELLO deadline while a worker's pending share is half
					 * spent (tcp_open.c) */
		unsigned pending_per_worker; /* max_pending over the workers */
		bool track_sources; /* per-source limits on: workers keep each connection's entry */
		/* keepalive mode: TCP_KEEPIDLE = TCP_KEEPINTVL, and TCP_USER_TIMEOUT, which the
		 * WELCOME tells the device as its interval and timeout */
		uint32_t ka_idle_s, ka_timeout_ms;
	} lim;
	/* the key store HELLOs are checked against (reload.c) */
	struct hbd_keyring {
		struct hb_keystore *cur; /* atomic pointer: replaced by a reload */
		uint64_t epoch; /* atomic: bumped by every reload */
		struct hb_keystore **retired; /* old stores a stuck worker might still read */
		unsigned nretired;
	} keys;
	/* HELLOs a previous daemon may have accepted are not known here: for one clock window
	 * after the start, a HELLO must be newer than the start (restart.c)
	 */
	struct hbd_replay_floor {
		uint64_t floor_ms, until_ms;
	} replay;
	/* the kernel fast paths (maps.h) */
	struct hbd_kernel {
		struct hbd_maps maps;
		bool offload; /* kernel fast paths loaded and in use */
		bool tcp_offload; /* and the TCP one among them (hbctl load --tcp kernel) */
		/* hbctl load --tcp keepalive: no sockhash; the kernel tracks the liveness of each
		 * connection sock_ops turned keepalive on for, and the receive side is a multishot
		 * poll plus a one-shot recv when it fires (tcp.h) */
		bool tcp_keepalive;
		bool tcp_conns; /* conns entries are kept up to date: kernel or keepalive mode */
		/* the kernel answers PINGREQs on our --mqtt-port (hbctl load --mqtt-port, --tcp
		 * kernel): MQTT connections join the sockhash as they authenticate */
		bool mqtt_kernel;
		int lock_fd; /* instance lock (offload mode), -1 if none */
		struct hbd_nicwatch nic; /* the XDP NIC (offload mode) */
	} kern;
	/* client state every worker shares */
	struct hbd_devices *devices;
	struct hbd_sessions sessions;
	struct hbd_keytab sources; /* per source address: TCP connections, failed HELLOs */
	struct hbd_keytab data_rl; /* per device: DATA rate */
	unsigned tcp_clients; /* atomic: live TCP connections, authenticated or not */
	unsigned tcp_pending; /* atomic: those without a HELLO yet; the rest count against
			       * max_clients */
	struct hb_ustats *stats; /* HB_MAX_WORKERS slots: the ustats map, or stats_own */
	struct hb_ustats *stats_own;
	int sink_fd;
	/* sockets and workers */
	int family; /* AF_INET6 (dual-stack) or AF_INET */
	uint16_t port;
	struct hbd_plan plan;
	int *tcp_fds, *udp_fds; /* one listener and one UDP socket per worker */
	int *mqtt_fds; /* one MQTT listener per worker (--mqtt-port), NULL if none */
	struct hbd_worker **workers;
	int *ring_fds; /* for MSG_RING between workers */
	uint64_t mono0_ns; /* CLOCK_MONOTONIC at start: worker clocks count ms from here */
	int stop; /* atomic: 1 = drain */
	/* start-up handshake between the control thread and the workers */
	struct hbd_start {
		pthread_mutex_t lock;
		pthread_cond_t cond;
		unsigned nready;
		int err;
		bool go;
	} start;
	/* upgrade (upgrade.c) */
	struct hbd_upgrade_state {
		int phase; /* atomic: enum hbd_ho_phase, which the old daemon's workers follow */
		bool successor; /* started by an upgrade: this daemon takes connections over */
		bool handed; /* everything was handed to a successor: exit without a drain */
		bool services_pending; /* successor: control socket, metrics once the old left */
		int term_pending; /* a drain signal that waits for an upgrade under way */
		struct hbd_upgrade *run; /* the upgrade under way, NULL if none */
	} upg;
	/* control thread: its ring for MSG_RING to the workers, events, control socket, metrics */
	struct hbd_control {
		struct io_uring ring;
		bool ok; /* the ring is set up */
		struct hbd_events events; /* workers -> control thread */
		uint64_t events_lost; /* atomic, for /metrics */
		struct hbd_api *api;
		struct hbd_metrics *metrics;
		uint16_t metrics_port;
	} ctl;
	struct hbd_fleet_side fleet; /* fleet mode (fleet_q.h); fleet.on false without --nats */
};

/* The key store HELLOs are checked against right now. */
static inline const struct hb_keystore *hbd_keys(struct hbd_daemon *d)
{
	return __atomic_load_n(&d->keys.cur, __ATOMIC_ACQUIRE);
}

/* The worker clock: ms of CLOCK_MONOTONIC since the daemon started. */
static inline uint64_t hbd_clock_ms(const struct hbd_daemon *d)
{
	return (hb_mono_ns() - d->mono0_ns) / 1000000;
}

enum hbd_ho_phase {
	HBD_HO_PHASE_NONE = 0, /* serving (or, after an aborted upgrade, serving again) */
	HBD_HO_PHASE_STOP, /* no new work: accepts and UDP receives cancelled */
	HBD_HO_PHASE_EXPORT, /* TCP connections are handed over */
	HBD_HO_PHASE_EXIT, /* done: workers leave their loops without a drain */
};

/* Runs the daemon until SIGTERM/SIGINT (blocked in every thread and taken by sigtimedwait in
 * the control thread). Returns an enum hbd_exit.
 */
int hbd_run(const struct hbd_config *cfg);

/* Rate-limited logging: true at most once per every_ms (per *last, which the caller keeps). */
static inline bool hbd_log_due(uint64_t *last_ms, uint64_t now_ms, uint64_t every_ms)
{
	uint64_t l = __atomic_load_n(last_ms, __ATOMIC_RELAXED);

	if (l && now_ms - l < every_ms)
		return false;
	return __atomic_compare_exchange_n(last_ms, &l, now_ms ? now_ms : 1, false,
					   __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

#endif
