// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* HELLO MAC, derived keys and key store parsing, checked against vectors from an independent
 * HMAC implementation (Python's hmac module; see the comment at each vector).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <stdbool.h>
#include <cmocka.h>

#include "auth.h"
#include "proto.h"

static void hex(const char *s, uint8_t *out, size_t n)
{
	assert_int_equal(hb_hex_decode(s, out, n), (int)n);
}

/* python3: hmac.new(bytes(range(32)), b'hbeat-hello-v1' + struct.pack('>QQ', 1234,
 * 1700000000000) + bytes(range(8)), hashlib.sha256).hexdigest()
 */
static const char *HELLO_VECTOR =
	"e9f0aed96e949f01628dba9e7bd63d4ae5cc0b6e72dcc0b5d6ee822087cd9b5c";
/* python3: hmac.new(bytes.fromhex('00112233445566778899aabbccddeeff'),
 * b'hbeat-device-key-v1' + struct.pack('>Q', 42), hashlib.sha256).hexdigest()
 */
static const char *DERIVE_VECTOR =
	"eeae31012ae5c4d1ba0825f2c9bc040cb0aa77e2ad730fcf391ff659bfcbebab";

static void fixed_hello(struct hb_hello *h)
{
	memset(h, 0, sizeof(*h));
	hb_put_be64(&h->device_id, 1234);
	hb_put_be64(&h->ts_ms, 1700000000000ull);
	for (int i = 0; i < 8; i++)
		h->nonce[i] = (uint8_t)i;
}

static void test_hello_mac_vector(void **state)
{
	uint8_t secret[32], mac[32], want[32];
	struct hb_hello h;

	for (int i = 0; i < 32; i++)
		secret[i] = (uint8_t)i;
	fixed_hello(&h);
	assert_int_equal(hb_hello_mac(secret, sizeof(secret), &h, mac), 0);
	hex(HELLO_VECTOR, want, 32);
	assert_memory_equal(mac, want, 32);
}

static void test_derive_vector(void **state)
{
	uint8_t master[16], out[32], want[32];

	hex("00112233445566778899aabbccddeeff", master, 16);
	assert_int_equal(hb_derive_secret(master, 16, 42, out), 0);
	hex(DERIVE_VECTOR, want, 32);
	assert_memory_equal(out, want, 32);
}

static char *write_keys(const char *text)
{
	static char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/hbeat-test-keys-%d", getpid());
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static void test_keystore_verify(void **state)
{
	const char *text = "# fleet\n"
			   "1234 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
			   "100-199 derive 00112233445566778899aabbccddeeff  # a range\n"
			   "\n";
	char err[256] = "";
	struct hb_keystore *ks = NULL;
	uint8_t secret[HB_SECRET_MAX], want[32];
	struct hb_hello h;
	char *path = write_keys(text);
	const uint64_t now = 1700000000000ull, window = 30000;

	assert_int_equal(hb_keystore_load(path, &ks, err, sizeof(err)), 0);
	unlink(path);
	assert_int_equal(hb_keystore_devices(ks), 1);
	assert_int_equal(hb_keystore_ranges(ks), 1);

	/* explicit device: the fixed vector verifies */
	fixed_hello(&h);
	hex(HELLO_VECTOR, h.mac, 32);
	assert_int_equal(hb_hello_verify(ks, &h, now, window), HB_AUTH_OK);
	/* one flipped bit anywhere signed breaks it */
	h.nonce[3] ^= 1;
	assert_int_equal(hb_hello_verify(ks, &h, now, window), HB_AUTH_BAD_MAC);
	h.nonce[3] ^= 1;
	h.mac[31] ^= 0x80;
	assert_int_equal(hb_hello_verify(ks, &h, now, window), HB_AUTH_BAD_MAC);
	h.mac[31] ^= 0x80;
	/* outside the clock window, both directions */
	assert_int_equal(hb_hello_verify(ks, &h, now + window + 1, window), HB_AUTH_CLOCK);
	assert_int_equal(hb_hello_verify(ks, &h, now - window - 1, window), HB_AUTH_CLOCK);
	assert_int_equal(hb_hello_verify(ks, &h, now + window, window), HB_AUTH_OK);

	/* a derived device: its secret is the range key derivation for id 150 */
	assert_int_equal(hb_keystore_secret(ks, 42, secret), -ENOENT);
	assert_int_equal(hb_keystore_secret(ks, 150, secret), 32);
	uint8_t master[16];
	hex("00112233445566778899aabbccddeeff", master, 16);
	assert_int_equal(hb_derive_secret(master, 16, 150, want), 0);
	assert_memory_equal(secret, want, 32);
	assert_int_equal(hb_hello_sign(&h, 150, now, secret, 32), 0);
	assert_int_equal(hb_hello_verify(ks, &h, now, window), HB_AUTH_OK);
	/* the same MAC does not authenticate a neighbour */
	hb_put_be64(&h.device_id, 151);
	assert_int_equal(hb_hello_verify(ks, &h, now, window), HB_AUTH_BAD_MAC);
	/* outside every range and entry */
	hb_put_be64(&h.device_id, 200);
	assert_int_equal(hb_hello_verify(ks, &h, now, window), HB_AUTH_UNKNOWN_DEVICE);
	hb_keystore_free(ks);
}

static void test_sign_uses_fresh_nonce(void **state)
{
	uint8_t secret[32] = { 7 };
	struct hb_hello a, b;

	assert_int_equal(hb_hello_sign(&a, 5, 1000, secret, 32), 0);
	assert_int_equal(hb_hello_sign(&b, 5, 1000, secret, 32), 0);
	assert_memory_not_equal(a.nonce, b.nonce, sizeof(a.nonce));
	assert_memory_not_equal(a.mac, b.mac, sizeof(a.mac));
}

static void test_keystore_errors(void **state)
{
	static const struct {
		const char *text, *needle;
	} cases[] = {
		{ "12 0011\n", "must be 16..64 bytes" },
		{ "abc 000102030405060708090a0b0c0d0e0f\n", "bad device id" },
		{ "0 000102030405060708090a0b0c0d0e0f\n", "bad device id" },
		{ "5-3 derive 000102030405060708090a0b0c0d0e0f\n", "bad range" },
		{ "1-3 derive zz0102030405060708090a0b0c0d0e0f\n", "master key" },
		{ "1 2 3 4\n", "expected" },
		{ "7 000102030405060708090a0b0c0d0e0f\n7 000102030405060708090a0b0c0d0e0f\n",
		  "listed twice" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[256] = "";
		struct hb_keystore *ks = NULL;
		char *path = write_keys(cases[i].text);

		assert_int_equal(hb_keystore_load(path, &ks, err, sizeof(err)), -EINVAL);
		unlink(path);
		assert_null(ks);
		if (!strstr(err, cases[i].needle))
			fail_msg("case %zu: error '%s' lacks '%s'", i, err, cases[i].needle);
	}
	char err[256] = "";
	struct hb_keystore *ks = NULL;
	assert_int_equal(hb_keystore_load("/nonexistent/keys", &ks, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/keys"));
}

/* A key store line is read whole or the file is refused: before, a line was read in pieces of
 * 511 bytes, so the end of a long comment was parsed as an entry and a device an operator had
 * commented out was admitted (security review). Lines may hold 511 characters before their
 * newline; one more refuses the file, with the line's number.
 */
static void test_keystore_long_lines(void **state)
{
	static const char secret[] = "7 000102030405060708090a0b0c0d0e0f";
	char text[2048], err[256] = "";
	struct hb_keystore *ks = NULL;
	char *path;
	int rc;

	/* line 2: a comment of 511 characters, then a device entry that is part of it */
	snprintf(text, sizeof(text), "1 000102030405060708090a0b0c0d0e0f\n#%0510d%s\n", 0, secret);
	path = write_keys(text);
	rc = hb_keystore_load(path, &ks, err, sizeof(err));
	if (!rc) {
		bool seven = hb_keystore_knows(ks, 7);

		hb_keystore_free(ks);
		unlink(path);
		fail_msg("a key store with a 546-character line loaded (device 7, commented out at "
			 "the end of it, %s)",
			 seven ? "ADMITTED" : "not admitted");
	}
	unlink(path);
	assert_int_equal(rc, -EINVAL);
	if (!strstr(err, ":2:") || !strstr(err, "longer than 511"))
		fail_msg("error '%s' names neither line 2 nor the length", err);

	/* 511 characters are one line: a comment, nothing admitted from it */
	snprintf(text, sizeof(text), "#%0510d\n%s\n", 0, secret);
	assert_int_equal(strchr(text, '\n') - text, HB_KS_LINE_MAX - 1);
	path = write_keys(text);
	assert_int_equal(hb_keystore_load(path, &ks, err, sizeof(err)), 0);
	unlink(path);
	assert_int_equal(hb_keystore_devices(ks), 1);
	hb_keystore_free(ks);
	/* 512 are too many, also on a last line without a newline */
	snprintf(text, sizeof(text), "%s\n#%0511d", secret, 0);
	path = write_keys(text);
	assert_int_equal(hb_keystore_load(path, &ks, err, sizeof(err)), -EINVAL);
	unlink(path);
	if (!strstr(err, ":2:"))
		fail_msg("error '%s' does not name line 2", err);
}

/* What a reload compares for each live session: the secret the old store gave the device and
 * the one the new store gives it, whichever kind of entry each comes from. */
static void test_keystore_same_secret(void **state)
{
	static const char *const m1 = "00112233445566778899aabbccddeeff";
	static const char *const m2 = "ff112233445566778899aabbccddeeff";
	char text[1024], err[256] = "", hexd[65];
	struct hb_keystore *a = NULL, *b = NULL;
	uint8_t master[16], d150[32];
	char *path;

	/* 150's derived secret under m1, as its own entry in the second store */
	hex(m1, master, 16);
	assert_int_equal(hb_derive_secret(master, 16, 150, d150), 0);
	for (int i = 0; i < 32; i++)
		snprintf(hexd + 2 * i, 3, "%02x", d150[i]);
	snprintf(text, sizeof(text),
		 "1 000102030405060708090a0b0c0d0e0f\n2 000102030405060708090a0b0c0d0e0f\n"
		 "3 000102030405060708090a0b0c0d0e0f\n100-199 derive %s\n200-299 derive %s\n",
		 m1, m1);
	path = write_keys(text);
	assert_int_equal(hb_keystore_load(path, &a, err, sizeof(err)), 0);
	snprintf(text, sizeof(text),
		 "1 000102030405060708090a0b0c0d0e0f\n2 ff0102030405060708090a0b0c0d0e0f\n"
		 "3 revoked\n150 %s\n151 %s\n100-199 derive %s\n200-249 derive %s\n"
		 "250-299 derive %s\n",
		 hexd, hexd, m1, m1, m2);
	path = write_keys(text);
	assert_int_equal(hb_keystore_load(path, &b, err, sizeof(err)), 0);
	unlink(path);
	assert_true(hb_keystore_same_secret(a, b, 1)); /* unchanged entry */
	assert_false(hb_keystore_same_secret(a, b, 2)); /* another secret */
	assert_false(hb_keystore_same_secret(a, b, 3)); /* revoked */
	assert_true(hb_keystore_same_secret(a, b, 150)); /* from the range to its own entry, same */
	assert_false(hb_keystore_same_secret(a, b, 151)); /* own entry with another device's key */
	assert_true(hb_keystore_same_secret(a, b, 120)); /* the same master */
	assert_true(hb_keystore_same_secret(a, b, 210)); /* a narrower range, the same master */
	assert_false(hb_keystore_same_secret(a, b, 260)); /* the master rotated */
	assert_false(hb_keystore_same_secret(a, b, 500)); /* in neither */
	hb_keystore_free(a);
	hb_keystore_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello_mac_vector),
		cmocka_unit_test(test_derive_vector),
		cmocka_unit_test(test_keystore_verify),
		cmocka_unit_test(test_sign_uses_fresh_nonce),
		cmocka_unit_test(test_keystore_errors),
		cmocka_unit_test(test_keystore_long_lines),
		cmocka_unit_test(test_keystore_same_secret),
	};

	return cmocka_run_group_tests_name("auth", tests, NULL, NULL);
}
