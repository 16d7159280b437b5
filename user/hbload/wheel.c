// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Timing wheel: 1 ms slots of intrusive doubly linked lists over client indexes. */
#include "wheel.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MASK (HBL_WHEEL_SLOTS - 1)

int hbl_wheel_init(struct hbl_wheel *w, uint32_t n, uint64_t epoch_ns)
{
	memset(w, 0, sizeof(*w));
	w->head = malloc(HBL_WHEEL_SLOTS * sizeof(*w->head));
	w->prev = malloc((size_t)(n ? n : 1) * sizeof(*w->prev));
	w->next = malloc((size_t)(n ? n : 1) * sizeof(*w->next));
	w->due = malloc((size_t)(n ? n : 1) * sizeof(*w->due));
	w->slot = malloc((size_t)(n ? n : 1) * sizeof(*w->slot));
	if (!w->head || !w->prev || !w->next || !w->due || !w->slot) {
		hbl_wheel_free(w);
		return -ENOMEM;
	}
	/* all HBL_NIL: empty slots, nothing queued */
	memset(w->head, 0xff, HBL_WHEEL_SLOTS * sizeof(*w->head));
	memset(w->slot, 0xff, (size_t)(n ? n : 1) * sizeof(*w->slot));
	w->n = n;
	w->epoch_ns = epoch_ns;
	return 0;
}

void hbl_wheel_free(struct hbl_wheel *w)
{
	free(w->head);
	free(w->prev);
	free(w->next);
	free(w->due);
	free(w->slot);
	memset(w, 0, sizeof(*w));
}

static uint64_t tick_of(const struct hbl_wheel *w, uint64_t ns)
{
	return ns <= w->epoch_ns ? 0 : (ns - w->epoch_ns) / 1000000;
}

/* The slot an entry lives in: its due tick, or the first unscanned one if that has passed. */
static uint64_t slot_tick(const struct hbl_wheel *w, uint64_t due)
{
	uint64_t t = tick_of(w, due);

	return t < w->cur ? w->cur : t;
}

static void unlink_entry(struct hbl_wheel *w, uint32_t i)
{
	if (w->prev[i] != HBL_NIL)
		w->next[w->prev[i]] = w->next[i];
	else
		w->head[w->slot[i]] = w->next[i];
	if (w->next[i] != HBL_NIL)
		w->prev[w->next[i]] = w->prev[i];
	w->slot[i] = HBL_NIL;
	w->count--;
}

void hbl_wheel_del(struct hbl_wheel *w, uint32_t i)
{
	if (w->slot[i] != HBL_NIL)
		unlink_entry(w, i);
}

void hbl_wheel_set(struct hbl_wheel *w, uint32_t i, uint64_t due_ns)
{
	uint32_t s, *h;

	hbl_wheel_del(w, i);
	w->due[i] = due_ns;
	s = (uint32_t)(slot_tick(w, due_ns) & MASK);
	h = &w->head[s];
	w->prev[i] = HBL_NIL;
	w->next[i] = *h;
	if (*h != HBL_NIL)
		w->prev[*h] = i;
	*h = i;
	w->slot[i] = s;
	w->count++;
}

static uint32_t take_due(struct hbl_wheel *w, uint64_t slot, uint64_t now_ns)
{
	for (uint32_t i = w->head[slot & MASK]; i != HBL_NIL; i = w->next[i]) {
		/* entries of later laps share the slot; their due time is still ahead */
		if (w->due[i] <= now_ns) {
			unlink_entry(w, i);
			return i;
		}
	}
	return HBL_NIL;
}

uint32_t hbl_wheel_pop(struct hbl_wheel *w, uint64_t now_ns)
{
	uint64_t now = tick_of(w, now_ns);
	uint32_t i;

	if (!w->count) {
		if (w->cur < now)
			w->cur = now;
		return HBL_NIL;
	}
	/* after a long stall one lap visits every slot: skip the rest */
	if (now >= HBL_WHEEL_SLOTS && w->cur < now - HBL_WHEEL_SLOTS + 1)
		w->cur = now - HBL_WHEEL_SLOTS + 1;
	/* slots before the current tick hold only due entries (and later laps) */
	for (; w->cur < now; w->cur++)
		if ((i = take_due(w, w->cur, now_ns)) != HBL_NIL)
			return i;
	/* the current tick's slot may hold entries due later in this millisecond: cur stays */
	return take_due(w, now, now_ns);
}

uint64_t hbl_wheel_next_ns(const struct hbl_wheel *w, uint64_t now_ns, uint32_t limit_ms)
{
	uint64_t now = tick_of(w, now_ns), best = UINT64_MAX;
	uint64_t from = w->cur < now ? w->cur : now;

	if (!w->count)
		return (uint64_t)limit_ms * 1000000;
	for (uint64_t t = from; t <= now + limit_ms && t < from + HBL_WHEEL_SLOTS; t++) {
		for (uint32_t i = w->head[t & MASK]; i != HBL_NIL; i = w->next[i])
			if (tick_of(w, w->due[i]) <= t && w->due[i] < best)
				best = w->due[i];
		/* the first slot with an entry of this lap holds the earliest one */
		if (best != UINT64_MAX)
			break;
	}
	if (best == UINT64_MAX)
		return (uint64_t)limit_ms * 1000000;
	return best > now_ns ? best - now_ns : 0;
}
