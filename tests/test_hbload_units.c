// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbload's pure logic: the timing wheel (never early, never lost), the UDP token map, the
 * command line and --source lists, the ACKs of downlinks (on a real io_uring whose SQEs are
 * read back, never submitted). No sockets.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

/* by path, as the other hbload tests do */
#include "lib/ht_assert.h"
#include "../user/hbload/hbload.h"
#include "../user/hbload/opts.h"
#include "../user/hbload/tokmap.h"
#include "../user/hbload/wakeups.h"
#include "../user/hbload/window.h"

#define MS 1000000ULL
#define EPOCH (1000 * MS)

static uint64_t rnd(uint64_t *x)
{
	*x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
	return *x >> 17;
}

static void test_wheel_exact_times(void **state)
{
	struct hbl_wheel w;

	(void)state;
	assert_int_equal(hbl_wheel_init(&w, 8, EPOCH), 0);
	hbl_wheel_set(&w, 0, EPOCH + 5 * MS + 300000); /* 5.3 ms */
	hbl_wheel_set(&w, 1, EPOCH + 5 * MS + 700000); /* 5.7 ms: same 1 ms slot */
	hbl_wheel_set(&w, 2, EPOCH + 9 * MS);
	assert_int_equal(hbl_wheel_next_ns(&w, EPOCH, 50), 5 * MS + 300000);
	/* within the slot, nothing comes out before its own time */
	assert_int_equal(hbl_wheel_pop(&w, EPOCH + 5 * MS + 299999), HBL_NIL);
	assert_int_equal(hbl_wheel_pop(&w, EPOCH + 5 * MS + 300000), 0);
	assert_int_equal(hbl_wheel_pop(&w, EPOCH + 5 * MS + 300000), HBL_NIL);
	assert_int_equal(hbl_wheel_next_ns(&w, EPOCH + 5 * MS + 300000, 50), 400000);
	/* an entry added for later in the current millisecond is still found */
	hbl_wheel_set(&w, 3, EPOCH + 5 * MS + 500000);
	assert_int_equal(hbl_wheel_pop(&w, EPOCH + 5 * MS + 600000), 3);
	assert_int_equal(hbl_wheel_pop(&w, EPOCH + 5 * MS + 800000), 1);
	/* rescheduling earlier and later; deleting */
	hbl_wheel_set(&w, 2, EPOCH + 7 * MS);
	hbl_wheel_set(&w, 4, EPOCH + 6 * MS);
	hbl_wheel_del(&w, 4);
	hbl_wheel_del(&w, 4); /* twice is harmless */
	assert_int_equal(w.count, 1);
	assert_int_equal(hbl_wheel_pop(&w, EPOCH + 6 * MS + 999999), HBL_NIL);
	assert_int_equal(hbl_wheel_pop(&w, EPOCH + 7 * MS), 2);
	/* nothing queued: next is the limit; a due time in the past fires at once */
	assert_int_equal(hbl_wheel_next_ns(&w, EPOCH + 8 * MS, 50), 50 * MS);
	hbl_wheel_set(&w, 5, EPOCH + 1 * MS);
	assert_int_equal(hbl_wheel_next_ns(&w, EPOCH + 20 * MS, 50), 0);
	assert_int_equal(hbl_wheel_pop(&w, EPOCH + 20 * MS), 5);
	hbl_wheel_free(&w);
}

static void test_wheel_laps_and_stalls(void **state)
{
	struct hbl_wheel w;
	uint64_t far = EPOCH + (HBL_WHEEL_SLOTS + 10) * MS; /* shares slot 10 with a nearer one */

	(void)state;
	assert_int_equal(hbl_wheel_init(&w, 4, EPOCH), 0);
	hbl_wheel_set(&w, 0, far);
	hbl_wheel_set(&w, 1, EPOCH + 10 * MS);
	assert_int_equal(hbl_wheel_pop(&w, EPOCH + 11 * MS), 1);
	/* the later lap stays put */
	assert_int_equal(hbl_wheel_pop(&w, EPOCH + 12 * MS), HBL_NIL);
	assert_int_equal(hbl_wheel_next_ns(&w, EPOCH + 12 * MS, 100), 100 * MS);
	/* a stall longer than the whole wheel still finds it */
	assert_int_equal(hbl_wheel_pop(&w, far + 5 * HBL_WHEEL_SLOTS * MS), 0);
	assert_int_equal(w.count, 0);
	hbl_wheel_free(&w);
}

