// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Per-key counters and GCRA rate limits (see keytab.h): a chained hash over a growable array,
 * so an entry's index stays valid while it lives.
 *
 * Hand-written rather than a library hash: connections hold entry indexes across calls, and
 * the table must bound its own size against a flood of new source addresses.
 */
#include "keytab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define FREE_MARK UINT32_MAX /* conns of an entry on the free list */

int hbd_keytab_init(struct hbd_keytab *t, double rate, unsigned burst, uint32_t max)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	t->max = max ? max : 1u << 20;
	t->free_head = HBD_KEY_NONE;
	if (rate > 0) {
		t->t_us = (uint64_t)(1e6 / rate);
		if (!t->t_us)
			t->t_us = 1;
		t->tau_us = (uint64_t)(burst ? burst - 1 : 0) * t->t_us;
	}
	t->bmask = 63;
	t->bucket = malloc(64 * sizeof(*t->bucket));
	if (!t->bucket)
		return -ENOMEM;
	memset(t->bucket, 0xff, 64 * sizeof(*t->bucket));
	return 0;
}

void hbd_keytab_free(struct hbd_keytab *t)
{
	free(t->e);
	free(t->bucket);
	pthread_mutex_destroy(&t->lock);
	memset(t, 0, sizeof(*t));
}

void hbd_key_source(const uint8_t addr[16], uint8_t key[16])
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	memcpy(key, addr, 16);
	if (memcmp(addr, mapped, sizeof(mapped)))
		memset(key + 8, 0, 8);
}

void hbd_key_u64(uint64_t id, uint8_t key[16])
{
	memset(key, 0, 16);
	memcpy(key, &id, sizeof(id));
}

static uint32_t hash(const uint8_t key[16])
{
	uint64_t a, b;

	memcpy(&a, key, 8);
	memcpy(&b, key + 8, 8);
	a ^= b * 0x9e3779b97f4a7c15ull;
	a ^= a >> 29;
	a *= 0xbf58476d1ce4e5b9ull;
	return (uint32_t)(a ^ (a >> 32));
}

static uint32_t find(const struct hbd_keytab *t, const uint8_t key[16])
{
	uint32_t i = t->bucket[hash(key) & t->bmask];

	while (i != HBD_KEY_NONE && memcmp(t->e[i].key, key, 16))
		i = t->e[i].next;
	return i;
}

/* Doubles the buckets once there are more entries than buckets. */
static void rehash(struct hbd_keytab *t)
{
	uint32_t nb = (t->bmask + 1) * 2, *b = malloc(nb * sizeof(*b));

	if (!b)
		return; /* longer chains, still correct */
	memset(b, 0xff, nb * sizeof(*b));
	for (uint32_t i = 0; i < t->fresh; i++) {
		uint32_t h;

		if (t->e[i].conns == FREE_MARK)
			continue;
		h = hash(t->e[i].key) & (nb - 1);
		t->e[i].next = b[h];
		b[h] = i;
	}
	free(t->bucket);
	t->bucket = b;
	t->bmask = nb - 1;
}

static uint32_t insert(struct hbd_keytab *t, const uint8_t key[16])
{
	uint32_t i, h;

	if (t->used >= t->max)
		return HBD_KEY_NONE;
	if (t->free_head != HBD_KEY_NONE) {
		i = t->free_head;
		t->free_head = t->e[i].next;
	} else {
		if (t->fresh == t->cap) {
			uint32_t cap = t->cap ? t->cap * 2 : 64;
			struct hbd_key *e = realloc(t->e, (size_t)cap * sizeof(*e));

			if (!e)
				return HBD_KEY_NONE;
			t->e = e;
			t->cap = cap;
		}
		i = t->fresh++;
	}
	memcpy(t->e[i].key, key, 16);
	t->e[i].conns = 0;
	t->e[i].tat_us = 0;
	h = hash(key) & t->bmask;
	t->e[i].next = t->bucket[h];
	t->bucket[h] = i;
	if (++t->used > t->bmask + 1)
		rehash(t);
	return i;
}

static void remove_entry(struct hbd_keytab *t, uint32_t i)
{
	uint32_t *pp = &t->bucket[hash(t->e[i].key) & t->bmask];

	while (*pp != i)
		pp = &t->e[*pp].next;
	*pp = t->e[i].next;
	t->e[i].conns = FREE_MARK;
	t->e[i].next = t->free_head;
	t->free_head = i;
	t->used--;
}

