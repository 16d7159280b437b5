/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Presence events (online, offline, expired, revoked, ...) from the workers' session code. */
#ifndef HBD_PRESENCE_H
#define HBD_PRESENCE_H

#include <stdint.h>

#include "events.h"

struct hbd_worker;

/* A session of device changed: kind ONLINE when admitted, or the kind hbd_presence_end() names
 * when it ended. addr/port (UDP, network order) may be NULL. Costs nothing while no one
 * subscribes.
 */
void hbd_presence(struct hbd_worker *w, enum hbd_ev_kind kind, uint64_t device, uint64_t loc,
		  const uint8_t *addr, uint16_t port);
/* The event a session end is, from the BYE reason the server sends (0 when it sends none:
 * the device left or its connection broke).
 */
enum hbd_ev_kind hbd_presence_end(uint8_t bye_reason);

#endif
