// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The worker -> control thread event queue (user/hbd/events.c) on its own: a full queue counts
 * what it drops and keeps what it has, the doorbell rings while anything is queued (also after a
 * partial take), the ring wraps in order, and producers on several threads lose nothing that
 * fitted. Plus the control plane's start-up failures: hbd refuses to run, with a clear message,
 * when its control socket or metrics address cannot be opened.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "events.h"
#include "lib/hbd_harness.h"
#include "lib/ht_assert.h"

static bool rung(const struct hbd_events *q)
{
	struct pollfd p = { .fd = q->efd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

static void ev(struct hbd_event *e, uint64_t dev)
{
	memset(e, 0, sizeof(*e));
	e->kind = HBD_EV_ONLINE;
	e->device = dev;
}

static void full_queue_drops_and_keeps(void **state)
{
	struct hbd_events q;
	struct hbd_event e, out[8];
	uint64_t dropped = 99;
	uint32_t n;

	(void)state;
	HT_EQ(hbd_events_init(&q, 4), 0, "%s", "a queue of 4");
	HT_FALSE(rung(&q), "%s", "an empty queue does not ring");
	HT_EQ(hbd_events_take(&q, out, 8, &dropped), 0, "%s", "nothing to take yet");
	HT_EQ(dropped, 0, "%s", "nothing dropped");
	for (uint64_t d = 1; d <= 6; d++) {
		ev(&e, d);
		hbd_events_push(&q, &e);
	}
	HT_TRUE(rung(&q), "%s", "queued events ring the bell");
	n = hbd_events_take(&q, out, 8, &dropped);
	HT_EQ(n, 4, "%s", "the 4 that fitted");
	HT_EQ(dropped, 2, "%s",
	      "the 2 that did not fit are counted"); /* devices 5 and 6: the queue held 4 */
	for (uint32_t i = 0; i < n; i++)
		HT_EQ(out[i].device, i + 1, "%s", "events in the order pushed");
	HT_FALSE(rung(&q), "%s", "an emptied queue stops ringing");
	/* the drop count is reported once */
	HT_EQ(hbd_events_take(&q, out, 8, &dropped), 0, "%s", "nothing to take yet");
	HT_EQ(dropped, 0, "%s", "nothing dropped");
	hbd_events_free(&q);
	hbd_events_free(&q); /* twice is harmless */
}

static void partial_take_keeps_the_bell_and_wraps(void **state)
{
	struct hbd_events q;
	struct hbd_event e, out[4];
	uint64_t dropped, next = 1, want = 1;

	(void)state;
	HT_EQ(hbd_events_init(&q, 5), 0, "%s", "a queue of 5");
	/* push 3, take 2, many times: the ring wraps and order holds */
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 3 && q.count < q.cap; i++) {
			ev(&e, next++);
			hbd_events_push(&q, &e);
		}
		HT_TRUE(rung(&q), "round %d: queued events ring the bell", round);
		uint32_t n = hbd_events_take(&q, out, 2, &dropped);

		HT_EQ(n, 2, "%s", "a take of at most 2");
		HT_EQ(dropped, 0, "%s", "nothing dropped");
		for (uint32_t i = 0; i < n; i++)
			HT_EQ(out[i].device, want++, "%s", "order kept across the wrap");
		/* something is left: the doorbell must still ring for the next round */
		HT_TRUE(q.count == 0 || rung(&q), "%s", "a partial take leaves the bell ringing");
	}
	while (q.count) {
		uint32_t n = hbd_events_take(&q, out, 4, &dropped);

		for (uint32_t i = 0; i < n; i++)
			HT_EQ(out[i].device, want++, "%s", "order kept across the wrap");
	}
	HT_EQ(want, next, "%s", "every event pushed was taken");
	hbd_events_free(&q);
}

/* A mark is passed once the reader has handled every event queued before it; dropped events
 * are not waited for, and a later event does not hold it back. */
static void mark_passed_when_handled(void **state)
{
	struct hbd_events q;
	struct hbd_event e, out[4];
	uint64_t dropped, mark;

	(void)state;
	HT_EQ(hbd_events_init(&q, 3), 0, "%s", "a queue of 3");
	HT_TRUE(hbd_events_passed(&q, hbd_events_mark(&q)), "%s",
		"an empty queue's mark is passed at once");
	for (uint64_t d = 1; d <= 4; d++) { /* the 4th is dropped */
		ev(&e, d);
		hbd_events_push(&q, &e);
	}
	mark = hbd_events_mark(&q);
	HT_EQ(mark, 3, "%s", "three queued, the dropped one not counted");
	HT_EQ(hbd_events_take(&q, out, 2, &dropped), 2, "%s", "two taken");
	HT_FALSE(hbd_events_passed(&q, mark), "%s", "taken is not handled");
	hbd_events_done(&q, 2);
	HT_FALSE(hbd_events_passed(&q, mark), "%s", "one queued before the mark is left");
	ev(&e, 5);
	hbd_events_push(&q, &e);
	HT_EQ(hbd_events_take(&q, out, 4, &dropped), 2, "%s", "the rest and a later one taken");
	hbd_events_done(&q, 2);
	HT_TRUE(hbd_events_passed(&q, mark), "%s", "every event before the mark handled");
	hbd_events_free(&q);
}

