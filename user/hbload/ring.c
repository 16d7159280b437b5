// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* One ring and its thread: setup, the event loop, teardown.
 *
 * The loop is the top of a ring's layers (hbload.h): each pass acts on what the main thread
 * changed (phase, storm, rate), runs the current sweep, the due wakeups and admission, then
 * sleeps until the next wakeup or a completion and hands the completions to dispatch.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "clock.h"
#include "hbload.h"
#include "log.h"

static int setup_clients(struct hbl_ring *r)
{
	const struct hbl_cfg *cfg = r->cfg;

	r->cl = calloc(r->n ? r->n : 1, sizeof(*r->cl));
	r->queue = malloc((r->n ? r->n : 1) * sizeof(*r->queue));
	if (!r->cl || !r->queue)
		return -ENOMEM;
	for (uint32_t l = 0; l < r->n; l++) {
		uint64_t g = hbl_global_index(r, l);

		hbc_init(&r->cl[l].c, cfg->o.first_device + g, cfg->o.proto);
		hbl_udp_client_init(r, l);
		if (g < cfg->o.silent)
			r->cl[l].flags |= HBL_F_SILENT;
	}
	return hbl_wheel_init(&r->wheel, r->n, cfg->t0_ns);
}

/* Everything a ring needs, created in its own thread (the ring is single-issuer). */
static int ring_setup(struct hbl_ring *r)
{
	struct io_uring_params p = { 0 };
	unsigned slots;
	int rc;

	if (hb_random(&r->rng, sizeof(r->rng)))
		r->rng = hb_mono_ns() ^ ((uint64_t)r->id << 32);
	hb_hist_init(&r->rtt);
	hb_hist_init(&r->lag);
	hbl_wstats_init(r->win, HBL_MAX_WINDOWS);
	p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
		  IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	p.cq_entries = HBL_CQ_ENTRIES;
	rc = io_uring_queue_init_params(HBL_SQ_ENTRIES, &r->ring, &p);
	if (rc) {
		snprintf(r->init_err, sizeof(r->init_err), "io_uring_queue_init: %s",
			 strerror(-rc));
		return rc;
	}
	r->ring_ok = 1;
	slots = r->cfg->o.proto == HB_TCP ? r->n : r->nsock;
	rc = io_uring_register_files_sparse(&r->ring, slots ? slots : 1);
	if (rc) {
		snprintf(
			r->init_err, sizeof(r->init_err),
			"registering %u direct descriptors: %s (RLIMIT_NOFILE caps a ring's table)",
			slots, strerror(-rc));
		return rc;
	}
	rc = hbl_rbufs_setup(r);
	if (!rc)
		rc = hbl_sbufs_init(&r->sb);
	if (rc) {
		snprintf(r->init_err, sizeof(r->init_err), "buffers: %s", strerror(-rc));
		return rc;
	}
	rc = setup_clients(r);
	if (!rc && r->cfg->o.proto == HB_UDP)
		rc = hbl_udp_init(r);
	if (rc)
		snprintf(r->init_err, sizeof(r->init_err), "client tables: %s", strerror(-rc));
	return rc;
}

static void ring_teardown(struct hbl_ring *r)
{
	/* exiting the ring closes every direct descriptor; SO_LINGER {1,0} makes that an RST, so
	 * no TIME_WAIT is left behind to collide with the next run's binds
	 */
	if (r->ring_ok)
		io_uring_queue_exit(&r->ring);
	r->ring_ok = 0;
	hbl_rbufs_free(r);
	hbl_sbufs_free(&r->sb);
	if (r->cl)
		for (uint32_t l = 0; l < r->n; l++)
			free(r->cl[l].carry);
	hbl_udp_free(r);
	hbl_downs_free(r);
	hbl_wheel_free(&r->wheel);
	free(r->cl);
	free(r->queue);
	HBL_ST_SET(&r->st, open, 0);
	HBL_ST_SET(&r->st, authed_now, 0);
}

