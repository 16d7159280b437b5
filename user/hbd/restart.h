/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A starting hbd and the daemon before it (restart.c): instance lock, adoption, clean-up. */
#ifndef HBD_RESTART_H
#define HBD_RESTART_H

#include <stddef.h>
#include <stdint.h>

struct hbd_daemon;

/* Takes the lock that makes hbd the only daemon on a pin directory. -EBUSY (why says so) if
 * another hbd holds it.
 */
int hbd_instance_lock(const char *pin_path, int *fd_out, char *why, size_t whylen);
/* Deletes the conns entries of TCP connections no daemon owns any more. Before listening. */
unsigned hbd_clean_stale_conns(struct hbd_daemon *d);
/* Takes the AUTHED sessions of the pinned map into the session and device tables and the
 * workers' wheels (after the workers set up, before they run). floor_ms is recorded as each
 * device's newest HELLO, so HELLOs from before the restart cannot be replayed.
 */
unsigned hbd_adopt_sessions(struct hbd_daemon *d, uint64_t floor_ms);

#endif
