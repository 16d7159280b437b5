// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Worker thread: ring set-up, the event loop (of one ring, or of several: --ring-threads), one
 * handle_cqe switch, ticks and the drain. */
#include "worker.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "accept.h"
#include "log.h"
#include "tcp.h"
#include "udp.h"
#include "vg.h"

/* A ring's memory counts in hbd's RSS (64 B an SQE, 16 B a CQE) and there are ~28 rings at
 * 500k clients (one per RLIMIT_NOFILE of descriptors): sized for one ring's share of the
 * traffic, not for all of it. hbd_sqe() submits when the SQ is full; CQEs beyond the CQ are
 * kept by the kernel (IORING_FEAT_NODROP), not dropped.
 */
#define SQ_ENTRIES 256
#define CQ_ENTRIES 4096
#define CQE_BATCH_MAX 4096 /* CQEs handled before the loop looks at the clock again */

static void worker_clock(struct hbd_worker *w)
{
	w->now_ms = hbd_clock_ms(w->d);
}

/* Buffer life (provided buffer rings): the kernel picks a buffer for each receive and names it
 * in the CQE; handle_cqe consumes it on the spot (a partial TCP frame is copied to a chunk) and
 * gives it back with io_uring_buf_ring_add; the ring tail is advanced once per loop iteration,
 * before any recv that ran out of buffers is re-armed.
 */
static int setup_buf_ring(struct hbd_worker *w, int bgid, uint32_t count, uint32_t size,
			  struct io_uring_buf_ring **br, uint8_t **mem)
{
	struct io_uring_buf_reg reg = { 0 };
	void *ring_mem;
	int rc;

	if (posix_memalign(&ring_mem, 4096, count * sizeof(struct io_uring_buf)))
		return -ENOMEM;
	*br = ring_mem;
	*mem = malloc((size_t)count * size);
	if (!*mem)
		return -ENOMEM;
	/* liburing 2.3 has no io_uring_setup_buf_ring: register memory we allocated */
	reg.ring_addr = (uint64_t)(uintptr_t)ring_mem;
	reg.ring_entries = count;
	reg.bgid = (uint16_t)bgid;
	rc = io_uring_register_buf_ring(&w->ring, &reg, 0);
	if (rc)
		return rc;
	io_uring_buf_ring_init(*br);
	for (uint32_t i = 0; i < count; i++)
		io_uring_buf_ring_add(*br, *mem + (size_t)i * size, size, (uint16_t)i,
				      io_uring_buf_ring_mask(count), (int)i);
	io_uring_buf_ring_advance(*br, (int)count);
	return 0;
}

