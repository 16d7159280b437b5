// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The fleet thread's device maps (fleet_map.h). */
#include "fleet_map.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t slot_of(const struct fleet_map *m, uint64_t key)
{
	/* device ids are often dense ranges: mix the bits before masking */
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (size_t)key & (m->cap - 1);
}

static int alloc_tables(struct fleet_map *m, size_t cap)
{
	m->keys = calloc(cap, sizeof(*m->keys));
	m->vals = calloc(cap, m->vsize);
	if (!m->keys || !m->vals) {
		free(m->keys);
		free(m->vals);
		m->keys = NULL;
		m->vals = NULL;
		return -ENOMEM;
	}
	m->cap = cap;
	m->count = 0;
	return 0;
}

int fleet_map_init(struct fleet_map *m, size_t vsize, size_t expect)
{
	size_t cap = 64;

	while (cap < expect + expect / 3)
		cap *= 2;
	memset(m, 0, sizeof(*m));
	m->vsize = vsize;
	return alloc_tables(m, cap);
}

void fleet_map_free(struct fleet_map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

void *fleet_map_get(const struct fleet_map *m, uint64_t key)
{
	if (!key || !m->cap)
		return NULL;
	for (size_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == key)
			return m->vals + i * m->vsize;
		if (!m->keys[i])
			return NULL;
	}
}

static int grow(struct fleet_map *m)
{
	struct fleet_map old = *m;

	if (alloc_tables(m, old.cap * 2)) {
		*m = old;
		return -ENOMEM;
	}
	for (size_t i = 0; i < old.cap; i++) {
		if (old.keys[i]) {
			size_t j = slot_of(m, old.keys[i]);

			while (m->keys[j])
				j = (j + 1) & (m->cap - 1);
			m->keys[j] = old.keys[i];
			memcpy(m->vals + j * m->vsize, old.vals + i * m->vsize, m->vsize);
			m->count++;
		}
	}
	free(old.keys);
	free(old.vals);
	return 0;
}

void *fleet_map_put(struct fleet_map *m, uint64_t key)
{
	void *v = fleet_map_get(m, key);
	size_t i;

	if (v || !key)
		return v;
	if ((m->count + 1) * 4 > m->cap * 3 && grow(m))
		return NULL;
	for (i = slot_of(m, key); m->keys[i]; i = (i + 1) & (m->cap - 1))
		;
	m->keys[i] = key;
	m->count++;
	v = m->vals + i * m->vsize;
	memset(v, 0, m->vsize);
	return v;
}

void fleet_map_del(struct fleet_map *m, uint64_t key)
{
	size_t mask = m->cap - 1, i, j;

	if (!key || !m->cap)
		return;
	for (i = slot_of(m, key); m->keys[i] != key; i = (i + 1) & mask)
		if (!m->keys[i])
			return;
	/* backward shift: move later members of the probe run into the hole */
	for (j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
		size_t home = slot_of(m, m->keys[j]);

		/* j's entry may fill the hole at i if its home is not cyclically in (i, j] */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			m->keys[i] = m->keys[j];
			memcpy(m->vals + i * m->vsize, m->vals + j * m->vsize, m->vsize);
			i = j;
		}
	}
	m->keys[i] = 0;
	m->count--;
}

void *fleet_map_next(const struct fleet_map *m, size_t *pos, uint64_t *key)
{
	for (; *pos < m->cap; (*pos)++) {
		if (m->keys[*pos]) {
			*key = m->keys[*pos];
			return m->vals + (*pos)++ * m->vsize;
		}
	}
	return NULL;
}
