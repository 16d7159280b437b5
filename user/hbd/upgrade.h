/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Upgrade without dropping devices (upgrade.c): SIGUSR2 hands everything to a new hbd. */
#ifndef HBD_UPGRADE_H
#define HBD_UPGRADE_H

#include <stdbool.h>
#include <stddef.h>

struct hbd_daemon;

/* Old daemon. SIGUSR2: start the successor and offer it the sockets. */
void hbd_upgrade_request(struct hbd_daemon *d);
/* Drives an upgrade under way; called from the control loop, never blocks for long. Returns
 * 1 when everything is handed over and this daemon must exit (without a drain).
 */
int hbd_upgrade_poll(struct hbd_daemon *d);
/* An upgrade is under way: the control loop polls more often. */
bool hbd_upgrade_busy(const struct hbd_daemon *d);
/* The control socket to poll for (-1: none). */
int hbd_upgrade_fd(const struct hbd_daemon *d);
void hbd_upgrade_free(struct hbd_daemon *d);

/* New daemon. Before planning: 1 if this process was started by an upgrade (the old daemon's
 * listening and UDP sockets are in tcp[]/udp[], *n of each, *n in: room), 0 if not, -errno if
 * the offer was unusable.
 */
int hbd_upgrade_child_offer(struct hbd_daemon *d, int *tcp, int *udp, unsigned *n, char *why,
			    size_t whylen);
/* Workers set up, not running: READY, then the old daemon's replay state and UDP sessions
 * into our tables, until GO. 0 or -errno.
 */
int hbd_upgrade_child_ready(struct hbd_daemon *d, char *why, size_t whylen);
/* Waits (polled) for the old daemon's DONE; logs the outcome. */
int hbd_upgrade_child_poll(struct hbd_daemon *d);

#endif
