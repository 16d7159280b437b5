// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Upgrade without dropping devices, the control thread's part: SIGUSR2 makes hbd start its
 * successor (the binary now at the path it was started from, same arguments) and hand it the
 * listening sockets, the UDP sockets, the sessions, the replay state and every TCP connection
 * (the sequence is in handoff.h, the connections' journey in handoff.c).
 *
 * Passing the very listening sockets, not opening new ones beside them, is what makes "no
 * connect refused" hold: nothing is ever closed, new connections wait in the same listen
 * queue while neither process accepts, and the new process picks them up from there.
 *
 * If the successor fails before it is ready, or dies on the way, the old daemon goes on
 * serving (what it already handed over is lost with the successor). The instance lock
 * (restart.c) is handed down too: the successor holds it from its first instruction.
 */
#include "upgrade.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "notify.h"
#include "services.h"
#include "worker.h"

extern char **environ;

#define ENV_HANDOFF "HBD_HANDOFF_FD"
#define ENV_LOCK "HBD_LOCK_FD"
#define READY_TIMEOUT_MS 30000

enum up_state { UP_IDLE, UP_WAIT_READY, UP_STOPPING, UP_EXPORTING, UP_CHILD, UP_CHILD_END };

struct hbd_upgrade {
	enum up_state state;
	int sock; /* the control socket to the other daemon */
	pid_t child;
	uint64_t deadline_ms, t0_ms;
	uint64_t sessions;
};

static void set_buffers(int fd)
{
	int sz = HBD_HO_SOCKBUF;

	/* beyond net.core.wmem_max with CAP_NET_ADMIN; else as much as the limit allows */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
}

/* Wakes every worker loop now rather than at its next tick. */
static void wake_workers(struct hbd_daemon *d)
{
	struct io_uring ring;

	if (io_uring_queue_init(8, &ring, 0))
		return; /* they see the phase at their next tick */
	for (unsigned i = 0; i < d->plan.workers; i++) {
		struct io_uring_sqe *sqe;
		struct io_uring_cqe *cqe;

		if (!d->workers[i] || d->ring_fds[i] < 0 || !(sqe = io_uring_get_sqe(&ring)))
			continue;
		io_uring_prep_msg_ring(sqe, d->ring_fds[i], 0, hbd_ud(HBD_OP_MSG_WAKE, 0, 0, 0), 0);
		if (io_uring_submit_and_wait(&ring, 1) == 1 && !io_uring_peek_cqe(&ring, &cqe))
			io_uring_cqe_seen(&ring, cqe);
	}
	io_uring_queue_exit(&ring);
}

static void set_phase(struct hbd_daemon *d, int phase)
{
	__atomic_store_n(&d->upg.phase, phase, __ATOMIC_RELEASE);
	wake_workers(d);
}

/* ---- the old daemon -------------------------------------------------------------------- */

/* environ without our variables, plus them. */
static char **child_env(int sock, int lock)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 3, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], ENV_HANDOFF "=", sizeof(ENV_HANDOFF)) &&
		    strncmp(environ[i], ENV_LOCK "=", sizeof(ENV_LOCK)))
			env[k++] = environ[i];
	if (asprintf(&env[k++], ENV_HANDOFF "=%d", sock) < 0)
		env[--k] = NULL;
	if (lock >= 0 && asprintf(&env[k++], ENV_LOCK "=%d", lock) < 0)
		env[--k] = NULL;
	return env;
}

static void abort_upgrade(struct hbd_daemon *d, const char *why)
{
	struct hbd_upgrade *u = d->upg.run;
	int st;

	hb_err("upgrade aborted: %s; this hbd goes on serving", why);
	if (u->child > 0) {
		kill(u->child, SIGKILL);
		waitpid(u->child, &st, 0);
	}
	u->child = 0;
	if (u->sock >= 0)
		close(u->sock);
	u->sock = -1;
	for (unsigned i = 0; i < d->plan.workers; i++)
		if (d->workers[i] && d->workers[i]->ho.sock >= 0) {
			/* the worker's own thread closes nothing of it meanwhile: it only writes */
			shutdown(d->workers[i]->ho.sock, SHUT_RDWR);
		}
	if (__atomic_load_n(&d->upg.phase, __ATOMIC_ACQUIRE) != HBD_HO_PHASE_NONE)
		set_phase(d, HBD_HO_PHASE_NONE);
	u->state = UP_IDLE;
}

