/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* UDP session token -> client index, for one ring: open addressing with linear probing.
 *
 * A ring's UDP clients share its pool of sockets, so a reply is matched to its client by the
 * session token it carries. Capacity is fixed at init (twice the ring's clients, so probes stay
 * short); deletion shifts followers back instead of leaving tombstones, so a long run with many
 * reconnects does not degrade. Token 0 never occurs in a session (HELLO uses it) and marks a
 * free slot.
 */
#ifndef HBL_TOKMAP_H
#define HBL_TOKMAP_H

#include <stdint.h>

struct hbl_tokmap {
	uint64_t *key;
	uint32_t *val;
	uint32_t mask;
	uint32_t count;
};

int hbl_tokmap_init(struct hbl_tokmap *m, uint32_t max_entries);
void hbl_tokmap_free(struct hbl_tokmap *m);
/* Inserts or replaces. -EINVAL for token 0, -ENOSPC when full. */
int hbl_tokmap_put(struct hbl_tokmap *m, uint64_t token, uint32_t val);
/* The value for token, or UINT32_MAX. */
uint32_t hbl_tokmap_get(const struct hbl_tokmap *m, uint64_t token);
/* Removes token if present; returns 1 if it was. */
int hbl_tokmap_del(struct hbl_tokmap *m, uint64_t token);

#endif
