// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* UDP sessions: a fixed pool, a chained hash on the (random) token, striped bucket locks. */
#include "sessions.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "sesskey.h"

#define NLOCKS 256

int hbd_sessions_init(struct hbd_sessions *t, uint32_t cap)
{
	uint32_t nb = 64;

	memset(t, 0, sizeof(*t));
	if (!cap || cap >= HB_WHEEL_NONE / 2)
		return -EINVAL;
	while (nb < cap)
		nb <<= 1;
	t->cap = cap;
	t->s = calloc(cap, sizeof(*t->s));
	t->links = calloc(cap, sizeof(*t->links));
	/* heads hold index + 1 (0: empty), so the array needs no filling: its pages stay unbacked
	 * until sessions land in them (a TCP-only daemon never touches them) */
	t->bucket = calloc(nb, sizeof(*t->bucket));
	t->locks = calloc(NLOCKS, sizeof(*t->locks));
	if (!t->s || !t->links || !t->bucket || !t->locks) {
		hbd_sessions_free(t);
		return -ENOMEM;
	}
	t->bmask = nb - 1;
	t->lmask = NLOCKS - 1;
	/* Nothing per session is touched here (calloc'd pages stay unbacked): indexes come from
	 * 'fresh' in order, and only freed ones go through the free list.
	 */
	t->free_head = HB_WHEEL_NONE;
	t->fresh = 0;
	pthread_mutex_init(&t->free_lock, NULL);
	for (uint32_t i = 0; i < NLOCKS; i++)
		pthread_mutex_init(&t->locks[i], NULL);
	return 0;
}

void hbd_sessions_free(struct hbd_sessions *t)
{
	if (t->locks) {
		for (uint32_t i = 0; i < NLOCKS; i++)
			pthread_mutex_destroy(&t->locks[i]);
		pthread_mutex_destroy(&t->free_lock);
	}
	free(t->s);
	free(t->links);
	free(t->bucket);
	free(t->locks);
	memset(t, 0, sizeof(*t));
}

int hbd_sess_alloc(struct hbd_sessions *t, unsigned owner, uint32_t *idx)
{
	struct hbd_sess *s;
	uint32_t i;

	pthread_mutex_lock(&t->free_lock);
	i = t->free_head;
	if (i != HB_WHEEL_NONE) {
		t->free_head = t->s[i].next;
	} else if (t->fresh < t->cap) {
		i = t->fresh++;
		t->links[i].next = t->links[i].prev = HB_WHEEL_NONE;
	} else {
		pthread_mutex_unlock(&t->free_lock);
		return -ENOSPC;
	}
	s = &t->s[i];
	t->active++;
	pthread_mutex_unlock(&t->free_lock);
	s->next = HB_WHEEL_NONE;
	s->token = 0;
	s->owner = (uint16_t)owner;
	s->state = HBD_SESS_RESERVED;
	hbd_sess_set_v2(s, HB_VERSION, NULL, 0);
	*idx = i;
	return 0;
}

void hbd_sess_release(struct hbd_sessions *t, uint32_t idx)
{
	struct hbd_sess *s = &t->s[idx];

	pthread_mutex_lock(&t->free_lock);
	s->state = HBD_SESS_FREE;
	__atomic_store_n(&s->gen, (uint16_t)(s->gen + 1), __ATOMIC_RELAXED);
	s->next = t->free_head;
	t->free_head = idx;
	t->active--;
	pthread_mutex_unlock(&t->free_lock);
}

static inline uint32_t bucket_of(const struct hbd_sessions *t, uint64_t token)
{
	/* tokens come from the CSPRNG: their low bits are already uniform */
	return (uint32_t)(token ^ (token >> 32)) & t->bmask;
}

static inline pthread_mutex_t *lock_of(struct hbd_sessions *t, uint32_t b)
{
	return &t->locks[b & t->lmask];
}