/* Random schedule against a brute-force reference: every entry pops exactly once, never
 * before its due time and no later than the first pop at or after it.
 */
static void test_wheel_random(void **state)
{
	enum { N = 2000 };
	static uint64_t due[N];
	static int done[N];
	struct hbl_wheel w;
	uint64_t x = 7, now = EPOCH;
	unsigned popped = 0;

	(void)state;
	assert_int_equal(hbl_wheel_init(&w, N, EPOCH), 0);
	for (uint32_t i = 0; i < N; i++) {
		due[i] = EPOCH + rnd(&x) % (200 * MS);
		hbl_wheel_set(&w, i, due[i]);
	}
	/* move about half of them once more */
	for (uint32_t i = 0; i < N; i += 2) {
		due[i] = EPOCH + rnd(&x) % (200 * MS);
		hbl_wheel_set(&w, i, due[i]);
	}
	while (popped < N) {
		uint64_t next = hbl_wheel_next_ns(&w, now, 50);
		uint32_t i;

		/* next_ns never overshoots the earliest due entry */
		for (uint32_t k = 0; k < N; k++)
			if (!done[k] && due[k] <= now + 50 * MS)
				HT_LE(now + next, (due[k] > now ? due[k] : now),
				      "next_ns %llu from %llu overshoots entry %u due at %llu",
				      (unsigned long long)next, (unsigned long long)now, k,
				      (unsigned long long)due[k]);
		now += next ? next : rnd(&x) % 300000;
		while ((i = hbl_wheel_pop(&w, now)) != HBL_NIL) {
			HT_FALSE(done[i], "entry %u popped twice", i);
			HT_LE(due[i], now, "entry %u popped at %llu, before it was due", i,
			      (unsigned long long)now);
			done[i] = 1;
			popped++;
		}
		for (uint32_t k = 0; k < N; k++)
			HT_TRUE(done[k] || due[k] > now,
				"entry %u due at %llu still in the wheel at %llu", k,
				(unsigned long long)due[k], (unsigned long long)now);
	}
	assert_int_equal(w.count, 0);
	hbl_wheel_free(&w);
}

static void test_tokmap(void **state)
{
	enum { N = 5000 };
	static uint64_t tok[N];
	static int live[N];
	struct hbl_tokmap m;
	uint64_t x = 99;

	(void)state;
	assert_int_equal(hbl_tokmap_init(&m, N), 0);
	assert_int_equal(hbl_tokmap_put(&m, 0, 1), -EINVAL);
	assert_int_equal(hbl_tokmap_get(&m, 0), UINT32_MAX);
	/* sequential tokens (a naive server) as well as random ones */
	for (uint32_t i = 0; i < N; i++) {
		tok[i] = i < N / 2 ? i + 1 : (rnd(&x) << 20) | 1;
		assert_int_equal(hbl_tokmap_put(&m, tok[i], i), 0);
		live[i] = 1;
	}
	assert_int_equal(m.count, N);
	/* churn: delete and re-add, checking every lookup against the reference */
	for (int round = 0; round < 20000; round++) {
		uint32_t i = (uint32_t)(rnd(&x) % N);

		if (live[i]) {
			assert_int_equal(hbl_tokmap_del(&m, tok[i]), 1);
			assert_int_equal(hbl_tokmap_del(&m, tok[i]), 0);
		} else {
			assert_int_equal(hbl_tokmap_put(&m, tok[i], i), 0);
		}
		live[i] = !live[i];
		if (round % 1000 == 0)
			for (uint32_t k = 0; k < N; k++)
				assert_int_equal(hbl_tokmap_get(&m, tok[k]),
						 live[k] ? k : UINT32_MAX);
	}
	/* replacing a value keeps one entry */
	uint32_t c = m.count;
	assert_int_equal(hbl_tokmap_put(&m, 123456789, 1), 0);
	assert_int_equal(hbl_tokmap_put(&m, 123456789, 2), 0);
	assert_int_equal(hbl_tokmap_get(&m, 123456789), 2);
	assert_int_equal(m.count, c + 1);
	hbl_tokmap_free(&m);

	/* a full map refuses instead of looping */
	assert_int_equal(hbl_tokmap_init(&m, 4), 0);
	int rc = 0;
	for (uint64_t t = 1; t < 100 && !rc; t++)
		rc = hbl_tokmap_put(&m, t, 0);
	assert_int_equal(rc, -ENOSPC);
	hbl_tokmap_free(&m);
}