void hbd_upgrade_request(struct hbd_daemon *d)
{
	struct hbd_upgrade *u;
	posix_spawnattr_t attr;
	sigset_t none, dfl;
	int sv[2], lock = -1, fds[2 * 125];
	struct hbd_ho_offer offer = { 0 };
	char **env;
	int rc;

	if (!d->upg.run && !(d->upg.run = calloc(1, sizeof(*d->upg.run)))) {
		hb_err("upgrade: out of memory");
		return;
	}
	u = d->upg.run;
	if (u->state != UP_IDLE || d->upg.successor) {
		hb_warn("SIGUSR2: an upgrade is already under way (or this hbd is still taking one "
			"over); ignored");
		return;
	}
	if (!d->cfg->argv || !d->cfg->exe[0]) {
		hb_err("SIGUSR2: no path to start a successor from");
		return;
	}
	if (d->plan.workers > 125) {
		hb_err("SIGUSR2: %u workers: an upgrade hands over at most 125 listeners",
		       d->plan.workers);
		return;
	}
	u->sock = -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		hb_err("upgrade: socketpair: %s", strerror(errno));
		return;
	}
	set_buffers(sv[0]);
	set_buffers(sv[1]);
	/* the child's ends must survive exec: dups carry no close-on-exec flag */
	int child_sock = fcntl(sv[1], F_DUPFD, 3);

	close(sv[1]);
	if (d->kern.lock_fd >= 0)
		lock = fcntl(d->kern.lock_fd, F_DUPFD, 3);
	env = child_env(child_sock, lock);
	sigemptyset(&none);
	sigemptyset(&dfl);
	sigaddset(&dfl, SIGTERM);
	sigaddset(&dfl, SIGINT);
	sigaddset(&dfl, SIGPIPE);
	posix_spawnattr_init(&attr);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &dfl);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	rc = env ? posix_spawn(&u->child, d->cfg->exe, NULL, &attr, d->cfg->argv, env) : ENOMEM;
	posix_spawnattr_destroy(&attr);
	close(child_sock);
	if (lock >= 0)
		close(lock);
	if (env) {
		for (char **e = env; *e; e++)
			if (!strncmp(*e, ENV_HANDOFF "=", sizeof(ENV_HANDOFF)) ||
			    !strncmp(*e, ENV_LOCK "=", sizeof(ENV_LOCK)))
				free(*e);
		free(env);
	}
	if (rc) {
		hb_err("upgrade: starting %s: %s", d->cfg->exe, strerror(rc));
		close(sv[0]);
		u->child = 0;
		return;
	}
	u->sock = sv[0];
	u->t0_ms = hb_mono_ms();
	u->deadline_ms = u->t0_ms + READY_TIMEOUT_MS;
	u->state = UP_WAIT_READY;
	for (unsigned i = 0; i < d->plan.workers; i++) {
		fds[i] = d->tcp_fds[i];
		fds[d->plan.workers + i] = d->udp_fds[i];
	}
	offer.workers = d->plan.workers;
	offer.port = d->port;
	offer.family = (uint16_t)d->family;
	offer.conn_size = sizeof(struct hbd_ho_conn);
	offer.sess_size = sizeof(struct hbd_ho_sess);
	rc = hbd_ho_send(u->sock, HBD_HO_OFFER, (uint16_t)(2 * d->plan.workers), &offer,
			 sizeof(offer), fds, 2 * d->plan.workers);
	if (rc) {
		abort_upgrade(d, "sending the sockets to the new hbd failed");
		return;
	}
	hb_info("SIGUSR2: started %s (pid %d) to take over; it gets the sockets now and every "
		"connection once it is ready",
		d->cfg->exe, (int)u->child);
}

struct dev_batch {
	struct hbd_ho_dev rec[HBD_HO_MSG_MAX / sizeof(struct hbd_ho_dev)];
	unsigned n;
	int sock, rc;
	uint64_t sent;
};

