/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Fleet mode's side of the shared state (hbd --nats): what the workers hand the fleet thread.
 *
 * The workers never talk to NATS. They push presence events and downlink outcomes into a queue
 * of their own (the same bounded queue as the control thread's, with its eventfd doorbell) and
 * flag a DATA batch ready for publishing; the fleet thread (fleet_*.c) takes both, and answers
 * each batch with a MSG_RING (HBD_OP_SINK_FLEET) once JetStream acknowledged all of it or one
 * publish failed. Core state: included anywhere, calls nothing above it.
 */
#ifndef HBD_FLEET_Q_H
#define HBD_FLEET_Q_H

#include <stdbool.h>
#include <stdint.h>

#include "events.h"

struct hbd_fleet;

struct hbd_fleet_side {
	bool on; /* --nats given: set before the workers start, never changed */
	struct hbd_events q; /* workers -> fleet thread: presence events, downlink outcomes */
	uint8_t *batch_ready; /* per worker, atomic: its in-flight sink batch awaits publishing */
	struct hbd_fleet *f; /* the fleet thread's state (fleet_impl.h) */
};

/* A worker's in-flight sink batch is to be published (its batch stays untouched until the
 * HBD_OP_SINK_FLEET completion comes back). */
static inline void hbd_fleet_batch_ready(struct hbd_fleet_side *fs, unsigned worker)
{
	__atomic_store_n(&fs->batch_ready[worker], 1, __ATOMIC_RELEASE);
	hbd_events_ring(&fs->q);
}

#endif
