// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd pure logic, no kernel: expiry wheel, device table, session table, sink lines, planning,
 * user_data packing, chunk pool, counters JSON.
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

#include "lib/ht_assert.h"
#include "chunk.h"
#include "devices.h"
#include "hbd.h"
#include "sessions.h"
#include "sink.h"
#include "stats.h"
#include "ud.h"
#include "hb_wheel.h"

#define CAP 1000

/* Pops everything due at now into a sorted bitmap; returns the count. */
static uint32_t pop_all(struct hb_wheel *w, uint64_t now, uint8_t *seen)
{
	uint32_t out[7], n, total = 0;

	do {
		n = hb_wheel_due(w, now, out, 7); /* a small batch exercises resumption */
		for (uint32_t i = 0; i < n; i++) {
			HT_LT(out[i], CAP, "id %u handed out by the wheel", out[i]);
			HT_FALSE(hb_wheel_scheduled(w, out[i]),
				 "id %u still scheduled after it was handed out", out[i]);
			seen[out[i]]++;
		}
		total += n;
	} while (n == 7);
	return total;
}

static void wheel_never_early_never_late(void **state)
{
	struct hb_wlink links[CAP];
	struct hb_wheel w;
	uint64_t due[CAP];
	uint8_t seen[CAP];
	const uint64_t tick = 10, span = 500;

	(void)state;
	hb_wheel_links_init(links, CAP);
	assert_int_equal(hb_wheel_init(&w, links, CAP, tick, span, 1000), 0);
	srand(7);
	for (uint32_t i = 0; i < CAP; i++) {
		due[i] = 1000 + (uint64_t)(rand() % (int)span);
		hb_wheel_add(&w, i, due[i]);
	}
	assert_int_equal(w.count, CAP);
	memset(seen, 0, sizeof(seen));
	/* walk time in uneven steps: each id must come out at the first now >= its deadline
	 * rounded up to a tick, never before its deadline
	 */
	for (uint64_t now = 1000; now <= 1000 + span + tick; now += 3) {
		uint8_t before[CAP];

		memcpy(before, seen, sizeof(seen));
		pop_all(&w, now, seen);
		for (uint32_t i = 0; i < CAP; i++) {
			if (seen[i] != before[i]) {
				HT_GE(now, due[i], "id %u handed out, never early", i);
				HT_LT(now, due[i] + tick + 3,
				      "id %u handed out late by less than a tick + a step", i);
			}
		}
	}
	for (uint32_t i = 0; i < CAP; i++)
		assert_int_equal(seen[i], 1);
	assert_int_equal(w.count, 0);
	hb_wheel_free(&w);
}

static void wheel_del_and_reschedule(void **state)
{
	struct hb_wlink links[CAP];
	struct hb_wheel w;
	uint8_t seen[CAP] = { 0 };

	(void)state;
	hb_wheel_links_init(links, CAP);
	assert_int_equal(hb_wheel_init(&w, links, CAP, 10, 100, 0), 0);
	for (uint32_t i = 0; i < 10; i++)
		hb_wheel_add(&w, i, 50);
	hb_wheel_del(&w, 3);
	hb_wheel_del(&w, 3); /* no-op */
	hb_wheel_del(&w, 500); /* never scheduled: no-op */
	HT_FALSE(hb_wheel_scheduled(&w, 3), "id 3 scheduled after hb_wheel_del");
	assert_int_equal(pop_all(&w, 49, seen), 0);
	assert_int_equal(pop_all(&w, 50, seen), 9);
	assert_int_equal(seen[3], 0);
	/* re-added with a deadline already past: comes out at the next tick, not in this one */
	hb_wheel_add(&w, 1, 10);
	assert_int_equal(pop_all(&w, 50, seen), 0);
	assert_int_equal(pop_all(&w, 60, seen), 1);
	assert_int_equal(seen[1], 2);
	hb_wheel_free(&w);
}