static int setup(struct hbd_worker *w)
{
	struct hbd_daemon *d = w->d;
	struct io_uring_params p = { 0 };
	/* a thread of several rings must see which of them have task work to run */
	unsigned shared = d->plan.per_thread > 1 ? IORING_SETUP_TASKRUN_FLAG : 0;
	int rc;

	/* one thread submits, and task work runs only when it waits: completions are batched
	 * into its loop instead of interrupting it
	 */
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE |
		  IORING_SETUP_SUBMIT_ALL | shared;
	p.cq_entries = CQ_ENTRIES;
	rc = -EINVAL; /* what a kernel without DEFER_TASKRUN answers */
	if (!d->cfg->no_defer_taskrun)
		rc = io_uring_queue_init_params(SQ_ENTRIES, &w->ring, &p);
	if (rc == -EINVAL) {
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_CQSIZE |
			  IORING_SETUP_SUBMIT_ALL | shared;
		p.cq_entries = CQ_ENTRIES;
		rc = io_uring_queue_init_params(SQ_ENTRIES, &w->ring, &p);
	}
	if (rc) {
		hb_err("worker %u: io_uring setup: %s", w->id, strerror(-rc));
		return rc;
	}
	if (w->id == 0)
		hb_info("worker rings: %s", p.flags & IORING_SETUP_DEFER_TASKRUN
						    ? "DEFER_TASKRUN, SINGLE_ISSUER"
						    : "COOP_TASKRUN (no DEFER_TASKRUN)");
	w->ring_ok = true;
	rc = io_uring_register_files_sparse(&w->ring, w->nslots);
	if (rc) {
		hb_err("worker %u: direct descriptor table of %u slots: %s%s", w->id, w->nslots,
		       strerror(-rc),
		       rc == -EMFILE ? " (a ring's table is capped at RLIMIT_NOFILE)" : "");
		return rc;
	}
	rc = setup_buf_ring(w, HBD_BGID_TCP, w->rx_count, w->rx_size, &w->rx_br, &w->rx_mem);
	if (!rc)
		rc = setup_buf_ring(w, HBD_BGID_UDP, w->ux_count, HBD_UDP_BUF_SIZE, &w->ux_br,
				    &w->ux_mem);
	if (rc) {
		hb_err("worker %u: provided buffer ring: %s", w->id, strerror(-rc));
		return rc;
	}
	io_uring_register_ring_fd(&w->ring); /* saves an fd lookup per enter; optional */
	d->ring_fds[w->id] = w->ring.ring_fd;

	w->conns = calloc(w->nslots, sizeof(*w->conns));
	w->links = malloc(w->nslots * sizeof(*w->links));
	if (d->lim.track_sources && !(w->src = malloc(w->nslots * sizeof(*w->src))))
		return -ENOMEM;
	w->dirty = malloc(w->nslots * sizeof(*w->dirty));
	w->rearm = malloc(w->nslots * sizeof(*w->rearm));
	if (!w->conns || !w->links || !w->dirty || !w->rearm)
		return -ENOMEM;
	if (w->mlfd >= 0 && !(w->mq = hbd_mqtt_sess_alloc(w->nslots)))
		return -ENOMEM;
	hb_wheel_links_init(w->links, w->nslots);
	worker_clock(w);
	hbd_accept_init(w);
	rc = hb_wheel_init(&w->tcp_wheel, w->links, w->nslots, d->lim.tick_ms, d->lim.timeout_ms,
			   w->now_ms);
	if (!rc)
		rc = hb_wheel_init(&w->udp_wheel, d->sessions.links, d->sessions.cap,
				   d->lim.tick_ms, d->lim.timeout_ms, w->now_ms);
	if (!rc)
		rc = hbd_chunks_init(&w->chunks, 64u << 20); /* up to 64 MiB a class in flight */
	if (rc)
		return rc;
	hbd_sink_init(&w->sink, d->sink_fd, d->cfg->sink_fsync);
	w->udp_msg.msg_namelen = sizeof(struct sockaddr_in6);
	w->next_tick = w->now_ms + d->lim.tick_ms;
	w->gate.since_ms = w->now_ms;
	return 0;
}

/* Called from hbd_daemon teardown after every worker thread has returned (a ring must not be
 * closed while another worker might still message it).
 */
void hbd_worker_free(struct hbd_worker *w)
{
	if (w->ring_ok)
		io_uring_queue_exit(&w->ring);
	w->ring_ok = false;
	hb_wheel_free(&w->tcp_wheel);
	hb_wheel_free(&w->udp_wheel);
	hbd_chunks_free(&w->chunks);
	hbd_sink_free(&w->sink);
	hbd_down_free(&w->down);
	free(w->rx_br);
	free(w->ux_br);
	free(w->rx_mem);
	free(w->ux_mem);
	hbd_mqtt_sess_free(w->mq, w->nslots);
	free(w->conns);
	free(w->links);
	free(w->src);
	hbd_ho_free(w);
	free(w->dirty);
	free(w->rearm);
}

static void sink_flush(struct hbd_worker *w)
{
	struct hbd_sink_batch *b = hbd_sink_start(&w->sink);
	struct io_uring_sqe *sqe;

	if (!b)
		return;
	if (w->d->fleet.on) {
		/* to JetStream instead of the file: the fleet thread answers with SINK_FLEET */
		w->sink_t0_ns = hb_mono_ns();
		hbd_fleet_batch_ready(&w->d->fleet, w->id);
		return;
	}
	sqe = hbd_sqe(w);
	if (!sqe) {
		/* cannot write now: drop nothing, retry next iteration (undo the start) */
		w->sink.fill ^= 1;
		w->sink.busy = false;
		return;
	}
	/* offset -1: the file position, which O_APPEND keeps at the end */
	io_uring_prep_write(sqe, w->sink.fd, b->buf + b->done,
			    (unsigned)hbd_sink_next_len(&w->sink, b), (uint64_t)-1);
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_SINK_WRITE, 0, 0, 0));
	w->sink_t0_ns = hb_mono_ns();
}