static void loop(struct hbl_ring *r)
{
	const struct hbl_cfg *cfg = r->cfg;

	for (;;) {
		uint64_t now = hb_mono_ns(), wait_ns;
		int phase = __atomic_load_n(&r->sh->phase, __ATOMIC_ACQUIRE);
		struct __kernel_timespec ts;
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		uint32_t l;

		if (phase != r->phase) {
			r->phase = phase;
			if (phase == HBL_PH_EXIT)
				return;
			hbl_phase_change(r, phase, now);
		}
		if (!r->stormed && phase == HBL_PH_RUN &&
		    now >= __atomic_load_n(&r->sh->storm_at_ns, __ATOMIC_RELAXED)) {
			r->stormed = 1;
			hbl_storm(r, now);
		}
		if (phase == HBL_PH_RUN &&
		    __atomic_load_n(&r->sh->rate_gen, __ATOMIC_ACQUIRE) != r->rate_gen) {
			r->rate_gen = __atomic_load_n(&r->sh->rate_gen, __ATOMIC_ACQUIRE);
			hbl_rate_change(r);
		}
		if (r->sweep)
			hbl_sweep(r, now);
		/* bounded (see HBL_CQ_ENTRIES); the rest is still due on the next pass */
		for (uint32_t k = 0;
		     k < HBL_WAKE_BATCH && (l = hbl_wheel_pop(&r->wheel, now)) != HBL_NIL; k++)
			hbl_wake(r, l, now);
		if (cfg->o.proto == HB_UDP)
			hbl_udp_tick(r, now);
		hbl_admit_run(r, now);
		if (r->ack_len)
			hbl_downs_run(r);

		/* sleep until the next wakeup, at most 50 ms so phase changes are seen quickly;
		 * 1 ms while admissions wait for connect-rate tokens or a UDP socket, or ACKs of
		 * downlinks for their connection. Admissions held back by the in-flight bound need
		 * no tick: each connect's or HELLO's end is a completion, or a wakeup in the wheel
		 * (a tick for each of 26 rings at 500k clients was a thousand wakeups a second per
		 * ring through all of setup and the storm)
		 */
		wait_ns = r->sweep ? 0 : hbl_wheel_next_ns(&r->wheel, now, 50);
		if (((r->qlen && r->phase == HBL_PH_RUN && r->inflight < r->inflight_max) ||
		     r->ack_len) &&
		    wait_ns > 1000000)
			wait_ns = 1000000;
		if (r->rbuf_returns) {
			io_uring_buf_ring_advance(r->br, (int)r->rbuf_returns);
			r->rbuf_returns = 0;
		}
		ts.tv_sec = (long long)(wait_ns / 1000000000ULL);
		ts.tv_nsec = (long long)(wait_ns % 1000000000ULL);
		/* -EBADR: the kernel found no memory for an overflowing completion and dropped it;
		 * whatever client it was for waits forever, so say so (once) and count it
		 */
		if (io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &ts, NULL) == -EBADR) {
			if (!r->st.cq_dropped)
				hb_err("ring %u: the kernel dropped completions: clients may hang",
				       r->id);
			HBL_INC(r, cq_dropped);
		}
		if (io_uring_cq_has_overflow(&r->ring))
			HBL_INC(r, cq_overflow);

		/* one clock read for the batch: RTTs include at most the batch's handling time */
		now = hb_mono_ns();
		io_uring_for_each_cqe(&r->ring, head, cqe) {
			hbl_dispatch(r, cqe, now);
			if (++seen == HBL_CQE_BATCH)
				break;
		}
		io_uring_cq_advance(&r->ring, seen);
	}
}

void *hbl_ring_main(void *arg)
{
	struct hbl_ring *r = arg;
	int rc;

	/* wakeups are set to the exact due time of the next heartbeat: do not let the kernel
	 * defer them by the default 50 us of timer slack
	 */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	rc = ring_setup(r);

	__atomic_store_n(&r->init_rc, rc, __ATOMIC_RELEASE);
	if (!rc) {
		if (r->cfg->o.proto == HB_UDP)
			hbl_udp_open_sockets(r);
		for (uint32_t l = 0; l < r->n; l++)
			hbl_admit(r, l);
		loop(r);
	}
	ring_teardown(r);
	return NULL;
}
