/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The pinned maps as every program reads them: a pin opened by name, the per-CPU kernel
 * counters and the per-worker daemon counters summed, a map's fill level. Used by hbd (its
 * maps, /metrics, the control socket's stats), by hbctl and by the tests alike, so that a
 * counter is summed one way everywhere. Struct layouts and pin names live in hbeat_abi.h.
 *
 * Every function returns 0 (or an fd) or a negative errno.
 */
#ifndef HB_PINS_H
#define HB_PINS_H

#include <stddef.h>
#include <stdint.h>

#include "hbeat_abi.h"

/* dir/name into out; -ENAMETOOLONG if it does not fit. */
int hb_pin_path(char *out, size_t len, const char *dir, const char *name);

/* The fd of the pin dir/name (a map or a link), or -errno. why (may be NULL) gets one line
 * naming the path and the reason, with a hint when the pin is missing. */
int hb_pin_open(const char *dir, const char *name, char *why, size_t whylen);

/* The lock file an hbd holds while it serves the pin directory pin_path (one daemon per set of
 * maps): the i-th place it tries (i = 0, 1, ...: /run/hbeat, /run/lock, /run, /tmp), e.g.
 * /run/hbeat/hbd_sys_fs_bpf_hbeat.lock; -ENOENT past the last, -ENAMETOOLONG if it does not
 * fit. hbd takes the first it can create; hbctl load looks at every one (hb_daemon_lock.c). */
int hb_daemon_lock_path(const char *pin_path, unsigned i, char *out, size_t len);

/* Counter names in struct order, from the ABI's X-macros; NULL-terminated. */
extern const char *const hb_kstat_names[];
extern const char *const hb_ustat_names[];
/* Counter i of a struct hb_kstats or hb_ustats (both are __u64 fields in X-macro order). */
#define HB_STAT(s, i) (((const __u64 *)(s))[i])

/* Sum over the possible CPUs of the per-CPU kstats entry (the map's fd). */
int hb_kstats_read(int kstats_fd, struct hb_kstats *sum);

/* Sum of n counter slots in memory (hbd's own, or the mmapped ustats map) read with relaxed
 * atomics, so workers may go on adding meanwhile; gauges sum exactly modulo 2^64. */
void hb_ustats_sum(const struct hb_ustats *slots, unsigned n, struct hb_ustats *sum);

/* Sum of the HB_MAX_WORKERS slots of the ustats map (its fd), read by lookups. */
int hb_ustats_read(int ustats_fd, struct hb_ustats *sum);

/* Entries in a map (its keys walked, bounded by its capacity) and its capacity. */
int hb_map_fill(int map_fd, __u32 *entries, __u32 *max_entries);

#endif
