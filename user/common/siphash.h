/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* SipHash-2-4, the keyed hash of the version 2 frame tag (docs/PROTOCOL.md): the userspace twin
 * of bpf/hb_siphash.bpf.h, checked against the same reference vectors (tests/test_proto). */
#ifndef HB_SIPHASH_H
#define HB_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* key: 16 bytes. The result is the algorithm's 64-bit integer; on the wire it is written in
 * little-endian order (hb_put_le64). */
uint64_t hb_siphash24(const uint8_t key[16], const void *msg, size_t len);

#endif