static void wheel_beyond_span_is_clamped_early(void **state)
{
	struct hb_wlink links[CAP];
	struct hb_wheel w;
	uint8_t seen[CAP] = { 0 };

	(void)state;
	hb_wheel_links_init(links, CAP);
	assert_int_equal(hb_wheel_init(&w, links, CAP, 10, 100, 0), 0);
	/* 16 buckets of 10 ms: a deadline 10 s away comes out within the wheel's span, early,
	 * and the caller (which re-checks) puts it back
	 */
	hb_wheel_add(&w, 5, 10000);
	assert_int_equal(pop_all(&w, 100, seen), 0);
	assert_int_equal(pop_all(&w, 200, seen), 1);
	hb_wheel_free(&w);
}

static void wheel_idle_jump_and_shared_links(void **state)
{
	struct hb_wlink links[CAP];
	struct hb_wheel a, b;
	uint8_t seen[CAP] = { 0 };
	uint32_t out[4];

	(void)state;
	hb_wheel_links_init(links, CAP);
	assert_int_equal(hb_wheel_init(&a, links, CAP, 5, 50, 0), 0);
	assert_int_equal(hb_wheel_init(&b, links, CAP, 5, 50, 0), 0);
	/* an idle wheel skips hours at once */
	assert_int_equal(hb_wheel_due(&a, 3600ull * 1000 * 1000, out, 4), 0);
	/* two wheels over one links array, disjoint ids */
	hb_wheel_add(&a, 1, 3600ull * 1000 * 1000 + 20);
	hb_wheel_add(&b, 2, 20);
	hb_wheel_add(&b, 3, 40);
	assert_int_equal(pop_all(&b, 25, seen), 1);
	assert_int_equal(seen[2], 1);
	hb_wheel_del(&b, 3);
	assert_int_equal(b.count, 0);
	HT_TRUE(hb_wheel_scheduled(&a, 1), "id 1 of the other wheel still scheduled");
	assert_int_equal(pop_all(&a, 3600ull * 1000 * 1000 + 20, seen), 1);
	assert_int_equal(seen[1], 1);
	hb_wheel_free(&a);
	hb_wheel_free(&b);
}

/* Cost stays flat: with 100k scheduled over the span, a tick hands out about its share. */
static void wheel_tick_cost_is_proportional(void **state)
{
	const uint32_t n = 100000;
	struct hb_wlink *links = malloc(n * sizeof(*links));
	uint32_t *out = malloc(n * sizeof(*out));
	struct hb_wheel w;

	(void)state;
	hb_wheel_links_init(links, n);
	assert_int_equal(hb_wheel_init(&w, links, n, 250, 45000, 0), 0);
	for (uint32_t i = 0; i < n; i++)
		hb_wheel_add(&w, i, 1 + (uint64_t)i * 45000 / n);
	/* the first 250 ms hold 1/180 of the deadlines */
	uint32_t got = hb_wheel_due(&w, 250, out, n);

	HT_TRUE(got >= n / 180 - 2 && got <= n / 180 + 2,
		"ids due in the first tick: 1/180 of %u, got %u", n, got);
	hb_wheel_free(&w);
	free(links);
	free(out);
}

