/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The local_addrs map (hbeat_abi.h): which destinations XDP may answer for. hbctl fills it at
 * load, hbd keeps it in step with address changes (nicwatch). */
#ifndef HB_LOCALADDR_H
#define HB_LOCALADDR_H

#include <stdint.h>

#include "hbeat_abi.h"

#define HB_LOCAL_SET_MAX 64 /* addresses of one NIC and the VLAN devices on it we track */

struct hb_local_set {
	unsigned n;
	struct hb_local_addr_key key[HB_LOCAL_SET_MAX];
	struct hb_local_addr val[HB_LOCAL_SET_MAX];
};

/* The unicast addresses of the NIC ifindex (HB_LOCAL_NIC) and of the VLAN devices whose lower
 * device it is (HB_LOCAL_VLAN), from getifaddrs. Multicast and broadcast addresses are never
 * in it. Returns 0 or -errno. */
int hb_local_collect(int ifindex, struct hb_local_set *out);

/* Makes the map hold exactly the set: adds what is missing, removes what is not in it. Returns
 * the number of entries changed, or -errno. */
int hb_local_sync(int map_fd, const struct hb_local_set *s);

/* Adds one address to a set (16 bytes, IPv4 as v4-mapped). -ENOSPC when full. */
int hb_local_add(struct hb_local_set *s, const uint8_t addr[16], uint32_t flags, uint32_t ifindex);

#endif
