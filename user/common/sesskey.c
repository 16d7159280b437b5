// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Version 2 session keys (HKDF-SHA256) and frame tags (SipHash-2-4). */
#include "sesskey.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>

#include "proto.h"
#include "siphash.h"

/* HMAC-SHA256(key, a || b || [c]) with the one-shot HMAC(); the messages here are short. */
static int hmac(const uint8_t *key, size_t klen, const uint8_t *a, size_t alen, const uint8_t *b,
		size_t blen, uint8_t c, int with_c, uint8_t out[HB_MAC_LEN])
{
	uint8_t msg[512];
	unsigned int olen = HB_MAC_LEN;
	size_t n = alen + blen + (with_c ? 1 : 0);
	int ok;

	if (n > sizeof(msg))
		return -EINVAL;
	if (alen)
		memcpy(msg, a, alen);
	if (blen)
		memcpy(msg + alen, b, blen);
	if (with_c)
		msg[alen + blen] = c;
	ok = HMAC(EVP_sha256(), key, (int)klen, msg, n, out, &olen) && olen == HB_MAC_LEN;
	OPENSSL_cleanse(msg, n);
	return ok ? 0 : -EIO;
}

int hb_hkdf_sha256(const uint8_t *salt, size_t salt_len, const uint8_t *ikm, size_t ikm_len,
		   const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len)
{
	uint8_t prk[HB_MAC_LEN], t[HB_MAC_LEN];
	static const uint8_t zeros[HB_MAC_LEN];
	size_t done = 0, tlen = 0;
	int rc;

	if (out_len > 255 * HB_MAC_LEN)
		return -EINVAL;
	/* Extract: an absent salt is HashLen zero bytes (RFC 5869 2.2) */
	rc = salt_len ? hmac(salt, salt_len, ikm, ikm_len, NULL, 0, 0, 0, prk)
		      : hmac(zeros, sizeof(zeros), ikm, ikm_len, NULL, 0, 0, 0, prk);
	for (uint8_t i = 1; !rc && done < out_len; i++) {
		rc = hmac(prk, sizeof(prk), t, tlen, info, info_len, i, 1, t);
		tlen = sizeof(t);
		if (!rc) {
			size_t n = out_len - done < tlen ? out_len - done : tlen;

			memcpy(out + done, t, n);
			done += n;
		}
	}
	OPENSSL_cleanse(prk, sizeof(prk));
	OPENSSL_cleanse(t, sizeof(t));
	return rc;
}

int hb_session_prk(const uint8_t *secret, size_t slen, const struct hb_hello_bound *h,
		   uint8_t prk[HB_MAC_LEN])
{
	uint8_t salt[sizeof(HB_SESSION_LABEL) - 1 + 24];
	const size_t label = sizeof(HB_SESSION_LABEL) - 1;

	memcpy(salt, HB_SESSION_LABEL, label);
	memcpy(salt + label, &h->device_id, 8);
	memcpy(salt + label + 8, &h->ts_ms, 8);
	memcpy(salt + label + 16, h->nonce, 8);
	return hmac(salt, sizeof(salt), secret, slen, NULL, 0, 0, 0, prk);
}

int hb_session_key(const uint8_t prk[HB_MAC_LEN], const uint8_t nonce[HB_NONCE_LEN], uint64_t token,
		   uint8_t key[HB_SESSION_KEY_LEN])
{
	uint8_t info[HB_NONCE_LEN + 8], t[HB_MAC_LEN];
	int rc;

	memcpy(info, nonce, HB_NONCE_LEN);
	hb_put_be64(info + HB_NONCE_LEN, token);
	/* one block of HKDF-Expand: T(1) = HMAC(PRK, info || 0x01), its first 16 bytes */
	rc = hmac(prk, HB_MAC_LEN, info, sizeof(info), NULL, 0, 1, 1, t);
	if (!rc)
		memcpy(key, t, HB_SESSION_KEY_LEN);
	OPENSSL_cleanse(t, sizeof(t));
	return rc;
}

uint64_t hb_frame_tag(const uint8_t key[HB_SESSION_KEY_LEN], const void *frame, size_t len)
{
	return hb_siphash24(key, frame, len);
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

void hb_frame_seal(const uint8_t key[HB_SESSION_KEY_LEN], void *frame, size_t len)
{
	put_le64((uint8_t *)frame + len, hb_frame_tag(key, frame, len));
}

int hb_frame_tag_ok(const uint8_t key[HB_SESSION_KEY_LEN], const void *frame, size_t len)
{
	uint8_t want[HB_TAG_LEN];

	put_le64(want, hb_frame_tag(key, frame, len));
	return CRYPTO_memcmp(want, (const uint8_t *)frame + len, HB_TAG_LEN) == 0;
}