static void devices_replay_and_supersede(void **state)
{
	struct hbd_devices *t;
	uint64_t old = 123;

	(void)state;
	assert_int_equal(hbd_devices_init(&t, 0), 0);
	assert_int_equal(hbd_devices_hello(t, 42, 1000, hbd_loc(0, 1, 7, 9), 1, &old), 0);
	assert_int_equal(old, 0);
	/* the same or an older timestamp is a replay */
	assert_int_equal(hbd_devices_hello(t, 42, 1000, hbd_loc(0, 1, 8, 9), 1, &old), -EALREADY);
	assert_int_equal(hbd_devices_hello(t, 42, 999, hbd_loc(0, 1, 8, 9), 1, &old), -EALREADY);
	assert_int_equal(hbd_devices_loc(t, 42), hbd_loc(0, 1, 7, 9));
	/* a newer HELLO supersedes and reports the old session */
	assert_int_equal(hbd_devices_hello(t, 42, 1001, hbd_loc(1, 3, 2, 77), 1, &old), 0);
	assert_int_equal(old, hbd_loc(0, 1, 7, 9));
	assert_int_equal(hbd_loc_worker(old), 1);
	assert_int_equal(hbd_loc_gen(old), 7);
	assert_int_equal(hbd_loc_index(old), 9);
	HT_TRUE(hbd_devices_loc(t, 42) & HBD_LOC_UDP,
		"device 42 located at a UDP session (loc %#llx)",
		(unsigned long long)hbd_devices_loc(t, 42));
	/* releasing the superseded session changes nothing; releasing the current one does */
	hbd_devices_release(t, 42, old);
	assert_int_equal(hbd_devices_loc(t, 42), hbd_loc(1, 3, 2, 77));
	hbd_devices_release(t, 42, hbd_loc(1, 3, 2, 77));
	assert_int_equal(hbd_devices_loc(t, 42), 0);
	/* the replay memory outlives the session */
	assert_int_equal(hbd_devices_hello(t, 42, 1001, 1, 1, &old), -EALREADY);
	hbd_devices_free(t);
}

/* expect: what the table is sized for; far below n it grows many times (by half, to
 * capacities that are not powers of two), at n it never grows.
 */
static void devices_grow_and_sweep_sized(size_t expect)
{
	struct hbd_devices *t;
	uint64_t old;
	const uint64_t n = 50000;

	assert_int_equal(hbd_devices_init(&t, expect), 0);
	for (uint64_t id = 1; id <= n; id++)
		assert_int_equal(hbd_devices_hello(t, id, 1000 + id,
						   id % 2 ? hbd_loc(0, 0, 0, 1) : 0, 1, &old),
				 0);
	assert_int_equal(hbd_devices_count(t), n);
	/* sweep: odd ids have a session and stay; even ids are past the window and go */
	unsigned dropped = 0;

	for (int i = 0; i < 1000 && dropped < n / 2; i++)
		dropped += hbd_devices_sweep(t, 1000000, 1000, 4096);
	assert_int_equal(dropped, n / 2);
	assert_int_equal(hbd_devices_count(t), n / 2);
	/* every survivor is still found after all the backward shifts */
	for (uint64_t id = 1; id <= n; id += 2)
		assert_int_equal(hbd_devices_loc(t, id), hbd_loc(0, 0, 0, 1));
	for (uint64_t id = 2; id <= n; id += 2)
		assert_int_equal(hbd_devices_loc(t, id), 0);
	/* within the window nothing goes */
	assert_int_equal(hbd_devices_sweep(t, 1000 + n, 100000, 1 << 20), 0);
	hbd_devices_free(t);
}

/* A key reload's walk: sessions the new store verified (its tag) are not asked about; the others
 * are, and those kept take the new tag, so the next reload does not ask again for them unless
 * it must. */
struct rekey_ask {
	uint64_t asked[8];
	int n;
	uint64_t cut; /* the device whose session is not kept */
};

static bool rekey_keep(void *arg, uint64_t id, uint64_t loc)
{
	struct rekey_ask *a = arg;

	(void)loc;
	if (a->n < 8)
		a->asked[a->n++] = id;
	return id != a->cut;
}