static void test_sources(void **state)
{
	struct sockaddr_storage *v = NULL;
	char err[128], buf[64];
	int n;

	(void)state;
	n = hbl_parse_sources("127.0.1.1-127.0.1.4,10.0.0.254-10.0.1.1", AF_INET, &v, err,
			      sizeof(err));
	assert_int_equal(n, 8);
	inet_ntop(AF_INET, &((struct sockaddr_in *)&v[3])->sin_addr, buf, sizeof(buf));
	assert_string_equal(buf, "127.0.1.4");
	inet_ntop(AF_INET, &((struct sockaddr_in *)&v[6])->sin_addr, buf, sizeof(buf));
	assert_string_equal(buf, "10.0.1.0"); /* ranges carry across octets */
	assert_int_equal(((struct sockaddr_in *)&v[0])->sin_port, 0);
	free(v);

	n = hbl_parse_sources("fd00::1-fd00::3,::1", AF_INET6, &v, err, sizeof(err));
	assert_int_equal(n, 4);
	inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&v[2])->sin6_addr, buf, sizeof(buf));
	assert_string_equal(buf, "fd00::3");
	assert_int_equal(v[3].ss_family, AF_INET6);
	free(v);

	/* errors say what is wrong */
	assert_int_equal(hbl_parse_sources("::1", AF_INET, &v, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "IPv4"));
	assert_int_equal(hbl_parse_sources("10.0.0.9-10.0.0.1", AF_INET, &v, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "backwards"));
	assert_int_equal(hbl_parse_sources("10.0.0.0-10.2.0.0", AF_INET, &v, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "more than"));
	assert_int_equal(hbl_parse_sources(",", AF_INET, &v, err, sizeof(err)), -EINVAL);
}

#define ARGC(v) ((int)(sizeof(v) / sizeof((v)[0])) - 1)

static void test_args(void **state)
{
	struct hbl_opts o;
	char *ok[] = { "hbload",    "--server",	  "127.0.0.1", "--port",   "7600",
		       "--clients", "500",	  "--proto",   "udp",	   "--interval",
		       "30",	    "--duration", "180",       "--json",   "--connect-rate",
		       "2000/s",    "--jitter",	  "0.25",      "--silent", "5",
		       NULL };
	char *no_clients[] = {
		"hbload", "--server", "x", "--interval", "1", "--duration", "1", NULL
	};
	char *bad_num[] = { "hbload",	  "--server", "x",	    "--clients", "10k",
			    "--interval", "1",	      "--duration", "1",	 NULL };
	char *storm_udp[] = { "hbload",	    "--server",	  "x",		"--clients", "10",
			      "--interval", "1",	  "--duration", "1",	     "--proto",
			      "udp",	    "--storm-at", "5",		NULL };
	char *too_silent[] = { "hbload", "--server",   "x", "--clients", "10", "--interval",
			       "1",	 "--duration", "1", "--silent",	 "11", NULL };

	(void)state;
	assert_int_equal(hbl_parse_args(ARGC(ok), ok, &o), 0);
	assert_string_equal(o.server, "127.0.0.1");
	assert_int_equal(o.port, 7600);
	assert_int_equal(o.clients, 500);
	assert_int_equal(o.proto, HB_UDP);
	HT_TRUE(o.interval_s == 30 && o.duration_s == 180,
		"--interval 30 --duration 180 parsed as %f and %f", o.interval_s, o.duration_s);
	HT_TRUE(o.json, "--json parsed");
	HT_TRUE(o.connect_rate == 2000, "--connect-rate 2000 parsed as %f", o.connect_rate);
	HT_TRUE(o.jitter == 0.25, "--jitter 0.25 parsed as %f", o.jitter);
	assert_int_equal(o.silent, 5);
	/* defaults */
	assert_int_equal(o.first_device, 1);
	HT_TRUE(o.drain_s == 2, "default drain_s %f", o.drain_s);
	HT_TRUE(o.storm_at_s < 0, "no storm by default (storm_at_s %f)", o.storm_at_s);
	assert_int_equal(hbl_parse_args(ARGC(no_clients), no_clients, &o), -EINVAL);
	assert_int_equal(hbl_parse_args(ARGC(bad_num), bad_num, &o), -EINVAL);
	assert_int_equal(hbl_parse_args(ARGC(storm_udp), storm_udp, &o), -EINVAL);
	assert_int_equal(hbl_parse_args(ARGC(too_silent), too_silent, &o), -EINVAL);
}

