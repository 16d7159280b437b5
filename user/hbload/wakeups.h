/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A ring's wakeups: when each client next needs attention, at exact times, O(1) add/remove.
 *
 * Each client has at most one wakeup (its next heartbeat, HELLO deadline or reconnect time).
 * The wheel is the common one (user/common/hb_wheel.h) with 1 ms buckets over 65 s; this
 * wrapper keeps each entry's exact due time in nanoseconds and hands an entry out only once that
 * time has come, so a heartbeat is never sent before its scheduled time (its timestamp would
 * then be in the future) and the ring can sleep until exactly the next due time instead of
 * rounding to the millisecond (which would add up to 1 ms to every RTT). 16 bytes a client.
 */
#ifndef HBL_WAKEUPS_H
#define HBL_WAKEUPS_H

#include <stdint.h>

#include "hb_wheel.h"

#define HBL_NIL HB_WHEEL_NONE
#define HBL_WHEEL_SLOTS 65536u /* 1 ms buckets: 65 s; a later wakeup comes back early, re-queued */

struct hbl_wheel {
	struct hb_wheel w; /* times in ns since epoch_ns, 1 ms ticks */
	struct hb_wlink *links; /* [n] */
	uint64_t *due; /* [n] exact due time, CLOCK_MONOTONIC ns */
	uint64_t epoch_ns;
	uint32_t n;
	uint32_t count; /* entries queued */
};

int hbl_wheel_init(struct hbl_wheel *w, uint32_t n, uint64_t epoch_ns);
void hbl_wheel_free(struct hbl_wheel *w);
/* Queues (or moves) entry i to fire at due_ns; times in the past fire on the next pop. */
void hbl_wheel_set(struct hbl_wheel *w, uint32_t i, uint64_t due_ns);
void hbl_wheel_del(struct hbl_wheel *w, uint32_t i);
/* Returns one entry due at or before now (and unqueues it), or HBL_NIL. */
uint32_t hbl_wheel_pop(struct hbl_wheel *w, uint64_t now_ns);
/* Nanoseconds from now until the earliest queued entry, looking at most limit_ms ahead;
 * limit_ms * 1e6 if none is that close. 0 if something is due now.
 */
uint64_t hbl_wheel_next_ns(const struct hbl_wheel *w, uint64_t now_ns, uint32_t limit_ms);

#endif
