/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Timing wheel of due clients for one ring: 1 ms slots, exact due times, O(1) add/remove.
 *
 * Each client has at most one wakeup (its next heartbeat, HELLO deadline or reconnect time).
 * Entries sit in doubly linked lists threaded through parallel arrays indexed by client, so
 * nothing is allocated after init and a client can be rescheduled earlier or later at any time.
 * The slot only narrows the search; an entry keeps its exact due time in nanoseconds and is
 * popped only once that time has come, so a heartbeat is never sent before its scheduled time
 * (its timestamp would then be in the future) and the ring can sleep until exactly the next due
 * time instead of rounding to the millisecond (which would add up to 1 ms to every RTT).
 * Slots cover HBL_WHEEL_SLOTS ms (65 s); a later wakeup waits in its slot for the right lap.
 */
#ifndef HBL_WHEEL_H
#define HBL_WHEEL_H

#include <stdint.h>

#define HBL_NIL UINT32_MAX
#define HBL_WHEEL_SLOTS 65536u /* power of two */

struct hbl_wheel {
	uint32_t *head; /* [HBL_WHEEL_SLOTS] first entry of each slot */
	uint32_t *prev, *next; /* [n] links */
	uint32_t *slot; /* [n] slot the entry is in, HBL_NIL if not queued */
	uint64_t *due; /* [n] due time, CLOCK_MONOTONIC ns */
	uint32_t n;
	uint32_t count; /* entries queued */
	uint64_t epoch_ns; /* tick 0 */
	uint64_t cur; /* first slot (tick) that may hold due entries: every earlier one is empty */
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