/* --steps and --step-stop-p99: parsing and the limits */
static void test_steps_args(void **state)
{
	struct hbl_opts o;
	char *ok[] = { "hbload",
		       "--server",
		       "x",
		       "--clients",
		       "10",
		       "--interval",
		       "1",
		       "--duration",
		       "1",
		       "--steps",
		       "100,250.5,1e3",
		       "--step-s",
		       "4",
		       "--step-settle",
		       "1",
		       "--step-stop-p99",
		       "0",
		       NULL };
	char *bad_list[] = { "hbload", "--server",   "x", "--clients", "10",	   "--interval",
			     "1",      "--duration", "1", "--steps",   "100,,200", NULL };
	char *negative[] = { "hbload", "--server",   "x", "--clients", "10",	 "--interval",
			     "1",      "--duration", "1", "--steps",   "100,-5", NULL };
	char *settle_too_long[] = { "hbload", "--server",      "x",   "--clients",
				    "10",     "--interval",    "1",   "--duration",
				    "1",      "--steps",       "100", "--step-s",
				    "2",      "--step-settle", "2",   NULL };

	(void)state;
	assert_int_equal(hbl_parse_args(ARGC(ok), ok, &o), 0);
	assert_int_equal(o.nsteps, 3);
	HT_TRUE(o.steps[0] == 100 && o.steps[1] == 250.5 && o.steps[2] == 1000,
		"--steps 100,250.5,1e3 parsed as %f, %f, %f", o.steps[0], o.steps[1], o.steps[2]);
	HT_TRUE(o.step_s == 4 && o.step_settle_s == 1 && o.step_stop_ms == 0,
		"--step-s 4 --step-settle 1 --step-stop-p99 0 parsed as %f, %f, %f", o.step_s,
		o.step_settle_s, o.step_stop_ms);
	assert_int_equal(hbl_parse_args(ARGC(bad_list), bad_list, &o), -EINVAL);
	assert_int_equal(hbl_parse_args(ARGC(negative), negative, &o), -EINVAL);
	assert_int_equal(hbl_parse_args(ARGC(settle_too_long), settle_too_long, &o), -EINVAL);
}

/* Windows: a scheduled time belongs to the window that holds it, [from, to); a percentile that
 * falls among the unanswered PINGs is reported as such, never as a fast answer.
 */