static void flush_devs(struct dev_batch *b)
{
	if (b->n && !b->rc)
		b->rc = hbd_ho_send(b->sock, HBD_HO_DEVICES, (uint16_t)b->n, b->rec,
				    (uint32_t)(b->n * sizeof(b->rec[0])), NULL, 0);
	b->sent += b->n;
	b->n = 0;
}

static void one_dev(void *ctx, uint64_t id, uint64_t ts)
{
	struct dev_batch *b = ctx;

	b->rec[b->n++] = (struct hbd_ho_dev){ id, ts };
	if (b->n == 65535 || b->n == sizeof(b->rec) / sizeof(b->rec[0]))
		flush_devs(b);
}

/* The replay state, then every live UDP session, then GO. Runs while no worker receives. */
static int send_state(struct hbd_daemon *d)
{
	struct hbd_sessions *t = &d->sessions;
	struct hbd_upgrade *u = d->upg.run;
	struct dev_batch *db = calloc(1, sizeof(*db));
	struct hbd_ho_sess *rec;
	uint32_t now = (uint32_t)hbd_clock_ms(d), fresh;
	const unsigned per = HBD_HO_MSG_MAX / sizeof(*rec);
	unsigned n = 0;
	int rc;

	rec = malloc(per * sizeof(*rec));
	if (!db || !rec) {
		free(db);
		free(rec);
		return -ENOMEM;
	}
	db->sock = u->sock;
	hbd_devices_foreach(d->devices, one_dev, db);
	flush_devs(db);
	rc = db->rc;
	free(db);
	pthread_mutex_lock(&t->free_lock);
	fresh = t->fresh;
	pthread_mutex_unlock(&t->free_lock);
	u->sessions = 0;
	for (uint32_t i = 0; !rc && i < fresh; i++) {
		struct hbd_sess s;

		if (hbd_sess_get(t, i, __atomic_load_n(&t->s[i].gen, __ATOMIC_RELAXED), false, &s))
			continue;
		rec[n] = (struct hbd_ho_sess){ .token = s.token,
					       .device_id = s.device_id,
					       .port = s.port,
					       .version = s.version,
					       .last_ts = s.last_ts };
		memcpy(rec[n].addr, s.addr, sizeof(s.addr));
		memcpy(rec[n].key, s.key, sizeof(s.key));
		rec[n].age_ms = (int32_t)(now - s.last_seen) > 0 ? now - s.last_seen : 0;
		if (++n == per) {
			rc = hbd_ho_send(u->sock, HBD_HO_SESSIONS, (uint16_t)n, rec,
					 (uint32_t)(n * sizeof(*rec)), NULL, 0);
			u->sessions += n;
			n = 0;
		}
	}
	if (!rc && n) {
		rc = hbd_ho_send(u->sock, HBD_HO_SESSIONS, (uint16_t)n, rec,
				 (uint32_t)(n * sizeof(*rec)), NULL, 0);
		u->sessions += n;
	}
	free(rec);
	if (!rc)
		rc = hbd_ho_send(u->sock, HBD_HO_GO, 0, NULL, 0, NULL, 0);
	/* the sessions are the new daemon's now: this one's gauge lets go of them */
	if (!rc)
		HBD_STAT_SUB(&d->stats[0], udp_active, u->sessions);
	return rc;
}

static bool all_workers(struct hbd_daemon *d, bool stopped)
{
	for (unsigned i = 0; i < d->plan.workers; i++) {
		const struct hbd_ho_worker *ho = &d->workers[i]->ho;

		if (!__atomic_load_n(stopped ? &ho->stopped : &ho->done, __ATOMIC_ACQUIRE))
			return false;
	}
	return true;
}

static bool child_gone(struct hbd_daemon *d)
{
	struct hbd_upgrade *u = d->upg.run;
	int st;

	if (u->child > 0 && waitpid(u->child, &st, WNOHANG) == u->child) {
		u->child = 0;
		return true;
	}
	return false;
}

