// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* SipHash-2-4 over a byte string. */
#include "siphash.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

struct sip {
	uint64_t v0, v1, v2, v3;
};

static void round2(struct sip *s, int n)
{
	while (n--) {
		s->v0 += s->v1;
		s->v1 = ROTL(s->v1, 13);
		s->v1 ^= s->v0;
		s->v0 = ROTL(s->v0, 32);
		s->v2 += s->v3;
		s->v3 = ROTL(s->v3, 16);
		s->v3 ^= s->v2;
		s->v0 += s->v3;
		s->v3 = ROTL(s->v3, 21);
		s->v3 ^= s->v0;
		s->v2 += s->v1;
		s->v1 = ROTL(s->v1, 17);
		s->v1 ^= s->v2;
		s->v2 = ROTL(s->v2, 32);
	}
}

static void word(struct sip *s, uint64_t m)
{
	s->v3 ^= m;
	round2(s, 2);
	s->v0 ^= m;
}

uint64_t hb_siphash24(const uint8_t key[16], const void *msg, size_t len)
{
	const uint8_t *p = msg;
	uint64_t k0 = le64(key), k1 = le64(key + 8), last = (uint64_t)(len & 0xff) << 56;
	struct sip s = {
		.v0 = k0 ^ 0x736f6d6570736575ULL,
		.v1 = k1 ^ 0x646f72616e646f6dULL,
		.v2 = k0 ^ 0x6c7967656e657261ULL,
		.v3 = k1 ^ 0x7465646279746573ULL,
	};
	size_t i;

	for (i = 0; i + 8 <= len; i += 8)
		word(&s, le64(p + i));
	for (size_t j = 0; i + j < len; j++)
		last |= (uint64_t)p[i + j] << (8 * j);
	word(&s, last);
	s.v2 ^= 0xff;
	round2(&s, 4);
	return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}