static void test_windows(void **state)
{
	struct hbl_windows w = { .def = { { 100, 200, 1 }, { 200, 300, 2 }, { 500, 600, 3 } } };
	struct hbl_wstats s[2], sum;
	char buf[256] = "";
	FILE *f;

	(void)state;
	assert_int_equal(hbl_window_of(&w, 150), -1); /* nothing published yet */
	__atomic_store_n(&w.n, 3, __ATOMIC_RELEASE);
	assert_int_equal(hbl_window_of(&w, 99), -1);
	assert_int_equal(hbl_window_of(&w, 100), 0);
	assert_int_equal(hbl_window_of(&w, 199), 0);
	assert_int_equal(hbl_window_of(&w, 200), 1);
	assert_int_equal(hbl_window_of(&w, 400), -1);
	assert_int_equal(hbl_window_of(&w, 599), 2);

	/* 1000 PINGs; 985 answered in 100 us, 5 in 50 ms; 10 never */
	hbl_wstats_init(s, 2);
	s[0].pings = 600;
	s[1].pings = 400;
	for (int i = 0; i < 985; i++) {
		hb_hist_add(&s[i % 2].rtt, 100);
		s[i % 2].pongs++;
	}
	for (int i = 0; i < 5; i++) {
		hb_hist_add(&s[1].rtt, 50000);
		s[1].pongs++;
	}
	hbl_wstats_init(&sum, 1);
	hbl_wstats_merge(&sum, &s[0]);
	hbl_wstats_merge(&sum, &s[1]);
	assert_int_equal(sum.pings, 1000);
	assert_int_equal(sum.pongs, 990);
	assert_int_equal(hbl_wstats_percentile(&sum, 50), 100);
	/* rank 985 is the last fast answer; 986..990 the slow ones; 991.. the unanswered */
	assert_int_equal(hbl_wstats_percentile(&sum, 98.5), 100);
	HT_GE(hbl_wstats_percentile(&sum, 98.6), 50000, "p98.6: one of the slow answers");
	HT_GE(hbl_wstats_percentile(&sum, 99), 50000, "p99: one of the slow answers");
	HT_TRUE(hbl_wstats_percentile(&sum, 99) != UINT64_MAX,
		"p99 is an answer, not the unanswered");
	assert_int_equal(hbl_wstats_percentile(&sum, 99.1), UINT64_MAX);
	sum.pings = 990; /* all answered: the tail is a real answer */
	HT_GE(hbl_wstats_percentile(&sum, 99.9), 50000,
	      "p99.9 with all answered: the slowest answer");
	HT_TRUE(hbl_wstats_percentile(&sum, 99.9) != UINT64_MAX,
		"p99.9 with all answered is an answer");

	/* the dump: one line per nonzero bucket, counts adding up */
	f = fmemopen(buf, sizeof(buf), "w");
	assert_non_null(f);
	assert_int_equal(hbl_hist_dump(f, "steady", &sum.rtt), 0);
	fclose(f);
	assert_non_null(strstr(buf, "# steady: low_us high_us count\n"));
	assert_non_null(strstr(buf, "\n100 100 985\n"));
	assert_non_null(strstr(buf, " 5\n"));
}

/* The ACK a queued SQE would send: its client and the seq of the frame in its buffer. */
static void sqe_is_ack(struct hbl_ring *r, struct io_uring_sqe *sqe, uint32_t l, uint16_t seq)
{
	struct hb_frame f;

	HT_EQ(hbl_ud_op(sqe->user_data), HBL_OP_TCP_SEND, "op of the SQE");
	HT_EQ(hbl_ud_idx(sqe->user_data), l, "client of the SQE");
	HT_EQ(hb_decode_stream(hbl_sbuf(&r->sb, hbl_ud_buf(sqe->user_data)), sqe->len, &f),
	      HB_DECODE_OK, "the frame the SQE sends decodes");
	HT_EQ(f.type, HB_ACK, "frame type");
	HT_EQ(f.seq, seq, "seq of the ACK: the DOWN's");
}

/* A DOWN is ACKed at once when the connection is free; behind a TCP send in flight or without
 * a send buffer it waits, in order, and goes once it can; a session gone meanwhile drops it. */