int hbd_keytab_conn_open(struct hbd_keytab *t, const uint8_t key[16], uint32_t max_conns,
			 uint32_t *idx, uint32_t *count)
{
	uint32_t i;
	int rc = 0;

	pthread_mutex_lock(&t->lock);
	i = find(t, key);
	if (i == HBD_KEY_NONE)
		i = insert(t, key);
	if (i == HBD_KEY_NONE) {
		rc = -ENOMEM;
	} else if (max_conns && t->e[i].conns >= max_conns) {
		rc = -EMFILE;
	} else {
		t->e[i].conns++;
		*idx = i;
	}
	if (count)
		*count = i == HBD_KEY_NONE ? 0 : t->e[i].conns;
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void hbd_keytab_conn_close(struct hbd_keytab *t, uint32_t idx)
{
	pthread_mutex_lock(&t->lock);
	if (idx < t->fresh && t->e[idx].conns && t->e[idx].conns != FREE_MARK)
		t->e[idx].conns--;
	pthread_mutex_unlock(&t->lock);
}

void hbd_keytab_key(struct hbd_keytab *t, uint32_t idx, uint8_t key[16])
{
	pthread_mutex_lock(&t->lock);
	if (idx < t->fresh && t->e[idx].conns != FREE_MARK)
		memcpy(key, t->e[idx].key, 16);
	else
		memset(key, 0, 16);
	pthread_mutex_unlock(&t->lock);
}

/* GCRA: an event at now is within the rate if the bucket, emptied at tat, has room for it:
 * max(tat, now) - now <= tau.
 */
static bool spent(const struct hbd_keytab *t, uint64_t tat, uint64_t now)
{
	return tat > now && tat - now > t->tau_us;
}

bool hbd_keytab_over(struct hbd_keytab *t, const uint8_t key[16], uint64_t now_us)
{
	bool over = false;
	uint32_t i;

	if (!t->t_us)
		return false;
	pthread_mutex_lock(&t->lock);
	i = find(t, key);
	if (i != HBD_KEY_NONE)
		over = spent(t, t->e[i].tat_us, now_us);
	pthread_mutex_unlock(&t->lock);
	return over;
}

static void charge(struct hbd_keytab *t, uint32_t i, uint64_t now)
{
	uint64_t tat = t->e[i].tat_us > now ? t->e[i].tat_us : now;

	/* never more than one event beyond a full bucket: a spent key recovers in one interval */
	if (tat - now <= t->tau_us)
		tat += t->t_us;
	t->e[i].tat_us = tat;
}

bool hbd_keytab_take(struct hbd_keytab *t, const uint8_t key[16], uint64_t now_us)
{
	bool ok = true;
	uint32_t i;

	if (!t->t_us)
		return true;
	pthread_mutex_lock(&t->lock);
	i = find(t, key);
	if (i == HBD_KEY_NONE)
		i = insert(t, key);
	/* a full table fails open: limits are for the few keys that misbehave, not for all */
	if (i != HBD_KEY_NONE) {
		ok = !spent(t, t->e[i].tat_us, now_us);
		if (ok)
			charge(t, i, now_us);
	}
	pthread_mutex_unlock(&t->lock);
	return ok;
}

void hbd_keytab_charge(struct hbd_keytab *t, const uint8_t key[16], uint64_t now_us)
{
	uint32_t i;

	if (!t->t_us)
		return;
	pthread_mutex_lock(&t->lock);
	i = find(t, key);
	if (i == HBD_KEY_NONE)
		i = insert(t, key);
	if (i != HBD_KEY_NONE)
		charge(t, i, now_us);
	pthread_mutex_unlock(&t->lock);
}

bool hbd_keytab_over_at(struct hbd_keytab *t, uint32_t idx, uint64_t now_us)
{
	bool over = false;

	if (!t->t_us)
		return false;
	pthread_mutex_lock(&t->lock);
	if (idx < t->fresh && t->e[idx].conns != FREE_MARK)
		over = spent(t, t->e[idx].tat_us, now_us);
	pthread_mutex_unlock(&t->lock);
	return over;
}

void hbd_keytab_charge_at(struct hbd_keytab *t, uint32_t idx, uint64_t now_us)
{
	if (!t->t_us)
		return;
	pthread_mutex_lock(&t->lock);
	if (idx < t->fresh && t->e[idx].conns != FREE_MARK)
		charge(t, idx, now_us);
	pthread_mutex_unlock(&t->lock);
}

unsigned hbd_keytab_sweep(struct hbd_keytab *t, uint64_t now_us, unsigned budget)
{
	unsigned freed = 0;

	pthread_mutex_lock(&t->lock);
	while (budget-- && t->fresh) {
		uint32_t i = t->sweep++ % t->fresh;
		struct hbd_key *e = &t->e[i];

		if (e->conns == 0 && e->tat_us <= now_us) {
			remove_entry(t, i);
			freed++;
		}
	}
	t->sweep %= t->fresh ? t->fresh : 1;
	pthread_mutex_unlock(&t->lock);
	return freed;
}

uint32_t hbd_keytab_count(struct hbd_keytab *t)
{
	uint32_t n;

	pthread_mutex_lock(&t->lock);
	n = t->used;
	pthread_mutex_unlock(&t->lock);
	return n;
}
