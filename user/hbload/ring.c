// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* One ring and its thread: setup, the event loop, buffers, admission of new sessions.
 *
 * Buffer lifecycles:
 * - receive buffers belong to the kernel while in the provided-buffer ring; a recv CQE lends
 *   one to us (IORING_CQE_F_BUFFER, id in the upper bits); the handler parses it (copying a
 *   partial TCP frame into the client's carry) and returns it with hbl_rbuf_return before the
 *   next wait, whatever the CQE's generation.
 * - send buffers come from a fixed pool; one is taken per send SQE and put back when that
 *   send's CQE arrives (its id rides in user_data), again whatever the generation.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>

#include "hbload.h"
#include "log.h"

uint64_t hbl_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* splitmix64: fast, good enough for jitter, seeded from the CSPRNG per ring */
uint64_t hbl_rand(struct hbl_ring *r)
{
	uint64_t z = (r->rng += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t hbl_global_index(const struct hbl_ring *r, uint32_t l)
{
	return (uint64_t)l * r->cfg->rings + r->id;
}

/* An SQE, submitting what is queued first if the SQ ring is full. */
struct io_uring_sqe *hbl_sqe(struct hbl_ring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	unsigned tries = 0;

	while (!sqe) {
		int rc = io_uring_submit(&r->ring);

		sqe = io_uring_get_sqe(&r->ring);
		/* cannot happen while per-iteration work stays bounded (HBL_CQ_ENTRIES); if it
		 * does, fail loudly rather than spin forever
		 */
		if (!sqe && ++tries == 1000000) {
			hb_err("ring %u: submission queue stuck (%s)", r->id, strerror(-rc));
			abort();
		}
	}
	return sqe;
}

/* Makes room for n SQEs in a row: a link chain split across two submits would run in parts. */
void hbl_sq_reserve(struct hbl_ring *r, unsigned n)
{
	if (io_uring_sq_space_left(&r->ring) < n)
		io_uring_submit(&r->ring);
}

int hbl_sbuf_get(struct hbl_ring *r)
{
	return r->nsfree ? r->sfree[--r->nsfree] : -1;
}

uint8_t *hbl_sbuf(struct hbl_ring *r, int id)
{
	return r->sbufs + (size_t)id * HBL_SBUF_SIZE;
}

void hbl_sbuf_put(struct hbl_ring *r, int id)
{
	r->sfree[r->nsfree++] = (uint16_t)id;
}

uint8_t *hbl_rbuf(struct hbl_ring *r, unsigned bid)
{
	return r->rbufs + (size_t)bid * HBL_RBUF_SIZE;
}

void hbl_rbuf_return(struct hbl_ring *r, unsigned bid)
{
	io_uring_buf_ring_add(r->br, hbl_rbuf(r, bid), HBL_RBUF_SIZE, (unsigned short)bid,
			      io_uring_buf_ring_mask(HBL_RBUF_COUNT), (int)r->rbuf_returns++);
}

void hbl_admit(struct hbl_ring *r, uint32_t l)
{
	struct hbl_client *c = &r->cl[l];

	c->ls = HBL_LS_WAIT;
	hbl_wheel_del(&r->wheel, l);
	if (c->flags & HBL_F_QUEUED)
		return;
	c->flags |= HBL_F_QUEUED;
	r->queue[(r->qhead + r->qlen++) % r->n] = l;
}

void hbl_inflight_done(struct hbl_ring *r, uint32_t l)
{
	if (r->cl[l].flags & HBL_F_INFLIGHT) {
		r->cl[l].flags &= ~HBL_F_INFLIGHT;
		r->inflight--;
	}
}

/* Starts queued sessions within the in-flight bound and the connect rate. */
static void admit_run(struct hbl_ring *r, uint64_t now)
{
	double rate = r->cfg->o.connect_rate / r->cfg->rings;

	if (r->phase != HBL_PH_RUN)
		return;
	if (rate > 0) {
		r->tokens += (double)(now - r->tokens_ns) * 1e-9 * rate;
		/* a burst of at most 10 ms worth, and never less than one connect */
		if (r->tokens > rate / 100 + 1)
			r->tokens = rate / 100 + 1;
		r->tokens_ns = now;
	}
	while (r->qlen && r->inflight < r->inflight_max && (rate <= 0 || r->tokens >= 1)) {
		uint32_t l;

		if (r->cfg->o.proto == HB_UDP && !r->nufree)
			break;
		l = r->queue[r->qhead];
		r->qhead = (r->qhead + 1) % r->n;
		r->qlen--;
		r->cl[l].flags &= ~HBL_F_QUEUED;
		if (r->cl[l].ls != HBL_LS_WAIT)
			continue;
		r->cl[l].flags |= HBL_F_INFLIGHT;
		r->inflight++;
		hbl_start(r, l, now);
		r->tokens -= 1;
	}
}

static int setup_bufs(struct hbl_ring *r)
{
	struct io_uring_buf_reg reg = { 0 };
	int rc;

	r->br_bytes = HBL_RBUF_COUNT * sizeof(struct io_uring_buf);
	r->br = mmap(NULL, r->br_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	if (r->br == MAP_FAILED) {
		r->br = NULL;
		return -errno;
	}
	r->rbufs = malloc((size_t)HBL_RBUF_COUNT * HBL_RBUF_SIZE);
	r->sbufs = malloc((size_t)HBL_SBUF_COUNT * HBL_SBUF_SIZE);
	r->sfree = malloc(HBL_SBUF_COUNT * sizeof(*r->sfree));
	if (!r->rbufs || !r->sbufs || !r->sfree)
		return -ENOMEM;
	reg.ring_addr = (unsigned long)r->br;
	reg.ring_entries = HBL_RBUF_COUNT;
	reg.bgid = 0;
	rc = io_uring_register_buf_ring(&r->ring, &reg, 0);
	if (rc)
		return rc;
	io_uring_buf_ring_init(r->br);
	for (unsigned i = 0; i < HBL_RBUF_COUNT; i++)
		hbl_rbuf_return(r, i);
	io_uring_buf_ring_advance(r->br, (int)r->rbuf_returns);
	r->rbuf_returns = 0;
	for (unsigned i = 0; i < HBL_SBUF_COUNT; i++)
		r->sfree[i] = (uint16_t)(HBL_SBUF_COUNT - 1 - i);
	r->nsfree = HBL_SBUF_COUNT;
	return 0;
}

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
		r->rng = hbl_now() ^ ((uint64_t)r->id << 32);
	hb_hist_init(&r->rtt);
	hb_hist_init(&r->lag);
	hbl_wstats_init(r->win, HBL_MAX_WINDOWS);
	p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
		  IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	p.cq_entries = HBL_CQ_ENTRIES;
	rc = io_uring_queue_init_params(HBL_SQ_ENTRIES, &r->ring, &p);
	if (rc) {
		snprintf(r->init_err, sizeof(r->init_err), "io_uring_queue_init: %s", strerror(-rc));
		return rc;
	}
	r->ring_ok = 1;
	slots = r->cfg->o.proto == HB_TCP ? r->n : r->nsock;
	rc = io_uring_register_files_sparse(&r->ring, slots ? slots : 1);
	if (rc) {
		snprintf(r->init_err, sizeof(r->init_err),
			 "registering %u direct descriptors: %s (RLIMIT_NOFILE caps a ring's table)",
			 slots, strerror(-rc));
		return rc;
	}
	rc = setup_bufs(r);
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
	if (r->br)
		munmap(r->br, r->br_bytes);
	if (r->cl)
		for (uint32_t l = 0; l < r->n; l++)
			free(r->cl[l].carry);
	hbl_udp_free(r);
	hbl_wheel_free(&r->wheel);
	free(r->rbufs);
	free(r->sbufs);
	free(r->sfree);
	free(r->cl);
	free(r->queue);
	HBL_ST_SET(&r->st, open, 0);
	HBL_ST_SET(&r->st, authed_now, 0);
}

static void dispatch(struct hbl_ring *r, const struct io_uring_cqe *cqe, uint64_t now)
{
	switch (hbl_ud_op(cqe->user_data)) {
	case HBL_OP_TCP_STEP:
	case HBL_OP_TCP_CONNECT:
	case HBL_OP_TCP_TIMEOUT:
	case HBL_OP_TCP_RECV:
	case HBL_OP_TCP_SEND:
	case HBL_OP_TCP_CLOSE:
		hbl_tcp_cqe(r, cqe, now);
		break;
	case HBL_OP_USOCK_STEP:
	case HBL_OP_USOCK_CONNECT:
	case HBL_OP_USOCK_RECV:
	case HBL_OP_UDP_SEND:
		hbl_udp_cqe(r, cqe, now);
		break;
	default:
		break;
	}
}

static void loop(struct hbl_ring *r)
{
	const struct hbl_cfg *cfg = r->cfg;

	for (;;) {
		uint64_t now = hbl_now(), wait_ns;
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
		for (uint32_t k = 0; k < HBL_WAKE_BATCH && (l = hbl_wheel_pop(&r->wheel, now)) != HBL_NIL;
		     k++)
			hbl_wake(r, l, now);
		if (cfg->o.proto == HB_UDP)
			hbl_udp_tick(r, now);
		admit_run(r, now);

		/* sleep until the next wakeup, at most 50 ms so phase changes are seen quickly;
		 * 1 ms while rate-limited admissions wait for tokens
		 */
		wait_ns = r->sweep ? 0 : hbl_wheel_next_ns(&r->wheel, now, 50);
		if (r->qlen && r->phase == HBL_PH_RUN && wait_ns > 1000000)
			wait_ns = 1000000;
		if (r->rbuf_returns) {
			io_uring_buf_ring_advance(r->br, (int)r->rbuf_returns);
			r->rbuf_returns = 0;
		}
		ts.tv_sec = (long long)(wait_ns / 1000000000ULL);
		ts.tv_nsec = (long long)(wait_ns % 1000000000ULL);
		io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &ts, NULL);

		/* one clock read for the batch: RTTs include at most the batch's handling time */
		now = hbl_now();
		io_uring_for_each_cqe(&r->ring, head, cqe)
		{
			dispatch(r, cqe, now);
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