static void sink_complete(struct hbd_worker *w, bool ok)
{
	struct hbd_sink_batch *b = hbd_sink_inflight(&w->sink);

	if (ok) {
		HBD_STAT_ADD(w->st, data_bytes, b->bytes);
		hbd_timing_add(&w->t_sink, (hb_mono_ns() - w->sink_t0_ns) / 1000);
	}
	for (uint32_t i = 0; i < b->nacks; i++) {
		if (b->acks[i].udp)
			hbd_udp_ack(w, &b->acks[i], ok);
		else
			hbd_tcp_ack(w, &b->acks[i], ok);
	}
	hbd_sink_done(&w->sink);
}

static void on_sink_write(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	struct hbd_sink_batch *b = hbd_sink_inflight(&w->sink);
	struct io_uring_sqe *sqe;

	if (cqe->res <= 0) {
		hb_err("sink: write: %s: %u DATA frames not acknowledged",
		       cqe->res ? strerror(-cqe->res) : "wrote nothing", b->nacks);
		HBD_STAT_ADD(w->st, errors, 1);
		sink_complete(w, false);
		return;
	}
	b->done += (size_t)cqe->res;
	sqe = b->done < b->len || w->sink.fsync ? hbd_sqe(w) : NULL;
	if (b->done < b->len) {
		if (!sqe) {
			sink_complete(w, false);
			return;
		}
		io_uring_prep_write(sqe, w->sink.fd, b->buf + b->done,
				    (unsigned)hbd_sink_next_len(&w->sink, b), (uint64_t)-1);
		io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_SINK_WRITE, 0, 0, 0));
		return;
	}
	if (w->sink.fsync) {
		if (!sqe) {
			sink_complete(w, false);
			return;
		}
		io_uring_prep_fsync(sqe, w->sink.fd, IORING_FSYNC_DATASYNC);
		io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_SINK_SYNC, 0, 0, 0));
		return;
	}
	sink_complete(w, true);
}

static void on_sink_sync(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	if (cqe->res < 0) {
		hb_err("sink: fdatasync: %s", strerror(-cqe->res));
		HBD_STAT_ADD(w->st, errors, 1);
	}
	sink_complete(w, cqe->res >= 0);
}

/* Each downlink in the inbox becomes a DOWN frame on its session's transport. */
static void deliver_downlinks(struct hbd_worker *w)
{
	struct hbd_down_req *r = hbd_down_take(&w->down);

	while (r) {
		struct hbd_down_req *next = r->next;
		struct hbd_down_pending *p = hbd_down_reserve(w, r);
		uint32_t index = hbd_loc_index(r->loc);
		uint16_t gen = hbd_loc_gen(r->loc), seq = w->down.seq;
		int rc;

		if (p) {
			if (r->loc & HBD_LOC_UDP)
				rc = hbd_udp_send_down(w, index, gen, seq, r->payload, r->len);
			else
				rc = hbd_tcp_send_down(w, index, gen, seq, r->payload, r->len);
			hbd_down_sent(w, r, p, rc);
		}
		free(r);
		r = next;
	}
}