static void on_ready(struct hbd_daemon *d)
{
	struct hbd_upgrade *u = d->upg.run;
	struct hbd_ho_ready r;
	struct hbd_ho_hdr h;
	int fds[HBD_HO_FDS];
	unsigned nfds = HBD_HO_FDS;
	int rc = hbd_ho_recv(u->sock, &r, sizeof(r), &h, fds, &nfds, 0);

	if (rc == -ETIMEDOUT) {
		if (child_gone(d))
			abort_upgrade(d,
				      "the new hbd exited before it was ready (its log says why)");
		else if (hb_mono_ms() > u->deadline_ms)
			abort_upgrade(d, "the new hbd did not become ready in 30 s");
		return;
	}
	if (rc != HBD_HO_READY || !nfds || h.count != nfds) {
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
		abort_upgrade(d, rc == 0 ? "the new hbd closed the control socket"
					 : "unexpected answer from the new hbd");
		return;
	}
	/* old worker i feeds new worker i % n: a message is one batch, whatever the interleaving */
	for (unsigned i = 0; i < d->plan.workers; i++) {
		struct hbd_worker *w = d->workers[i];

		w->ho.sock = fcntl(fds[i % nfds], F_DUPFD_CLOEXEC, 3);
		set_buffers(w->ho.sock);
		w->ho.stopped = w->ho.done = false;
	}
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
	hb_info("upgrade: the new hbd is ready (%u workers) after %llu ms: handing over", nfds,
		(unsigned long long)(hb_mono_ms() - u->t0_ms));
	u->state = UP_STOPPING;
	u->deadline_ms = hb_mono_ms() + (uint64_t)(d->cfg->drain_s * 1000) + 5000;
	set_phase(d, HBD_HO_PHASE_STOP);
}

int hbd_upgrade_poll(struct hbd_daemon *d)
{
	struct hbd_upgrade *u = d->upg.run;
	struct hbd_ho_done done = { 0 };
	int rc;

	if (!u || u->state == UP_IDLE)
		return 0;
	if (u->state == UP_CHILD)
		return hbd_upgrade_child_poll(d);
	if (u->state == UP_CHILD_END) {
		/* every worker has closed its receiving end: this daemon is an ordinary one now */
		for (unsigned i = 0; i < d->plan.workers; i++)
			if (__atomic_load_n(&d->workers[i]->ho.sock, __ATOMIC_ACQUIRE) >= 0)
				return 0;
		d->upg.successor = false;
		u->state = UP_IDLE;
		/* the predecessor is gone: its control socket and metrics port are free now */
		if (d->upg.services_pending)
			hbd_services_open(d);
		return 0;
	}
	if (u->state == UP_WAIT_READY) {
		on_ready(d);
		return 0;
	}
	if (child_gone(d)) {
		abort_upgrade(d, "the new hbd died during the handover (connections it had taken "
				 "are lost)");
		return 0;
	}
	if (u->state == UP_STOPPING) {
		if (!all_workers(d, true)) {
			if (hb_mono_ms() > u->deadline_ms)
				abort_upgrade(d, "the workers did not stop taking new work");
			return 0;
		}
		rc = send_state(d);
		if (rc) {
			abort_upgrade(d, "sending sessions to the new hbd failed");
			return 0;
		}
		u->state = UP_EXPORTING;
		set_phase(d, HBD_HO_PHASE_EXPORT);
		return 0;
	}
	/* UP_EXPORTING: the workers hand their connections over */
	if (!all_workers(d, false))
		return 0;
	for (unsigned i = 0; i < d->plan.workers; i++) {
		done.conns += d->workers[i]->ho.sent;
		done.dropped += d->workers[i]->ho.dropped;
	}
	done.sessions = u->sessions;
	hbd_ho_send(u->sock, HBD_HO_DONE, 0, &done, sizeof(done), NULL, 0);
	hb_info("upgrade: handed over %llu TCP connections and %llu UDP sessions in %llu ms "
		"(%llu could not be): exiting",
		(unsigned long long)done.conns, (unsigned long long)done.sessions,
		(unsigned long long)(hb_mono_ms() - u->t0_ms), (unsigned long long)done.dropped);
	set_phase(d, HBD_HO_PHASE_EXIT);
	hbd_notify_mainpid(u->child); /* systemd follows the successor */
	return 1;
}

bool hbd_upgrade_busy(const struct hbd_daemon *d)
{
	return d->upg.run && d->upg.run->state != UP_IDLE;
}

void hbd_upgrade_free(struct hbd_daemon *d)
{
	if (!d->upg.run)
		return;
	if (d->upg.run->sock >= 0)
		close(d->upg.run->sock);
	free(d->upg.run);
	d->upg.run = NULL;
}

