// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd's control thread: set-up, workers, the liveness stamp, signals, drain, final counters. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "api.h"
#include "control.h"
#include "fleet.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "placement.h"
#include "reload.h"
#include "restart.h"
#include "services.h"
#include "sockets.h"
#include "upgrade.h"
#include "uring_sock.h"
#include "worker.h"

#define EVENT_QUEUE 16384 /* worker -> control events in flight; beyond, they are counted lost */
#define CTL_RING 256
#define WORKER_TICK_MAX_MS 250 /* 8 ticks a timeout, but no slower than this */

int hbd_plan_workers(unsigned max_clients, unsigned want_workers, unsigned ncpu, uint64_t nofile,
		     struct hbd_plan *p)
{
	uint64_t cap, need, per, rings;
	unsigned workers = want_workers ? want_workers : (ncpu ? ncpu : 1);

	if (!max_clients)
		return -EINVAL;
	if (nofile > (1u << 24))
		nofile = 1u << 24; /* unlimited: 16M slots a ring is plenty */
	if (nofile < HBD_SLOT_RESERVE + 64)
		return -EMFILE;
	cap = nofile - HBD_SLOT_RESERVE;
	need = ((uint64_t)max_clients * 108 + 99) / 100;
	rings = (need + cap - 1) / cap;
	if (workers < rings)
		workers = (unsigned)rings;
	if (workers > HBD_MAX_RINGS)
		return -E2BIG;
	per = (need + workers - 1) / workers + 16;
	if (per < 64)
		per = 64;
	if (per > cap)
		per = cap;
	p->workers = workers;
	p->slots = (uint32_t)per;
	hbd_plan_threads(p, 0);
	return 0;
}

void hbd_plan_threads(struct hbd_plan *p, unsigned ring_threads)
{
	unsigned threads = ring_threads && ring_threads < p->workers ? ring_threads : p->workers;

	p->per_thread = (p->workers + threads - 1) / threads;
	/* fewer than asked when the rings do not divide evenly (5 rings on 4: 2 a thread, 3) */
	p->threads = (p->workers + p->per_thread - 1) / p->per_thread;
}

static int open_sink(const char *path, bool fsync, bool repair)
{
	char why[256] = "";
	size_t dropped;
	int fd = hbd_sink_open(path, repair, fsync, &dropped, why, sizeof(why));

	if (fd < 0) {
		hb_err("sink %s: %s", path, why);
		return fd;
	}
	if (dropped)
		hb_warn("sink %s ended in a line cut short by a crash: removed its %zu bytes (those "
			"DATA frames were never acknowledged; their devices send them again)",
			path, dropped);
	return fd;
}

/* Whether the directory that holds (or would hold) the pins is on a bpffs. */
static bool on_bpffs(const char *pin_path)
{
	char dir[PATH_MAX];
	struct statfs st;
	char *slash;

	snprintf(dir, sizeof(dir), "%s", pin_path);
	if (!statfs(dir, &st))
		return st.f_type == 0xcafe4a11; /* BPF_FS_MAGIC */
	slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = 0;
	return !statfs(dir, &st) && st.f_type == 0xcafe4a11;
}

static bool uring_has_op(int op)
{
	struct io_uring_probe *p = io_uring_get_probe();
	bool ok = p && io_uring_opcode_supported(p, op);

	if (p)
		io_uring_free_probe(p);
	return ok;
}

/* Keepalive mode's timing in the units of the socket options: a probe every period
 * (hbd_keepalive_period_s: TCP_KEEPIDLE and TCP_KEEPINTVL), and the kill once --keepalive-probes
 * went unanswered, TCP_USER_TIMEOUT = period x (probes + 1) after the last packet received (with
 * a user timeout set, the kernel's keepalive kills on it rather than on TCP_KEEPCNT): within
 * interval x (probes + 1) with the kernel's timer slack. The user timeout bounds a connection
 * with unacknowledged data the same way (the keepalive timer leaves those to the
 * retransmission timer). */