static void handle_cqe(struct hbd_worker *w, struct io_uring_cqe *cqe)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);

	switch (hbd_ud_op(ud)) {
	case HBD_OP_ACCEPT:
		hbd_accept_on_cqe(w, cqe);
		break;
	case HBD_OP_COOKIE:
		hbd_tcp_on_cookie(w, cqe);
		break;
	case HBD_OP_SOCKHASH:
		hbd_tcp_on_sockhash(w, cqe);
		break;
	case HBD_OP_RECV:
		hbd_tcp_on_recv(w, cqe);
		break;
	case HBD_OP_POLL:
		hbd_tcp_on_poll(w, cqe);
		break;
	case HBD_OP_SEND:
		hbd_tcp_on_send(w, cqe);
		break;
	case HBD_OP_CLOSE:
		hbd_tcp_on_close(w, cqe);
		break;
	case HBD_OP_CANCEL:
		/* only failures get here: the op already ended, its own CQE does the rest */
		break;
	case HBD_OP_UDP_RECV:
		hbd_udp_on_recv(w, cqe);
		break;
	case HBD_OP_UDP_SEND:
		hbd_udp_on_send(w, cqe);
		break;
	case HBD_OP_SINK_WRITE:
		on_sink_write(w, cqe);
		break;
	case HBD_OP_SINK_SYNC:
		on_sink_sync(w, cqe);
		break;
	case HBD_OP_SINK_FLEET:
		if (cqe->res < 0)
			HBD_STAT_ADD(w->st, errors, 1);
		if (hbd_sink_inflight(&w->sink))
			sink_complete(w, cqe->res >= 0);
		break;
	case HBD_OP_MSG_SENT:
		hb_warn("worker %u: message to worker %u failed: %s", w->id, hbd_ud_index(ud),
			strerror(-cqe->res));
		HBD_STAT_ADD(w->st, errors, 1);
		break;
	case HBD_OP_MSG_WAKE:
		break; /* the loop checks the stop flag */
	case HBD_OP_TICK:
		w->tick_armed = false;
		break;
	case HBD_OP_MSG_KILL_TCP:
		hbd_tcp_kill(w, hbd_ud_index(ud), hbd_ud_gen(ud), hbd_ud_aux(ud));
		break;
	case HBD_OP_MSG_KILL_UDP:
		hbd_udp_kill(w, hbd_ud_index(ud), hbd_ud_gen(ud), hbd_ud_aux(ud));
		break;
	case HBD_OP_MSG_INBOX:
		deliver_downlinks(w);
		break;
	case HBD_OP_MSG_DOWN_ACK:
		hbd_down_acked(w, hbd_loc(1, w->id, hbd_ud_gen(ud), hbd_ud_index(ud)),
			       (uint16_t)cqe->res);
		break;
	case HBD_OP_FD_INSTALL:
		hbd_ho_on_install(w, cqe->res, hbd_ud_index(ud));
		break;
	case HBD_OP_HO_RECV:
		hbd_ho_on_recv(w, cqe->res);
		break;
	case HBD_OP_HO_UPDATE:
		hbd_ho_on_update(w, cqe->res);
		break;
	default:
		hb_err("worker %u: CQE with unknown user_data %#llx", w->id,
		       (unsigned long long)ud);
		break;
	}
}

/* Everything batched during the iteration goes to the kernel here, once. */
static void flush(struct hbd_worker *w)
{
	if (w->rx_ret) {
		io_uring_buf_ring_advance(w->rx_br, (int)w->rx_ret);
		w->rx_ret = 0;
	}
	if (w->ux_ret) {
		io_uring_buf_ring_advance(w->ux_br, (int)w->ux_ret);
		w->ux_ret = 0;
	}
	hbd_tcp_flush(w);
	hbd_accept_fill(w);
	sink_flush(w);
	if (!w->udp_armed && !w->udp_retry && !w->draining && !hbd_handing_off(w))
		hbd_udp_arm(w);
}

static void tick(struct hbd_worker *w)
{
	hbd_tcp_expire(w);
	hbd_udp_expire(w);
	deliver_downlinks(w);
	hbd_down_tick(w);
	if (!w->draining) {
		hbd_accept_tick(w);
		if (w->udp_retry && !w->udp_armed && !hbd_udp_arm(w))
			w->udp_retry = false;
	}
}

static void cancel(struct hbd_worker *w, uint64_t ud)
{
	struct io_uring_sqe *sqe = hbd_sqe(w);

	if (!sqe)
		return;
	io_uring_prep_cancel64(sqe, ud, 0);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, 0, 0, 0));
}

/* Drain: no new clients, BYE(SHUTDOWN) to every connection once its sink ACKs are out, and to
 * every UDP session once the sink is idle (so their ACKs go out first), then wait for the last
 * sends and closes.
 */
static void drain_start(struct hbd_worker *w)
{
	w->draining = true;
	w->drain_deadline = w->now_ms + (uint64_t)(w->d->cfg->drain_s * 1000);
	hbd_accept_stop(w);
	if (w->udp_armed)
		cancel(w, hbd_ud(HBD_OP_UDP_RECV, 0, 0, 0));
	hbd_tcp_drain(w);
}

