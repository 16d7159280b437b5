// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Upgrade handoff, the workers' part (the sequence is in handoff.h): an old worker quiesces
 * its connections and sends them off in batches; a new worker registers what arrives.
 *
 * Batch life (old side): slots that are quiet are collected (at most HBD_HO_FDS), each gets an
 * IORING_OP_FIXED_FD_INSTALL (uring_sock.h), and when every install has completed the records
 * and fds go out in one sendmsg. The regular fds are closed right after it (the message holds its own
 * references), then the direct descriptors. A batch is never more than HBD_HO_FDS regular fds.
 *
 * Message life (new side): one recvmsg is in flight; its fds are registered into free
 * direct-descriptor slots with one IORING_OP_FILES_UPDATE (IORING_FILE_INDEX_ALLOC: the kernel
 * picks slots, so accepts running meanwhile cannot collide), closed, and each record becomes a
 * connection (tcp_handoff.c); then the next recvmsg.
 */
#include "handoff.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accept.h"
#include "log.h"
#include "tcp.h"
#include "udp.h"
#include "uring_sock.h"
#include "vg.h"
#include "worker.h"

int hbd_ho_send(int sock, uint16_t type, uint16_t count, const void *body, uint32_t len,
		const int *fds, unsigned nfds)
{
	struct hbd_ho_hdr h = { .magic = HBD_HO_MAGIC, .type = type, .count = count, .len = len };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)body, len } };
	union {
		struct cmsghdr c;
		char b[CMSG_SPACE(HBD_HO_FDS * sizeof(int))];
	} u;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
	ssize_t n;

	if (nfds > HBD_HO_FDS)
		return -E2BIG;
	if (nfds) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.b;
		m.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		u.c.cmsg_level = SOL_SOCKET;
		u.c.cmsg_type = SCM_RIGHTS;
		u.c.cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(&u.c), fds, nfds * sizeof(int));
	}
	do
		n = sendmsg(sock, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == (ssize_t)(sizeof(h) + len) ? 0 : -EMSGSIZE;
}

/* The fds of a received message, and whether anything was cut off. */
static int take_fds(struct msghdr *m, int *fds, unsigned *nfds)
{
	unsigned room = *nfds, n = 0;

	*nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		unsigned k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (unsigned i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (n < room)
				fds[n++] = fd;
			else
				close(fd);
		}
	}
	*nfds = n;
	return (m->msg_flags & (MSG_CTRUNC | MSG_TRUNC)) ? -EMSGSIZE : 0;
}

int hbd_ho_recv(int sock, void *buf, size_t cap, struct hbd_ho_hdr *h, int *fds, unsigned *nfds,
		int timeout_ms)
{
	union {
		struct cmsghdr c;
		char b[CMSG_SPACE(HBD_HO_FDS * sizeof(int))];
	} u;
	struct iovec iov[2] = { { h, sizeof(*h) }, { buf, cap } };
	struct msghdr m = { .msg_iov = iov,
			    .msg_iovlen = 2,
			    .msg_control = u.b,
			    .msg_controllen = sizeof(u.b) };
	struct pollfd p = { .fd = sock, .events = POLLIN };
	ssize_t n;
	int rc;

	rc = poll(&p, 1, timeout_ms);
	if (rc == 0)
		return -ETIMEDOUT;
	if (rc < 0)
		return -errno;
	n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	if (n == 0)
		return 0;
	rc = take_fds(&m, fds, nfds);
	if (rc || (size_t)n < sizeof(*h) || h->magic != HBD_HO_MAGIC ||
	    (size_t)n != sizeof(*h) + h->len)
		return rc ? rc : -EPROTO;
	return h->type;
}

void hbd_ho_init(struct hbd_worker *w)
{
	memset(&w->ho, 0, sizeof(w->ho));
	w->ho.sock = -1;
}

void hbd_ho_free(struct hbd_worker *w)
{
	for (unsigned i = 0; i < w->ho.un; i++)
		close(w->ho.ufd[i]);
	w->ho.un = 0;
	if (w->ho.sock >= 0)
		close(w->ho.sock);
	w->ho.sock = -1;
	free(w->ho.buf);
	w->ho.buf = NULL;
}

/* ---- the old side ---------------------------------------------------------------------- */

static void stop_intake(struct hbd_worker *w)
{
	struct io_uring_sqe *sqe;

	hbd_accept_stop(w);
	if (w->udp_armed && (sqe = hbd_sqe(w))) {
		io_uring_prep_cancel64(sqe, hbd_ud(HBD_OP_UDP_RECV, 0, 0, 0), 0);
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, 0, 0, 0));
	}
}

static void resume_intake(struct hbd_worker *w)
{
	w->acc.stopped = false;
	w->ho.exporting = false;
	w->ho.stopped = false;
	hbd_accept_fill(w);
	if (!w->udp_armed)
		hbd_udp_arm(w);
}

