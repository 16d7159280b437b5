/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Helpers shared by the BPF tests (test_xdp.c, test_sockmap.c): frame building, counter
 * snapshots, and scratch bpffs/cgroup directories that are removed again even when a test
 * fails. Static functions in a header, because the Makefile builds only tests/test_*.c.
 */
#ifndef HB_TEST_UTIL_H
#define HB_TEST_UTIL_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "hb_bpf.h"
#include "hbeat_abi.h"

#define HBT_BPF_FS_MAGIC 0xcafe4a11

static inline __u64 hbt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Mounts bpffs at /sys/fs/bpf if it is not there (what hbctl and run-tests.sh do as well). */
static inline int hbt_ensure_bpffs(void)
{
	struct statfs st;

	if (!statfs("/sys/fs/bpf", &st) && st.f_type == HBT_BPF_FS_MAGIC)
		return 0;
	return system("mkdir -p /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf") == 0 ? 0 : -1;
}

/* A TCP-form frame (header + payload) into buf; returns its size. */
static inline size_t hbt_frame(void *buf, __u8 type, __u16 seq, const void *payload, __u16 len)
{
	struct hb_hdr h = {
		.magic = htons(HB_MAGIC), .version = HB_VERSION, .type = type,
		.len = htons(len), .seq = htons(seq),
	};

	memcpy(buf, &h, sizeof(h));
	if (len)
		memcpy((char *)buf + sizeof(h), payload, len);
	return sizeof(h) + len;
}

/* A PING with an 8-byte timestamp payload (TCP form). */
static inline size_t hbt_ping(void *buf, __u16 seq, __u64 ts)
{
	return hbt_frame(buf, HB_PING, seq, &ts, sizeof(ts));
}

/* Sum of the per-CPU kernel counters. */
static inline void hbt_kstats(const struct hbk *h, struct hb_kstats *s)
{
	if (hbk_read_kstats(hbk_map_fd(h, HB_MAP_KSTATS), s))
		memset(s, 0xff, sizeof(*s)); /* makes every later comparison fail loudly */
}

/* Describes how two counter snapshots differ, checked against one expected change: the counter
 * at index want_idx (-1: none) must have moved by want_delta and every other one must not have
 * moved. Returns NULL if so, else a message naming the first offender (static buffer). */
static inline const char *hbt_kstats_diff(const struct hb_kstats *a, const struct hb_kstats *b,
					  int want_idx, __u64 want_delta)
{
	static char msg[160];

	for (int i = 0; i < HB_KSTATS_N; i++) {
		__u64 d = HBK_KSTAT(b, i) - HBK_KSTAT(a, i);
		__u64 want = i == want_idx ? want_delta : 0;

		if (d != want) {
			snprintf(msg, sizeof(msg), "counter %s moved by %llu, expected %llu",
				 hbk_kstat_names[i], (unsigned long long)d, (unsigned long long)want);
			return msg;
		}
	}
	return NULL;
}

/* Index of a kernel counter by name, -1 if none (the tables name counters as strings). */
static inline int hbt_kstat_idx(const char *name)
{
	for (int i = 0; i < HB_KSTATS_N; i++)
		if (!strcmp(hbk_kstat_names[i], name))
			return i;
	return -1;
}

/* Checks a whole counter snapshot difference against expected moves given as name, (int) delta
 * pairs ending with NULL; every counter not named must not have moved. Returns NULL or a
 * message naming the first offender (static buffer). */
static inline const char *hbt_kstats_expect(const struct hb_kstats *a, const struct hb_kstats *b, ...)
{
	static char msg[160];
	__u64 want[HB_KSTATS_N] = { 0 };
	const char *name;
	va_list ap;

	va_start(ap, b);
	while ((name = va_arg(ap, const char *))) {
		int i = hbt_kstat_idx(name);
		__u64 d = (__u64)va_arg(ap, int); /* deltas are passed as int */

		if (i < 0) {
			snprintf(msg, sizeof(msg), "no counter named %s", name);
			va_end(ap);
			return msg;
		}
		want[i] = d;
	}
	va_end(ap);
	for (int i = 0; i < HB_KSTATS_N; i++) {
		__u64 d = HBK_KSTAT(b, i) - HBK_KSTAT(a, i);

		if (d != want[i]) {
			snprintf(msg, sizeof(msg), "counter %s moved by %llu, expected %llu",
				 hbk_kstat_names[i], (unsigned long long)d, (unsigned long long)want[i]);
			return msg;
		}
	}
	return NULL;
}

/* A fresh scratch directory on bpffs for pins, so tests never touch /sys/fs/bpf/hbeat. */
static inline int hbt_pin_dir(char *out, size_t len)
{
	snprintf(out, len, "/sys/fs/bpf/hbeat-test-%d-%llu", (int)getpid(),
		 (unsigned long long)(hbt_now_ns() % 1000000));
	return 0;
}

/* Removes every file in a scratch pin directory, then the directory (pins are files). */
static inline void hbt_rm_pin_dir(const char *dir)
{
	char cmd[PATH_MAX + 32];

	if (!dir || !dir[0] || strncmp(dir, "/sys/fs/bpf/hbeat-test-", 23))
		return; /* never anything but our own scratch directories */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

/* Scratch pin directories and cgroups of earlier test runs that were killed before their
 * teardown (the pid in the name is gone). Our own names only. */
static inline void hbt_reap_stale(void)
{
	static const char *const roots[] = { "/sys/fs/bpf", "/sys/fs/cgroup/unified" };
	char path[PATH_MAX], proc[64];
	struct dirent *e;
	DIR *d;
	int pid;

	for (size_t r = 0; r < sizeof(roots) / sizeof(roots[0]); r++) {
		d = opendir(roots[r]);
		if (!d)
			continue;
		while ((e = readdir(d))) {
			if (sscanf(e->d_name, "hbeat-test-%d", &pid) != 1 || pid == getpid())
				continue;
			snprintf(proc, sizeof(proc), "/proc/%d", pid);
			if (!access(proc, F_OK))
				continue;
			snprintf(path, sizeof(path), "%s/%s", roots[r], e->d_name);
			if (r == 0)
				hbt_rm_pin_dir(path);
			else
				rmdir(path); /* fails harmlessly while it still holds processes */
		}
		closedir(d);
	}
}

#endif /* HB_TEST_UTIL_H */
