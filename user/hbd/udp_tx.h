/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Sending UDP datagrams (udp_tx.c), below udp.c and udp_v2.c. */
#ifndef HBD_UDP_TX_H
#define HBD_UDP_TX_H

#include <stdint.h>

struct hbd_worker;

/* One frame to addr/port (16 bytes, v4-mapped for IPv4; port in network order): version 1, or
 * version 2 tagged under key if key is not NULL. 0 or -ENOMEM (counted in errors). */
int hbd_udp_send(struct hbd_worker *w, const uint8_t addr[16], uint16_t port, uint8_t type,
		 uint16_t seq, uint64_t token, const void *payload, uint16_t len,
		 const uint8_t *key);

#endif
