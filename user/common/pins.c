// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Pinned maps: open by name, counter sums, fill level (see pins.h). */
#include "pins.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HB_STAT_NAME(n) #n,
const char *const hb_kstat_names[] = { HB_KSTATS(HB_STAT_NAME) NULL };
const char *const hb_ustat_names[] = { HB_USTATS(HB_STAT_NAME) NULL };

int hb_pin_path(char *out, size_t len, const char *dir, const char *name)
{
	int n = snprintf(out, len, "%s/%s", dir, name);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int hb_daemon_lock_path(const char *pin_path, unsigned i, char *out, size_t len)
{
	/* /run/hbeat first: the unit's RuntimeDirectory, writable under ProtectSystem=strict */
	static const char *const dirs[] = { "/run/hbeat", "/run/lock", "/run", "/tmp" };
	char name[256];
	size_t n = 0;
	int k;

	if (i >= sizeof(dirs) / sizeof(dirs[0]))
		return -ENOENT;
	/* one lock file per pin directory, named after it */
	for (const char *p = pin_path; *p && n < sizeof(name) - 1; p++)
		name[n++] = *p == '/' ? '_' : *p;
	name[n] = 0;
	k = snprintf(out, len, "%s/hbd%s.lock", dirs[i], name);
	return k < 0 || (size_t)k >= len ? -ENAMETOOLONG : 0;
}

int hb_pin_open(const char *dir, const char *name, char *why, size_t whylen)
{
	char path[4096];
	int fd, rc;

	rc = hb_pin_path(path, sizeof(path), dir, name);
	if (rc) {
		if (why)
			snprintf(why, whylen, "%s/%s: path too long", dir, name);
		return rc;
	}
	fd = bpf_obj_get(path);
	if (fd >= 0)
		return fd;
	rc = -errno;
	if (why)
		snprintf(why, whylen, "%s: %s%s", path, strerror(-rc),
			 rc == -ENOENT ? " (is hbeat loaded there? hbctl status --pin-path DIR)"
			 : rc == -EACCES || rc == -EPERM ? " (the pins are root's: run as root)"
							 : "");
	return rc;
}

int hb_kstats_read(int fd, struct hb_kstats *sum)
{
	/* the kernel copies a per-CPU value out at a stride of its size rounded up to 8 */
	size_t stride = (sizeof(struct hb_kstats) + 7) & ~(size_t)7;
	int ncpu = libbpf_num_possible_cpus();
	__u32 zero = 0;
	uint8_t *vals;
	int rc = 0;

	memset(sum, 0, sizeof(*sum));
	if (ncpu < 0)
		return ncpu;
	vals = calloc((size_t)ncpu, stride);
	if (!vals)
		return -ENOMEM;
	if (bpf_map_lookup_elem(fd, &zero, vals)) {
		rc = -errno;
	} else {
		for (int c = 0; c < ncpu; c++) {
			const __u64 *v = (const __u64 *)(vals + (size_t)c * stride);

			for (int i = 0; i < HB_KSTATS_N; i++)
				((__u64 *)sum)[i] += v[i];
		}
	}
	free(vals);
	return rc;
}

void hb_ustats_sum(const struct hb_ustats *slots, unsigned n, struct hb_ustats *sum)
{
	memset(sum, 0, sizeof(*sum));
	for (unsigned i = 0; i < n; i++) {
#define HB_STAT_ADD_UP(name) sum->name += __atomic_load_n(&slots[i].name, __ATOMIC_RELAXED);
		HB_USTATS(HB_STAT_ADD_UP)
#undef HB_STAT_ADD_UP
	}
}

int hb_ustats_read(int fd, struct hb_ustats *sum)
{
	struct hb_ustats *slots = aligned_alloc(64, HB_MAX_WORKERS * sizeof(*slots));
	int rc = 0;

	memset(sum, 0, sizeof(*sum));
	if (!slots)
		return -ENOMEM;
	for (__u32 k = 0; k < HB_MAX_WORKERS && !rc; k++)
		if (bpf_map_lookup_elem(fd, &k, &slots[k]))
			rc = -errno;
	if (!rc)
		hb_ustats_sum(slots, HB_MAX_WORKERS, sum);
	free(slots);
	return rc;
}

int hb_map_fill(int fd, __u32 *entries, __u32 *max_entries)
{
	struct bpf_map_info info = { 0 };
	__u32 len = sizeof(info), n = 0;
	__u8 key[64], next[64];
	void *prev = NULL;

	if (bpf_obj_get_info_by_fd(fd, &info, &len))
		return -errno;
	if (info.key_size > sizeof(key))
		return -E2BIG;
	*max_entries = info.max_entries;
	/* bounded by max_entries: a map being refilled while we walk cannot keep us forever */
	while (n <= info.max_entries && !bpf_map_get_next_key(fd, prev, next)) {
		memcpy(key, next, info.key_size);
		prev = key;
		n++;
	}
	*entries = n;
	return 0;
}