static void devices_rekey_by_tag(void **state)
{
	struct hbd_devices *t;
	struct rekey_ask a = { .cut = 3 };
	uint64_t old;

	(void)state;
	assert_int_equal(hbd_devices_init(&t, 0), 0);
	/* 1 and 3 came in under store 5, 2 under store 6 (after the swap), 4 has no session */
	assert_int_equal(hbd_devices_hello(t, 1, 1000, hbd_loc(0, 0, 0, 1), 5, &old), 0);
	assert_int_equal(hbd_devices_hello(t, 2, 1000, hbd_loc(0, 0, 0, 2), 6, &old), 0);
	assert_int_equal(hbd_devices_hello(t, 3, 1000, hbd_loc(0, 0, 0, 3), 5, &old), 0);
	assert_int_equal(hbd_devices_hello(t, 4, 1000, 0, 5, &old), 0);
	assert_int_equal(hbd_devices_adopt(t, 5, 900, hbd_loc(1, 0, 0, 5)), 0);
	hbd_devices_rekey(t, 6, rekey_keep, &a);
	HT_EQ(a.n, 3, "sessions asked about in the reload to store 6 (1, 3 and adopted 5)");
	for (int i = 0; i < a.n; i++)
		HT_TRUE(a.asked[i] == 1 || a.asked[i] == 3 || a.asked[i] == 5,
			"device %llu asked about (2 came in under store 6, 4 has no session)",
			(unsigned long long)a.asked[i]);
	/* the next reload, to store 7: kept ones are store 6's now, and 3 (cut, still there
	 * until its worker ends it) is asked again */
	a.n = 0;
	a.cut = 0;
	hbd_devices_rekey(t, 6, rekey_keep, &a);
	HT_EQ(a.n, 1, "sessions asked about in a second walk for store 6 (only 3, not kept)");
	HT_EQ(a.asked[0], 3, "the session not kept before");
	a.n = 0;
	hbd_devices_rekey(t, 7, rekey_keep, &a);
	HT_EQ(a.n, 4, "sessions asked about in the reload to store 7 (all four live ones)");
	hbd_devices_free(t);
}

static void devices_grow_and_sweep(void **state)
{
	(void)state;
	devices_grow_and_sweep_sized(1000);
	devices_grow_and_sweep_sized(50000);
}

static void sessions_lifecycle(void **state)
{
	struct hbd_sessions t;
	struct hbd_sess_view v;
	struct hbd_sess s;
	uint8_t a1[16] = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 }, a2[16] = { 0 };
	uint32_t i0, i1, i2;

	(void)state;
	assert_int_equal(hbd_sessions_init(&t, 2), 0);
	assert_int_equal(hbd_sess_alloc(&t, 3, &i0), 0);
	assert_int_equal(hbd_sess_alloc(&t, 3, &i1), 0);
	assert_int_equal(hbd_sess_alloc(&t, 3, &i2), -ENOSPC);
	t.s[i0].device_id = 5;
	memcpy(t.s[i0].addr, a1, 16);
	t.s[i0].port = htons(1000);
	assert_int_equal(hbd_sess_publish(&t, i0, 0xabc), 0);
	assert_int_equal(hbd_sess_publish(&t, i1, 0xabc), -EEXIST);
	assert_int_equal(hbd_sess_touch(&t, 0xdef, a1, htons(1000), 5, &v), -ENOENT);
	assert_int_equal(hbd_sess_touch(&t, 0, a1, htons(1000), 5, &v), -ENOENT);
	assert_int_equal(hbd_sess_touch(&t, 0xabc, a1, htons(1000), 5, &v), 0);
	HT_FALSE(v.rebound, "rebound reported for a touch from the same source");
	assert_int_equal(v.device_id, 5);
	assert_int_equal(v.owner, 3);
	assert_int_equal(hbd_sess_last_seen(&t, i0), 5);
	/* a new source moves the session */
	assert_int_equal(hbd_sess_touch(&t, 0xabc, a2, htons(2000), 9, &v), 0);
	HT_TRUE(v.rebound, "rebound reported for a touch from a new source");
	assert_int_equal(hbd_sess_lookup(&t, 0xabc, &s), 0);
	assert_int_equal(s.port, htons(2000));
	/* unhash: gone for lookups, and a stale gen is refused */
	assert_int_equal(hbd_sess_get(&t, i0, (uint16_t)(v.gen + 1), true, &s), -ESTALE);
	assert_int_equal(hbd_sess_get(&t, i0, v.gen, true, &s), 0);
	assert_int_equal(hbd_sess_get(&t, i0, v.gen, true, &s), -ESTALE);
	assert_int_equal(hbd_sess_lookup(&t, 0xabc, &s), -ENOENT);
	hbd_sess_release(&t, i0);
	hbd_sess_release(&t, i1);
	assert_int_equal(hbd_sess_alloc(&t, 0, &i2), 0);
	assert_int_equal(t.active, 1);
	hbd_sessions_free(&t);
}

