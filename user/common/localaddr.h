/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The local_addrs map (hbeat_abi.h): which destinations XDP may answer for. hbctl fills it at
 * load, hbd keeps it in step with address changes (nicwatch). */
#ifndef HB_LOCALADDR_H
#define HB_LOCALADDR_H

#include <stdint.h>

#include "hbeat_abi.h"

/* The set is the map's value itself: struct hb_local_addrs (hbeat_abi.h). */

/* The unicast addresses of the NIC ifindex (HB_LOCAL_NIC) and of the VLAN devices whose lower
 * device it is (HB_LOCAL_VLAN), from getifaddrs. Multicast and broadcast addresses are never
 * in it; addresses beyond HB_MAX_LOCAL_ADDRS are left out (XDP passes PINGs to them to the
 * stack). Returns 0 or -errno. */
int hb_local_collect(int ifindex, struct hb_local_addrs *out);

/* Makes the map hold exactly the set. Returns 1 if it changed, 0 if it held it already, or
 * -errno. */
int hb_local_sync(int map_fd, const struct hb_local_addrs *s);

/* Adds one address to a set (16 bytes, IPv4 as v4-mapped). -ENOSPC when full. */
int hb_local_add(struct hb_local_addrs *s, const uint8_t addr[16], uint32_t flags,
		 uint32_t ifindex);

#endif
