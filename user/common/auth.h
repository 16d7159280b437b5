/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Device authentication: HELLO MACs (HMAC-SHA256 via libcrypto) and the device key store. */
#ifndef HB_AUTH_H
#define HB_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hbeat_abi.h"

#define HB_SECRET_MIN 16
#define HB_SECRET_MAX 64

/* Key store file, one entry per line ('#' starts a comment):
 *   <device_id> <hex secret>                 one device, 16..64 byte secret
 *   <device_id> revoked                      refused, even inside a derive range
 *   <first>-<last> derive <hex master key>   a range of devices whose secrets are derived:
 *                                            HMAC-SHA256(master, HB_DERIVE_LABEL || be64 id)
 * Derived keys let a fleet of 500,000 devices be provisioned with one line; the device (or the
 * factory) holds only its own derived secret.
 */
#define HB_DERIVE_LABEL "hbeat-device-key-v1"
/* A line holds at most HB_KS_LINE_MAX - 1 characters before its newline; a longer one makes the
 * file unreadable (never a line read in pieces, whose rest would be parsed as an entry).
 */
#define HB_KS_LINE_MAX 512

struct hb_keystore;

/* Loads a key store. On error returns -errno and describes the problem (file, line) in err. */
int hb_keystore_load(const char *path, struct hb_keystore **out, char *err, size_t errlen);
void hb_keystore_free(struct hb_keystore *ks);
/* Number of single-device entries (revoked ones included), of ranges, of revoked devices. */
size_t hb_keystore_devices(const struct hb_keystore *ks);
size_t hb_keystore_ranges(const struct hb_keystore *ks);
size_t hb_keystore_revoked(const struct hb_keystore *ks);
/* True if a HELLO from this device could be accepted (it has a secret and is not revoked);
 * derives nothing, so a whole fleet can be checked after a reload.
 */
bool hb_keystore_knows(const struct hb_keystore *ks, uint64_t device_id);
/* True if both stores give the device the same secret (false if either has none for it): what
 * a reload asks of every live session, so one whose key was replaced is cut. Compares the
 * entries (a range's master, not each derived key) and copies no secret out.
 */
bool hb_keystore_same_secret(const struct hb_keystore *a, const struct hb_keystore *b,
			     uint64_t device_id);
/* A small name the holder gives a store (0 until set): hbd records with each session which
 * store verified its HELLO. */
void hb_keystore_set_tag(struct hb_keystore *ks, uint8_t tag);
uint8_t hb_keystore_tag(const struct hb_keystore *ks);

/* What one key-store line holds, without its secret: for tools that edit the file. */
enum hb_ks_kind { HB_KS_BLANK = 0, HB_KS_DEVICE, HB_KS_RANGE, HB_KS_REVOKED };
struct hb_ks_line {
	enum hb_ks_kind kind;
	uint64_t first, last; /* the device id (first == last), or the range */
};
/* Parses one line (a comment or blank line is HB_KS_BLANK). -EINVAL with the reason in err. */
int hb_keystore_parse_line(const char *line, struct hb_ks_line *out, char *err, size_t errlen);
/* Reads the next line of a key store, newline included, into line: 1, 0 at the end of the
 * file, or -EMSGSIZE if the line is longer than HB_KS_LINE_MAX - 1 characters (what was read
 * of it is in line: cleanse it).
 */
int hb_keystore_read_line(FILE *f, char line[HB_KS_LINE_MAX + 1]);

/* Copies the device's secret into out; returns its length, -ENOENT for an unknown device, or
 * -EKEYREVOKED for a revoked one. */
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
	HB_AUTH_REVOKED = 4, /* the key store marks the device revoked */
	HB_AUTH_OTHER_SERVER = 5, /* a bound HELLO for another server (hbeat_abi.h) */
};

/* Checks a HELLO against the key store: known device, timestamp within window_ms of now_ms,
 * MAC correct (constant-time compare). Replay within the window (a timestamp not newer than the
 * device's last accepted one) is the caller's check: it needs per-device state.
 */
int hb_hello_verify(const struct hb_keystore *ks, const struct hb_hello *h, uint64_t now_ms,
		    uint64_t window_ms);
const char *hb_auth_str(int rc);

/* A HELLO as received, either form: the 56-byte one (bound false, server_id 0) or the bound
 * 64-byte one (hbeat_abi.h). */
struct hb_hello_msg {
	struct hb_hello_bound h;
	bool bound;
};

/* Reads a HELLO payload of either length into m. -EINVAL for any other length. */
int hb_hello_parse(const void *payload, size_t len, struct hb_hello_msg *m);

/* mac = HMAC-SHA256(secret, HB_HELLO_BOUND_LABEL || device_id || ts_ms || nonce || server_id). */
int hb_hello_bound_mac(const uint8_t *secret, size_t slen, const struct hb_hello_bound *h,
		       uint8_t out[HB_MAC_LEN]);
/* Fills a bound HELLO for a device and a server (0: any): fresh nonce, timestamp, MAC. */
int hb_hello_bound_sign(struct hb_hello_bound *h, uint64_t device_id, uint64_t ts_ms,
			uint64_t server_id, const uint8_t *secret, size_t slen);

/* Checks a HELLO of either form as hb_hello_verify does, and, for a bound one that names a
 * server, that it names server_id (our id; HB_AUTH_OTHER_SERVER if not, also when we have
 * none). If prk is not NULL and the HELLO is good, it receives the device's half of the
 * version 2 session key (hb_session_prk), derived from the secret while it is at hand.
 */
int hb_hello_msg_verify(const struct hb_keystore *ks, const struct hb_hello_msg *m,
			uint64_t server_id, uint64_t now_ms, uint64_t window_ms,
			uint8_t prk[HB_MAC_LEN]);

/* Random bytes from libcrypto's CSPRNG. Returns 0 or -EIO. */
int hb_random(void *buf, size_t n);

/* Parses hex into out (at most cap bytes). Returns the byte count or -EINVAL. */
int hb_hex_decode(const char *hex, uint8_t *out, size_t cap);

#endif
