// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* fastopen_cost: what TCP Fast Open would save a login's setup, measured before building it
 * into hbd and hbload (docs/SETUP.md, "TCP Fast Open"). One process in a network namespace
 * of its own (loopback only, net.ipv4.tcp_fastopen = 3 there, nothing outside touched): a
 * thread serves an epoll loop that answers each connection's first 40 bytes with 40 bytes, as
 * a WELCOME answers a HELLO, and the main thread opens CONNS connections one after another,
 * each sending 40 bytes and reading the answer, with and without TCP_FASTOPEN_CONNECT (the
 * HELLO in the SYN), ROUNDS times each, alternated. Loopback runs both ends' TCP in this
 * process, so its rusage is the whole cost of a connection on both sides.
 *
 *   build/tools/fastopen_cost [CONNS [ROUNDS]]      (defaults 9000 and 6; needs root)
 *
 * Prints a JSON line per run (CPU and wall time per connection, whether the last connection's
 * SYN carried its data) and one with the medians.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"

#define FRAME 40
#define PORT 7999
#define MAX_ROUNDS 64

struct run {
	int lfd, conns;
	int *server_fds; /* accepted, closed after the run */
	int accepted;
};

static double cpu_s(void)
{
	struct rusage u;

	getrusage(RUSAGE_SELF, &u);
	return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
	       (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* The server: accept, answer each connection's first frame once, keep it open. */
static void *serve(void *arg)
{
	struct run *r = arg;
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = r->lfd }, evs[64];
	int ep = epoll_create1(EPOLL_CLOEXEC), answered = 0;
	char buf[FRAME];

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, r->lfd, &ev))
		goto out;
	while (answered < r->conns) {
		int n = epoll_wait(ep, evs, 64, 5000);

		if (n <= 0)
			break; /* 5 s without an event: the client failed */
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd, c;

			if (fd != r->lfd) {
				if (read(fd, buf, FRAME) == FRAME && write(fd, buf, FRAME) == FRAME)
					answered++;
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				continue;
			}
			while (r->accepted < r->conns &&
			       (c = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >=
				       0) {
				r->server_fds[r->accepted++] = c;
				ev.data.fd = c;
				epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
			}
		}
	}
out:
	if (ep >= 0)
		close(ep);
	return NULL;
}

static int client_socket(int fastopen)
{
	static const struct linger rst = { .l_onoff = 1, .l_linger = 0 };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	/* an RST at close, as hbload's: no TIME_WAIT left for the next run's ports */
	if (fd >= 0 &&
	    (setsockopt(fd, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst)) ||
	     setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
	     (fastopen && setsockopt(fd, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, &one, sizeof(one))))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* One run: CONNS connections, each a frame out and a frame back. Returns -1 on a failure. */
static int one_run(int conns, int fastopen, double *cpu_us, double *wall_us, int *syn_data)
{
	const struct sockaddr_in sa = { .sin_family = AF_INET,
					.sin_port = htons(PORT),
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, qlen = 4096, rc = 0, opened = 0;
	struct run r = { .conns = conns };
	int *fds = calloc((size_t)conns, sizeof(int));
	char frame[FRAME] = "HELLO";
	double c0, w0;
	pthread_t t;

	r.server_fds = calloc((size_t)conns, sizeof(int));
	r.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (!fds || !r.server_fds || r.lfd < 0 ||
	    setsockopt(r.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    (fastopen && setsockopt(r.lfd, IPPROTO_TCP, TCP_FASTOPEN, &qlen, sizeof(qlen))) ||
	    bind(r.lfd, (const struct sockaddr *)&sa, sizeof(sa)) || listen(r.lfd, 4096) ||
	    pthread_create(&t, NULL, serve, &r)) {
		perror("fastopen_cost: listener");
		if (r.lfd >= 0)
			close(r.lfd);
		free(fds);
		free(r.server_fds);
		return -1;
	}
	c0 = cpu_s();
	w0 = hb_mono_s();
	for (; opened < conns; opened++) {
		int fd = client_socket(fastopen);

		fds[opened] = fd;
		if (fd < 0 || connect(fd, (const struct sockaddr *)&sa, sizeof(sa)) ||
		    write(fd, frame, FRAME) != FRAME || read(fd, frame, FRAME) != FRAME) {
			perror("fastopen_cost: connection");
			rc = -1;
			opened += fd >= 0;
			break;
		}
	}
	*wall_us = (hb_mono_s() - w0) * 1e6 / conns;
	*cpu_us = (cpu_s() - c0) * 1e6 / conns;
	if (!rc) {
		struct tcp_info ti;
		socklen_t len = sizeof(ti);

		*syn_data = !getsockopt(fds[conns - 1], IPPROTO_TCP, TCP_INFO, &ti, &len) &&
			    (ti.tcpi_options & TCPI_OPT_SYN_DATA);
	}
	if (rc)
		shutdown(r.lfd, SHUT_RDWR); /* the server's wait ends at its 5 s timeout */
	pthread_join(t, NULL);
	for (int i = 0; i < opened; i++)
		close(fds[i]);
	for (int i = 0; i < r.accepted; i++)
		close(r.server_fds[i]);
	close(r.lfd);
	free(fds);
	free(r.server_fds);
	return rc;
}

/* A network namespace of this process's own, its loopback up, Fast Open on for both ends. */
static int own_netns(void)
{
	struct ifreq ifr = { 0 };
	int s, fd;

	if (unshare(CLONE_NEWNET)) {
		perror("fastopen_cost: unshare(CLONE_NEWNET) (needs root)");
		return -1;
	}
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	strcpy(ifr.ifr_name, "lo");
	ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
	if (s < 0 || ioctl(s, SIOCSIFFLAGS, &ifr)) {
		perror("fastopen_cost: loopback up");
		if (s >= 0)
			close(s);
		return -1;
	}
	close(s);
	fd = open("/proc/sys/net/ipv4/tcp_fastopen", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "3", 1) != 1) {
		perror("fastopen_cost: net.ipv4.tcp_fastopen = 3");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	int conns = argc > 1 ? atoi(argv[1]) : 9000, rounds = argc > 2 ? atoi(argv[2]) : 6;
	double cpu[2][MAX_ROUNDS], wall[2][MAX_ROUNDS];

	if (conns < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "usage: fastopen_cost [CONNS [ROUNDS (1-%d)]]\n", MAX_ROUNDS);
		return 2;
	}
	if (own_netns())
		return 1;
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < 2; k++) {
			int fastopen = (r + k) % 2, syn_data = 0; /* the order alternates */

			if (one_run(conns, fastopen, &cpu[fastopen][r], &wall[fastopen][r],
				    &syn_data))
				return 1;
			printf("{\"round\":%d,\"fastopen\":%s,\"conns\":%d,\"cpu_us_per_conn\":%.2f,"
			       "\"wall_us_per_conn\":%.2f,\"syn_data\":%s}\n",
			       r + 1, fastopen ? "true" : "false", conns, cpu[fastopen][r],
			       wall[fastopen][r], syn_data ? "true" : "false");
		}
	}
	printf("{\"median\":true,\"rounds\":%d,\"conns\":%d,\"cpu_us_per_conn\":{\"plain\":%.2f,"
	       "\"fastopen\":%.2f},\"wall_us_per_conn\":{\"plain\":%.2f,\"fastopen\":%.2f}}\n",
	       rounds, conns, median(cpu[0], rounds), median(cpu[1], rounds),
	       median(wall[0], rounds), median(wall[1], rounds));
	return 0;
}
