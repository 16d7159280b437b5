// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* MQTT identities: device topics, the user name, and passwords derived from device secrets. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>

#include "mqtt.h"

size_t hb_mqtt_topic(char *out, size_t cap, uint64_t device_id, const char *leaf)
{
	int n = snprintf(out, cap, "devices/%" PRIu64 "/%s", device_id, leaf);

	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* A canonical decimal id > 0 at p[0..n): no sign, no leading zero, no overflow. */
static uint64_t parse_id(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	if (!n || n > 20 || p[0] == '0')
		return 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t d;

		if (p[i] < '0' || p[i] > '9')
			return 0;
		d = (uint64_t)(p[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return 0;
		v = v * 10 + d;
	}
	return v;
}

uint64_t hb_mqtt_user_device(struct hb_mqtt_str u)
{
	return parse_id(u.p, u.len);
}

uint64_t hb_mqtt_topic_device(struct hb_mqtt_str t, const char *leaf, struct hb_mqtt_str *rest)
{
	static const char pre[] = "devices/";
	size_t pl = sizeof(pre) - 1, ll = strlen(leaf), i;
	uint64_t id;

	if (t.len < pl || memcmp(t.p, pre, pl))
		return 0;
	for (i = pl; i < t.len && t.p[i] != '/'; i++)
		;
	id = parse_id(t.p + pl, i - pl);
	if (!id || i == t.len)
		return 0;
	i++;
	if (t.len - i < ll || memcmp(t.p + i, leaf, ll))
		return 0;
	i += ll;
	/* the leaf ends the topic or a level does: "upx" is not "up" */
	if (i < t.len && t.p[i] != '/')
		return 0;
	if (rest) {
		rest->p = t.p + i;
		rest->len = (uint16_t)(t.len - i);
	}
	return id;
}

static int pw_mac(const uint8_t *secret, size_t slen, const char *realm, uint64_t device_id,
		  uint32_t day, uint8_t mac[32])
{
	uint8_t msg[sizeof(HB_MQTT_PW_LABEL) + HB_MQTT_REALM_MAX + 1 + 4 + 8];
	size_t rl = strlen(realm), off = 0;
	uint32_t d = htobe32(day);
	uint64_t id = htobe64(device_id);
	unsigned olen = 0;

	if (rl > HB_MQTT_REALM_MAX)
		return -EINVAL;
	/* label and realm each end with a NUL byte: no realm can pose as another's prefix */
	memcpy(msg, HB_MQTT_PW_LABEL, sizeof(HB_MQTT_PW_LABEL));
	off = sizeof(HB_MQTT_PW_LABEL);
	memcpy(msg + off, realm, rl);
	off += rl;
	msg[off++] = 0;
	memcpy(msg + off, &d, 4);
	off += 4;
	memcpy(msg + off, &id, 8);
	off += 8;
	if (!HMAC(EVP_sha256(), secret, (int)slen, msg, off, mac, &olen) || olen != 32)
		return -EIO;
	OPENSSL_cleanse(msg, sizeof(msg));
	return 0;
}

int hb_mqtt_password(const uint8_t *secret, size_t slen, const char *realm, uint64_t device_id,
		     uint32_t expiry_day, char out[HB_MQTT_PW_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	uint8_t mac[32];
	int n, rc = pw_mac(secret, slen, realm, device_id, expiry_day, mac);

	if (rc)
		return rc;
	n = snprintf(out, HB_MQTT_PW_LEN + 1, "hb1.%" PRIu32 ".", expiry_day);
	for (int i = 0; i < 32; i++) {
		out[n++] = hex[mac[i] >> 4];
		out[n++] = hex[mac[i] & 15];
	}
	out[n] = 0;
	OPENSSL_cleanse(mac, sizeof(mac));
	return n;
}

static int hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int hb_mqtt_password_check(const uint8_t *secret, size_t slen, const char *realm,
			   uint64_t device_id, struct hb_mqtt_str pw, uint32_t today,
			   uint32_t max_days)
{
	uint8_t got[32], want[32];
	size_t i = 4, start;
	uint64_t day = 0;
	int ok;

	if (pw.len < 4 || memcmp(pw.p, "hb1.", 4))
		return HB_MQTT_PW_FORMAT;
	for (start = i; i < pw.len && pw.p[i] != '.'; i++) {
		if (pw.p[i] < '0' || pw.p[i] > '9' || i - start >= 10)
			return HB_MQTT_PW_FORMAT;
		day = day * 10 + (uint64_t)(pw.p[i] - '0');
	}
	if (i == start || i == pw.len || day > UINT32_MAX || (pw.p[start] == '0' && i > start + 1))
		return HB_MQTT_PW_FORMAT;
	i++;
	if (pw.len - i != 64)
		return HB_MQTT_PW_FORMAT;
	for (int k = 0; k < 32; k++) {
		int hi = hexval(pw.p[i + 2 * k]), lo = hexval(pw.p[i + 2 * k + 1]);

		if (hi < 0 || lo < 0)
			return HB_MQTT_PW_FORMAT;
		got[k] = (uint8_t)(hi << 4 | lo);
	}
	if (day < today)
		return HB_MQTT_PW_EXPIRED;
	if (day - today > max_days)
		return HB_MQTT_PW_TOO_LONG;
	if (pw_mac(secret, slen, realm, device_id, (uint32_t)day, want))
		return HB_MQTT_PW_MAC;
	ok = !CRYPTO_memcmp(got, want, sizeof(want));
	OPENSSL_cleanse(want, sizeof(want));
	return ok ? HB_MQTT_PW_OK : HB_MQTT_PW_MAC;
}

const char *hb_mqtt_pw_str(int rc)
{
	switch (rc) {
	case HB_MQTT_PW_OK:
		return "ok";
	case HB_MQTT_PW_FORMAT:
		return "not an hb1 password";
	case HB_MQTT_PW_EXPIRED:
		return "expired";
	case HB_MQTT_PW_TOO_LONG:
		return "valid for longer than the server allows";
	case HB_MQTT_PW_MAC:
		return "wrong password";
	default:
		return "unknown";
	}
}