#define PRODUCERS 4
#define PER_PRODUCER 5000

struct producer {
	struct hbd_events *q;
	uint64_t base;
};

static void *produce(void *arg)
{
	struct producer *p = arg;
	struct hbd_event e;

	for (uint64_t i = 0; i < PER_PRODUCER; i++) {
		ev(&e, p->base + i);
		hbd_events_push(p->q, &e);
	}
	return NULL;
}

static void producers_lose_nothing_that_fits(void **state)
{
	static struct hbd_event out[PRODUCERS * PER_PRODUCER];
	struct hbd_events q;
	struct producer p[PRODUCERS];
	pthread_t t[PRODUCERS];
	uint64_t dropped, last[PRODUCERS] = { 0 };
	uint32_t n;

	(void)state;
	HT_EQ(hbd_events_init(&q, PRODUCERS * PER_PRODUCER), 0, "%s",
	      "a queue big enough for every producer");
	for (int i = 0; i < PRODUCERS; i++) {
		p[i] = (struct producer){ .q = &q, .base = (uint64_t)(i + 1) << 32 };
		HT_EQ(pthread_create(&t[i], NULL, produce, &p[i]), 0, "producer thread %d", i);
	}
	for (int i = 0; i < PRODUCERS; i++)
		pthread_join(t[i], NULL);
	n = hbd_events_take(&q, out, PRODUCERS * PER_PRODUCER, &dropped);
	HT_EQ(n, PRODUCERS * PER_PRODUCER, "%s", "every event pushed");
	HT_EQ(dropped, 0, "%s", "nothing dropped");
	/* each producer's events arrive in its own order */
	for (uint32_t i = 0; i < n; i++) {
		uint64_t who = (out[i].device >> 32) - 1, seq = out[i].device & 0xffffffffu;

		HT_TRUE(who < PRODUCERS, "%s", "an event of a known producer");
		HT_EQ(seq, last[who], "producer %u's events in its order", (unsigned)who);
		last[who]++;
	}
	hbd_events_free(&q);
}

/* hbd with one more option that must stop it before it serves: it exits nonzero within a few
 * seconds (never reaching "ready") and says why on stderr.
 */
static void refuses_to_start(const char *opt, const char *val, const char *needle)
{
	char dir[] = "/tmp/hbdevt.XXXXXX", keys[64], sink[64], err[64], hbd[PATH_MAX], line[512];
	uint64_t deadline;
	int status = -1;
	pid_t pid;

	HT_TRUE(mkdtemp(dir) != NULL, "%s", "a scratch directory");
	snprintf(keys, sizeof(keys), "%s/keys", dir);
	snprintf(sink, sizeof(sink), "%s/sink.jsonl", dir);
	snprintf(err, sizeof(err), "%s/hbd.err", dir);
	HT_EQ(ht_write_keys(keys), 0, "%s", "the key file");
	ht_hbd_path(hbd, sizeof(hbd));
	pid = fork();
	HT_TRUE(pid >= 0, "%s", "fork");
	if (pid == 0) {
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(e, STDERR_FILENO);
		execl(hbd, hbd, "--keys", keys, "--sink", sink, "--port", "0", "--pin-path", dir,
		      opt, val, (char *)NULL);
		_exit(127);
	}
	deadline = ht_now_ms() + 10000;
	while (ht_now_ms() < deadline && waitpid(pid, &status, WNOHANG) != pid)
		ht_sleep_ms(10);
	if (ht_now_ms() >= deadline) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		fail_msg("hbd %s %s: still running after 10 s, expected a refusal", opt, val);
	}
	HT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0, "hbd %s %s: status %d", opt, val,
		status);
	HT_EQ(ht_file_contains(err, "ready:", NULL, 0), 0, "hbd never says ready (stderr in %s)",
	      err);
	HT_EQ(ht_file_contains(err, needle, line, sizeof(line)), 1, "no '%s' in hbd's stderr",
	      needle);
	snprintf(line, sizeof(line), "rm -rf %s", dir);
	if (system(line)) {
	}
}

static void control_socket_in_a_missing_directory(void **state)
{
	(void)state;
	refuses_to_start("--control", "/nonexistent-hbd-dir/ctl.sock", "control socket");
}

static void metrics_port_already_taken(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	char addr[64];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	(void)state;
	HT_TRUE(fd >= 0, "%s", "a TCP socket");
	HT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0, "%s", "bind 127.0.0.1:0");
	HT_EQ(listen(fd, 1), 0, "%s", "listen");
	HT_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0, "%s", "the port taken");
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(a.sin_port));
	refuses_to_start("--metrics", addr, "metrics on");
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(full_queue_drops_and_keeps),
		cmocka_unit_test(mark_passed_when_handled),
		cmocka_unit_test(partial_take_keeps_the_bell_and_wraps),
		cmocka_unit_test(producers_lose_nothing_that_fits),
		cmocka_unit_test(control_socket_in_a_missing_directory),
		cmocka_unit_test(metrics_port_already_taken),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