static int keepalive_timing(struct hbd_daemon *d)
{
	const struct hbd_config *cfg = d->cfg;
	uint64_t idle = hbd_keepalive_period_s((uint64_t)(cfg->interval_s * 1000.0 + 0.5));
	uint64_t uto = idle * (cfg->keepalive_probes + 1) * 1000;

	if (idle > 32767 || uto > INT32_MAX) {
		hb_err("--interval %g with --keepalive-probes %u is beyond TCP keepalive (idle at most "
		       "32767 s, interval x (probes + 1) at most %d ms); use a shorter --interval",
		       cfg->interval_s, cfg->keepalive_probes, INT32_MAX);
		return -EINVAL;
	}
	d->lim.ka_idle_s = (uint32_t)idle;
	d->lim.ka_timeout_ms = (uint32_t)uto;
	return 0;
}

static int setup_maps(struct hbd_daemon *d)
{
	const struct hbd_config *cfg = d->cfg;
	char why[512];
	int rc;

	if (cfg->no_offload) {
		hb_info("--no-offload: answering every heartbeat in userspace");
	} else if (hbd_maps_open_offload(&d->kern.maps, cfg->pin_path, why, sizeof(why))) {
		if (!on_bpffs(cfg->pin_path))
			hb_warn("no bpffs at %s, so no pinned fast path: answering heartbeats in "
				"userspace; mount one (mount -t bpf bpf /sys/fs/bpf) and run `hbctl load "
				"--dev IFACE`, then restart hbd (kill -USR2 keeps its devices)",
				cfg->pin_path);
		else
			hb_warn("BPF fast path not loaded at %s (%s): answering heartbeats in "
				"userspace; run `hbctl load --dev IFACE`",
				cfg->pin_path, why);
	} else {
		struct hb_config hc;
		enum hb_tcp_path path =
			hbd_maps_config(&d->kern.maps, &hc) ? HB_TCP_KERNEL : hc.tcp_path;

		d->kern.offload = true;
		d->kern.tcp_offload = path == HB_TCP_KERNEL;
		d->kern.tcp_keepalive = path == HB_TCP_KEEPALIVE;
		if (d->kern.tcp_keepalive) {
			rc = keepalive_timing(d);
			if (rc)
				return rc;
			hb_info("BPF loaded with --tcp keepalive: the kernel probes silent TCP "
				"connections after %u s and closes them %u ms after the last packet "
				"(--keepalive-probes %u); UDP heartbeats answered by XDP",
				d->lim.ka_idle_s, d->lim.ka_timeout_ms, cfg->keepalive_probes);
		} else if (!d->kern.tcp_offload) {
			hb_info("BPF loaded with --tcp user: TCP heartbeats answered here, UDP ones by XDP");
		} else if (!uring_has_op(HB_IORING_OP_FIXED_FD_INSTALL)) {
			hb_warn("io_uring lacks IORING_OP_FIXED_FD_INSTALL (kernel >= 6.8), which adds "
				"connections to the sockhash: TCP heartbeats answered here, UDP ones by "
				"XDP");
			d->kern.tcp_offload = false;
		} else if (hbd_maps_open_sockhash(&d->kern.maps, cfg->pin_path, why, sizeof(why))) {
			hb_warn("no sockhash to add TCP connections to (%s): TCP heartbeats answered "
				"here, UDP ones by XDP",
				why);
			d->kern.tcp_offload = false;
		}
		/* TCP slots of every worker, then the sessions (worker.h, hbd_seen_tcp/udp) */
		uint64_t want = hbd_seen_udp_base(d) + d->sessions.cap;

		if (hbd_maps_open_seen(&d->kern.maps, cfg->pin_path, want, why, sizeof(why)))
			hb_info("no heartbeat stamps to map (%s): expiry looks each device up in the "
				"maps instead (hbctl load of this version pins them)",
				why);
		else if (d->kern.maps.seen_n < want)
			hb_info("%s/%s holds %u heartbeat stamps, fewer than the %" PRIu64
				" TCP slots "
				"and sessions here: expiry looks the devices beyond them up in the maps "
				"(hbctl load --max-conns/--max-sessions size it)",
				cfg->pin_path, HB_MAP_SEEN, d->kern.maps.seen_n, want);
		/* one daemon per set of maps, before touching any of them: a second would undo the
		 * first one's sessions and zero its counters
		 */
		rc = d->upg.successor
			     ? 0 /* inherited from the old daemon */
			     : hbd_instance_lock(cfg->pin_path, &d->kern.lock_fd, why, sizeof(why));
		if (rc == -EBUSY) {
			hb_err("%s", why);
			return rc;
		}
		if (rc)
			hb_warn("no instance lock (%s): make sure no other hbd uses %s", why,
				cfg->pin_path);
		/* the kernel's ECHO path must refuse what this daemon refuses */
		rc = hbd_maps_set_max_payload(&d->kern.maps, cfg->max_payload);
		if (rc == -EOPNOTSUPP && cfg->max_payload < HB_MAX_PAYLOAD)
			hb_warn("%s was loaded by an older hbctl, whose TCP path reflects ECHOs of up "
				"to %u bytes whatever --max-payload says: hbctl unload and load again",
				cfg->pin_path, HB_MAX_PAYLOAD);
		else if (rc && rc != -EOPNOTSUPP)
			hb_warn("config.max_payload: %s: the kernel reflects ECHOs of up to %u bytes",
				strerror(-rc), HB_MAX_PAYLOAD);
		/* XDP must refuse what this daemon refuses: version 1 PINGs under
		 * --require-udp-mac */
		rc = hbd_maps_set_flags(&d->kern.maps,
					cfg->require_udp_mac ? HB_CFG_REQUIRE_UDP_MAC : 0);
		if (rc && cfg->require_udp_mac) {
			hb_err("--require-udp-mac: cannot tell the XDP program (%s): hbctl unload "
			       "and load again",
			       strerror(-rc));
			return rc;
		}
		/* the only daemon now: sock_ops sets this timing on every connection from here on,
		 * before the first one (the listeners open after this) */
		/* a conns entry per authenticated connection in every TCP mode: the kernel answers
		 * by it in --tcp kernel, and it is what hbctl conns and bpftool list in all three */
		d->kern.tcp_conns = true;
		d->kern.mqtt_kernel = d->kern.tcp_offload && cfg->mqtt_port &&
				      !hbd_maps_config(&d->kern.maps, &hc) &&
				      hc.mqtt_port == cfg->mqtt_port;
		if (cfg->mqtt_port)
			hb_info("MQTT port %u: PINGREQs answered %s", cfg->mqtt_port,
				d->kern.mqtt_kernel ? "in the kernel"
						    : "here (hbctl load --mqtt-port "
						      "with --tcp kernel moves them)");
		if (d->kern.tcp_keepalive &&
		    (rc = hbd_maps_set_keepalive(&d->kern.maps, d->lim.ka_idle_s,
						 cfg->keepalive_probes, d->lim.ka_timeout_ms))) {
			hb_err("writing the keepalive timing into %s/%s: %s", cfg->pin_path,
			       HB_MAP_CONFIG, strerror(-rc));
			return rc;
		}
	}
	/* counters are published whenever the map is there, whatever the mode */
	if (!hbd_maps_open_ustats(&d->kern.maps, cfg->pin_path, why, sizeof(why))) {
		d->stats = d->kern.maps.ustats_mem;
		hb_info("publishing counters in %s/%s", cfg->pin_path, HB_MAP_USTATS);
	} else {
		hb_dbg("counters kept private: %s", why);
	}
	if (!d->stats) {
		d->stats_own = aligned_alloc(64, HB_MAX_WORKERS * sizeof(struct hb_ustats));
		d->stats = d->stats_own;
	}
	/* counters count this daemon's life: a restarted daemon starts from zero; an upgraded
	 * one goes on from its predecessor's (both add to them while they overlap)
	 */
	if (d->stats && (!d->upg.successor || d->stats == d->stats_own))
		memset(d->stats, 0, HB_MAX_WORKERS * sizeof(struct hb_ustats));
	return d->stats ? 0 : -ENOMEM;
}

