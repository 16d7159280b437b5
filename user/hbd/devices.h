/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Device table shared by all workers: last accepted HELLO time (replay) and current session. */
#ifndef HBD_DEVICES_H
#define HBD_DEVICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a device's current session lives, packed in 64 bits (0 = none):
 *   bit 63 valid, bit 62 UDP, bits 48..61 worker, bits 32..47 gen, bits 0..31 slot/index.
 */
#define HBD_LOC_VALID (1ull << 63)
#define HBD_LOC_UDP (1ull << 62)
static inline uint64_t hbd_loc(int udp, unsigned worker, uint16_t gen, uint32_t index)
{
	return HBD_LOC_VALID | (udp ? HBD_LOC_UDP : 0) | ((uint64_t)(worker & 0x3fff) << 48) |
	       ((uint64_t)gen << 32) | index;
}
static inline unsigned hbd_loc_worker(uint64_t loc)
{
	return (unsigned)(loc >> 48) & 0x3fff;
}
static inline uint16_t hbd_loc_gen(uint64_t loc)
{
	return (uint16_t)(loc >> 32);
}
static inline uint32_t hbd_loc_index(uint64_t loc)
{
	return (uint32_t)loc;
}

struct hbd_devices;

/* A table sized for about expect devices (it grows beyond). */
int hbd_devices_init(struct hbd_devices **out, size_t expect);
void hbd_devices_free(struct hbd_devices *t);

/* Called for a HELLO whose MAC and clock window already checked out. Refuses a replay: ts_ms
 * must be newer than the device's last accepted HELLO (-EALREADY). Otherwise records ts_ms and
 * new_loc as the device's current session, verified by the key store tagged key_tag
 * (hb_keystore_tag), and returns the one it supersedes in *old_loc (0 if none). -ENOMEM if the
 * table cannot grow.
 */
int hbd_devices_hello(struct hbd_devices *t, uint64_t id, uint64_t ts_ms, uint64_t new_loc,
		      uint8_t key_tag, uint64_t *old_loc);
/* An MQTT CONNECT whose credentials checked out: as hbd_devices_hello, without a timestamp
 * (an MQTT password is checked by its expiry day, not against replay; the newest HELLO time
 * stays as it is for the device's hbeat sessions).
 */
int hbd_devices_claim(struct hbd_devices *t, uint64_t id, uint64_t new_loc, uint8_t key_tag,
		      uint64_t *old_loc);
/* A session taken over from an earlier daemon (pinned map, or handed over in an upgrade):
 * records loc as the device's current session and ts_ms as its newest HELLO (if newer).
 * -EEXIST if the device has a current session already (the caller drops the new one).
 */
int hbd_devices_adopt(struct hbd_devices *t, uint64_t id, uint64_t ts_ms, uint64_t loc);
/* How many sessions hbd_devices_adopt ever recorded: a session taken over comes with no
 * presence event, so fleet mode compares its records with the table when this moves. */
uint64_t hbd_devices_adoptions(struct hbd_devices *t);
/* A session ended: it stops being the device's current one, if it still is. */
void hbd_devices_release(struct hbd_devices *t, uint64_t id, uint64_t loc);
/* Current session of a device (0 if none or unknown). */
uint64_t hbd_devices_loc(struct hbd_devices *t, uint64_t id);
/* Incremental clean-up, called every tick: looks at up to budget table slots and drops devices
 * with no session whose last HELLO is older than the clock window (the window check alone
 * refuses their replays now). Returns the number dropped.
 */
unsigned hbd_devices_sweep(struct hbd_devices *t, uint64_t now_ms, uint64_t window_ms,
			   unsigned budget);
size_t hbd_devices_count(struct hbd_devices *t);
/* A key reload: for every device with a current session that the store tagged key_tag did not
 * verify, asks keep(); a session kept is from then on counted as the new store's (its tag
 * becomes key_tag), one not kept is left as it is (the caller cuts it). keep runs under the
 * device's shard lock and must not call back into the table.
 */
void hbd_devices_rekey(struct hbd_devices *t, uint8_t key_tag,
		       bool (*keep)(void *arg, uint64_t id, uint64_t loc), void *arg);
/* Calls fn for every device (each shard locked while it is walked); for the upgrade. */
void hbd_devices_foreach(struct hbd_devices *t,
			 void (*fn)(void *ctx, uint64_t id, uint64_t last_ts_ms), void *ctx);
/* Records ts_ms as the device's newest accepted HELLO if it is newer (an upgrade hands the
 * replay state over).
 */
int hbd_devices_note(struct hbd_devices *t, uint64_t id, uint64_t ts_ms);

#endif
