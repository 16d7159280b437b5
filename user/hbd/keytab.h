/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Per-key counters and rate limits: live TCP connections and failed HELLOs per source address,
 * DATA frames per device. One table per use, each under one mutex (every operation is a few
 * hundred ns; callers are per connection or per frame of an uncommon type, never per heartbeat).
 */
#ifndef HBD_KEYTAB_H
#define HBD_KEYTAB_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define HBD_KEY_NONE UINT32_MAX

/* 32 bytes an entry, stable index (connections keep it to give their count back). */
struct hbd_key {
	uint8_t key[16];
	uint32_t conns; /* live connections holding this entry */
	uint32_t next; /* hash chain, or free list */
	uint64_t tat_us; /* GCRA: when the bucket is empty again (monotonic us) */
};

struct hbd_keytab {
	pthread_mutex_t lock;
	struct hbd_key *e;
	uint32_t cap, used, fresh, free_head;
	uint32_t *bucket, bmask;
	uint32_t sweep; /* next index the incremental sweep looks at */
	uint32_t max; /* entries at most: a flood of new keys cannot take all memory */
	uint64_t t_us; /* GCRA emission interval: 1 s / rate (0: no rate limit) */
	uint64_t tau_us; /* burst tolerance: (burst - 1) * t_us */
};

/* rate events/s with bursts of burst (rate 0: none); max entries (0: 1M). */
int hbd_keytab_init(struct hbd_keytab *t, double rate, unsigned burst, uint32_t max);
void hbd_keytab_free(struct hbd_keytab *t);

/* The key of a source address (16 bytes, IPv4 v4-mapped): IPv4 per /32, IPv6 per /64, since
 * one IPv6 host commonly holds a whole /64.
 */
void hbd_key_source(const uint8_t addr[16], uint8_t key[16]);
void hbd_key_u64(uint64_t id, uint8_t key[16]);

/* One more connection for key: its entry index in *idx, or -EMFILE if max_conns (> 0) are
 * open already, -ENOMEM if the table is full.
 */
int hbd_keytab_conn_open(struct hbd_keytab *t, const uint8_t key[16], uint32_t max_conns,
			 uint32_t *idx, uint32_t *count);
void hbd_keytab_conn_close(struct hbd_keytab *t, uint32_t idx);
/* The key of a live entry (zeroes if idx is not one). */
void hbd_keytab_key(struct hbd_keytab *t, uint32_t idx, uint8_t key[16]);

/* GCRA. Over the rate: true if the key's budget is spent (nothing counted). */
bool hbd_keytab_over(struct hbd_keytab *t, const uint8_t key[16], uint64_t now_us);
/* Counts one event; false (and not counted) if that would exceed the rate. */
bool hbd_keytab_take(struct hbd_keytab *t, const uint8_t key[16], uint64_t now_us);
/* Counts one event whatever the budget (a failed HELLO has happened). */
void hbd_keytab_charge(struct hbd_keytab *t, const uint8_t key[16], uint64_t now_us);
/* The same two by the index a connection holds (hbd_keytab_conn_open). */
bool hbd_keytab_over_at(struct hbd_keytab *t, uint32_t idx, uint64_t now_us);
void hbd_keytab_charge_at(struct hbd_keytab *t, uint32_t idx, uint64_t now_us);

/* Incremental clean-up: frees up to budget entries' worth of idle keys (no connection, bucket
 * refilled). Returns how many were freed.
 */
unsigned hbd_keytab_sweep(struct hbd_keytab *t, uint64_t now_us, unsigned budget);
uint32_t hbd_keytab_count(struct hbd_keytab *t);

#endif
