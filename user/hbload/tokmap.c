// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Token map: linear probing with backward-shift deletion. */
#include "tokmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Tokens are random, but a test server might hand out 1, 2, 3...: mix before masking. */
static uint32_t home(const struct hbl_tokmap *m, uint64_t t)
{
	t ^= t >> 33;
	t *= 0xff51afd7ed558ccdULL;
	t ^= t >> 33;
	return (uint32_t)t & m->mask;
}

int hbl_tokmap_init(struct hbl_tokmap *m, uint32_t max_entries)
{
	uint32_t cap = 16;

	memset(m, 0, sizeof(*m));
	while (cap < 2 * (uint64_t)max_entries && cap < (1u << 31))
		cap <<= 1;
	m->key = calloc(cap, sizeof(*m->key));
	m->val = calloc(cap, sizeof(*m->val));
	if (!m->key || !m->val) {
		hbl_tokmap_free(m);
		return -ENOMEM;
	}
	m->mask = cap - 1;
	return 0;
}

void hbl_tokmap_free(struct hbl_tokmap *m)
{
	free(m->key);
	free(m->val);
	memset(m, 0, sizeof(*m));
}

int hbl_tokmap_put(struct hbl_tokmap *m, uint64_t token, uint32_t val)
{
	uint32_t i;

	if (!token)
		return -EINVAL;
	for (i = home(m, token);; i = (i + 1) & m->mask) {
		if (m->key[i] == token) {
			m->val[i] = val;
			return 0;
		}
		if (!m->key[i])
			break;
	}
	/* keep one slot free so every probe loop terminates */
	if (m->count + 1 >= m->mask)
		return -ENOSPC;
	m->key[i] = token;
	m->val[i] = val;
	m->count++;
	return 0;
}

uint32_t hbl_tokmap_get(const struct hbl_tokmap *m, uint64_t token)
{
	if (!token)
		return UINT32_MAX;
	for (uint32_t i = home(m, token); m->key[i]; i = (i + 1) & m->mask)
		if (m->key[i] == token)
			return m->val[i];
	return UINT32_MAX;
}

int hbl_tokmap_del(struct hbl_tokmap *m, uint64_t token)
{
	uint32_t i, j;

	if (!token)
		return 0;
	for (i = home(m, token); m->key[i] != token; i = (i + 1) & m->mask)
		if (!m->key[i])
			return 0;
	/* shift back every follower whose home lies at or before the hole (cyclically) */
	for (j = (i + 1) & m->mask; m->key[j]; j = (j + 1) & m->mask) {
		uint32_t h = home(m, m->key[j]);

		if (((j - h) & m->mask) >= ((j - i) & m->mask)) {
			m->key[i] = m->key[j];
			m->val[i] = m->val[j];
			i = j;
		}
	}
	m->key[i] = 0;
	m->count--;
	return 1;
}
