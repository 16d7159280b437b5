// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Device table: 64 shards, each an open-addressing hash (linear probing) under its own lock.
 *
 * Memory: 24 bytes an entry. Shards are sized up front for the expected number of devices at
 * a load of 3/4, with any capacity (not only powers of two: an index is the hash scaled to the
 * capacity), and grow by half when they pass 7/8; so ~32 bytes a device at the expected count
 * instead of 32..64 with doubling. calloc'd: pages are touched only as entries land in them.
 * Hand-written rather than a library hash: it must be compact at 500k devices and needs
 * deletion without tombstones (backward shift), which glibc's hsearch does not offer.
 */
#include "devices.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SHARD_BITS 6
#define NSHARDS (1u << SHARD_BITS)
#define SHARD_MIN 64

#define TS_MAX ((1ull << 56) - 1) /* ms since 1970: two million years */

struct dev {
	uint64_t id; /* 0 = empty slot (device ids are nonzero) */
	uint64_t last_ts_ms : 56;
	/* the tag of the key store that verified the current session's HELLO, or that a reload
	 * found giving it the same secret (0: not known, e.g. adopted): a reload tells by it
	 * which sessions came in under its new store and need no check (hbd_devices_rekey) */
	uint64_t key_tag : 8;
	uint64_t loc;
};

_Static_assert(sizeof(struct dev) == 24, "a device table entry stays 24 bytes");

static inline uint64_t ts_clamp(uint64_t ts_ms)
{
	return ts_ms < TS_MAX ? ts_ms : TS_MAX;
}

struct shard {
	pthread_mutex_t lock;
	struct dev *slot;
	uint32_t cap, used, sweep;
} __attribute__((aligned(64)));

struct hbd_devices {
	struct shard shard[NSHARDS];
	unsigned sweep_shard;
	uint64_t adoptions; /* atomic */
};