/* One MQTT listener per worker, in an SO_REUSEPORT group as the service port's are. */
static int open_mqtt(struct hbd_daemon *d, char *why, size_t whylen)
{
	const struct hbd_config *cfg = d->cfg;
	int rc;

	d->mqtt_fds = calloc(d->plan.workers, sizeof(int));
	if (!d->mqtt_fds)
		return -ENOMEM;
	rc = hbd_sockets_open_tcp(cfg->bind, cfg->mqtt_port, d->plan.workers, d->mqtt_fds, why,
				  whylen);
	if (rc) {
		hb_err("listen on %s MQTT port %u: %s",
		       cfg->bind ? cfg->bind : "::", cfg->mqtt_port, why);
		free(d->mqtt_fds);
		d->mqtt_fds = NULL;
	}
	return rc;
}

/* A worker starts on its CPU (--cpus), so its ring and tables are allocated there too. */
static int start_thread(struct hbd_worker *w)
{
	pthread_attr_t attr;
	cpu_set_t one;
	int rc;

	if (w->cpu < 0)
		return -pthread_create(&w->thread, NULL, hbd_worker_main, w);
	CPU_ZERO(&one);
	CPU_SET(w->cpu, &one);
	rc = pthread_attr_init(&attr);
	if (rc)
		return -rc;
	rc = pthread_attr_setaffinity_np(&attr, sizeof(one), &one);
	if (!rc)
		rc = pthread_create(&w->thread, &attr, hbd_worker_main, w);
	pthread_attr_destroy(&attr);
	return -rc;
}