static void sink_line_format(void **state)
{
	struct timespec ts = { .tv_sec = 1700000000, .tv_nsec = 123456789 };
	char line[HBD_SINK_LINE_MAX];
	uint8_t big[HB_MAX_PAYLOAD];
	size_t n;

	(void)state;
	n = hbd_sink_format(line, sizeof(line), 42, false, 7, &ts, "hello", 5);
	assert_string_equal(line,
			    "{\"device\":42,\"transport\":\"tcp\",\"seq\":7,"
			    "\"time\":\"2023-11-14T22:13:20.123Z\",\"payload\":\"aGVsbG8=\"}\n");
	assert_int_equal(n, strlen(line));
	n = hbd_sink_format(line, sizeof(line), 1, true, 65535, &ts, "\xff\x00", 2);
	assert_non_null(strstr(line, "\"transport\":\"udp\",\"seq\":65535"));
	assert_non_null(strstr(line, "\"payload\":\"/wA=\""));
	memset(big, 0xab, sizeof(big));
	/* the largest payload fits the line budget; a too small buffer is refused */
	HT_TRUE(hbd_sink_format(line, sizeof(line), UINT64_MAX, true, 1, &ts, big, sizeof(big)) >
			1368,
		"sink line of the largest payload (it fits the line budget)");
	assert_int_equal(hbd_sink_format(line, 50, 1, true, 1, &ts, big, sizeof(big)), 0);
	assert_int_equal(hbd_sink_format(line, sizeof(line), 1, true, 1, &ts, big,
					 HB_MAX_PAYLOAD + 1),
			 0);
}

static void sink_batches(void **state)
{
	struct timespec ts = { 0 };
	struct hbd_sink s;
	struct hbd_ack a = { .slot = 3, .gen = 4, .seq = 5 };
	struct hbd_sink_batch *b;

	(void)state;
	hbd_sink_init(&s, -1, false);
	assert_null(hbd_sink_start(&s)); /* nothing to write */
	for (int i = 0; i < 1000; i++)
		assert_int_equal(hbd_sink_add(&s, 1, false, (uint16_t)i, &ts, "x", 1, &a), 0);
	b = hbd_sink_start(&s);
	assert_non_null(b);
	assert_int_equal(b->nacks, 1000);
	assert_int_equal(b->bytes, 1000);
	assert_ptr_equal(hbd_sink_inflight(&s), b);
	/* while it is written, new lines go to the other batch, which waits its turn */
	assert_int_equal(hbd_sink_add(&s, 1, true, 9, &ts, "y", 1, &a), 0);
	assert_null(hbd_sink_start(&s));
	hbd_sink_done(&s);
	assert_null(hbd_sink_inflight(&s));
	b = hbd_sink_start(&s);
	assert_non_null(b);
	assert_int_equal(b->nacks, 1);
	assert_non_null(strstr(b->buf, "\"udp\""));
	hbd_sink_done(&s);
	hbd_sink_free(&s);
}