/* Caller holds the bucket's lock. */
static uint32_t find(const struct hbd_sessions *t, uint32_t b, uint64_t token)
{
	uint32_t i = t->bucket[b] - 1; /* an empty head (0) gives HB_WHEEL_NONE */

	while (i != HB_WHEEL_NONE && t->s[i].token != token)
		i = t->s[i].next;
	return i;
}

int hbd_sess_publish(struct hbd_sessions *t, uint32_t idx, uint64_t token)
{
	uint32_t b = bucket_of(t, token);
	struct hbd_sess *s = &t->s[idx];
	int rc = 0;

	if (!token)
		return -EINVAL;
	pthread_mutex_lock(lock_of(t, b));
	if (find(t, b, token) != HB_WHEEL_NONE) {
		rc = -EEXIST;
	} else {
		__atomic_store_n(&s->token, token, __ATOMIC_RELAXED);
		s->state = HBD_SESS_ACTIVE;
		s->next = t->bucket[b] - 1;
		t->bucket[b] = idx + 1;
	}
	pthread_mutex_unlock(lock_of(t, b));
	return rc;
}

int hbd_sess_touch(struct hbd_sessions *t, uint64_t token, const uint8_t addr[16], uint16_t port,
		   uint32_t now, struct hbd_sess_view *v)
{
	uint32_t b = bucket_of(t, token), i;
	struct hbd_sess *s;

	if (!token)
		return -ENOENT;
	pthread_mutex_lock(lock_of(t, b));
	i = find(t, b, token);
	if (i == HB_WHEEL_NONE) {
		pthread_mutex_unlock(lock_of(t, b));
		return -ENOENT;
	}
	s = &t->s[i];
	/* a version 1 frame carries no tag: it speaks for no version 2 session */
	if (s->version == HB_VERSION_2) {
		pthread_mutex_unlock(lock_of(t, b));
		return -EBADMSG;
	}
	v->rebound = s->port != port || memcmp(s->addr, addr, 16) != 0;
	if (v->rebound) {
		memcpy(s->addr, addr, 16);
		s->port = port;
	}
	__atomic_store_n(&s->last_seen, now, __ATOMIC_RELAXED);
	v->idx = i;
	v->gen = s->gen;
	v->owner = s->owner;
	v->device_id = s->device_id;
	pthread_mutex_unlock(lock_of(t, b));
	return 0;
}

int hbd_sess_lookup(struct hbd_sessions *t, uint64_t token, struct hbd_sess *out)
{
	uint32_t b = bucket_of(t, token), i;

	if (!token)
		return -ENOENT;
	pthread_mutex_lock(lock_of(t, b));
	i = find(t, b, token);
	if (i != HB_WHEEL_NONE)
		*out = t->s[i];
	pthread_mutex_unlock(lock_of(t, b));
	return i == HB_WHEEL_NONE ? -ENOENT : 0;
}

int hbd_sess_get(struct hbd_sessions *t, uint32_t idx, uint16_t gen, bool unhash,
		 struct hbd_sess *out)
{
	struct hbd_sess *s;
	uint32_t b;
	int rc = 0;

	if (idx >= t->cap)
		return -ESTALE;
	s = &t->s[idx];
	/* A stale (idx, gen) may name an index another worker has since reused, so token and gen
	 * are read atomically; an ACTIVE session's token never changes, and a reused index has a
	 * new gen, so a wrong bucket guess is caught by the checks under the lock.
	 */
	b = bucket_of(t, __atomic_load_n(&s->token, __ATOMIC_RELAXED));
	pthread_mutex_lock(lock_of(t, b));
	if (__atomic_load_n(&s->gen, __ATOMIC_RELAXED) != gen || s->state != HBD_SESS_ACTIVE ||
	    bucket_of(t, s->token) != b) {
		rc = -ESTALE;
	} else {
		*out = *s;
		if (unhash) {
			if (t->bucket[b] - 1 == idx) {
				t->bucket[b] = s->next + 1; /* HB_WHEEL_NONE + 1 == 0: empty */
			} else {
				uint32_t *pp = &t->s[t->bucket[b] - 1].next;

				while (*pp != idx)
					pp = &t->s[*pp].next;
				*pp = s->next;
			}
			s->next = HB_WHEEL_NONE;
			s->state = HBD_SESS_DEAD;
		}
	}
	pthread_mutex_unlock(lock_of(t, b));
	return rc;
}