/* --cpus: every service socket of worker i gets worker i's CPU (an upgrade's inherited ones
 * too, which may have had another), so the kernel hands it what that CPU received. */
static int steer_sockets(struct hbd_daemon *d)
{
	const struct hbd_config *cfg = d->cfg;
	char list[256];

	for (unsigned i = 0; i < d->plan.workers; i++) {
		int cpu = hbd_placement_cpu(&cfg->cpus, i / d->plan.per_thread);
		int fds[3] = { d->tcp_fds[i], d->udp_fds[i], d->mqtt_fds ? d->mqtt_fds[i] : -1 };

		for (unsigned k = 0; k < 3; k++) {
			int rc = fds[k] >= 0 ? hbd_placement_steer(fds[k], cpu) : 0;

			if (rc) {
				hb_err("--cpus: SO_INCOMING_CPU %d on worker %u's socket: %s", cpu,
				       i, strerror(-rc));
				return rc;
			}
		}
	}
	hb_cpus_format(&cfg->cpus, list, sizeof(list));
	if (hbd_placement_kernel_steers())
		hb_info("workers on CPUs %s (worker i on the (i mod %d)-th), each steered what its "
			"CPU receives (SO_INCOMING_CPU)",
			list, CPU_COUNT(&cfg->cpus));
	else
		hb_warn("workers on CPUs %s, but this kernel's SO_REUSEPORT groups ignore "
			"SO_INCOMING_CPU (Linux 6.1 or later steers): connections are spread by hash",
			list);
	return 0;
}