static void plan_rings(void **state)
{
	struct hbd_plan p;

	(void)state;
	/* this machine: 20000 fds, 2 CPUs */
	assert_int_equal(hbd_plan_workers(10000, 0, 2, 20000, &p), 0);
	assert_int_equal(p.workers, 2);
	HT_TRUE(p.slots * p.workers >= 10800 && p.slots <= 20000,
		"plan for 10000 clients: %u slots x %u workers", p.slots, p.workers);
	assert_int_equal(hbd_plan_workers(500000, 0, 2, 20000, &p), 0);
	HT_GE(p.workers, 28, "workers for 500000 clients within 20000 fds");
	HT_LE(p.slots, 20000 - HBD_SLOT_RESERVE, "slots a ring with %d fds kept in reserve",
	      HBD_SLOT_RESERVE);
	HT_GE((uint64_t)p.slots * p.workers, 540000,
	      "slots x workers for 500000 clients with 8%% spare (%u x %u)", p.slots, p.workers);
	/* a host with a high limit keeps one ring per CPU */
	assert_int_equal(hbd_plan_workers(500000, 0, 8, 1 << 20, &p), 0);
	assert_int_equal(p.workers, 8);
	HT_GE((uint64_t)p.slots * 8, 540000,
	      "slots x 8 workers for 500000 clients with 8%% spare (%u slots)", p.slots);
	/* RLIM_INFINITY */
	assert_int_equal(hbd_plan_workers(500000, 4, 8, UINT64_MAX, &p), 0);
	assert_int_equal(p.workers, 4);
	/* --workers is a floor, never a cap below what the clients need */
	assert_int_equal(hbd_plan_workers(100000, 1, 2, 20000, &p), 0);
	HT_GE(p.workers, 6, "workers for 100000 clients with --workers 1 (a floor)");
	assert_int_equal(hbd_plan_workers(2, 1, 1, 20000, &p), 0);
	assert_int_equal(p.slots, 64);
	assert_int_equal(hbd_plan_workers(0, 1, 1, 20000, &p), -EINVAL);
	assert_int_equal(hbd_plan_workers(10, 1, 1, 100, &p), -EMFILE);
	assert_int_equal(hbd_plan_workers(1u << 24, 1, 1, 1024, &p), -E2BIG);
	/* --ring-threads: rings shared out, a thread a ring without it or when asked for more */
	assert_int_equal(hbd_plan_workers(500000, 32, 2, 20000, &p), 0);
	assert_int_equal(p.per_thread, 1);
	assert_int_equal(p.threads, 32);
	hbd_plan_threads(&p, 2);
	assert_int_equal(p.per_thread, 16);
	assert_int_equal(p.threads, 2);
	hbd_plan_threads(&p, 64);
	assert_int_equal(p.threads, 32);
	p.workers = 5;
	hbd_plan_threads(&p, 4);
	assert_int_equal(p.per_thread, 2);
	assert_int_equal(p.threads, 3);
}

static void user_data_packing(void **state)
{
	uint64_t ud = hbd_ud(HBD_OP_MSG_KILL_UDP, 0xfffffffe, 0xbeef, HB_BYE_SUPERSEDED);

	(void)state;
	assert_int_equal(hbd_ud_op(ud), HBD_OP_MSG_KILL_UDP);
	assert_int_equal(hbd_ud_index(ud), 0xfffffffe);
	assert_int_equal(hbd_ud_gen(ud), 0xbeef);
	assert_int_equal(hbd_ud_aux(ud), HB_BYE_SUPERSEDED);
	assert_int_not_equal(hbd_ud(HBD_OP_RECV, 1, 1, 0), hbd_ud(HBD_OP_RECV, 1, 2, 0));
}

static void chunk_pool(void **state)
{
	struct hbd_chunks p;
	uint32_t got[1024 + 1], big, mid, extra;

	(void)state;
	assert_int_equal(hbd_chunks_init(&p, 64 * 1024), 0); /* one slab a class */
	/* the smallest class that fits */
	assert_int_equal(hbd_chunk_cap(&p, got[0] = hbd_chunk_alloc(&p, 1)), 56);
	assert_int_equal(hbd_chunk_cap(&p, mid = hbd_chunk_alloc(&p, 57)), 248);
	assert_int_equal(hbd_chunk_cap(&p, big = hbd_chunk_alloc(&p, HB_MAX_FRAME)), 2040);
	assert_int_equal(hbd_chunk_alloc(&p, 2041), HBD_NONE);
	hbd_chunk_put(&p, got[0]);
	hbd_chunk_put(&p, mid);
	/* a class is exhausted at its limit; the others are not */
	for (int i = 0; i < 1024; i++) {
		got[i] = hbd_chunk_alloc(&p, 8);
		assert_int_not_equal(got[i], HBD_NONE);
		hbd_chunk(&p, got[i])->data[55] = (uint8_t)i;
	}
	extra = hbd_chunk_alloc(&p, 8);
	assert_int_equal(extra, HBD_NONE);
	assert_int_not_equal(mid = hbd_chunk_alloc(&p, 8 + 57), HBD_NONE);
	for (int i = 0; i < 1024; i++)
		assert_int_equal(hbd_chunk(&p, got[i])->data[55], (uint8_t)i);
	hbd_chunk_put(&p, got[10]);
	assert_int_equal(hbd_chunk_alloc(&p, 3), got[10]);
	assert_int_equal(p.used, 1024 + 2);
	hbd_chunks_free(&p);
}

