// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Environment checks and feature probes for hbctl (see hb_env.h). */
#include "hb_env.h"

#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "log.h"

#define BPF_FS_MAGIC_ 0xcafe4a11
#define CGROUP2_SUPER_MAGIC_ 0x63677270
#define SYSFS_MAGIC_ 0x62656572
#define BPFFS_ROOT "/sys/fs/bpf"

int hbe_check_root(void)
{
	if (geteuid() == 0)
		return 0;
	hb_err("hbctl must run as root (it needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN); "
	       "try: sudo hbctl ...");
	return -EPERM;
}

static bool on_bpffs(const char *path)
{
	struct statfs st;

	return !statfs(path, &st) && st.f_type == BPF_FS_MAGIC_;
}

int hbe_ensure_bpffs(const char *pin_dir, bool *mounted)
{
	char buf[PATH_MAX], *parent;

	*mounted = false;
	snprintf(buf, sizeof(buf), "%s", pin_dir);
	parent = dirname(buf);
	if (on_bpffs(parent))
		return 0;
	if (!strcmp(parent, BPFFS_ROOT)) {
		struct statfs cg;

		/* `ip netns exec` gives the command a private mount namespace with a fresh /sys and
		 * nothing mounted below it. A bpffs mounted there dies with the command, and with it
		 * every pin: the load would silently undo itself. Refuse instead. */
		if (!statfs("/sys/fs/cgroup", &cg) && cg.f_type == SYSFS_MAGIC_) {
			hb_err("no bpffs at %s and nothing mounted on /sys/fs/cgroup: this looks like "
			       "`ip netns exec`, whose private /sys would take the pins with it when "
			       "hbctl exits; enter only the network namespace instead: "
			       "nsenter --net=/run/netns/NAME hbctl ...",
			       BPFFS_ROOT);
			return -ENOENT;
		}
		if (mkdir(BPFFS_ROOT, 0700) && errno != EEXIST) {
			hb_err("cannot create %s: %s", BPFFS_ROOT, strerror(errno));
			return -errno;
		}
		if (mount("bpf", BPFFS_ROOT, "bpf", 0, "mode=0700")) {
			int err = -errno;

			hb_err("no bpffs at %s and mounting one failed: %s; try: mount -t bpf bpf %s",
			       BPFFS_ROOT, strerror(-err), BPFFS_ROOT);
			return err;
		}
		*mounted = true;
		return 0;
	}
	hb_err("%s is not on a bpffs, so pins cannot live there; use a --pin-path under %s", parent,
	       BPFFS_ROOT);
	return -ENOTDIR;
}

int hbe_check_btf(void)
{
	if (!access("/sys/kernel/btf/vmlinux", R_OK))
		return 0;
	hb_err("kernel BTF is missing (/sys/kernel/btf/vmlinux): hbeat needs a kernel built with "
	       "CONFIG_DEBUG_INFO_BTF=y");
	return -ENOENT;
}

int hbe_check_cgroup2(const char *path)
{
	struct statfs st;

	if (statfs(path, &st)) {
		hb_err("cgroup %s: %s; pass the cgroup v2 mount with --cgroup (under `ip netns exec` "
		       "/sys/fs/cgroup is empty: use nsenter --net=/run/netns/NAME hbctl ... instead)",
		       path, strerror(errno));
		return -errno;
	}
	if (st.f_type != CGROUP2_SUPER_MAGIC_) {
		hb_err("%s is not a cgroup v2 directory (sock_ops needs cgroup v2); pass its mount "
		       "point with --cgroup (often /sys/fs/cgroup or /sys/fs/cgroup/unified)",
		       path);
		return -ENOTDIR;
	}
	return 0;
}

struct probe {
	const char *what;
	const char *since;
	int (*fn)(const struct probe *p);
	int a, b;
};

static int prog_type(const struct probe *p)
{
	return libbpf_probe_bpf_prog_type(p->a, NULL);
}

static int map_type(const struct probe *p)
{
	return libbpf_probe_bpf_map_type(p->a, NULL);
}

static int helper(const struct probe *p)
{
	return libbpf_probe_bpf_helper(p->a, p->b, NULL);
}

static struct btf *vmlinux_btf;

static int kfunc(const struct probe *p)
{
	if (!vmlinux_btf)
		vmlinux_btf = btf__load_vmlinux_btf();
	if (!vmlinux_btf)
		return -errno;
	return btf__find_by_name_kind(vmlinux_btf, p->what, BTF_KIND_FUNC) > 0;
}

static const struct probe probes[] = {
	{ "XDP programs", "4.8", prog_type, BPF_PROG_TYPE_XDP, 0 },
	{ "sk_skb programs", "4.14", prog_type, BPF_PROG_TYPE_SK_SKB, 0 },
	{ "sock_ops programs", "4.13", prog_type, BPF_PROG_TYPE_SOCK_OPS, 0 },
	{ "SOCKHASH maps", "4.18", map_type, BPF_MAP_TYPE_SOCKHASH, 0 },
	{ "bpf_sock_hash_update in sock_ops", "4.18", helper, BPF_PROG_TYPE_SOCK_OPS,
	  BPF_FUNC_sock_hash_update },
	{ "bpf_sk_redirect_hash in sk_skb", "4.18", helper, BPF_PROG_TYPE_SK_SKB,
	  BPF_FUNC_sk_redirect_hash },
	{ "bpf_get_socket_cookie in sock_ops", "4.19", helper, BPF_PROG_TYPE_SOCK_OPS,
	  BPF_FUNC_get_socket_cookie },
	{ "bpf_get_netns_cookie in sock_ops", "5.15", helper, BPF_PROG_TYPE_SOCK_OPS,
	  BPF_FUNC_get_netns_cookie },
	{ "bpf_snprintf", "5.13", helper, BPF_PROG_TYPE_SOCK_OPS, BPF_FUNC_snprintf },
	{ "bpf_cast_to_kern_ctx", "6.2", kfunc, 0, 0 },
};

int hbe_probe_features(void)
{
	int err = 0;

	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		int r = probes[i].fn(&probes[i]);

		if (r == 1)
			continue;
		hb_err("kernel lacks %s (needs Linux >= %s)%s%s", probes[i].what, probes[i].since,
		       r < 0 ? ": probe failed: " : "", r < 0 ? strerror(-r) : "");
		err = -EOPNOTSUPP;
		break;
	}
	btf__free(vmlinux_btf);
	vmlinux_btf = NULL;
	return err;
}
