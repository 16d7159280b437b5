/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Device authentication: HELLO MACs (HMAC-SHA256 via libcrypto) and the device key store. */
#ifndef HB_AUTH_H
#define HB_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "hbeat_abi.h"

#define HB_SECRET_MIN 16
#define HB_SECRET_MAX 64

/* Key store file, one entry per line ('#' starts a comment):
 *   <device_id> <hex secret>                 one device, 16..64 byte secret
 *   <first>-<last> derive <hex master key>   a range of devices whose secrets are derived:
 *                                            HMAC-SHA256(master, HB_DERIVE_LABEL || be64 id)
 * Derived keys let a fleet of 500,000 devices be provisioned with one line; the device (or the
 * factory) holds only its own derived secret.
 */
#define HB_DERIVE_LABEL "hbeat-device-key-v1"

struct hb_keystore;

/* Loads a key store. On error returns -errno and describes the problem (file, line) in err. */
int hb_keystore_load(const char *path, struct hb_keystore **out, char *err, size_t errlen);
void hb_keystore_free(struct hb_keystore *ks);
/* Number of single-device entries and of ranges. */
size_t hb_keystore_devices(const struct hb_keystore *ks);
size_t hb_keystore_ranges(const struct hb_keystore *ks);
/* Copies the device's secret into out; returns its length, or -ENOENT for an unknown device. */
int hb_keystore_secret(const struct hb_keystore *ks, uint64_t device_id,
		       uint8_t out[HB_SECRET_MAX]);

/* secret = HMAC-SHA256(master, HB_DERIVE_LABEL || be64 device_id). */
int hb_derive_secret(const uint8_t *master, size_t mlen, uint64_t device_id,
		     uint8_t out[HB_MAC_LEN]);

/* mac = HMAC-SHA256(secret, HB_HELLO_LABEL || device_id || ts_ms || nonce), as on the wire. */
int hb_hello_mac(const uint8_t *secret, size_t slen, const struct hb_hello *h,
		 uint8_t out[HB_MAC_LEN]);

/* Fills a HELLO for a device: fresh random nonce, timestamp, MAC. Returns 0 or -EIO. */
int hb_hello_sign(struct hb_hello *h, uint64_t device_id, uint64_t ts_ms, const uint8_t *secret,
		  size_t slen);

enum hb_auth {
	HB_AUTH_OK = 0,
	HB_AUTH_UNKNOWN_DEVICE = 1,
	HB_AUTH_BAD_MAC = 2,
	HB_AUTH_CLOCK = 3, /* timestamp outside the clock window */
};

/* Checks a HELLO against the key store: known device, timestamp within window_ms of now_ms,
 * MAC correct (constant-time compare). Replay within the window (a timestamp not newer than the
 * device's last accepted one) is the caller's check: it needs per-device state.
 */
int hb_hello_verify(const struct hb_keystore *ks, const struct hb_hello *h, uint64_t now_ms,
		    uint64_t window_ms);
const char *hb_auth_str(int rc);

/* Random bytes from libcrypto's CSPRNG. Returns 0 or -EIO. */
int hb_random(void *buf, size_t n);

/* Parses hex into out (at most cap bytes). Returns the byte count or -EINVAL. */
int hb_hex_decode(const char *hex, uint8_t *out, size_t cap);

#endif
