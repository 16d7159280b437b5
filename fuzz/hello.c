// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Fuzz target "hello": hbd's HELLO check (hello.c: MAC, clock window, replay, the device's
 * current session) driven by a sequence of fuzzed operations, each result compared with a model
 * of the rules in docs/PROTOCOL.md. Time is virtual (the check takes the wall clock as an
 * argument), so the model is exact at every window boundary.
 *
 * The first byte sets the replay floor a restarted daemon keeps for one window (odd: a floor
 * (byte >> 1) * 100 ms before the start). Each operation then starts with one byte:
 *   0xff: release the current session of a device; 0xfe: run the device-table sweep;
 *   else bits 0-1 device kind (explicit key, derived key, unknown id, raw 56-byte payload),
 *   bit 2 sign with the right key, bits 3-5 timestamp kind, bits 6-7 advance the clock.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "devices.h"
#include "hbd.h"
#include "hello.h"
#include "proto.h"
#include "targets.h"
#include "worker.h"

#define WINDOW_MS 30000ull
#define T0_MS 1700000000000ull

static struct hb_keystore *keys;

static int secret_of(uint64_t id, uint8_t *out)
{
	return hb_keystore_secret(keys, id, out);
}

static bool known(uint64_t id)
{
	return (id >= 1 && id <= 9) || (id >= 100 && id <= 199);
}

/* Model state for the known devices: last accepted timestamp and current session. */
static size_t slot_of(uint64_t id)
{
	return id <= 9 ? id : 10 + (id - 100);
}

static void load_keys(void)
{
	char path[] = "/tmp/hbfuzz-keys.XXXXXX", why[256];
	int fd = mkstemp(path);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

	HBF_CHECK(f, "temporary key file");
	for (int d = 1; d <= 9; d++) {
		fprintf(f, "%d ", d);
		for (int i = 0; i < 16; i++)
			fprintf(f, "%02x", d * 16 + i);
		fputc('\n', f);
	}
	fprintf(f,
		"100-199 derive 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
	fclose(f);
	HBF_CHECK(!hb_keystore_load(path, &keys, why, sizeof(why)), "key store: %s", why);
	unlink(path);
}

int hbf_hello(const uint8_t *data, size_t n)
{
	struct hbf_in in = { data, n };
	uint64_t last[110] = { 0 }, cur[110] = { 0 }, now = T0_MS;
	struct hbd_daemon d = { 0 };
	unsigned op_no = 0;

	if (!keys)
		load_keys();
	d.keys.cur = keys;
	d.lim.window_ms = WINDOW_MS;
	if (in.n && (*in.p & 1)) {
		d.replay.floor_ms = T0_MS - (uint64_t)(*in.p >> 1) * 100;
		d.replay.until_ms = d.replay.floor_ms + WINDOW_MS;
	}
	hbf_u8(&in);
	HBF_CHECK(!hbd_devices_init(&d.devices, 0), "device table");

	while (in.n && op_no < 128) { /* long inputs cost HMACs, not coverage */
		uint8_t op = hbf_u8(&in), secret[HB_SECRET_MAX], mac[HB_MAC_LEN];
		uint64_t id, ts, loc = hbd_loc(0, 0, (uint16_t)op_no, op_no);
		struct hbd_hello_result r;
		struct hb_hello h;
		bool sign, ok_mac;
		int rc, want;

		op_no++;
		if (op == 0xff) { /* the session ended */
			id = hbf_u8(&in) % 2 ? 100 + hbf_u8(&in) % 100 : 1 + hbf_u8(&in) % 9;
			hbd_devices_release(d.devices, id, cur[slot_of(id)]);
			cur[slot_of(id)] = 0;
			continue;
		}
		if (op == 0xfe) { /* the control thread's sweep; invisible to the rules */
			hbd_devices_sweep(d.devices, now, WINDOW_MS, 2048);
			continue;
		}
		now += (uint64_t[]){ 0, 1, 1000, WINDOW_MS + 1 }[op >> 6];
		switch (op & 3) {
		case 0:
			id = 1 + hbf_u8(&in) % 9;
			break;
		case 1:
			id = 100 + hbf_u8(&in) % 100;
			break;
		default:
			id = hbf_u64(&in);
			break;
		}
		switch ((op >> 3) & 7) {
		case 0:
			ts = now + (int8_t)hbf_u8(&in);
			break;
		case 1: /* a replay of the last accepted one */
			ts = known(id) ? last[slot_of(id)] : now;
			break;
		case 2:
			ts = known(id) ? last[slot_of(id)] - 1 : now - 1;
			break;
		case 3:
			ts = now - WINDOW_MS - 1 - hbf_u8(&in);
			break;
		case 4:
			ts = now + WINDOW_MS + 1 + hbf_u8(&in);
			break;
		case 5:
			ts = hbf_u64(&in);
			break;
		case 6:
			ts = now - WINDOW_MS;
			break;
		default:
			ts = now + WINDOW_MS;
			break;
		}
		sign = op & 4;
		if ((op & 3) == 3) {
			hbf_bytes(&in, &h, sizeof(h)); /* raw payload: whatever the bytes say */
			id = hb_get_be64(&h.device_id);
			ts = hb_get_be64(&h.ts_ms);
			sign = false;
		} else {
			hb_put_be64(&h.device_id, id);
			hb_put_be64(&h.ts_ms, ts);
			hbf_bytes(&in, h.nonce, sizeof(h.nonce));
			hbf_bytes(&in, h.mac, sizeof(h.mac));
		}
		rc = secret_of(id, secret);
		HBF_CHECK((rc > 0) == known(id), "key store and model disagree on device %llu",
			  (unsigned long long)id);
		ok_mac = false;
		if (rc > 0) {
			hb_hello_mac(secret, (size_t)rc, &h, mac);
			if (sign)
				memcpy(h.mac, mac, sizeof(mac));
			ok_mac = !memcmp(mac, h.mac, sizeof(mac));
		}

		if (!known(id))
			want = HB_AUTH_UNKNOWN_DEVICE;
		else if (!ok_mac)
			want = HB_AUTH_BAD_MAC;
		else if (ts < now - WINDOW_MS || ts > now + WINDOW_MS)
			want = HB_AUTH_CLOCK;
		else if ((now < d.replay.until_ms && ts <= d.replay.floor_ms) ||
			 ts <= last[slot_of(id)])
			want = HBD_REFUSE_REPLAY; /* may predate the restart, or seen since */
		else
			want = 0;

		{
			struct hb_hello_msg m;

			hb_hello_parse(&h, sizeof(h), &m);
			rc = hbd_hello_check_at(&d, &m, loc, now, &r);
		}
		HBF_CHECK(rc == want, "op %u device %llu ts now%+lld: got %d (%s), want %d (%s)",
			  op_no, (unsigned long long)id, (long long)(ts - now), rc,
			  hbd_auth_str(rc), want, hbd_auth_str(want));
		HBF_CHECK(r.device_id == id, "result names device %llu, HELLO %llu",
			  (unsigned long long)r.device_id, (unsigned long long)id);
		if (rc == 0) {
			HBF_CHECK(r.token != 0, "zero session token handed out");
			HBF_CHECK(r.old_loc == cur[slot_of(id)],
				  "superseded session %#llx, want %#llx",
				  (unsigned long long)r.old_loc,
				  (unsigned long long)cur[slot_of(id)]);
			HBF_CHECK(hbd_devices_loc(d.devices, id) == loc,
				  "device's session not recorded");
			last[slot_of(id)] = ts;
			cur[slot_of(id)] = loc;
		}
	}
	hbd_devices_free(d.devices);
	return 0;
}
