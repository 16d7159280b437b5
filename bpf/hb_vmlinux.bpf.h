/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* vmlinux.h for hbeat's BPF objects. Include this instead of vmlinux.h directly.
 *
 * The 6.18 vmlinux.h carries `typedef struct config_s config;` (from zstd), which would collide
 * with the pinned map named "config" (the map name is the C identifier, and the ABI fixes the pin
 * name). Renaming the typedef while vmlinux.h is read keeps both; nothing in hbeat uses it.
 */
#ifndef HB_VMLINUX_BPF_H
#define HB_VMLINUX_BPF_H

#define config hb_vmlinux_zstd_config
#include "vmlinux.h"
#undef config

/* Constants vmlinux.h lacks (they are #defines, not BTF). */
#ifndef ETH_ALEN
#define ETH_ALEN 6
#endif
#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

#endif /* HB_VMLINUX_BPF_H */
