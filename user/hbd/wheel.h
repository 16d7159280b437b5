/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Hashed timer wheel of expiry deadlines: O(1) add/remove, cost per tick ~ entries due then. */
#ifndef HBD_WHEEL_H
#define HBD_WHEEL_H

#include <stdbool.h>
#include <stdint.h>

#define HB_WHEEL_NONE UINT32_MAX

/* Intrusive links, indexed by id. An id's links are HB_WHEEL_NONE while it is not scheduled.
 * Several wheels may share one links array as long as each id is in at most one of them (the
 * UDP session table does this: one array, one wheel per owning worker).
 */
struct hb_wlink {
	uint32_t next, prev;
};

/* Each bucket is a circular doubly linked list whose sentinel has id cap + bucket, so an entry
 * unlinks itself without knowing its bucket. Deadlines are kept within nbuckets ticks of the
 * current tick (clamped earlier otherwise), so a bucket only ever holds one tick's entries.
 */
struct hb_wheel {
	struct hb_wlink *links; /* cap entries, not owned */
	struct hb_wlink *heads; /* nbuckets sentinels, owned */
	uint32_t cap;
	uint32_t mask; /* nbuckets - 1 */
	uint64_t tick_ms;
	uint64_t cur; /* next tick to hand out */
	uint32_t count; /* entries scheduled */
};

/* Marks cap ids as unscheduled. */
void hb_wheel_links_init(struct hb_wlink *links, uint32_t cap);

/* A wheel of tick_ms granularity whose buckets span at least span_ms. Returns 0 or -ENOMEM /
 * -EINVAL.
 */
int hb_wheel_init(struct hb_wheel *w, struct hb_wlink *links, uint32_t cap, uint64_t tick_ms,
		  uint64_t span_ms, uint64_t now_ms);
void hb_wheel_free(struct hb_wheel *w);

/* Schedules id (not scheduled yet) to be handed out by the first hb_wheel_due() call with
 * now_ms >= due_ms. Deadlines already past, or beyond the span, are clamped to the nearest
 * bucket: an entry may come out early (beyond the span) but never late by more than a tick, so
 * the caller always re-checks the real deadline.
 */
void hb_wheel_add(struct hb_wheel *w, uint32_t id, uint64_t due_ms);
/* Unschedules id; a no-op if it is not scheduled. */
void hb_wheel_del(struct hb_wheel *w, uint32_t id);
static inline bool hb_wheel_scheduled(const struct hb_wheel *w, uint32_t id)
{
	return w->links[id].next != HB_WHEEL_NONE;
}

/* Unlinks up to max entries whose bucket is due at now_ms into out; returns how many. Call
 * again while it returns max. Work is proportional to entries returned plus ticks elapsed.
 */
uint32_t hb_wheel_due(struct hb_wheel *w, uint64_t now_ms, uint32_t *out, uint32_t max);

#endif
