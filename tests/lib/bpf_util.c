// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The BPF tests' frames, kernel counter checks, scratch pin directories and cgroups. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "bpf_util.h"

#define HBT_BPF_FS_MAGIC 0xcafe4a11

int hbt_ensure_bpffs(void)
{
	struct statfs st;

	if (!statfs("/sys/fs/bpf", &st) && st.f_type == HBT_BPF_FS_MAGIC)
		return 0;
	return system("mkdir -p /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf") == 0 ? 0 : -1;
}

size_t hbt_frame(void *buf, __u8 type, __u16 seq, const void *payload, __u16 len)
{
	struct hb_hdr h = {
		.magic = htons(HB_MAGIC),
		.version = HB_VERSION,
		.type = type,
		.len = htons(len),
		.seq = htons(seq),
	};

	memcpy(buf, &h, sizeof(h));
	if (len)
		memcpy((char *)buf + sizeof(h), payload, len);
	return sizeof(h) + len;
}

size_t hbt_ping(void *buf, __u16 seq, __u64 ts)
{
	return hbt_frame(buf, HB_PING, seq, &ts, sizeof(ts));
}

void hbt_kstats(const struct hbk *h, struct hb_kstats *s)
{
	if (hbk_read_kstats(hbk_map_fd(h, HB_MAP_KSTATS), s))
		memset(s, 0xff, sizeof(*s)); /* makes every later comparison fail loudly */
}

const char *hbt_kstats_diff(const struct hb_kstats *a, const struct hb_kstats *b, int want_idx,
			    __u64 want_delta)
{
	static char msg[160];

	for (int i = 0; i < HB_KSTATS_N; i++) {
		__u64 d = HBK_KSTAT(b, i) - HBK_KSTAT(a, i);
		__u64 want = i == want_idx ? want_delta : 0;

		if (d != want) {
			snprintf(msg, sizeof(msg), "counter %s moved by %llu, expected %llu",
				 hbk_kstat_names[i], (unsigned long long)d,
				 (unsigned long long)want);
			return msg;
		}
	}
	return NULL;
}

int hbt_kstat_idx(const char *name)
{
	for (int i = 0; i < HB_KSTATS_N; i++)
		if (!strcmp(hbk_kstat_names[i], name))
			return i;
	return -1;
}

const char *hbt_kstats_expect(const struct hb_kstats *a, const struct hb_kstats *b, ...)
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
				 hbk_kstat_names[i], (unsigned long long)d,
				 (unsigned long long)want[i]);
			return msg;
		}
	}
	return NULL;
}

bool hbt_in_sockhash(int sockhash_fd, __u64 cookie)
{
	struct hb_conn_key k = { .cookie = cookie };
	__u64 v;

	return bpf_map_lookup_elem(sockhash_fd, &k, &v) == 0;
}

int hbt_pin_dir(char *out, size_t len)
{
	snprintf(out, len, "/sys/fs/bpf/hbeat-test-%d-%llu", (int)getpid(),
		 (unsigned long long)(hbt_now_ns() % 1000000));
	return 0;
}

void hbt_rm_pin_dir(const char *dir)
{
	char cmd[PATH_MAX + 32];

	if (!dir || !dir[0] || strncmp(dir, "/sys/fs/bpf/hbeat-test-", 23))
		return; /* never anything but our own scratch directories */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		err = -errno;
	close(fd);
	return err;
}

int hbt_cgroup_enter(char *cg, size_t cap)
{
	char pid[32], procs[PATH_MAX + 16];
	int err;

	snprintf(cg, cap, "%s/hbeat-test-%d", HBK_DEFAULT_CGROUP, (int)getpid());
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", cg);
	snprintf(pid, sizeof(pid), "%d", getpid());
	if (mkdir(cg, 0755))
		return -errno;
	err = write_file(procs, pid);
	if (err)
		rmdir(cg);
	return err;
}

void hbt_cgroup_leave(const char *cg)
{
	char pid[32], procs[PATH_MAX + 16];

	snprintf(pid, sizeof(pid), "%d", getpid());
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", HBK_DEFAULT_CGROUP);
	if (write_file(procs, pid))
		fprintf(stderr, "could not move back to the root cgroup\n");
	if (rmdir(cg))
		fprintf(stderr, "could not remove %s: %s\n", cg, strerror(errno));
}

void hbt_reap_stale(void)
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

void hbt_local_addr(const struct hbk *h, int family, const void *addr, __u32 flags)
{
	int fd = hbk_map_fd(h, HB_MAP_LOCAL_ADDRS);
	struct hb_local_addrs s;
	__u32 zero = 0;
	__u8 a[16] = { 0 };

	if (family == 4) {
		a[10] = a[11] = 0xff;
		memcpy(a + 12, addr, 4);
	} else {
		memcpy(a, addr, 16);
	}
	HT_EQ(bpf_map_lookup_elem(fd, &zero, &s), 0, "local_addrs read");
	HT_LT(s.n, HB_MAX_LOCAL_ADDRS, "room in local_addrs");
	memcpy(s.a[s.n].addr, a, 16);
	s.a[s.n].flags = flags;
	s.a[s.n].ifindex = 1;
	s.n++;
	HT_EQ(bpf_map_update_elem(fd, &zero, &s, BPF_ANY), 0, "local_addrs update");
}