static bool drain_done(struct hbd_worker *w)
{
	bool sink_idle = !w->sink.busy && !w->sink.b[w->sink.fill].nacks;

	if (sink_idle && w->udp_wheel.count)
		hbd_udp_drain(w);
	return sink_idle && !w->nconns && !w->acc.armed && !w->udp_armed && !w->udp_inflight &&
	       !w->udp_wheel.count;
}

/* The loop waits for at least one CQE; a timeout SQE guarantees one every tick. (A timeout
 * SQE rather than io_uring_submit_and_wait_timeout: the latter's IORING_ENTER_EXT_ARG is
 * mishandled by valgrind 3.19, which then waits forever, and an SQE costs nothing per tick.)
 */
static void arm_tick(struct hbd_worker *w)
{
	struct io_uring_sqe *sqe = hbd_sqe(w);

	if (!sqe)
		return;
	w->tick_ts.tv_sec = (long long)(w->d->lim.tick_ms / 1000);
	w->tick_ts.tv_nsec = (long long)(w->d->lim.tick_ms % 1000) * 1000000;
	io_uring_prep_timeout(sqe, &w->tick_ts, 0, 0);
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_TICK, 0, 0, 0));
	w->tick_armed = true;
}

/* With --batch-wait, a worker that found completions last time waits for up to BATCH_WAIT_NR
 * more, or the configured time, before the kernel wakes it. On rings with DEFER_TASKRUN the
 * receive completions are lazy task work: the kernel wakes the task only once that many are
 * queued or the timer fires, so one wakeup serves many heartbeats. A worker whose last wait
 * gathered nothing goes back to waking at the first completion: an idle daemon never polls.
 *
 * The timed wait pays only when several completions arrive within one: at a lower rate it
 * costs a timer per wakeup and saves none, and each heartbeat waits for the timer. So each
 * worker measures its own completion rate over a window of at least the wait and uses the
 * timed wait only while that rate would gather BATCH_GATE_ON completions in one (a PING and
 * its PONG's send are two, so: two heartbeats a wait); it stops below BATCH_GATE_OFF, where a
 * wait gathers fewer than one and a half. A daemon starts with it off.
 *
 * Nor while a connection waits for its HELLO: a login is a conversation (accept, HELLO,
 * WELCOME), and a device that connects does not send its next frame before the answer, so each
 * wait would add to every login and a reconnect storm would be that much slower.
 */
#define BATCH_WAIT_NR 64
#define BATCH_GATE_ON 4
#define BATCH_GATE_OFF 3
#define BATCH_GATE_MIN_WINDOW_MS 10

static void batch_gate(struct hbd_worker *w, unsigned ncqes)
{
	unsigned us = w->d->cfg->batch_wait_us;
	uint64_t window_ms = us / 1000, elapsed = w->now_ms - w->gate.since_ms, per_wait;

	if (!us)
		return;
	w->gate.cqes += ncqes;
	if (window_ms < BATCH_GATE_MIN_WINDOW_MS)
		window_ms = BATCH_GATE_MIN_WINDOW_MS;
	if (elapsed < window_ms)
		return;
	per_wait = w->gate.cqes * us / (elapsed * 1000);
	/* atomic: /metrics counts the workers whose wait is on */
	if (per_wait >= BATCH_GATE_ON)
		__atomic_store_n(&w->gate.on, true, __ATOMIC_RELAXED);
	else if (per_wait < BATCH_GATE_OFF)
		__atomic_store_n(&w->gate.on, false, __ATOMIC_RELAXED);
	w->gate.cqes = 0;
	w->gate.since_ms = w->now_ms;
}

/* Whether a thread sleeps out the --batch-wait now: its gate (of gate, the worker whose gate
 * counts the thread's completions) is on, the last wait found completions, and no connection
 * waits for its HELLO (a login is a conversation). */
static bool batch_wait_now(const struct hbd_worker *gate, bool busy, bool logins)
{
	return gate->gate.on && busy && !logins && !HBD_ON_VALGRIND;
}

static int wait_cqes(struct hbd_worker *w, bool busy)
{
	unsigned us = w->d->cfg->batch_wait_us;
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;

	if (!batch_wait_now(w, busy, w->pending))
		return io_uring_submit_and_wait(&w->ring, 1);
	ts.tv_sec = us / 1000000;
	ts.tv_nsec = (long long)(us % 1000000) * 1000;
	return io_uring_submit_and_wait_timeout(&w->ring, &cqe, BATCH_WAIT_NR, &ts, NULL);
}

