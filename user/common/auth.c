// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* HELLO MACs, derived device keys and the key store, on libcrypto's HMAC and CSPRNG. */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "sesskey.h"

struct ks_device {
	uint64_t id;
	uint8_t len;
	uint8_t secret[HB_SECRET_MAX];
};

struct ks_range {
	uint64_t first, last;
	uint8_t len;
	uint8_t master[HB_SECRET_MAX];
};

struct hb_keystore {
	struct ks_device *dev; /* sorted by id for bsearch */
	size_t ndev, capdev;
	struct ks_range *range; /* few; scanned in order */
	size_t nrange, caprange;
	uint8_t tag; /* the holder's name for this store (hb_keystore_set_tag) */
};

int hb_random(void *buf, size_t n)
{
	return RAND_bytes(buf, (int)n) == 1 ? 0 : -EIO;
}

static int hmac256(const uint8_t *key, size_t klen, const uint8_t *msg, size_t n,
		   uint8_t out[HB_MAC_LEN])
{
	unsigned int olen = HB_MAC_LEN;

	if (!HMAC(EVP_sha256(), key, (int)klen, msg, n, out, &olen) || olen != HB_MAC_LEN)
		return -EIO;
	return 0;
}

int hb_derive_secret(const uint8_t *master, size_t mlen, uint64_t device_id,
		     uint8_t out[HB_MAC_LEN])
{
	uint8_t msg[sizeof(HB_DERIVE_LABEL) - 1 + 8];

	memcpy(msg, HB_DERIVE_LABEL, sizeof(HB_DERIVE_LABEL) - 1);
	hb_put_be64(msg + sizeof(HB_DERIVE_LABEL) - 1, device_id);
	return hmac256(master, mlen, msg, sizeof(msg), out);
}

int hb_hello_mac(const uint8_t *secret, size_t slen, const struct hb_hello *h,
		 uint8_t out[HB_MAC_LEN])
{
	const size_t label = sizeof(HB_HELLO_LABEL) - 1;
	const size_t signed_len = offsetof(struct hb_hello, mac);
	uint8_t msg[sizeof(HB_HELLO_LABEL) - 1 + offsetof(struct hb_hello, mac)];

	memcpy(msg, HB_HELLO_LABEL, label);
	memcpy(msg + label, h, signed_len);
	return hmac256(secret, slen, msg, sizeof(msg), out);
}

int hb_hello_sign(struct hb_hello *h, uint64_t device_id, uint64_t ts_ms, const uint8_t *secret,
		  size_t slen)
{
	hb_put_be64(&h->device_id, device_id);
	hb_put_be64(&h->ts_ms, ts_ms);
	if (hb_random(h->nonce, sizeof(h->nonce)))
		return -EIO;
	return hb_hello_mac(secret, slen, h, h->mac);
}