static void test_downlink_acks(void **state)
{
	struct hbl_cfg cfg = { .o = { .proto = HB_TCP } };
	struct hbl_ring r = { .cfg = &cfg, .n = 3 };
	struct hbl_client cl[3] = { 0 };
	unsigned head, n = 0;
	struct io_uring_sqe *sqes[256];

	(void)state;
	r.cl = cl;
	HT_EQ(io_uring_queue_init(256, &r.ring, 0), 0, "io_uring_queue_init");
	HT_EQ(hbl_sbufs_init(&r.sb), 0, "send buffers");
	for (uint32_t l = 0; l < 3; l++) {
		hbc_init(&cl[l].c, 100 + l, HB_TCP);
		cl[l].c.state = HBC_AUTHED;
		cl[l].ls = HBL_LS_AUTHED;
	}
	hbl_down(&r, 0, 7); /* free: at once */
	HT_EQ(r.ack_len, 0, "ACKs waiting after a DOWN to a free connection");
	HT_EQ(r.st.downs_acked, 1, "downs_acked");
	cl[1].flags |= HBL_F_SENDING; /* a send in flight: the ACKs wait, 100 of them */
	for (uint16_t i = 0; i < 100; i++)
		hbl_down(&r, 1, (uint16_t)(1000 + i));
	hbl_down(&r, 2, 9); /* free, but behind the waiting ones */
	HT_EQ(r.ack_len, 101, "ACKs waiting behind the send in flight");
	hbl_downs_run(&r);
	HT_EQ(r.ack_len, 100, "client 1's still waiting while its send is in flight");
	HT_EQ(r.st.downs_acked, 2, "downs_acked: client 2's went in the pass");
	/* one send at a time: each pass sends the first of client 1's, as the send flag says */
	for (int pass = 0; pass < 100; pass++) {
		cl[1].flags &= ~HBL_F_SENDING;
		hbl_downs_run(&r);
	}
	HT_EQ(r.ack_len, 0, "ACKs waiting at the end");
	HT_EQ(r.st.downs_acked, 102, "downs_acked");
	HT_EQ(r.st.downs_dropped, 0, "downs_dropped");
	head = *r.ring.sq.khead;
	n = io_uring_sq_ready(&r.ring);
	HT_EQ(n, 102, "SQEs prepared");
	for (unsigned i = 0; i < n && i < 256; i++)
		sqes[i] = &r.ring.sq.sqes[(head + i) & *r.ring.sq.kring_mask];
	sqe_is_ack(&r, sqes[0], 0, 7);
	sqe_is_ack(&r, sqes[1], 2, 9);
	for (unsigned i = 0; i < 100; i++)
		sqe_is_ack(&r, sqes[2 + i], 1, (uint16_t)(1000 + i));
	/* a waiting ACK whose session ended (a new connection, gen moved on) is dropped */
	cl[1].flags |= HBL_F_SENDING;
	hbl_down(&r, 1, 5);
	cl[1].gen++;
	cl[1].flags &= ~HBL_F_SENDING;
	hbl_downs_run(&r);
	HT_EQ(r.ack_len, 0, "ACKs waiting after the session ended");
	HT_EQ(r.st.downs_dropped, 1, "downs_dropped");
	/* no send buffer: waits, then goes */
	{
		unsigned nfree = r.sb.nfree;

		cl[0].flags &= ~HBL_F_SENDING; /* its first ACK's send completed */
		r.sb.nfree = 0;
		hbl_down(&r, 0, 11);
		HT_EQ(r.ack_len, 1, "ACK waiting for a send buffer");
		r.sb.nfree = nfree;
		hbl_downs_run(&r);
		HT_EQ(r.ack_len, 0, "ACK sent once a buffer is free");
		HT_EQ(r.st.downs_acked, 103, "downs_acked");
	}
	HT_EQ(r.st.downs_received, 104, "downs_received");
	hbl_downs_free(&r);
	hbl_sbufs_free(&r.sb);
	io_uring_queue_exit(&r.ring);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wheel_exact_times),
		cmocka_unit_test(test_wheel_laps_and_stalls),
		cmocka_unit_test(test_wheel_random),
		cmocka_unit_test(test_tokmap),
		cmocka_unit_test(test_sources),
		cmocka_unit_test(test_args),
		cmocka_unit_test(test_steps_args),
		cmocka_unit_test(test_windows),
		cmocka_unit_test(test_downlink_acks),
	};

	return cmocka_run_group_tests_name("hbload units", tests, NULL, NULL);
}