/* The work of one loop iteration before the wait: handoff, drain, tick, and everything the
 * iteration batched. Returns false once this worker's loop is over. */
static bool step(struct hbd_worker *w)
{
	struct hbd_daemon *d = w->d;

	worker_clock(w);
	/* nothing from the last iteration is still using the key store it read */
	__atomic_store_n(&w->epoch, __atomic_load_n(&d->keys.epoch, __ATOMIC_ACQUIRE),
			 __ATOMIC_RELEASE);
	hbd_ho_step(w);
	/* handed everything to a successor: leave without a drain, which would say BYE to
	 * devices that now belong to it
	 */
	if (__atomic_load_n(&d->upg.phase, __ATOMIC_ACQUIRE) == HBD_HO_PHASE_EXIT && w->ho.done)
		return false;
	if (!w->draining && !hbd_handing_off(w) && __atomic_load_n(&d->stop, __ATOMIC_ACQUIRE))
		drain_start(w);
	if (w->draining && drain_done(w))
		return false;
	if (w->draining && w->now_ms >= w->drain_deadline) {
		hb_warn("worker %u: drain timed out with %u connections", w->id, w->nconns);
		return false;
	}
	if (w->now_ms >= w->next_tick) {
		tick(w);
		w->next_tick = w->now_ms + d->lim.tick_ms;
	}
	if (!w->tick_armed)
		arm_tick(w);
	flush(w);
	return true;
}

static unsigned reap(struct hbd_worker *w)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	worker_clock(w);
	io_uring_for_each_cqe(&w->ring, head, cqe) {
		handle_cqe(w, cqe);
		if (++n == CQE_BATCH_MAX)
			break;
	}
	io_uring_cq_advance(&w->ring, n);
	return n;
}

static void wait_error(struct hbd_worker *w, int rc)
{
	if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY) {
		hb_err("worker %u: io_uring wait: %s", w->id, strerror(-rc));
		HBD_STAT_ADD(w->st, errors, 1);
	}
}

static void run(struct hbd_worker *w)
{
	bool busy = false;

	while (step(w)) {
		unsigned n;

		wait_error(w, wait_cqes(w, busy));
		n = reap(w);
		busy = n > 0;
		batch_gate(w, n);
		HBD_VALGRIND_YIELD();
	}
}

/* Completions queued as task work (TASKRUN_FLAG), or CQEs held back by a full CQ: only an enter
 * of this thread turns them into CQEs. */
static bool ring_needs_enter(const struct io_uring *ring)
{
	return IO_URING_READ_ONCE(*ring->sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW);
}

/* --ring-threads: one thread runs the rings of ws[0..n-1]. Every ring signals the thread's one
 * eventfd when work arrives for it (the kernel signals a registered eventfd when a DEFER_TASKRUN
 * ring's task-work list becomes non-empty, though on 6.18 through an RCU callback, some 15 ms
 * late, and when CQEs are posted), so the thread sleeps once for all of them. The eventfd is
 * read before the rings are looked at: what arrives after that signals it again. A busy thread
 * whose completions would batch (ws[0]'s gate, counted over all its rings) first sleeps out the
 * --batch-wait, so one wakeup serves every ring's completions of that time: at 500k clients
 * each ring alone is too quiet for its gate.
 */
static void wait_group(struct hbd_worker **ws, unsigned n, int evfd, bool busy)
{
	unsigned us = ws[0]->d->cfg->batch_wait_us;
	bool logins = false;
	struct pollfd p = { .fd = evfd, .events = POLLIN };

	for (unsigned i = 0; i < n; i++)
		logins |= !ws[i]->exited && ws[i]->pending;
	if (batch_wait_now(ws[0], busy, logins)) {
		struct timespec ts = { .tv_sec = us / 1000000,
				       .tv_nsec = (long)(us % 1000000) * 1000 };

		nanosleep(&ts, NULL);
		return;
	}
	if (poll(&p, 1, -1) < 0 && errno != EINTR)
		wait_error(ws[0], -errno);
}

/* An enter runs a bounded batch of a ring's task work (the kernel's default is 20 items) and
 * sets IORING_SQ_TASKRUN again if some is left: run it until none is, or up to
 * HARVEST_ENTERS enters, handling the CQEs of each before the next. What is left then makes
 * the next iteration skip its wait. */
