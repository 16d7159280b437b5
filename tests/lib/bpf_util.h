/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Helpers shared by the BPF tests (test_xdp*.c, test_sockmap.c, test_hbd_offload.c): frame
 * building, counter snapshots, and scratch bpffs/cgroup directories that are removed again even
 * when a test fails.
 */
#ifndef HT_BPF_UTIL_H
#define HT_BPF_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include <linux/types.h>

#include "hb_bpf.h"
#include "hbeat_abi.h"
#include "ht_assert.h"
#include "ht_time.h"

/* Mounts bpffs at /sys/fs/bpf if it is not there (what hbctl and run-tests.sh do as well). */
int hbt_ensure_bpffs(void);

/* A TCP-form frame (header + payload) into buf; returns its size. */
size_t hbt_frame(void *buf, __u8 type, __u16 seq, const void *payload, __u16 len);

/* A PING with an 8-byte timestamp payload (TCP form). */
size_t hbt_ping(void *buf, __u16 seq, __u64 ts);

/* Sum of the per-CPU kernel counters (all ones if unreadable, so every comparison fails). */
void hbt_kstats(const struct hbk *h, struct hb_kstats *s);

/* Describes how two counter snapshots differ, checked against one expected change: the counter
 * at index want_idx (-1: none) must have moved by want_delta and every other one must not have
 * moved. Returns NULL if so, else a message naming the first offender (static buffer). */
const char *hbt_kstats_diff(const struct hb_kstats *a, const struct hb_kstats *b, int want_idx,
			    __u64 want_delta);

/* Index of a kernel counter by name, -1 if none (the tables name counters as strings). */
int hbt_kstat_idx(const char *name);

/* Checks a whole counter snapshot difference against expected moves given as name, (int) delta
 * pairs ending with NULL; every counter not named must not have moved. Returns NULL or a
 * message naming the first offender (static buffer). */
const char *hbt_kstats_expect(const struct hb_kstats *a, const struct hb_kstats *b, ...);

/* Fails the test unless the counters moved from snapshot a to b by exactly the name, delta
 * pairs given (and no other moved). */
#define HT_KSTATS(a, b, ...)                                                                    \
	do {                                                                                    \
		const char *ht_m_ = hbt_kstats_expect(a, b, __VA_ARGS__, NULL);                 \
                                                                                                \
		if (ht_m_)                                                                      \
			ht_fail(__FILE__, __LINE__, ht_m_, "kernel counters from %s to %s", #a, \
				#b);                                                            \
	} while (0)

/* Puts addr (4 bytes for family 4, else 16) into the handle's local_addrs with flags
 * (enum hb_local_flag): a destination XDP then answers for. */
void hbt_local_addr(const struct hbk *h, int family, const void *addr, __u32 flags);

/* Whether a socket is in a sockhash under its cookie. */
bool hbt_in_sockhash(int sockhash_fd, __u64 cookie);

/* A fresh scratch directory name on bpffs for pins, so tests never touch /sys/fs/bpf/hbeat. */
int hbt_pin_dir(char *out, size_t len);

/* Removes every file in a scratch pin directory, then the directory (pins are files). */
void hbt_rm_pin_dir(const char *dir);

/* Moves this process into a child cgroup of its own under the cgroup v2 root that hbeat's
 * sock_ops program attaches to, so a test's sock_ops sees only the test's sockets; its path
 * into cg. Returns 0 or a negative errno (and leaves nothing behind). */
int hbt_cgroup_enter(char *cg, size_t cap);

/* Moves this process back to the root cgroup and removes cg. */
void hbt_cgroup_leave(const char *cg);

/* Scratch pin directories and cgroups of earlier test runs that were killed before their
 * teardown (the pid in the name is gone). Our own names only. */
void hbt_reap_stale(void);

#endif /* HT_BPF_UTIL_H */