static int start_workers(struct hbd_daemon *d)
{
	const struct hbd_config *cfg = d->cfg;
	unsigned n = d->plan.workers, per = d->plan.per_thread, started = 0;
	int rc = 0;

	d->workers = calloc(
		n, sizeof(*d->workers)); // NOLINT(bugprone-sizeof-expression): an array of pointers
	if (!d->workers)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		struct hbd_worker *w = calloc(1, sizeof(*w));

		if (!w) {
			rc = -ENOMEM;
			break;
		}
		d->workers[i] = w;
		w->d = d;
		w->id = i;
		hbd_down_init(&w->down);
		hbd_ho_init(w);
		w->st = &d->stats[i % HB_MAX_WORKERS];
		w->lfd = d->tcp_fds[i];
		w->ufd = d->udp_fds[i];
		w->mlfd = d->mqtt_fds ? d->mqtt_fds[i] : -1;
		w->nslots = d->plan.slots;
		w->rx_count = cfg->rx_buffers;
		w->rx_size = cfg->rx_buf_size;
		w->ux_count = HBD_UDP_BUFS;
		/* -1 without --cpus; the rings of one thread share its CPU */
		w->cpu = hbd_placement_cpu(&cfg->cpus, i / per);
		/* the first ring of each thread's share starts the thread */
		w->group_n = i % per ? 0 : (n - i < per ? n - i : per);
	}
	for (unsigned i = 0; !rc && i < n; i += per) {
		rc = start_thread(d->workers[i]);
		if (rc)
			hb_err("worker thread: %s", strerror(-rc));
		else
			started += d->workers[i]->group_n;
	}
	pthread_mutex_lock(&d->start.lock);
	if (rc && !d->start.err)
		d->start.err = rc;
	while (d->start.nready < started)
		pthread_cond_wait(&d->start.cond, &d->start.lock);
	rc = d->start.err;
	/* every worker is set up and waiting: state from an earlier daemon goes into its tables
	 * and wheels now, before any of them runs
	 */
	if (!rc && d->upg.successor) {
		char why[256];

		rc = hbd_upgrade_child_ready(d, why, sizeof(why));
		if (rc)
			hb_err("upgrade: %s", why);
	} else if (!rc && d->kern.offload) {
		hbd_adopt_sessions(d, d->replay.floor_ms);
	}
	d->start.go = !rc;
	pthread_cond_broadcast(&d->start.cond);
	pthread_mutex_unlock(&d->start.lock);
	/* threads not started are joined as if they had exited */
	for (unsigned i = started; i < n; i++) {
		free(d->workers[i]);
		d->workers[i] = NULL;
	}
	return rc;
}

static void stop_workers(struct hbd_daemon *d)
{
	__atomic_store_n(&d->stop, 1, __ATOMIC_RELEASE);
	/* wake every loop now rather than at its next tick */
	for (unsigned i = 0; i < d->plan.workers; i++)
		if (d->workers[i])
			hbd_ctl_msg(d, i, hbd_ud(HBD_OP_MSG_WAKE, 0, 0, 0), 0);
	hbd_ctl_flush(d);
	for (unsigned i = 0; i < d->plan.workers; i++) {
		if (d->workers[i] && d->workers[i]->group_n)
			pthread_join(d->workers[i]->thread, NULL);
	}
}

static void print_stats(struct hbd_daemon *d)
{
	struct hb_ustats sum;
	char buf[4096];

	if (!d->stats)
		return;
	hbd_stats_sum(d->stats, HB_MAX_WORKERS, &sum);
	if (hbd_stats_json(&sum, buf, sizeof(buf)) > 0) {
		printf("%s\n", buf);
		fflush(stdout);
	}
}

static const char *mode_str(const struct hbd_daemon *d)
{
	if (d->kern.offload)
		return "offload";
	return d->cfg->no_offload ? "userspace(--no-offload)" : "userspace(bpf-not-loaded)";
}