static const struct ks_device *find_device(const struct hb_keystore *ks, uint64_t id)
{
	size_t lo = 0, hi = ks->ndev;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ks->dev[mid].id == id)
			return &ks->dev[mid];
		if (ks->dev[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static const struct ks_range *find_range(const struct hb_keystore *ks, uint64_t id)
{
	for (size_t i = 0; i < ks->nrange; i++)
		if (id >= ks->range[i].first && id <= ks->range[i].last)
			return &ks->range[i];
	return NULL;
}

int hb_keystore_secret(const struct hb_keystore *ks, uint64_t device_id, uint8_t out[HB_SECRET_MAX])
{
	const struct ks_device *d = find_device(ks, device_id);

	if (d) {
		if (!d->len)
			return -EKEYREVOKED;
		memcpy(out, d->secret, d->len);
		return d->len;
	}
	const struct ks_range *r = find_range(ks, device_id);

	if (!r)
		return -ENOENT;
	if (hb_derive_secret(r->master, r->len, device_id, out))
		return -EIO;
	return HB_MAC_LEN;
}

int hb_hello_verify(const struct hb_keystore *ks, const struct hb_hello *h, uint64_t now_ms,
		    uint64_t window_ms)
{
	struct hb_hello_msg m;

	hb_hello_parse(h, sizeof(*h), &m);
	return hb_hello_msg_verify(ks, &m, 0, now_ms, window_ms, NULL);
}

int hb_hello_parse(const void *payload, size_t len, struct hb_hello_msg *m)
{
	memset(m, 0, sizeof(*m));
	if (len == sizeof(struct hb_hello_bound)) {
		memcpy(&m->h, payload, sizeof(m->h));
		m->bound = true;
		return 0;
	}
	if (len != sizeof(struct hb_hello))
		return -EINVAL;
	memcpy(&m->h, payload, offsetof(struct hb_hello, mac));
	memcpy(m->h.mac, (const uint8_t *)payload + offsetof(struct hb_hello, mac), HB_MAC_LEN);
	return 0;
}

int hb_hello_bound_mac(const uint8_t *secret, size_t slen, const struct hb_hello_bound *h,
		       uint8_t out[HB_MAC_LEN])
{
	const size_t label = sizeof(HB_HELLO_BOUND_LABEL) - 1;
	uint8_t msg[sizeof(HB_HELLO_BOUND_LABEL) - 1 + offsetof(struct hb_hello_bound, mac)];

	memcpy(msg, HB_HELLO_BOUND_LABEL, label);
	memcpy(msg + label, h, offsetof(struct hb_hello_bound, mac));
	return hmac256(secret, slen, msg, sizeof(msg), out);
}

int hb_hello_bound_sign(struct hb_hello_bound *h, uint64_t device_id, uint64_t ts_ms,
			uint64_t server_id, const uint8_t *secret, size_t slen)
{
	hb_put_be64(&h->device_id, device_id);
	hb_put_be64(&h->ts_ms, ts_ms);
	hb_put_be64(&h->server_id, server_id);
	if (hb_random(h->nonce, sizeof(h->nonce)))
		return -EIO;
	return hb_hello_bound_mac(secret, slen, h, h->mac);
}

/* The v1 HELLO's MAC over the fields a parsed message keeps. */
static int v1_mac(const uint8_t *secret, size_t slen, const struct hb_hello_bound *b,
		  uint8_t out[HB_MAC_LEN])
{
	struct hb_hello h;

	memcpy(&h, b, offsetof(struct hb_hello, mac));
	return hb_hello_mac(secret, slen, &h, out);
}

int hb_hello_msg_verify(const struct hb_keystore *ks, const struct hb_hello_msg *m,
			uint64_t server_id, uint64_t now_ms, uint64_t window_ms,
			uint8_t prk[HB_MAC_LEN])
{
	const struct hb_hello_bound *h = &m->h;
	uint64_t bound_to = m->bound ? hb_get_be64(&h->server_id) : 0;
	uint8_t secret[HB_SECRET_MAX], mac[HB_MAC_LEN];
	uint64_t ts = hb_get_be64(&h->ts_ms);
	int slen, ok;

	slen = hb_keystore_secret(ks, hb_get_be64(&h->device_id), secret);
	if (slen == -EKEYREVOKED)
		return HB_AUTH_REVOKED;
	if (slen < 0)
		return HB_AUTH_UNKNOWN_DEVICE;
	if ((m->bound ? hb_hello_bound_mac(secret, (size_t)slen, h, mac)
		      : v1_mac(secret, (size_t)slen, h, mac))) {
		OPENSSL_cleanse(secret, sizeof(secret));
		return HB_AUTH_BAD_MAC;
	}
	ok = CRYPTO_memcmp(mac, h->mac, HB_MAC_LEN) == 0;
	if (ok && prk && hb_session_prk(secret, (size_t)slen, h, prk))
		ok = 0;
	OPENSSL_cleanse(secret, sizeof(secret));
	if (!ok)
		return HB_AUTH_BAD_MAC;
	/* after the MAC, like the clock: who is not the device learns nothing */
	if (bound_to && bound_to != server_id)
		return HB_AUTH_OTHER_SERVER;
	/* checked after the MAC so an unauthenticated sender learns nothing about our clock */
	if (ts + window_ms < now_ms || ts > now_ms + window_ms)
		return HB_AUTH_CLOCK;
	return HB_AUTH_OK;
}

const char *hb_auth_str(int rc)
{
	switch (rc) {
	case HB_AUTH_OK:
		return "ok";
	case HB_AUTH_OTHER_SERVER:
		return "HELLO bound to another server (--server-id)";
	case HB_AUTH_UNKNOWN_DEVICE:
		return "unknown device";
	case HB_AUTH_BAD_MAC:
		return "bad MAC";
	case HB_AUTH_CLOCK:
		return "timestamp outside clock window";
	case HB_AUTH_REVOKED:
		return "device revoked";
	default:
		return "?";
	}
}

int hb_hex_decode(const char *hex, uint8_t *out, size_t cap)
{
	size_t n = strlen(hex);

	if (n == 0 || n % 2 || n / 2 > cap)
		return -EINVAL;
	for (size_t i = 0; i < n / 2; i++) {
		char byte[3] = { hex[2 * i], hex[2 * i + 1], 0 };
		char *end;

		if (!isxdigit((unsigned char)byte[0]) || !isxdigit((unsigned char)byte[1]))
			return -EINVAL;
		out[i] = (uint8_t)strtoul(byte, &end, 16);
	}
	return (int)(n / 2);
}

static int cmp_dev(const void *a, const void *b)
{
	const struct ks_device *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!*s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return (errno || *end) ? -EINVAL : 0;
}

/* Grows an array by one element; returns the new element or NULL. The capacity doubles, so a
 * store of a fleet's lines is read in linear time; the old array is cleansed before it is freed
 * (realloc would leave copies of the secrets in freed memory).
 */
static void *push(void **arr, size_t *n, size_t *cap, size_t elem)
{
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 64;
		void *p = calloc(ncap, elem);

		if (!p)
			return NULL;
		if (*n) {
			memcpy(p, *arr, *n * elem);
			OPENSSL_cleanse(*arr, *n * elem);
		}
		free(*arr);
		*arr = p;
		*cap = ncap;
	}
	return (char *)*arr + (*n)++ * elem;
}

/* One key-store line, parsed. The secret bytes live here only until the line is stored. */
struct ks_parsed {
	enum hb_ks_kind kind;
	uint64_t first, last; /* device: first == last */
	uint8_t len;
	uint8_t key[HB_SECRET_MAX];
};

static int parse_fields(char *line, struct ks_parsed *p, char *err, size_t errlen)
{
	char *f[4] = { 0 };
	int nf = 0, len;
	char *save = NULL, *tok;

	memset(p, 0, sizeof(*p));
	for (tok = strtok_r(line, " \t\r\n", &save); tok && nf < 4;
	     tok = strtok_r(NULL, " \t\r\n", &save))
		f[nf++] = tok;
	if (nf == 0) {
		p->kind = HB_KS_BLANK;
		return 0;
	}
	if (nf == 2) {
		if (parse_u64(f[0], &p->first) || p->first == 0) {
			snprintf(err, errlen, "bad device id '%s' (a nonzero decimal number)",
				 f[0]);
			return -EINVAL;
		}
		p->last = p->first;
		if (!strcmp(f[1], "revoked")) {
			p->kind = HB_KS_REVOKED;
			return 0;
		}
		len = hb_hex_decode(f[1], p->key, sizeof(p->key));
		if (len < HB_SECRET_MIN) {
			snprintf(err, errlen,
				 "secret of device %" PRIu64 " must be %d..%d bytes of hex",
				 p->first, HB_SECRET_MIN, HB_SECRET_MAX);
			return -EINVAL;
		}
		p->kind = HB_KS_DEVICE;
		p->len = (uint8_t)len;
		return 0;
	}
	if (nf == 3 && !strcmp(f[1], "derive")) {
		char *dash = strchr(f[0], '-');

		if (!dash || (*dash = 0, parse_u64(f[0], &p->first)) ||
		    parse_u64(dash + 1, &p->last) || p->first == 0 || p->first > p->last) {
			snprintf(err, errlen, "bad range (FIRST-LAST, nonzero, FIRST <= LAST)");
			return -EINVAL;
		}
		len = hb_hex_decode(f[2], p->key, sizeof(p->key));
		if (len < HB_SECRET_MIN) {
			snprintf(err, errlen, "master key must be %d..%d bytes of hex",
				 HB_SECRET_MIN, HB_SECRET_MAX);
			return -EINVAL;
		}
		p->kind = HB_KS_RANGE;
		p->len = (uint8_t)len;
		return 0;
	}
	snprintf(err, errlen,
		 "expected '<id> <hex secret>', '<id> revoked' or "
		 "'<first>-<last> derive <hex key>'");
	return -EINVAL;
}

int hb_keystore_read_line(FILE *f, char line[HB_KS_LINE_MAX + 1])
{
	size_t n;

	if (!fgets(line, HB_KS_LINE_MAX + 1, f))
		return 0;
	n = strlen(line);
	if (n && line[n - 1] == '\n')
		n--;
	return n > HB_KS_LINE_MAX - 1 ? -EMSGSIZE : 1;
}

int hb_keystore_parse_line(const char *line, struct hb_ks_line *out, char *err, size_t errlen)
{
	char buf[HB_KS_LINE_MAX + 1], *hash;
	struct ks_parsed p;
	int rc;

	if (strlen(line) >= sizeof(buf)) {
		snprintf(err, errlen, "line longer than %d characters", HB_KS_LINE_MAX - 1);
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", line);
	hash = strchr(buf, '#');
	if (hash)
		*hash = 0;
	rc = parse_fields(buf, &p, err, errlen);
	OPENSSL_cleanse(buf, sizeof(buf));
	if (!rc) {
		out->kind = p.kind;
		out->first = p.first;
		out->last = p.last;
	}
	OPENSSL_cleanse(&p, sizeof(p));
	return rc;
}

/* Revoked devices are single-device entries with no secret (len 0). */
static int parse_line(struct hb_keystore *ks, char *line, char *err, size_t errlen)
{
	struct ks_parsed p;
	int rc = parse_fields(line, &p, err, errlen);

	if (rc || p.kind == HB_KS_BLANK)
		goto out;
	if (p.kind == HB_KS_RANGE) {
		struct ks_range *slot =
			push((void **)&ks->range, &ks->nrange, &ks->caprange, sizeof(*slot));

		if (!slot) {
			rc = -ENOMEM;
			goto out;
		}
		slot->first = p.first;
		slot->last = p.last;
		slot->len = p.len;
		memcpy(slot->master, p.key, sizeof(slot->master));
	} else {
		struct ks_device *slot =
			push((void **)&ks->dev, &ks->ndev, &ks->capdev, sizeof(*slot));

		if (!slot) {
			rc = -ENOMEM;
			goto out;
		}
		slot->id = p.first;
		slot->len = p.kind == HB_KS_DEVICE ? p.len : 0;
		memcpy(slot->secret, p.key, sizeof(slot->secret));
	}
out:
	OPENSSL_cleanse(&p, sizeof(p));
	return rc;
}

int hb_keystore_load(const char *path, struct hb_keystore **out, char *err, size_t errlen)
{
	struct hb_keystore *ks = calloc(1, sizeof(*ks));
	char line[HB_KS_LINE_MAX + 1], why[256];
	unsigned lineno = 0;
	FILE *f;
	int rc = 0, got;

	if (!ks)
		return -ENOMEM;
	f = fopen(path, "re");
	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		free(ks);
		return rc;
	}
	while ((got = hb_keystore_read_line(f, line))) {
		char *hash = strchr(line, '#');

		lineno++;
		if (got < 0) {
			snprintf(err, errlen, "%s:%u: line longer than %d characters", path, lineno,
				 HB_KS_LINE_MAX - 1);
			rc = -EINVAL;
			break;
		}
		if (hash)
			*hash = 0;
		why[0] = 0;
		rc = parse_line(ks, line, why, sizeof(why));
		if (rc) {
			snprintf(err, errlen, "%s:%u: %s", path, lineno,
				 why[0] ? why : strerror(-rc));
			break;
		}
	}
	fclose(f);
	OPENSSL_cleanse(line, sizeof(line));
	if (rc) {
		hb_keystore_free(ks);
		return rc;
	}
	if (ks->ndev) /* a store of derive ranges only has no array: qsort(NULL) is undefined */
		qsort(ks->dev, ks->ndev, sizeof(*ks->dev), cmp_dev);
	for (size_t i = 1; i < ks->ndev; i++) {
		if (ks->dev[i].id == ks->dev[i - 1].id) {
			snprintf(err, errlen, "%s: device %" PRIu64 " listed twice", path,
				 ks->dev[i].id);
			hb_keystore_free(ks);
			return -EINVAL;
		}
	}
	*out = ks;
	return 0;
}

void hb_keystore_free(struct hb_keystore *ks)
{
	if (!ks)
		return;
	if (ks->dev)
		OPENSSL_cleanse(ks->dev, ks->ndev * sizeof(*ks->dev));
	if (ks->range)
		OPENSSL_cleanse(ks->range, ks->nrange * sizeof(*ks->range));
	free(ks->dev);
	free(ks->range);
	free(ks);
}

size_t hb_keystore_devices(const struct hb_keystore *ks)
{
	return ks->ndev;
}

size_t hb_keystore_ranges(const struct hb_keystore *ks)
{
	return ks->nrange;
}

size_t hb_keystore_revoked(const struct hb_keystore *ks)
{
	size_t n = 0;

	for (size_t i = 0; i < ks->ndev; i++)
		n += !ks->dev[i].len;
	return n;
}

void hb_keystore_set_tag(struct hb_keystore *ks, uint8_t tag)
{
	ks->tag = tag;
}

uint8_t hb_keystore_tag(const struct hb_keystore *ks)
{
	return ks->tag;
}

/* Compares where the secrets come from, deriving only when one store has the device's own
 * entry and the other a range: a whole fleet in one unchanged range costs a bsearch and a range
 * scan a device, no HMAC. */
bool hb_keystore_same_secret(const struct hb_keystore *a, const struct hb_keystore *b,
			     uint64_t device_id)
{
	const struct ks_device *da = find_device(a, device_id), *db = find_device(b, device_id);
	const struct ks_range *ra = da ? NULL : find_range(a, device_id);
	const struct ks_range *rb = db ? NULL : find_range(b, device_id);
	uint8_t sa[HB_SECRET_MAX], sb[HB_SECRET_MAX];
	int la, lb;
	bool same;

	if ((da && !da->len) || (db && !db->len) || (!da && !ra) || (!db && !rb))
		return false; /* revoked or unknown on one side: no secret to share */
	if (da && db)
		return da->len == db->len && !CRYPTO_memcmp(da->secret, db->secret, da->len);
	if (ra && rb)
		return ra->len == rb->len && !CRYPTO_memcmp(ra->master, rb->master, ra->len);
	la = hb_keystore_secret(a, device_id, sa);
	lb = hb_keystore_secret(b, device_id, sb);
	same = la > 0 && la == lb && !CRYPTO_memcmp(sa, sb, (size_t)la);
	OPENSSL_cleanse(sa, sizeof(sa));
	OPENSSL_cleanse(sb, sizeof(sb));
	return same;
}

bool hb_keystore_knows(const struct hb_keystore *ks, uint64_t device_id)
{
	const struct ks_device *d = find_device(ks, device_id);

	if (d)
		return d->len != 0;
	for (size_t i = 0; i < ks->nrange; i++)
		if (device_id >= ks->range[i].first && device_id <= ks->range[i].last)
			return true;
	return false;
}
