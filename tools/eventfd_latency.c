// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* eventfd_latency: how soon an eventfd registered on an io_uring tells its thread that a
 * completion is waiting, with the ring set up as hbd's workers set theirs up (DEFER_TASKRUN,
 * SINGLE_ISSUER) and with COOP_TASKRUN. hbd --ring-threads sleeps on such an eventfd for all
 * of a thread's rings, so this latency is the least a PONG can wait there (docs/BENCHMARKS.md,
 * "Rings on fewer threads").
 *
 * A second thread writes one byte into a socket pair every 30 ms, ROUNDS times; the main thread
 * has a recv armed for it, sleeps in poll(2) on the eventfd, then enters the ring for the
 * completion. Prints, per ring set-up, the mean and the largest time from the write to the
 * completion in hand, in ms, as one JSON line.
 *
 *   build/tools/eventfd_latency
 */
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"

#define ROUNDS 20
#define GAP_US 30000

struct pair {
	int fds[2];
	double sent[ROUNDS]; /* when the writer wrote byte i */
};

static void *writer(void *arg)
{
	struct pair *p = arg;

	for (int i = 0; i < ROUNDS; i++) {
		double t;

		usleep(GAP_US);
		t = hb_mono_s();
		__atomic_store(&p->sent[i], &t, __ATOMIC_RELEASE);
		if (write(p->fds[1], "x", 1) != 1)
			break;
	}
	return NULL;
}

/* One completion: armed, slept for in poll on the eventfd, taken. Returns -1 on an error. */
static int one(struct io_uring *ring, int evfd, int fd, char *buf)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct io_uring_cqe *cqe;

	if (!sqe)
		return -1;
	io_uring_prep_recv(sqe, fd, buf, 1, 0);
	if (io_uring_submit(ring) != 1)
		return -1;
	for (;;) {
		struct pollfd pfd = { .fd = evfd, .events = POLLIN };
		uint64_t count;

		if (poll(&pfd, 1, 1000) < 0)
			return -1;
		if (read(evfd, &count, sizeof(count)) < 0 && pfd.revents)
			return -1;
		io_uring_get_events(ring);
		if (!io_uring_peek_cqe(ring, &cqe)) {
			io_uring_cqe_seen(ring, cqe);
			return 0;
		}
	}
}

static int measure(const char *name, unsigned flags)
{
	struct io_uring_params params;
	struct io_uring ring;
	struct pair p = { 0 };
	double sum = 0, worst = 0;
	pthread_t t;
	char buf[1];
	int evfd, rc = 0;

	memset(&params, 0, sizeof(params));
	params.flags = flags;
	if (io_uring_queue_init_params(8, &ring, &params)) {
		fprintf(stderr, "eventfd_latency: %s: io_uring setup failed\n", name);
		return -1;
	}
	evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (evfd < 0 || io_uring_register_eventfd(&ring, evfd) ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.fds)) {
		fprintf(stderr, "eventfd_latency: %s: eventfd or socket pair failed\n", name);
		io_uring_queue_exit(&ring);
		return -1;
	}
	if (pthread_create(&t, NULL, writer, &p)) {
		rc = -1;
	} else {
		for (int i = 0; i < ROUNDS && !rc; i++) {
			double ms, sent;

			rc = one(&ring, evfd, p.fds[0], buf);
			__atomic_load(&p.sent[i], &sent, __ATOMIC_ACQUIRE);
			ms = (hb_mono_s() - sent) * 1e3;
			sum += ms;
			worst = ms > worst ? ms : worst;
		}
		pthread_join(t, NULL);
	}
	if (!rc)
		printf("{\"ring\":\"%s\",\"rounds\":%d,\"mean_ms\":%.3f,\"max_ms\":%.3f}\n", name,
		       ROUNDS, sum / ROUNDS, worst);
	close(p.fds[0]);
	close(p.fds[1]);
	close(evfd);
	io_uring_queue_exit(&ring);
	return rc;
}

int main(void)
{
	int rc = measure("DEFER_TASKRUN|SINGLE_ISSUER|TASKRUN_FLAG",
			 IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SINGLE_ISSUER |
				 IORING_SETUP_TASKRUN_FLAG);

	if (measure("COOP_TASKRUN|TASKRUN_FLAG",
		    IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG))
		rc = -1;
	return rc ? 1 : 0;
}