static void submit_installs(struct hbd_worker *w)
{
	for (unsigned i = 0; i < w->ho.n; i++) {
		struct io_uring_sqe *sqe = hbd_sqe(w);
		uint32_t slot = w->ho.slot[i];

		w->ho.fd[i] = -1;
		if (!sqe) {
			w->ho.fd[i] = -EBUSY;
			continue;
		}
		hb_prep_fixed_fd_install(sqe, (int)slot);
		io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_FD_INSTALL, i, w->conns[slot].gen, 0));
		w->ho.installing++;
	}
}

/* Every install of the batch has completed: records and fds out, then local clean-up. */
static void send_batch(struct hbd_worker *w)
{
	struct hbd_ho_worker *ho = &w->ho;
	uint8_t *body = ho->buf, *p = body;
	int fds[HBD_HO_FDS];
	unsigned nfds = 0, nrec = 0;
	int rc;

	for (unsigned i = 0; i < ho->n; i++) {
		size_t k;

		if (ho->fd[i] < 0) {
			/* no regular fd for it: it cannot travel; closed like a lost connection */
			hb_warn("worker %u: slot %u could not become a regular fd (%s): closed",
				w->id, ho->slot[i], strerror(-ho->fd[i]));
			hbd_tcp_drop(w, ho->slot[i]);
			ho->dropped++;
			continue;
		}
		k = hbd_tcp_export(w, ho->slot[i], p);
		p += k;
		fds[nfds++] = ho->fd[i];
		ho->slot[nrec++] = ho->slot[i];
	}
	rc = nfds ? hbd_ho_send(ho->sock, HBD_HO_CONNS, (uint16_t)nfds, body, (uint32_t)(p - body),
				fds, nfds)
		  : 0;
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
	for (unsigned i = 0; i < nrec; i++) {
		if (rc) {
			hbd_tcp_drop(w, ho->slot[i]);
			ho->dropped++;
		} else {
			hbd_tcp_handed(w, ho->slot[i]);
			ho->sent++;
		}
	}
	if (rc)
		hb_err("worker %u: handing %u connections over failed: %s: closed them", w->id,
		       nrec, strerror(-rc));
	ho->n = 0;
	ho->bytes = 0;
}

void hbd_ho_on_install(struct hbd_worker *w, int res, uint32_t pos)
{
	struct hbd_ho_worker *ho = &w->ho;

	if (pos < ho->n)
		ho->fd[pos] = res;
	if (ho->installing && --ho->installing == 0)
		send_batch(w);
}

/* Collects quiet connections into a batch; asks the others to quiet down. */
static void export_some(struct hbd_worker *w)
{
	struct hbd_ho_worker *ho = &w->ho;
	bool late = w->now_ms >= ho->deadline_ms;
	uint32_t looked = 0;

	if (ho->installing)
		return;
	if (!ho->buf && !(ho->buf = malloc(HBD_HO_MSG_MAX)))
		return;
	while (looked++ < w->nslots && ho->n < HBD_HO_FDS &&
	       ho->bytes + sizeof(struct hbd_ho_conn) + HB_MAX_FRAME + 8 <= HBD_HO_MSG_MAX) {
		uint32_t slot = ho->cursor++ % w->nslots;
		enum hbd_tcp_quiet q = hbd_tcp_quiesce(w, slot);

		if (q == HBD_TCP_QUIET) {
			ho->slot[ho->n++] = slot;
			ho->bytes += sizeof(struct hbd_ho_conn) + HB_MAX_FRAME + 8;
		} else if (q == HBD_TCP_BUSY && late) {
			/* a peer that will not take its replies, or a stuck operation */
			hbd_tcp_drop(w, slot);
			ho->dropped++;
		}
	}
	if (ho->n)
		submit_installs(w);
}

/* ---- the new side ---------------------------------------------------------------------- */

static void arm_recv(struct hbd_worker *w)
{
	struct hbd_ho_worker *ho = &w->ho;
	struct io_uring_sqe *sqe;

	if (ho->receiving || ho->registering || ho->done)
		return;
	if (!ho->buf && !(ho->buf = malloc(HBD_HO_MSG_MAX + sizeof(struct hbd_ho_hdr))))
		return;
	sqe = hbd_sqe(w);
	if (!sqe)
		return;
	ho->iov.iov_base = ho->buf;
	ho->iov.iov_len = HBD_HO_MSG_MAX + sizeof(struct hbd_ho_hdr);
	memset(&ho->msg, 0, sizeof(ho->msg));
	ho->msg.msg_iov = &ho->iov;
	ho->msg.msg_iovlen = 1;
	ho->msg.msg_control = ho->cbuf;
	ho->msg.msg_controllen = sizeof(ho->cbuf);
	io_uring_prep_recvmsg(sqe, ho->sock, &ho->msg, MSG_CMSG_CLOEXEC);
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_HO_RECV, 0, 0, 0));
	ho->receiving = true;
}

