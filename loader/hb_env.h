/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Environment checks and kernel feature probes that hbctl runs before touching anything, so a
 * missing piece is named ("kernel lacks X, needs Linux >= Y") instead of surfacing as a verifier
 * or errno message. Each function logs what is wrong and what to try, and returns 0 or a
 * negative errno.
 */
#ifndef HB_ENV_H
#define HB_ENV_H

#include <stdbool.h>
#include <stddef.h>

/* Root (the BPF, netlink and cgroup operations need CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN). */
int hbe_check_root(void);
/* The directory that will hold pin_dir must be on a bpffs. If /sys/fs/bpf is not one, mounts
 * it there and sets *mounted. */
int hbe_ensure_bpffs(const char *pin_dir, bool *mounted);
/* Kernel BTF (/sys/kernel/btf/vmlinux): CO-RE relocations and the kfunc need it. */
int hbe_check_btf(void);
/* path is a cgroup v2 directory. */
int hbe_check_cgroup2(const char *path);
/* Every program/map type, helper and kfunc hbeat uses; names the first missing one. */
int hbe_probe_features(void);
/* Whether the kernel loads freplace (BPF_PROG_TYPE_EXT) programs, which libxdp's
 * multi-program dispatcher needs (hb_freplace.c). 0 if it does; else -errno and why. Quiet. */
int hbe_probe_freplace(char *why, size_t whylen);

#endif