/* ---- the new daemon -------------------------------------------------------------------- */

int hbd_upgrade_child_offer(struct hbd_daemon *d, int *tcp, int *udp, unsigned *n, char *why,
			    size_t whylen)
{
	const char *s = getenv(ENV_HANDOFF), *l = getenv(ENV_LOCK);
	struct hbd_ho_offer offer;
	struct hbd_ho_hdr h;
	int fds[HBD_HO_FDS], rc, sock;
	unsigned nfds = HBD_HO_FDS;

	if (!s)
		return 0;
	sock = atoi(s);
	unsetenv(ENV_HANDOFF);
	unsetenv(ENV_LOCK);
	fcntl(sock, F_SETFD, FD_CLOEXEC);
	if (l) {
		d->kern.lock_fd = atoi(l);
		fcntl(d->kern.lock_fd, F_SETFD, FD_CLOEXEC);
	}
	if (!(d->upg.run = calloc(1, sizeof(*d->upg.run))))
		return -ENOMEM;
	d->upg.run->sock = sock;
	d->upg.run->state = UP_CHILD;
	d->upg.run->t0_ms = hb_mono_ms();
	d->upg.successor = true;
	d->upg.services_pending = true;
	rc = hbd_ho_recv(sock, &offer, sizeof(offer), &h, fds, &nfds, 10000);
	if (rc != HBD_HO_OFFER || h.len != sizeof(offer) ||
	    offer.conn_size != sizeof(struct hbd_ho_conn) ||
	    offer.sess_size != sizeof(struct hbd_ho_sess) || nfds != 2 * offer.workers ||
	    offer.workers > *n) {
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
		snprintf(why, whylen, "no usable offer from the old hbd (%s)",
			 rc < 0 ? strerror(-rc)
				: "another version of the handoff, or too many workers");
		return rc < 0 ? rc : -EPROTO;
	}
	for (unsigned i = 0; i < offer.workers; i++) {
		tcp[i] = fds[i];
		udp[i] = fds[offer.workers + i];
	}
	*n = offer.workers;
	d->port = offer.port;
	d->family = offer.family;
	return 1;
}

/* A session of the old daemon into ours; the workers are not running yet. */
static void take_session(struct hbd_daemon *d, const struct hbd_ho_sess *r, unsigned owner)
{
	struct hbd_sessions *t = &d->sessions;
	struct hbd_worker *w = d->workers[owner];
	uint32_t idx, last, silent;
	struct hbd_sess *s;
	uint64_t ns;

	if (hbd_sess_alloc(t, owner, &idx)) {
		HBD_STAT_ADD(w->st, full, 1);
		return;
	}
	s = &t->s[idx];
	s->device_id = r->device_id;
	memcpy(s->addr, r->addr, sizeof(s->addr));
	s->port = r->port;
	hbd_sess_set_v2(s, r->version, r->key, r->last_ts);
	last = (uint32_t)hbd_clock_ms(d) - r->age_ms;
	s->last_seen = last;
	if (hbd_sess_publish(t, idx, r->token) ||
	    hbd_devices_adopt(d->devices, r->device_id, 0, hbd_loc(1, owner, s->gen, idx))) {
		struct hbd_sess gone;

		hbd_sess_get(t, idx, s->gen, true, &gone);
		hbd_sess_release(t, idx);
		return;
	}
	/* The kernel stamps the old daemon's seen slot until the entry names ours. The age handed
	 * over is that of the last datagram the old daemon read, often its HELLO: the entry has the
	 * last heartbeat, which XDP answered (and which may predate our start).
	 */
	if (d->kern.offload &&
	    !hbd_maps_sess_reseat(&d->kern.maps, r->token, hbd_seen_udp(d, idx), &ns))
		last = hbd_adopt_seen(d, ns, last);
	__atomic_store_n(&s->last_seen, last, __ATOMIC_RELAXED);
	silent = hbd_silence(w, last);
	hb_wheel_add(&w->udp_wheel, idx,
		     w->now_ms - (silent < d->lim.timeout_ms ? silent : d->lim.timeout_ms) +
			     d->lim.timeout_ms);
	HBD_STAT_ADD(w->st, udp_active, 1);
	HBD_STAT_ADD(w->st, handoff_in, 1);
}

