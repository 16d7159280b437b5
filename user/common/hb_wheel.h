/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Hashed timer wheel: O(1) add/remove, cost per step ~ entries due then. One wheel serves
 * hbd's keepalive expiry (ms, 8 bytes of links a connection) and hbload's wakeups (ns, exact
 * times kept by the caller: user/hbload/wakeups.h).
 */
#ifndef HB_WHEEL_H
#define HB_WHEEL_H

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
 * unlinks itself without knowing its bucket. Times are in any unit (hbd: ms, hbload: ns);
 * bucket t holds deadlines in ((t - 1) * tick, t * tick]. Deadlines are kept within nbuckets
 * ticks of the current tick (clamped earlier otherwise), so a bucket only ever holds one
 * tick's entries.
 */
struct hb_wheel {
	struct hb_wlink *links; /* cap entries, not owned */
	struct hb_wlink *heads; /* nbuckets sentinels, owned */
	uint32_t cap;
	uint32_t mask; /* nbuckets - 1 */
	uint64_t tick;
	uint64_t cur; /* next tick to hand out */
	uint32_t count; /* entries scheduled */
};

/* Marks cap ids as unscheduled. */
void hb_wheel_links_init(struct hb_wlink *links, uint32_t cap);

/* A wheel of the given tick whose buckets span at least span (same unit). Returns 0 or
 * -ENOMEM / -EINVAL.
 */
int hb_wheel_init(struct hb_wheel *w, struct hb_wlink *links, uint32_t cap, uint64_t tick,
		  uint64_t span, uint64_t now);
void hb_wheel_free(struct hb_wheel *w);

/* Schedules id (not scheduled yet) to be handed out by the first hb_wheel_due() call with
 * now >= due. Deadlines already past, or beyond the span, are clamped to the nearest bucket:
 * an entry may come out early (beyond the span) but never late by more than a tick, so the
 * caller always re-checks the real deadline.
 */
void hb_wheel_add(struct hb_wheel *w, uint32_t id, uint64_t due);
/* Unschedules id; a no-op if it is not scheduled. */
void hb_wheel_del(struct hb_wheel *w, uint32_t id);
static inline bool hb_wheel_scheduled(const struct hb_wheel *w, uint32_t id)
{
	return w->links[id].next != HB_WHEEL_NONE;
}

/* Unlinks up to max entries whose bucket is due at now into out; returns how many. Call
 * again while it returns max. Work is proportional to entries returned plus ticks elapsed
 * (at most one lap of the wheel however long the caller stalled).
 */
uint32_t hb_wheel_due(struct hb_wheel *w, uint64_t now, uint32_t *out, uint32_t max);

/* Walking one bucket without unlinking (for callers that keep exact deadlines and want the
 * entries of the tick under way): the first id of tick t's bucket, then the next after id;
 * HB_WHEEL_NONE at the end. The bucket must not change during the walk.
 */
uint32_t hb_wheel_first(const struct hb_wheel *w, uint64_t t);
uint32_t hb_wheel_next(const struct hb_wheel *w, uint32_t id);

#endif
