/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Fleet mode (hbd --nats): presence, downlink and DATA through NATS JetStream, for daemon.c.
 *
 *   hbd_fleet_init    before the workers start: the queue they push into (fleet_q.h)
 *   hbd_fleet_start   once they run (their rings exist): the connection and the threads
 *   hbd_fleet_stop    after they have been joined: the last events written, then disconnect
 *   hbd_fleet_free    at the end, whatever happened before
 * Not reaching NATS is no reason not to start: heartbeats do not depend on it; the connection
 * is retried for as long as hbd runs (docs/FLEET.md says what works meanwhile).
 */
#ifndef HBD_FLEET_H
#define HBD_FLEET_H

#include <stddef.h>

struct hbd_daemon;

int hbd_fleet_init(struct hbd_daemon *d, char *why, size_t whylen);
int hbd_fleet_start(struct hbd_daemon *d, char *why, size_t whylen);
void hbd_fleet_stop(struct hbd_daemon *d);
void hbd_fleet_free(struct hbd_daemon *d);

#endif
