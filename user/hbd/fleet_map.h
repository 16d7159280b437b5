/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A hash map from a device id (never 0) to a fixed-size value, for the fleet thread's tables:
 * open addressing, linear probing, backward-shift deletion, doubling at 3/4 full. Not
 * thread-safe (the fleet holds its lock). A value pointer is good until the next put or del.
 */
#ifndef HBD_FLEET_MAP_H
#define HBD_FLEET_MAP_H

#include <stddef.h>
#include <stdint.h>

struct fleet_map {
	uint64_t *keys; /* 0: empty */
	uint8_t *vals;
	size_t vsize, cap, count;
};

int fleet_map_init(struct fleet_map *m, size_t vsize, size_t expect);
void fleet_map_free(struct fleet_map *m);
void *fleet_map_get(const struct fleet_map *m, uint64_t key);
/* The value of key, a zeroed new one if it had none; NULL if out of memory. */
void *fleet_map_put(struct fleet_map *m, uint64_t key);
void fleet_map_del(struct fleet_map *m, uint64_t key);
/* Iteration: *pos from 0; the next occupied slot's value (its key in *key), NULL at the end.
 * Nothing may be added or deleted while iterating. */
void *fleet_map_next(const struct fleet_map *m, size_t *pos, uint64_t *key);

#endif
