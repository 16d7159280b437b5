// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A ring's wakeups: the common wheel plus exact due times (see wakeups.h). */
#include "wakeups.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TICK_NS 1000000ULL

int hbl_wheel_init(struct hbl_wheel *w, uint32_t n, uint64_t epoch_ns)
{
	uint32_t cap = n ? n : 1;
	int rc;

	memset(w, 0, sizeof(*w));
	w->links = malloc((size_t)cap * sizeof(*w->links));
	w->due = malloc((size_t)cap * sizeof(*w->due));
	if (!w->links || !w->due) {
		hbl_wheel_free(w);
		return -ENOMEM;
	}
	hb_wheel_links_init(w->links, cap);
	/* span: one bucket short of the whole wheel, so nbuckets is exactly HBL_WHEEL_SLOTS */
	rc = hb_wheel_init(&w->w, w->links, cap, TICK_NS, (HBL_WHEEL_SLOTS - 2) * TICK_NS, 0);
	if (rc) {
		hbl_wheel_free(w);
		return rc;
	}
	w->n = n;
	w->epoch_ns = epoch_ns;
	return 0;
}

void hbl_wheel_free(struct hbl_wheel *w)
{
	hb_wheel_free(&w->w);
	free(w->links);
	free(w->due);
	memset(w, 0, sizeof(*w));
}

static uint64_t rel(const struct hbl_wheel *w, uint64_t ns)
{
	return ns > w->epoch_ns ? ns - w->epoch_ns : 0;
}

void hbl_wheel_del(struct hbl_wheel *w, uint32_t i)
{
	if (hb_wheel_scheduled(&w->w, i)) {
		hb_wheel_del(&w->w, i);
		w->count--;
	}
}

void hbl_wheel_set(struct hbl_wheel *w, uint32_t i, uint64_t due_ns)
{
	hbl_wheel_del(w, i);
	w->due[i] = due_ns;
	hb_wheel_add(&w->w, i, rel(w, due_ns));
	w->count++;
}

uint32_t hbl_wheel_pop(struct hbl_wheel *w, uint64_t now_ns)
{
	uint64_t now = rel(w, now_ns);
	uint32_t i;

	if (!w->count) {
		hb_wheel_due(&w->w, now, &i, 1); /* moves the wheel on past idle ticks */
		return HBL_NIL;
	}
	/* whole ticks that have passed: everything in them is due, except entries clamped there
	 * from beyond the wheel's span, which go back in for their real time
	 */
	while (hb_wheel_due(&w->w, now, &i, 1)) {
		w->count--;
		if (w->due[i] <= now_ns)
			return i;
		hbl_wheel_set(w, i, w->due[i]);
	}
	/* the tick under way: what is due in it already */
	for (i = hb_wheel_first(&w->w, w->w.cur); i != HBL_NIL; i = hb_wheel_next(&w->w, i)) {
		if (w->due[i] <= now_ns) {
			hbl_wheel_del(w, i);
			return i;
		}
	}
	return HBL_NIL;
}

uint64_t hbl_wheel_next_ns(const struct hbl_wheel *w, uint64_t now_ns, uint32_t limit_ms)
{
	uint64_t now = rel(w, now_ns), best = UINT64_MAX;
	uint64_t from = w->w.cur, to = now / TICK_NS + 1 + limit_ms;

	if (!w->count)
		return (uint64_t)limit_ms * TICK_NS;
	/* buckets not yet handed out hold their tick's entries (and, at most, ones clamped from
	 * beyond the span, whose real time is later): the first non-empty one has the earliest
	 */
	for (uint64_t t = from; t <= to && t < from + HBL_WHEEL_SLOTS; t++) {
		for (uint32_t i = hb_wheel_first(&w->w, t); i != HBL_NIL;
		     i = hb_wheel_next(&w->w, i))
			if (w->due[i] < best)
				best = w->due[i];
		if (best != UINT64_MAX)
			break;
	}
	if (best == UINT64_MAX || best > now_ns + (uint64_t)limit_ms * TICK_NS)
		return (uint64_t)limit_ms * TICK_NS;
	return best > now_ns ? best - now_ns : 0;
}
