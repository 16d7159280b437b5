// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Hashed timer wheel: no scan of all entries, only of those due in a tick. */
#include "hb_wheel.h"

#include <errno.h>
#include <stdlib.h>

static inline struct hb_wlink *node(struct hb_wheel *w, uint32_t id)
{
	return id < w->cap ? &w->links[id] : &w->heads[id - w->cap];
}

void hb_wheel_links_init(struct hb_wlink *links, uint32_t cap)
{
	for (uint32_t i = 0; i < cap; i++)
		links[i].next = links[i].prev = HB_WHEEL_NONE;
}

int hb_wheel_init(struct hb_wheel *w, struct hb_wlink *links, uint32_t cap, uint64_t tick,
		  uint64_t span, uint64_t now)
{
	uint64_t want, n = 2;

	if (!tick || cap >= UINT32_MAX / 2)
		return -EINVAL;
	/* +2: the bucket being handed out and rounding of the deadline up to a tick */
	want = span / tick + 2;
	while (n < want) {
		if (n >= (1u << 24))
			return -EINVAL;
		n <<= 1;
	}
	w->heads = calloc(n, sizeof(*w->heads));
	if (!w->heads)
		return -ENOMEM;
	w->links = links;
	w->cap = cap;
	w->mask = (uint32_t)n - 1;
	w->tick = tick;
	w->cur = now / tick;
	w->count = 0;
	for (uint32_t b = 0; b < n; b++)
		w->heads[b].next = w->heads[b].prev = cap + b;
	return 0;
}

void hb_wheel_free(struct hb_wheel *w)
{
	free(w->heads);
	w->heads = NULL;
}

void hb_wheel_add(struct hb_wheel *w, uint32_t id, uint64_t due)
{
	uint64_t t = (due + w->tick - 1) / w->tick; /* first tick at or after due */
	uint32_t s;
	struct hb_wlink *e = &w->links[id], *h;

	if (t < w->cur)
		t = w->cur;
	if (t > w->cur + w->mask)
		t = w->cur + w->mask;
	s = w->cap + (uint32_t)(t & w->mask);
	h = node(w, s);
	/* insert at the tail: entries of a bucket come out in the order they were added */
	e->next = s;
	e->prev = h->prev;
	node(w, h->prev)->next = id;
	h->prev = id;
	w->count++;
}

static void unlink_id(struct hb_wheel *w, uint32_t id)
{
	struct hb_wlink *e = &w->links[id];

	node(w, e->prev)->next = e->next;
	node(w, e->next)->prev = e->prev;
	e->next = e->prev = HB_WHEEL_NONE;
	w->count--;
}

void hb_wheel_del(struct hb_wheel *w, uint32_t id)
{
	if (w->links[id].next != HB_WHEEL_NONE)
		unlink_id(w, id);
}

uint32_t hb_wheel_due(struct hb_wheel *w, uint64_t now, uint32_t *out, uint32_t max)
{
	uint64_t now_tick = now / w->tick;
	uint32_t n = 0;

	/* after a stall longer than the wheel every bucket is due: one lap visits them all */
	if (now_tick > w->cur + w->mask)
		w->cur = now_tick - w->mask;
	while (w->cur <= now_tick && n < max) {
		uint32_t s = w->cap + (uint32_t)(w->cur & w->mask);
		struct hb_wlink *h = node(w, s);

		if (w->count == 0) {
			w->cur = now_tick + 1; /* nothing scheduled: skip the idle ticks at once */
			break;
		}
		while (h->next != s && n < max) {
			uint32_t id = h->next;

			unlink_id(w, id);
			out[n++] = id;
		}
		if (h->next == s)
			w->cur++;
	}
	return n;
}

uint32_t hb_wheel_first(const struct hb_wheel *w, uint64_t t)
{
	uint32_t s = w->cap + (uint32_t)(t & w->mask);
	uint32_t id = w->heads[s - w->cap].next;

	return id == s ? HB_WHEEL_NONE : id;
}

uint32_t hb_wheel_next(const struct hb_wheel *w, uint32_t id)
{
	uint32_t nx = w->links[id].next;

	return nx >= w->cap ? HB_WHEEL_NONE : nx; /* a sentinel ends the bucket */
}