void hbd_sess_set_v2(struct hbd_sess *s, uint8_t version, const uint8_t key[HB_SESSION_KEY_LEN],
		     uint64_t last_ts)
{
	s->version = version;
	if (key && version == HB_VERSION_2)
		memcpy(s->key, key, sizeof(s->key));
	else
		OPENSSL_cleanse(s->key, sizeof(s->key));
	s->last_ts = last_ts;
	s->path_data = 0;
	s->path_port = 0;
	memset(s->path_addr, 0, sizeof(s->path_addr));
}

/* The replay window of a PING (hbeat_abi.h, HB_V2_TS_AHEAD), as XDP applies it. */
static bool ts_fresh(uint64_t last, uint64_t ts)
{
	return !last || (ts > last && ts - last <= HB_V2_TS_AHEAD);
}

int hbd_sess_touch_v2(struct hbd_sessions *t, uint64_t token, const uint8_t addr[16], uint16_t port,
		      uint32_t now, const struct hbd_v2_in *in, struct hbd_sess_view *v)
{
	uint32_t b = bucket_of(t, token), i;
	struct hbd_sess *s;
	bool here;
	int rc = 0;

	if (!token)
		return -ENOENT;
	memset(v, 0, sizeof(*v));
	pthread_mutex_lock(lock_of(t, b));
	i = find(t, b, token);
	if (i == HB_WHEEL_NONE) {
		pthread_mutex_unlock(lock_of(t, b));
		return -ENOENT;
	}
	s = &t->s[i];
	if (s->version != HB_VERSION_2 || !hb_frame_tag_ok(s->key, in->frame, in->len)) {
		rc = -EBADMSG;
		goto out;
	}
	if (in->ping && !ts_fresh(s->last_ts > in->floor_ts ? s->last_ts : in->floor_ts, in->ts)) {
		rc = -EALREADY;
		goto out;
	}
	if (in->ping)
		s->last_ts = in->ts;
	here = s->port == port && !memcmp(s->addr, addr, 16);
	if (!here && in->response && s->path_data && s->path_port == port &&
	    !memcmp(s->path_addr, addr, 16) &&
	    CRYPTO_memcmp(&s->path_data, in->response, sizeof(s->path_data)) == 0) {
		/* the device answered from the new address what was sent only there */
		memcpy(s->addr, addr, 16);
		s->port = port;
		s->path_data = 0;
		v->rebound = here = true;
	}
	if (!here) {
		v->elsewhere = true;
		if (!s->path_data || s->path_port != port || memcmp(s->path_addr, addr, 16) ||
		    (uint32_t)(now - s->path_ms) >= in->challenge_gap_ms) {
			uint64_t data = 0;

			while (!data && !hb_random(&data, sizeof(data)))
				;
			s->path_data = data;
			memcpy(s->path_addr, addr, 16);
			s->path_port = port;
			s->path_ms = now;
			v->challenge = data;
		}
	}
	if (here || in->ping)
		__atomic_store_n(&s->last_seen, now, __ATOMIC_RELAXED);
	v->idx = i;
	v->gen = s->gen;
	v->owner = s->owner;
	v->device_id = s->device_id;
	memcpy(v->key, s->key, sizeof(v->key));
	memcpy(v->addr, s->addr, 16);
	v->port = s->port;
out:
	pthread_mutex_unlock(lock_of(t, b));
	return rc;
}