int hbd_run(const struct hbd_config *cfg)
{
	struct hbd_daemon *d = calloc(1, sizeof(*d));
	int rc, exit_code = HBD_EXIT_SETUP;
	struct rlimit rl = { 0 };
	char why[512];
	sigset_t sigs;
	int sigfd = -1;
	long ncpu;
	int ho_tcp[125], ho_udp[125];
	unsigned ho_n = 0, want;

	if (!d)
		return HBD_EXIT_FAIL;
	hb_log_init("hbd", (enum hb_log_level)cfg->log_level);
	hb_log_route_libbpf();
	pthread_mutex_init(&d->start.lock, NULL);
	pthread_cond_init(&d->start.cond, NULL);
	hbd_maps_init(&d->kern.maps);
	d->cfg = cfg;
	d->sink_fd = -1;
	d->kern.lock_fd = -1;
	d->mono0_ns = hb_mono_ns();
	d->replay.floor_ms = hb_realtime_ms();
	d->lim.interval_ms = (uint64_t)(cfg->interval_s * 1000);
	d->lim.timeout_ms = (uint64_t)(cfg->interval_s * cfg->expiry_mult * 1000);
	d->lim.window_ms = (uint64_t)(cfg->clock_window_s * 1000);
	d->lim.server_id = cfg->server_id;
	d->replay.until_ms = d->replay.floor_ms + d->lim.window_ms;
	/* 8 ticks a timeout keeps expiry within ~12% late; 250 ms is plenty at 30 s intervals */
	d->lim.tick_ms = d->lim.timeout_ms / 8;
	if (d->lim.tick_ms < 5)
		d->lim.tick_ms = 5;
	if (d->lim.tick_ms > WORKER_TICK_MAX_MS)
		d->lim.tick_ms = WORKER_TICK_MAX_MS;

	rc = hb_keystore_load(cfg->keys, &d->keys.cur, why, sizeof(why));
	if (rc) {
		hb_err("key store: %s", why);
		goto out;
	}
	hbd_keys_tag_first(d->keys.cur);
	{
		struct stat st;

		if (!stat(cfg->keys, &st) && (st.st_mode & 077))
			hb_warn("key store %s is readable by others (mode %03o): chmod 600 it",
				cfg->keys, st.st_mode & 0777);
	}
	if (hbd_events_init(&d->ctl.events, EVENT_QUEUE) ||
	    io_uring_queue_init(CTL_RING, &d->ctl.ring, 0)) {
		hb_err("control thread set-up failed (out of memory or io_uring unavailable)");
		goto out;
	}
	d->ctl.ok = true;
	getrlimit(RLIMIT_NOFILE, &rl);
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	/* started by an upgrade: the old daemon's sockets come first (as many workers at least) */
	ho_n = sizeof(ho_tcp) / sizeof(ho_tcp[0]);
	rc = hbd_upgrade_child_offer(d, ho_tcp, ho_udp, &ho_n, why, sizeof(why));
	if (rc < 0) {
		hb_err("upgrade: %s", why);
		goto out;
	}
	if (!rc)
		ho_n = 0;
	else
		d->replay.until_ms = 0; /* the old daemon hands its replay state over */
	want = cfg->workers	       ? cfg->workers
	       : CPU_COUNT(&cfg->cpus) ? (unsigned)CPU_COUNT(&cfg->cpus)
	       : ncpu > 0	       ? (unsigned)ncpu
				       : 1;
	if (want < ho_n)
		want = ho_n;
	/* connections without a HELLO have slots of their own: they never take a device's */
	rc = hbd_plan_workers(cfg->max_clients + cfg->max_pending, want,
			      ncpu > 0 ? (unsigned)ncpu : 1, rl.rlim_cur, &d->plan);
	if (rc) {
		hb_err("cannot plan %u clients and %u connections without a HELLO with "
		       "RLIMIT_NOFILE %llu: %s",
		       cfg->max_clients, cfg->max_pending, (unsigned long long)rl.rlim_cur,
		       strerror(-rc));
		goto out;
	}
	d->lim.pending_per_worker = (cfg->max_pending + d->plan.workers - 1) / d->plan.workers;
	hbd_plan_threads(&d->plan, cfg->ring_threads);
	/* a connection gets no longer to authenticate than an authenticated one may stay silent */
	d->lim.hello_timeout_ms = (uint64_t)(cfg->hello_timeout_s * 1000);
	if (d->lim.hello_timeout_ms > d->lim.timeout_ms)
		d->lim.hello_timeout_ms = d->lim.timeout_ms;
	d->lim.hello_busy_ms = d->lim.hello_timeout_ms < HBD_HELLO_BUSY_MS ? d->lim.hello_timeout_ms
									   : HBD_HELLO_BUSY_MS;
	d->lim.track_sources = cfg->max_per_source || cfg->auth_fail_rate > 0;
	if (hbd_devices_init(&d->devices, cfg->max_clients) ||
	    hbd_sessions_init(&d->sessions, cfg->max_clients) ||
	    /* bounded: a flood of new source addresses must not take all memory */
	    hbd_keytab_init(&d->sources, cfg->auth_fail_rate, cfg->auth_fail_burst,
			    4 * cfg->max_clients + 65536) ||
	    hbd_keytab_init(&d->data_rl, cfg->data_rate, cfg->data_burst,
			    2 * cfg->max_clients + 1024)) {
		hb_err("out of memory for %u clients", cfg->max_clients);
		goto out;
	}
	rc = setup_maps(d);
	if (rc) {
		if (rc == -ENOMEM)
			hb_err("out of memory for counters");
		goto out;
	}
	if (d->kern.offload) {
		if (!d->upg.successor) /* an old daemon still owns its connections */
			hbd_clean_stale_conns(d);
		{
			struct hb_config c;

			if (!hbd_maps_config(&d->kern.maps, &c) && c.ifindex)
				hbd_nic_init(&d->kern.nic, (int)c.ifindex, c.ifname, cfg->pin_path);
		}
	}
	/* no repair while an old daemon may be mid-write on the same file; in fleet mode DATA
	 * goes to JetStream instead */
	if (!cfg->nats.urls) {
		d->sink_fd = open_sink(cfg->sink, cfg->sink_fsync, !d->upg.successor);
		if (d->sink_fd < 0)
			goto out;
	}
	d->tcp_fds = calloc(d->plan.workers, sizeof(int));
	d->udp_fds = calloc(d->plan.workers, sizeof(int));
	d->ring_fds = malloc(d->plan.workers * sizeof(int));
	if (!d->tcp_fds || !d->udp_fds || !d->ring_fds)
		goto out;
	for (unsigned i = 0; i < d->plan.workers; i++)
		d->tcp_fds[i] = d->udp_fds[i] = d->ring_fds[i] = -1;
	for (unsigned i = 0; i < ho_n; i++) {
		d->tcp_fds[i] = ho_tcp[i];
		d->udp_fds[i] = ho_udp[i];
	}
	/* more workers than the old daemon had: their sockets join its SO_REUSEPORT groups */
	rc = d->plan.workers > ho_n
		     ? hbd_sockets_open(cfg->bind, ho_n ? d->port : cfg->port,
					d->plan.workers - ho_n, d->tcp_fds + ho_n,
					d->udp_fds + ho_n, &d->port, &d->family, why, sizeof(why))
		     : 0;
	if (rc) {
		hb_err("listen on %s port %u: %s", cfg->bind ? cfg->bind : "::", cfg->port, why);
		goto out;
	}
	if (cfg->mqtt_port && open_mqtt(d, why, sizeof(why)))
		goto out;
	if (CPU_COUNT(&cfg->cpus) && steer_sockets(d))
		goto out;

	/* every thread inherits the mask: only the control loop's signalfd takes these signals */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	sigfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sigfd < 0) {
		hb_err("signalfd: %s", strerror(errno));
		goto out;
	}

	if (cfg->nats.urls && hbd_fleet_init(d, why, sizeof(why))) {
		hb_err("fleet mode: %s", why);
		goto out;
	}
	rc = start_workers(d);
	if (rc) {
		hb_err("workers did not start: %s", strerror(-rc));
		stop_workers(d);
		goto out;
	}
	if (cfg->nats.urls && hbd_fleet_start(d, why, sizeof(why))) {
		hb_err("fleet mode: %s", why);
		stop_workers(d);
		goto out;
	}
	/* a successor opens them once its predecessor has closed them (upgrade.c) */
	if (!d->upg.successor && hbd_services_open(d)) {
		stop_workers(d);
		goto out;
	}
	hb_info("ready: listening on %s port=%u tcp+udp workers=%u slots=%u max_clients=%u "
		"interval_ms=%llu timeout_ms=%llu mode=%s sink=%s control=%s metrics_port=%u pid=%d%s",
		cfg->bind ? cfg->bind : "::", d->port, d->plan.workers, d->plan.slots,
		cfg->max_clients, (unsigned long long)d->lim.interval_ms,
		(unsigned long long)d->lim.timeout_ms, mode_str(d), cfg->sink,
		cfg->control ? cfg->control : "none", d->ctl.metrics_port, (int)getpid(),
		d->upg.successor ? " (upgrade: taking over)" : "");
	if (d->plan.per_thread > 1)
		hb_info("workers: %u rings on %u threads, %u a thread (--ring-threads)",
			d->plan.workers, d->plan.threads, d->plan.per_thread);
	hbd_notify_ready(d);
	exit_code = hbd_control_loop(d, sigfd);
	if (!d->upg.handed)
		hbd_notify_stopping();
	/* no more requests; the workers' last events are dropped with the queue */
	hbd_api_close(d->ctl.api);
	d->ctl.api = NULL;
	stop_workers(d);
	hbd_fleet_stop(d); /* after the workers: their last presence events and DATA go out */
	/* metrics read worker memory: stop serving before the workers are freed */
	hbd_metrics_stop(d->ctl.metrics);
	d->ctl.metrics = NULL;
	if (d->kern.offload && !d->upg.handed) {
		/* the fast paths must stop answering for a daemon that is gone: a zero stamp is
		 * stale at once (unless the grace check is disabled); after an upgrade the
		 * successor stamps, and a zero here would silence the fast paths under it
		 */
		hbd_maps_stamp(&d->kern.maps, 0, (uint64_t)(cfg->grace_s * 1e9));
	}
	print_stats(d);
	hb_info("stopped");
