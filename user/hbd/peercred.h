/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Who is at the other end of a control-socket connection, and whether it may control hbd. */
#ifndef HBD_PEERCRED_H
#define HBD_PEERCRED_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The peer of the connected UNIX socket fd (its credentials as the kernel recorded them at
 * connect, SO_PEERCRED and SO_PEERGROUPS) may send requests if it is root, runs as hbd's own
 * user, or, when has_group, has gid as its group or among its supplementary groups. Returns
 * true if it may; otherwise false, and why says who it is.
 */
bool hbd_peer_permitted(int fd, bool has_group, gid_t gid, char *why, size_t whylen);

#endif
