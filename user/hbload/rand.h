/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A ring's random numbers (heartbeat jitter, first-beat spread, backoff, storm reconnects).
 *
 * splitmix64: a few multiplies a number, good enough to spread a fleet, and cheap on the
 * per-heartbeat path. Each ring keeps its own state (seeded from the CSPRNG at setup), so no
 * two threads share one and nothing needs a lock. Not for anything secret.
 */
#ifndef HBL_RAND_H
#define HBL_RAND_H

#include <stdint.h>

static inline uint64_t hbl_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

#endif