out:
	hbd_api_close(d->ctl.api);
	hbd_metrics_stop(d->ctl.metrics);
	hbd_fleet_free(d); /* before the workers' memory, which its threads read */
	if (sigfd >= 0)
		close(sigfd);
	if (d->ctl.ok)
		io_uring_queue_exit(&d->ctl.ring);
	hbd_events_free(&d->ctl.events);
	for (unsigned i = 0; i < d->keys.nretired; i++)
		hb_keystore_free(d->keys.retired[i]);
	free(d->keys.retired);
	if (d->workers) {
		for (unsigned i = 0; i < d->plan.workers; i++) {
			if (d->workers[i])
				hbd_worker_free(d->workers[i]);
			free(d->workers[i]);
		}
	}
	if (d->tcp_fds)
		hbd_sockets_close(d->plan.workers, d->tcp_fds, d->udp_fds);
	for (unsigned i = 0; d->mqtt_fds && i < d->plan.workers; i++) {
		if (d->mqtt_fds[i] >= 0)
			close(d->mqtt_fds[i]);
	}
	free(d->mqtt_fds);
	if (d->sink_fd >= 0)
		close(d->sink_fd);
	if (d->kern.lock_fd >= 0)
		close(d->kern.lock_fd);
	if (d->kern.nic.ifindex)
		hbd_nic_close(&d->kern.nic);
	hbd_maps_close(&d->kern.maps);
	free(d->stats_own);
	hbd_sessions_free(&d->sessions);
	hbd_keytab_free(&d->sources);
	hbd_keytab_free(&d->data_rl);
	hbd_devices_free(d->devices);
	hb_keystore_free(d->keys.cur);
	free(d->workers);
	free(d->tcp_fds);
	free(d->udp_fds);
	free(d->ring_fds);
	hbd_upgrade_free(d);
	pthread_mutex_destroy(&d->start.lock);
	pthread_cond_destroy(&d->start.cond);
	free(d);
	return exit_code;
}