#define HARVEST_ENTERS 16

static unsigned harvest(struct hbd_worker *w)
{
	unsigned n = 0;

	for (unsigned k = 0; k < HARVEST_ENTERS && ring_needs_enter(&w->ring); k++) {
		wait_error(w, io_uring_get_events(&w->ring));
		n += reap(w);
	}
	return n + reap(w);
}

static void run_group(struct hbd_worker **ws, unsigned n, int evfd)
{
	unsigned live = n;
	bool busy = false;

	for (;;) {
		bool ready = false;
		unsigned cqes = 0;
		uint64_t count;

		for (unsigned i = 0; i < n; i++) {
			struct hbd_worker *w = ws[i];
			int rc;

			if (w->exited)
				continue;
			if (!step(w)) {
				/* read elsewhere (reload.c); only this thread writes it */
				__atomic_store_n(&w->exited, true, __ATOMIC_RELEASE);
				live--;
				continue;
			}
			rc = io_uring_sq_ready(&w->ring) ? io_uring_submit(&w->ring) : 0;
			if (rc < 0)
				hb_warn("worker %u: submit: %s", w->id, strerror(-rc));
			ready |= io_uring_cq_ready(&w->ring) || ring_needs_enter(&w->ring);
		}
		if (!live)
			break;
		if (!ready)
			wait_group(ws, n, evfd, busy);
		if (read(evfd, &count, sizeof(count)) < 0 && errno != EAGAIN)
			wait_error(ws[0], -errno);
		for (unsigned i = 0; i < n; i++)
			if (!ws[i]->exited)
				cqes += harvest(ws[i]);
		busy = cqes > 0;
		batch_gate(ws[0], cqes);
		HBD_VALGRIND_YIELD();
	}
}

/* The rings of a thread, each registered to signal its eventfd. */
static int group_open(struct hbd_worker **ws, unsigned n)
{
	int evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

	if (evfd < 0) {
		hb_err("worker %u: eventfd: %s", ws[0]->id, strerror(errno));
		return -errno;
	}
	for (unsigned i = 0; i < n; i++) {
		int rc = io_uring_register_eventfd(&ws[i]->ring, evfd);

		if (rc) {
			hb_err("worker %u: io_uring_register_eventfd: %s", ws[i]->id,
			       strerror(-rc));
			close(evfd);
			return rc;
		}
	}
	return evfd;
}

void *hbd_worker_main(void *arg)
{
	struct hbd_worker *lead = arg, **ws;
	struct hbd_daemon *d = lead->d;
	unsigned n = lead->group_n;
	int rc = 0, evfd = -1;
	char name[16];

	/* "top -H" and the tests tell the workers apart from hbd's other threads by this */
	snprintf(name, sizeof(name), "hbd-worker-%u", lead->id % 1000);
	pthread_setname_np(pthread_self(), name);
	ws = d->workers + lead->id;
	for (unsigned i = 0; i < n; i++) {
		ws[i]->dispatch = handle_cqe;
		if (!rc)
			rc = setup(ws[i]);
	}
	if (!rc && n > 1 && (evfd = group_open(ws, n)) < 0)
		rc = evfd;

	pthread_mutex_lock(&d->start.lock);
	if (rc && !d->start.err)
		d->start.err = rc;
	d->start.nready += n;
	pthread_cond_broadcast(&d->start.cond);
	while (!d->start.go && !d->start.err)
		pthread_cond_wait(&d->start.cond, &d->start.lock);
	rc = d->start.err;
	pthread_mutex_unlock(&d->start.lock);
	for (unsigned i = 0; !rc && i < n; i++) {
		if (hbd_accept_fill(ws[i]) || hbd_udp_arm(ws[i])) {
			hb_err("worker %u: cannot arm accept/recvmsg", ws[i]->id);
			__atomic_store_n(&d->stop, 1, __ATOMIC_RELEASE);
		}
	}
	if (!rc && n > 1)
		run_group(ws, n, evfd);
	else if (!rc)
		run(lead);
	if (evfd >= 0)
		close(evfd);
	for (unsigned i = 0; i < n; i++)
		__atomic_store_n(&ws[i]->exited, true, __ATOMIC_RELEASE);
	return NULL;
}
