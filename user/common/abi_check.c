// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Compile-time checks that the ABI structs have the sizes BPF, daemon and loader all assume. */
#include <stddef.h>

#include "hbeat_abi.h"

_Static_assert(sizeof(struct hb_hdr) == 8, "wire header is 8 bytes");
_Static_assert(sizeof(struct hb_hello) == 56, "HELLO payload");
_Static_assert(sizeof(struct hb_hello_bound) == 64, "bound HELLO payload");
_Static_assert(sizeof(struct hb_welcome) == 16, "WELCOME payload");
_Static_assert(HB_WELCOME_FLAGS_LEN == 20, "WELCOME payload with server flags");
_Static_assert(sizeof(struct hb_ping) == 8, "PING payload");
_Static_assert(sizeof(struct hb_bye) == 2 && sizeof(struct hb_error) == 2, "BYE/ERROR payload");
_Static_assert(HB_PING_TCP_BYTES == 16 && HB_PING_UDP_BYTES == 24, "heartbeat size on the wire");
_Static_assert(sizeof(struct hb_conn_key) == 8 && sizeof(struct hb_session_key) == 8, "map keys");
_Static_assert(sizeof(struct hb_conn) == 96, "conns value");
_Static_assert(offsetof(struct hb_conn, flags) == 92, "conns value layout");
_Static_assert(sizeof(struct hb_session) == 136, "sessions value");
_Static_assert(offsetof(struct hb_session, key) == 104, "sessions value v2 layout");
_Static_assert(sizeof(struct hb_welcome2) == 28, "version 2 WELCOME payload");
_Static_assert(HB_PING_V2_BYTES == 32, "a version 2 UDP PING is 32 bytes");
_Static_assert(offsetof(struct hb_session, state) == 20, "sessions value layout");
_Static_assert(sizeof(struct hb_config) == 80, "config value");
_Static_assert(sizeof(struct hb_kstats) == HB_KSTATS_N * 8, "kstats is all u64");
_Static_assert(sizeof(struct hb_ustats) % 64 == 0, "ustats slots are whole cache lines");
_Static_assert(HB_USTATS_N * 8 <= sizeof(struct hb_ustats), "ustats is u64 fields");
