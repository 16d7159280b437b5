/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Protocol version 2 over UDP: the session key and the frame tag (docs/PROTOCOL.md).
 *
 *   PRK = HKDF-Extract(salt = HB_SESSION_LABEL || device_id || ts_ms || nonce, IKM = secret)
 *         with the three fields of the HELLO as on the wire
 *   key = HKDF-Expand(PRK, info = server nonce || token (be64), 16 bytes)
 *   tag = SipHash-2-4(key, the frame before the tag), little-endian on the wire
 *
 * HKDF-SHA256 (RFC 5869) on libcrypto's HMAC. The device computes PRK when it signs its HELLO
 * (it has the secret then) and the key when the WELCOME brings the server's nonce and the
 * token; the server computes both while it checks the HELLO.
 */
#ifndef HB_SESSKEY_H
#define HB_SESSKEY_H

#include <stddef.h>
#include <stdint.h>

#include "hbeat_abi.h"

#define HB_SESSION_LABEL "hbeat-udp-session-v2"

/* RFC 5869 with SHA-256: out_len at most 255 * 32. 0 or -EIO/-EINVAL. */
int hb_hkdf_sha256(const uint8_t *salt, size_t salt_len, const uint8_t *ikm, size_t ikm_len,
		   const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len);

/* The device's half: PRK from its secret and its (bound) HELLO. */
int hb_session_prk(const uint8_t *secret, size_t slen, const struct hb_hello_bound *h,
		   uint8_t prk[HB_MAC_LEN]);
/* The session key from PRK, the WELCOME's nonce and the token. */
int hb_session_key(const uint8_t prk[HB_MAC_LEN], const uint8_t nonce[HB_NONCE_LEN], uint64_t token,
		   uint8_t key[HB_SESSION_KEY_LEN]);

/* The tag of a version 2 frame whose first len bytes (header, token, payload) are at frame. */
uint64_t hb_frame_tag(const uint8_t key[HB_SESSION_KEY_LEN], const void *frame, size_t len);
/* Writes the tag after the len bytes at frame (the buffer holds len + HB_TAG_LEN). */
void hb_frame_seal(const uint8_t key[HB_SESSION_KEY_LEN], void *frame, size_t len);
/* 1 if the HB_TAG_LEN bytes after the len bytes at frame are its tag (constant time). */
int hb_frame_tag_ok(const uint8_t key[HB_SESSION_KEY_LEN], const void *frame, size_t len);

#endif