static inline uint64_t mix(uint64_t x)
{
	/* splitmix64 finalizer: device ids are often sequential */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

int hbd_devices_init(struct hbd_devices **out, size_t expect)
{
	struct hbd_devices *t = calloc(1, sizeof(*t));
	size_t per = (expect * 4 / 3 + NSHARDS - 1) / NSHARDS;

	if (!t)
		return -ENOMEM;
	if (per < SHARD_MIN)
		per = SHARD_MIN;
	if (per > UINT32_MAX / 4)
		per = UINT32_MAX / 4;
	for (unsigned i = 0; i < NSHARDS; i++) {
		struct shard *s = &t->shard[i];

		pthread_mutex_init(&s->lock, NULL);
		s->slot = calloc(per, sizeof(*s->slot));
		s->cap = (uint32_t)per;
		if (!s->slot) {
			hbd_devices_free(t);
			return -ENOMEM;
		}
	}
	*out = t;
	return 0;
}

void hbd_devices_free(struct hbd_devices *t)
{
	if (!t)
		return;
	for (unsigned i = 0; i < NSHARDS; i++) {
		free(t->shard[i].slot);
		pthread_mutex_destroy(&t->shard[i].lock);
	}
	free(t);
}

static inline struct shard *shard_of(struct hbd_devices *t, uint64_t h)
{
	return &t->shard[h >> (64 - SHARD_BITS)];
}

/* Home slot of a hash: its low 32 bits scaled to the capacity (the top bits chose the shard). */
static inline uint32_t home_of(const struct shard *s, uint64_t h)
{
	return (uint32_t)(((h & 0xffffffffull) * s->cap) >> 32);
}

static inline uint32_t next_slot(const struct shard *s, uint32_t i)
{
	return i + 1 == s->cap ? 0 : i + 1;
}

/* Slot holding id, or the empty slot where it would go. */
static uint32_t probe(const struct shard *s, uint64_t id, uint64_t h)
{
	uint32_t i = home_of(s, h);

	while (s->slot[i].id && s->slot[i].id != id)
		i = next_slot(s, i);
	return i;
}

/* One more entry would pass a load of 7/8: grow first (linear probing slows down beyond). */
static inline int needs_room(const struct shard *s)
{
	return (uint64_t)(s->used + 1) * 8 > (uint64_t)s->cap * 7;
}

static int grow(struct shard *s)
{
	uint32_t oldn = s->cap, n = oldn + oldn / 2;
	struct dev *old = s->slot, *nw = calloc(n, sizeof(*nw));

	if (!nw)
		return -ENOMEM;
	s->slot = nw;
	s->cap = n;
	for (uint32_t i = 0; i < oldn; i++) {
		if (old[i].id)
			nw[probe(s, old[i].id, mix(old[i].id))] = old[i];
	}
	free(old);
	s->sweep = 0;
	return 0;
}

/* Backward-shift deletion: later entries of the probe run move up so lookups never stop at a
 * hole that was not there when they were inserted.
 */
static void remove_at(struct shard *s, uint32_t i)
{
	uint32_t j = i;

	for (;;) {
		uint32_t home;

		j = next_slot(s, j);
		if (!s->slot[j].id)
			break;
		home = home_of(s, mix(s->slot[j].id));
		/* move j into the hole at i unless its home lies cyclically in (i, j] */
		if ((j + s->cap - home) % s->cap >= (j + s->cap - i) % s->cap) {
			s->slot[i] = s->slot[j];
			i = j;
		}
	}
	memset(&s->slot[i], 0, sizeof(s->slot[i]));
	s->used--;
}

/* The entry of id, added (empty: no timestamp, no location) if the shard had none, which
 * *added (may be NULL) tells; NULL with *rc set if the shard could not grow. Called with the
 * shard's lock held. */
static struct dev *lookup_or_add(struct shard *s, uint64_t id, uint64_t h, bool *added, int *rc)
{
	struct dev *d = &s->slot[probe(s, id, h)];

	if (added)
		*added = !d->id;
	if (d->id)
		return d;
	if (needs_room(s)) {
		*rc = grow(s);
		if (*rc)
			return NULL;
		d = &s->slot[probe(s, id, h)];
	}
	d->id = id;
	d->last_ts_ms = 0;
	d->key_tag = 0;
	d->loc = 0;
	s->used++;
	return d;
}

int hbd_devices_hello(struct hbd_devices *t, uint64_t id, uint64_t ts_ms, uint64_t new_loc,
		      uint8_t key_tag, uint64_t *old_loc)
{
	uint64_t h = mix(id);
	struct shard *s = shard_of(t, h);
	struct dev *d;
	bool added;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	d = lookup_or_add(s, id, h, &added, &rc);
	if (!d)
		goto out;
	ts_ms = ts_clamp(ts_ms);
	if (!added && ts_ms <= d->last_ts_ms) {
		rc = -EALREADY;
		goto out;
	}
	d->last_ts_ms = ts_ms;
	*old_loc = d->loc;
	d->loc = new_loc;
	d->key_tag = key_tag;
out:
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int hbd_devices_claim(struct hbd_devices *t, uint64_t id, uint64_t new_loc, uint8_t key_tag,
		      uint64_t *old_loc)
{
	uint64_t h = mix(id);
	struct shard *s = shard_of(t, h);
	struct dev *d;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	d = lookup_or_add(s, id, h, NULL, &rc);
	if (d) {
		*old_loc = d->loc;
		d->loc = new_loc;
		d->key_tag = key_tag;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int hbd_devices_adopt(struct hbd_devices *t, uint64_t id, uint64_t ts_ms, uint64_t loc)
{
	uint64_t h = mix(id);
	struct shard *s = shard_of(t, h);
	struct dev *d;
	int rc = 0;

	if (!id)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	d = lookup_or_add(s, id, h, NULL, &rc);
	if (!d)
		goto out;
	if (d->loc) {
		rc = -EEXIST;
		goto out;
	}
	ts_ms = ts_clamp(ts_ms);
	if (ts_ms > d->last_ts_ms)
		d->last_ts_ms = ts_ms;
	d->loc = loc;
	d->key_tag = 0; /* verified by another daemon, with keys we do not know */
	__atomic_add_fetch(&t->adoptions, 1, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&s->lock);
	return rc;
}

uint64_t hbd_devices_adoptions(struct hbd_devices *t)
{
	return __atomic_load_n(&t->adoptions, __ATOMIC_ACQUIRE);
}

void hbd_devices_release(struct hbd_devices *t, uint64_t id, uint64_t loc)
{
	uint64_t h = mix(id);
	struct shard *s = shard_of(t, h);
	struct dev *d;

	pthread_mutex_lock(&s->lock);
	d = &s->slot[probe(s, id, h)];
	if (d->id == id && d->loc == loc)
		d->loc = 0;
	pthread_mutex_unlock(&s->lock);
}

uint64_t hbd_devices_loc(struct hbd_devices *t, uint64_t id)
{
	uint64_t h = mix(id), loc = 0;
	struct shard *s = shard_of(t, h);
	struct dev *d;

	pthread_mutex_lock(&s->lock);
	d = &s->slot[probe(s, id, h)];
	if (d->id == id)
		loc = d->loc;
	pthread_mutex_unlock(&s->lock);
	return loc;
}

unsigned hbd_devices_sweep(struct hbd_devices *t, uint64_t now_ms, uint64_t window_ms,
			   unsigned budget)
{
	unsigned dropped = 0;

	while (budget) {
		struct shard *s = &t->shard[t->sweep_shard];

		pthread_mutex_lock(&s->lock);
		while (budget && s->sweep < s->cap) {
			struct dev *d = &s->slot[s->sweep];

			budget--;
			if (d->id && !d->loc && d->last_ts_ms + window_ms < now_ms) {
				remove_at(s, s->sweep);
				dropped++;
				continue; /* an entry may have shifted into this slot */
			}
			s->sweep++;
		}
		if (s->sweep >= s->cap) {
			s->sweep = 0;
			t->sweep_shard = (t->sweep_shard + 1) % NSHARDS;
		}
		pthread_mutex_unlock(&s->lock);
	}
	return dropped;
}

size_t hbd_devices_count(struct hbd_devices *t)
{
	size_t n = 0;

	for (unsigned i = 0; i < NSHARDS; i++) {
		pthread_mutex_lock(&t->shard[i].lock);
		n += t->shard[i].used;
		pthread_mutex_unlock(&t->shard[i].lock);
	}
	return n;
}

void hbd_devices_rekey(struct hbd_devices *t, uint8_t key_tag,
		       bool (*keep)(void *arg, uint64_t id, uint64_t loc), void *arg)
{
	for (unsigned i = 0; i < NSHARDS; i++) {
		struct shard *s = &t->shard[i];

		pthread_mutex_lock(&s->lock);
		for (uint32_t k = 0; k < s->cap; k++) {
			struct dev *d = &s->slot[k];

			if (d->id && d->loc && d->key_tag != key_tag && keep(arg, d->id, d->loc))
				d->key_tag = key_tag;
		}
		pthread_mutex_unlock(&s->lock);
	}
}

void hbd_devices_foreach(struct hbd_devices *t,
			 void (*fn)(void *ctx, uint64_t id, uint64_t last_ts_ms), void *ctx)
{
	for (unsigned i = 0; i < NSHARDS; i++) {
		struct shard *s = &t->shard[i];

		pthread_mutex_lock(&s->lock);
		for (uint32_t k = 0; k < s->cap; k++)
			if (s->slot[k].id)
				fn(ctx, s->slot[k].id, s->slot[k].last_ts_ms);
		pthread_mutex_unlock(&s->lock);
	}
}

int hbd_devices_note(struct hbd_devices *t, uint64_t id, uint64_t ts_ms)
{
	uint64_t h = mix(id);
	struct shard *s = shard_of(t, h);
	struct dev *d;
	int rc = 0;

	if (!id)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	d = lookup_or_add(s, id, h, NULL, &rc);
	if (!d)
		goto out;
	ts_ms = ts_clamp(ts_ms);
	if (ts_ms > d->last_ts_ms)
		d->last_ts_ms = ts_ms;
out:
	pthread_mutex_unlock(&s->lock);
	return rc;
}
