/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* SipHash-2-4 (Aumasson and Bernstein, 2012) for the version 2 frame tag, in pieces the XDP
 * program inlines: a state, one compression per 8-byte word (2 rounds), and the finalisation
 * (the length block, then 4 rounds). The PING's tag covers exactly three words (header, token,
 * timestamp), so the fast path runs straight-line code with no loop for the verifier to walk;
 * hb_siphash_buf() is the general form over a short stack buffer, used by the test program that
 * checks these pieces against the paper's vectors.
 *
 * Words are read as little-endian integers, as the algorithm defines them: a plain load on the
 * little-endian machines XDP runs on (HB_SIP_LE64 is a no-op there).
 */
#ifndef HB_SIPHASH_BPF_H
#define HB_SIPHASH_BPF_H

#include "hb_vmlinux.bpf.h"

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HB_SIP_LE64(x) (x)
#else
#define HB_SIP_LE64(x) __builtin_bswap64(x)
#endif

#define HB_SIP_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

struct hb_sip {
	__u64 v0, v1, v2, v3;
};

static __always_inline void hb_sip_round(struct hb_sip *s)
{
	s->v0 += s->v1;
	s->v1 = HB_SIP_ROTL(s->v1, 13);
	s->v1 ^= s->v0;
	s->v0 = HB_SIP_ROTL(s->v0, 32);
	s->v2 += s->v3;
	s->v3 = HB_SIP_ROTL(s->v3, 16);
	s->v3 ^= s->v2;
	s->v0 += s->v3;
	s->v3 = HB_SIP_ROTL(s->v3, 21);
	s->v3 ^= s->v0;
	s->v2 += s->v1;
	s->v1 = HB_SIP_ROTL(s->v1, 17);
	s->v1 ^= s->v2;
	s->v2 = HB_SIP_ROTL(s->v2, 32);
}

/* k0, k1: the 16-byte key as two little-endian words. */
static __always_inline void hb_sip_init(struct hb_sip *s, __u64 k0, __u64 k1)
{
	s->v0 = k0 ^ 0x736f6d6570736575ULL;
	s->v1 = k1 ^ 0x646f72616e646f6dULL;
	s->v2 = k0 ^ 0x6c7967656e657261ULL;
	s->v3 = k1 ^ 0x7465646279746573ULL;
}

static __always_inline void hb_sip_word(struct hb_sip *s, __u64 m)
{
	s->v3 ^= m;
	hb_sip_round(s);
	hb_sip_round(s);
	s->v0 ^= m;
}

/* last: the message's final 0..7 bytes as a little-endian word, with the message length
 * (mod 256) in its top byte. */
static __always_inline __u64 hb_sip_final(struct hb_sip *s, __u64 last)
{
	hb_sip_word(s, last);
	s->v2 ^= 0xff;
	hb_sip_round(s);
	hb_sip_round(s);
	hb_sip_round(s);
	hb_sip_round(s);
	return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

/* The tag of a 24-byte message given as its three words. */
static __always_inline __u64 hb_siphash_3w(__u64 k0, __u64 k1, __u64 m0, __u64 m1, __u64 m2)
{
	struct hb_sip s;

	hb_sip_init(&s, k0, k1);
	hb_sip_word(&s, m0);
	hb_sip_word(&s, m1);
	hb_sip_word(&s, m2);
	return hb_sip_final(&s, (__u64)24 << 56);
}

#define HB_SIP_BUF_MAX 64 /* hb_siphash_buf: bytes at most */

/* Over len (< HB_SIP_BUF_MAX) bytes of a stack buffer of HB_SIP_BUF_MAX bytes. */
static __always_inline __u64 hb_siphash_buf(__u64 k0, __u64 k1, const __u8 *b, __u32 len)
{
	struct hb_sip s;
	__u64 last = (__u64)(len & 0xff) << 56, m;
	__u32 words = len / 8, i, j;

	hb_sip_init(&s, k0, k1);
	for (i = 0; i < HB_SIP_BUF_MAX / 8; i++) {
		if (i >= words)
			break;
		__builtin_memcpy(&m, b + i * 8, 8);
		hb_sip_word(&s, HB_SIP_LE64(m));
	}
	for (j = 0; j < 7; j++) {
		if (j >= (len & 7))
			break;
		last |= (__u64)b[(words * 8 + j) & (HB_SIP_BUF_MAX - 1)] << (8 * j);
	}
	return hb_sip_final(&s, last);
}

#endif /* HB_SIPHASH_BPF_H */