int hbd_upgrade_child_ready(struct hbd_daemon *d, char *why, size_t whylen)
{
	struct hbd_upgrade *u = d->upg.run;
	struct hbd_ho_ready ready = { .workers = d->plan.workers };
	int fds[HBD_HO_FDS] = { 0 };
	uint8_t *buf = malloc(HBD_HO_MSG_MAX);
	uint64_t sessions = 0, devices = 0;
	unsigned k = 0;
	int rc;

	if (!buf)
		return -ENOMEM;
	for (unsigned i = 0; i < d->plan.workers && i < HBD_HO_FDS; i++) {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
			rc = -errno;
			snprintf(why, whylen, "socketpair: %s", strerror(-rc));
			goto out;
		}
		set_buffers(sv[0]);
		set_buffers(sv[1]);
		d->workers[i]->ho.sock = sv[0];
		fds[k++] = sv[1];
	}
	rc = hbd_ho_send(u->sock, HBD_HO_READY, (uint16_t)k, &ready, sizeof(ready), fds, k);
	for (unsigned i = 0; i < k; i++)
		close(fds[i]);
	if (rc) {
		snprintf(why, whylen, "telling the old hbd we are ready: %s", strerror(-rc));
		goto out;
	}
	for (;;) {
		struct hbd_ho_hdr h;
		unsigned nfds = 0;

		rc = hbd_ho_recv(u->sock, buf, HBD_HO_MSG_MAX, &h, fds, &nfds, 60000);
		if (rc == HBD_HO_DEVICES && h.len == h.count * sizeof(struct hbd_ho_dev)) {
			const struct hbd_ho_dev *r = (const void *)buf;

			for (unsigned i = 0; i < h.count; i++)
				hbd_devices_note(d->devices, r[i].id, r[i].last_ts_ms);
			devices += h.count;
		} else if (rc == HBD_HO_SESSIONS && h.len == h.count * sizeof(struct hbd_ho_sess)) {
			const struct hbd_ho_sess *r = (const void *)buf;

			/* hbd_plan_workers never plans fewer than one worker; the analyzer cannot
			 * know that */
			unsigned nw = d->plan.workers ? d->plan.workers : 1;

			for (unsigned i = 0; i < h.count; i++, sessions++)
				take_session(d, &r[i], (unsigned)(sessions % nw));
		} else if (rc == HBD_HO_GO) {
			rc = 0;
			break;
		} else {
			snprintf(why, whylen, "waiting for the old hbd's state: %s",
				 rc < 0	   ? strerror(-rc)
				 : rc == 0 ? "it closed the socket"
					   : "bad message");
			rc = rc < 0 ? rc : -EPROTO;
			goto out;
		}
	}
	hb_info("upgrade: took over %llu UDP sessions and the replay state of %llu devices; TCP "
		"connections follow",
		(unsigned long long)sessions, (unsigned long long)devices);
out:
	free(buf);
	return rc;
}

int hbd_upgrade_child_poll(struct hbd_daemon *d)
{
	struct hbd_upgrade *u = d->upg.run;
	struct hbd_ho_done done;
	struct hbd_ho_hdr h;
	unsigned nfds = 0;
	int rc = hbd_ho_recv(u->sock, &done, sizeof(done), &h, NULL, &nfds, 0);

	if (rc == -ETIMEDOUT)
		return 0;
	if (rc == HBD_HO_DONE && h.len == sizeof(done))
		hb_info("upgrade complete in %llu ms: the old hbd handed over %llu TCP connections "
			"and %llu UDP sessions (%llu could not be)",
			(unsigned long long)(hb_mono_ms() - u->t0_ms),
			(unsigned long long)done.conns, (unsigned long long)done.sessions,
			(unsigned long long)done.dropped);
	else
		hb_warn("upgrade: the old hbd went away without saying it was done; connections "
			"it had not handed over are lost");
	close(u->sock);
	u->sock = -1;
	u->state = UP_CHILD_END;
	return 0;
}

int hbd_upgrade_fd(const struct hbd_daemon *d)
{
	return d->upg.run && d->upg.run->state != UP_IDLE ? d->upg.run->sock : -1;
}
