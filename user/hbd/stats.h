/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Daemon counters (HB_USTATS in the ABI): one slot a worker, in the pinned map or private. */
#ifndef HBD_STATS_H
#define HBD_STATS_H

#include <jansson.h>
#include <stddef.h>

#include "hbeat_abi.h"
#include "pins.h"

/* Workers add with relaxed atomics: no syscalls, and workers beyond HB_MAX_WORKERS share a
 * slot safely. Gauges (tcp_active, udp_active) go up and down; their sum over slots is exact
 * modulo 2^64.
 */
#define HBD_STAT_ADD(slot, field, n) \
	__atomic_fetch_add(&(slot)->field, (__u64)(n), __ATOMIC_RELAXED)
#define HBD_STAT_SUB(slot, field, n) \
	__atomic_fetch_sub(&(slot)->field, (__u64)(n), __ATOMIC_RELAXED)

/* The sum of the slots (user/common/pins.h does it, for hbctl too). */
static inline void hbd_stats_sum(const struct hb_ustats *slots, unsigned n, struct hb_ustats *out)
{
	hb_ustats_sum(slots, n, out);
}
/* Every counter under its ABI name, in ABI order: a new JSON object, NULL on ENOMEM. */
json_t *hbd_stats_obj(const struct hb_ustats *s);
/* The same object as text, no newline. Returns its length, -ENOSPC or -ENOMEM. */
int hbd_stats_json(const struct hb_ustats *s, char *buf, size_t cap);

#endif