void hbd_ho_on_recv(struct hbd_worker *w, int res)
{
	struct hbd_ho_worker *ho = &w->ho;
	struct hbd_ho_hdr *h = (struct hbd_ho_hdr *)ho->buf;
	struct io_uring_sqe *sqe;
	unsigned n = HBD_HO_FDS;

	ho->receiving = false;
	if (res <= 0) {
		if (res < 0 && res != -ECANCELED)
			hb_warn("worker %u: handoff receive: %s", w->id, strerror(-res));
		ho->done = true; /* EOF: the old daemon has sent all it had */
		return;
	}
	HBD_KERNEL_WROTE(ho->buf, res);
	HBD_KERNEL_WROTE(ho->cbuf, ho->msg.msg_controllen);
	if (take_fds(&ho->msg, ho->ufd, &n) || (size_t)res < sizeof(*h) ||
	    h->magic != HBD_HO_MAGIC || h->type != HBD_HO_CONNS || h->count != n ||
	    (size_t)res != sizeof(*h) + h->len) {
		hb_err("worker %u: malformed handoff message (%d bytes, %u fds): its connections "
		       "are lost",
		       w->id, res, n);
		for (unsigned i = 0; i < n; i++)
			close(ho->ufd[i]);
		HBD_STAT_ADD(w->st, errors, n);
		arm_recv(w);
		return;
	}
	ho->un = n;
	memcpy(ho->uslot, ho->ufd, n * sizeof(int));
	sqe = hbd_sqe(w);
	if (!sqe) {
		hbd_ho_on_update(w, -EBUSY);
		return;
	}
	/* the kernel overwrites uslot[] with the slots it picked */
	io_uring_prep_files_update(sqe, ho->uslot, n, (int)IORING_FILE_INDEX_ALLOC);
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_HO_UPDATE, 0, 0, 0));
	ho->registering = true;
}

void hbd_ho_on_update(struct hbd_worker *w, int res)
{
	struct hbd_ho_worker *ho = &w->ho;
	const uint8_t *p = ho->buf + sizeof(struct hbd_ho_hdr);

	ho->registering = false;
	HBD_KERNEL_WROTE(ho->uslot, ho->un * sizeof(int));
	const uint8_t *end = p + ((struct hbd_ho_hdr *)ho->buf)->len;

	for (unsigned i = 0; i < ho->un; i++) {
		const struct hbd_ho_conn *rec = (const struct hbd_ho_conn *)p;
		bool fits = p + sizeof(*rec) <= end && rec->partial_len <= HB_MAX_FRAME &&
			    p + sizeof(*rec) + rec->partial_len <= end;

		if (fits)
			p += sizeof(*rec) + ((rec->partial_len + 7u) & ~7u);
		close(ho->ufd[i]); /* registered (or not): the regular fd is not needed */
		if (res > 0 && (unsigned)res > i && !fits) {
			/* registered but unreadable: give the slot back */
			struct io_uring_sqe *sqe = hbd_sqe(w);

			if (sqe) {
				io_uring_prep_close_direct(sqe, (unsigned)ho->uslot[i]);
				io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, 0, 0, 0));
			}
		}
		if (res < 0 || (unsigned)res <= i || !fits) {
			HBD_STAT_ADD(w->st, errors, 1);
			continue;
		}
		hbd_tcp_adopt(w, (uint32_t)ho->uslot[i], rec, (const uint8_t *)(rec + 1));
		ho->received++;
	}
	if (res < 0 || (unsigned)res < ho->un)
		hb_err("worker %u: registering %u handed-over connections: %s", w->id, ho->un,
		       res < 0 ? strerror(-res) : "fewer slots than connections (table full?)");
	ho->un = 0;
	arm_recv(w);
}

/* ---- both ------------------------------------------------------------------------------ */

void hbd_ho_step(struct hbd_worker *w)
{
	struct hbd_ho_worker *ho = &w->ho;
	int phase = __atomic_load_n(&w->d->upg.phase, __ATOMIC_ACQUIRE);

	if (__atomic_load_n(&ho->sock, __ATOMIC_ACQUIRE) < 0)
		return;
	if (w->d->upg.successor) {
		/* a new daemon's worker: take what O's workers send, until they are gone; then
		 * this daemon may itself be upgraded (upgrade.c waits for every worker here)
		 */
		if (ho->done && !ho->receiving && !ho->registering) {
			close(ho->sock);
			free(ho->buf);
			ho->buf = NULL;
			ho->done = false;
			__atomic_store_n(&ho->sock, -1, __ATOMIC_RELEASE);
			return;
		}
		arm_recv(w);
		return;
	}
	if (phase != ho->phase) {
		if (phase == HBD_HO_PHASE_STOP)
			stop_intake(w);
		if (phase == HBD_HO_PHASE_EXPORT) {
			ho->exporting = true;
			ho->deadline_ms = w->now_ms + (uint64_t)(w->d->cfg->drain_s * 1000);
		}
		if (phase == HBD_HO_PHASE_NONE)
			resume_intake(w);
		ho->phase = phase;
	}
	if (phase == HBD_HO_PHASE_STOP || phase == HBD_HO_PHASE_EXPORT)
		ho->stopped = !w->acc.armed && !w->udp_armed;
	if (phase == HBD_HO_PHASE_EXPORT) {
		export_some(w);
		ho->done = !w->nconns && !ho->installing && !w->sink.busy &&
			   !w->sink.b[w->sink.fill].nacks && !w->udp_inflight;
	}
}
