/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Fuzz targets: each checks a property of the real code on one input and aborts, naming the
 * property, if it does not hold. libFuzzer runs them through fuzz/entry.c (built with clang,
 * `make fuzz`); tests/test_fuzz_corpus.c replays the committed corpus and every past crash
 * through the same functions in the ordinary (and ASan) test build.
 */
#ifndef HB_FUZZ_TARGETS_H
#define HB_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Frame codec: stream and datagram decode against a plain reference decoder, re-encode, and
 * the device state machine (hbclient) fed whatever decodes.
 */
int hbf_frame(const uint8_t *data, size_t n);
/* hbd's TCP reassembly (reasm.c) with the stream cut at fuzzed points, against a one-shot
 * decode of the whole stream; no chunk may leak.
 */
int hbf_reasm(const uint8_t *data, size_t n);
/* hbd's HELLO check (MAC, clock window, replay, superseding) driven by fuzzed operations,
 * against a model of what must be accepted.
 */
int hbf_hello(const uint8_t *data, size_t n);
/* The MQTT codec: framing against a reference varint reader, bodies inside their packets and
 * encoding back to the same bytes, the password checker. */
int hbf_mqtt(const uint8_t *data, size_t n);

struct hbf_target {
	const char *name;
	int (*fn)(const uint8_t *data, size_t n);
};

/* clang-format off */
#define HBF_TARGETS                                                                       \
	{                                                                                 \
		{ "frame", hbf_frame }, { "reasm", hbf_reasm }, { "hello", hbf_hello },   \
		{ "mqtt", hbf_mqtt }, { 0 }                                               \
	}
/* clang-format on */

/* A property failed: say which and crash, so libFuzzer keeps the input. */
#define HBF_CHECK(cond, ...)                                                                    \
	do {                                                                                    \
		if (!(cond)) {                                                                  \
			fprintf(stderr, "fuzz property failed at %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                                           \
			fputc('\n', stderr);                                                    \
			abort();                                                                \
		}                                                                               \
	} while (0)

/* A cursor over the input for structured targets: bytes run out as zeros. */
struct hbf_in {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t hbf_u8(struct hbf_in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static inline uint64_t hbf_u64(struct hbf_in *in)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | hbf_u8(in);
	return v;
}

static inline void hbf_bytes(struct hbf_in *in, void *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint8_t *)out)[i] = hbf_u8(in);
}

#endif