static void stats_json(void **state)
{
	struct hb_ustats slots[3];
	struct hb_ustats sum;
	char buf[4096];

	(void)state;
	memset(slots, 0, sizeof(slots));
	HBD_STAT_ADD(&slots[0], pings_user, 5);
	HBD_STAT_ADD(&slots[2], pings_user, 6);
	HBD_STAT_ADD(&slots[1], tcp_active, 1);
	HBD_STAT_SUB(&slots[2], tcp_active, 1);
	HBD_STAT_ADD(&slots[1], full, 3);
	hbd_stats_sum(slots, 3, &sum);
	assert_int_equal(sum.pings_user, 11);
	assert_int_equal(sum.tcp_active, 0); /* a gauge moved by two workers */
	HT_GT(hbd_stats_json(&sum, buf, sizeof(buf)), 0, "stats JSON written");
	assert_non_null(strstr(buf, "{\"pings_user\":11,"));
	assert_non_null(strstr(buf, "\"full\":3"));
	assert_int_equal(buf[strlen(buf) - 1], '}'); /* one closed object, whatever comes last */
	assert_int_equal(hbd_stats_json(&sum, buf, 20), -ENOSPC);
}

static void args(void **state)
{
	struct hbd_config c;
	char *ok[] = { "hbd", "--keys",	       "k", "--interval",   "0.2",    "--expiry-mult",
		       "2",   "--max-clients", "5", "--no-offload", "--bind", "127.0.0.1",
		       NULL };
	char *bad[] = { "hbd", "--keys", "k", "--interval", "abc", NULL };
	char *nokeys[] = { "hbd", NULL };
	char *rx[] = { "hbd", "--keys", "k", "--rx-buffers", "100", NULL };

	(void)state;
	hbd_config_defaults(&c);
	assert_int_equal(hbd_parse_args(12, ok, &c), 0);
	HT_TRUE(c.interval_s > 0.19 && c.interval_s < 0.21, "--interval 0.2 parsed as %f",
		c.interval_s);
	assert_int_equal(c.max_clients, 5);
	HT_TRUE(c.no_offload, "--no-offload parsed");
	assert_string_equal(c.bind, "127.0.0.1");
	hbd_config_defaults(&c);
	assert_int_equal(hbd_parse_args(5, bad, &c), -EINVAL);
	hbd_config_defaults(&c);
	assert_int_equal(hbd_parse_args(1, nokeys, &c), -EINVAL);
	hbd_config_defaults(&c);
	assert_int_equal(hbd_parse_args(5, rx, &c), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(wheel_never_early_never_late),
		cmocka_unit_test(wheel_del_and_reschedule),
		cmocka_unit_test(wheel_beyond_span_is_clamped_early),
		cmocka_unit_test(wheel_idle_jump_and_shared_links),
		cmocka_unit_test(wheel_tick_cost_is_proportional),
		cmocka_unit_test(devices_replay_and_supersede),
		cmocka_unit_test(devices_grow_and_sweep),
		cmocka_unit_test(devices_rekey_by_tag),
		cmocka_unit_test(sessions_lifecycle),
		cmocka_unit_test(sink_line_format),
		cmocka_unit_test(sink_batches),
		cmocka_unit_test(plan_rings),
		cmocka_unit_test(user_data_packing),
		cmocka_unit_test(chunk_pool),
		cmocka_unit_test(stats_json),
		cmocka_unit_test(args),
	};

	return cmocka_run_group_tests_name("hbd_logic", tests, NULL, NULL);
}
