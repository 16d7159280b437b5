/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Fleet mode (hbd --nats): presence, downlink and DATA through NATS JetStream, for daemon.c.
 *
 *   hbd_fleet_init    before the workers start: the queue they push into (fleet_q.h)
 *   hbd_fleet_start   once they run (their rings exist): the connection and the threads
 *   hbd_fleet_stop    after they have been joined: the last events written, then disconnect
 *   hbd_fleet_free    at the end, whatever happened before
 *   hbd_fleet_stats   any time between start and free (the metrics thread): the counters
 * Not reaching NATS is no reason not to start: heartbeats do not depend on it; the connection
 * is retried for as long as hbd runs (docs/FLEET.md says what works meanwhile).
 */
#ifndef HBD_FLEET_H
#define HBD_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hbd_daemon;

/* What fleet mode has done since the start. */
struct hbd_fleet_counters {
	uint64_t pres_written; /* presence writes JetStream acknowledged */
	/* failed presence writes, by why: at the publish, no acknowledgement in time, refused */
	uint64_t pres_failed_pub, pres_failed_timeout, pres_failed_js;
	uint64_t pres_taken_back; /* writes in flight given up and made again (not failures) */
	uint64_t events_lost; /* presence events the workers' queue had no room for */
	uint64_t data_published, data_failed;
	uint64_t down_in, down_replied; /* downlink requests taken, and answered */
	uint64_t superseded; /* sessions cut: their device came online on another node */
	uint64_t node_lost_marked; /* dead nodes' devices marked offline */
};

/* What fleet mode has done and holds now, for /metrics: one consistent snapshot. */
struct hbd_fleet_stats {
	bool connected; /* to NATS, with the stream and buckets in place */
	unsigned nodes_live; /* in hbeat_nodes, refreshed within the TTL, this node included */
	uint64_t held; /* devices whose presence this node owns (their last state included) */
	uint64_t pres_inflight; /* presence writes published and not acknowledged yet */
	uint64_t nats_errors; /* nats-server's asynchronous errors: a permission refused, say */
	struct hbd_fleet_counters count;
};

int hbd_fleet_init(struct hbd_daemon *d, char *why, size_t whylen);
int hbd_fleet_start(struct hbd_daemon *d, char *why, size_t whylen);
void hbd_fleet_stop(struct hbd_daemon *d);
void hbd_fleet_free(struct hbd_daemon *d);
/* false without fleet mode */
bool hbd_fleet_stats(struct hbd_daemon *d, struct hbd_fleet_stats *s);

#endif
