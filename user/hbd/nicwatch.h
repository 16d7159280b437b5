/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The NIC the XDP fast path sits on, watched by the control thread (nicwatch.c). */
#ifndef HBD_NICWATCH_H
#define HBD_NICWATCH_H

#include <stdbool.h>
#include <stdint.h>

struct hbd_nicwatch {
	int ifindex; /* from the config map hbctl wrote; 0: nothing to watch */
	char ifname[16];
	int state; /* last seen: enum in nicwatch.c */
	uint64_t next_ms;
	int local_fd; /* the pinned local_addrs map, -1 if the pins have none */
};

/* Starts watching the NIC named in the config map (offload mode only); pin_dir holds the maps. */
void hbd_nic_init(struct hbd_nicwatch *n, int ifindex, const char *ifname, const char *pin_dir);
void hbd_nic_close(struct hbd_nicwatch *n);
/* At most once a second: says so when the NIC goes down or comes back, disappears, or loses
 * its XDP program (UDP heartbeats then reach hbd and are answered in userspace), and brings
 * local_addrs in step with the NIC's addresses (XDP answers only PINGs addressed to them).
 */
void hbd_nic_check(struct hbd_nicwatch *n, uint64_t now_ms);

#endif
