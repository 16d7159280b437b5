// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* DATA sink batches and their JSON lines (base64 by libcrypto's EVP_EncodeBlock).
 *
 * Sync policy: a DATA frame is ACKed only after the write() of the batch holding its line has
 * completed, so nothing ACKed is lost if hbd crashes or is killed (the data is in the page
 * cache). Surviving power loss or a kernel crash needs --sink-fsync, which adds an fdatasync
 * after each batch and before its ACKs. Batches group every DATA frame of one event-loop
 * iteration, so the cost is one write (and one fdatasync) per iteration, not per frame.
 */
#include "sink.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbeat_abi.h"

void hbd_sink_init(struct hbd_sink *s, int fd, bool fsync)
{
	memset(s, 0, sizeof(*s));
	s->fd = fd;
	s->fsync = fsync;
}

void hbd_sink_free(struct hbd_sink *s)
{
	for (int i = 0; i < 2; i++) {
		free(s->b[i].buf);
		free(s->b[i].acks);
	}
	memset(s->b, 0, sizeof(s->b));
}

size_t hbd_sink_format(char *out, size_t cap, uint64_t device, bool udp, uint16_t seq,
		       const struct timespec *ts, const void *payload, size_t len)
{
	char b64[(HB_MAX_PAYLOAD + 2) / 3 * 4 + 1];
	struct tm tm;
	int n;

	if (len > HB_MAX_PAYLOAD || !gmtime_r(&ts->tv_sec, &tm))
		return 0;
	EVP_EncodeBlock((unsigned char *)b64, payload, (int)len);
	n = snprintf(out, cap,
		     "{\"device\":%" PRIu64 ",\"transport\":\"%s\",\"seq\":%u,"
		     "\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"payload\":\"%s\"}\n",
		     device, udp ? "udp" : "tcp", seq, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
		     tm.tm_hour, tm.tm_min, tm.tm_sec, ts->tv_nsec / 1000000, b64);
	return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

int hbd_sink_add(struct hbd_sink *s, uint64_t device, bool udp, uint16_t seq,
		 const struct timespec *now, const void *payload, size_t len,
		 const struct hbd_ack *ack)
{
	struct hbd_sink_batch *b = &s->b[s->fill];
	size_t n;

	if (b->cap - b->len < HBD_SINK_LINE_MAX) {
		size_t cap = b->cap ? b->cap * 2 : 16384;
		char *p = realloc(b->buf, cap);

		if (!p)
			return -ENOMEM;
		b->buf = p;
		b->cap = cap;
	}
	if (b->nacks == b->acap) {
		uint32_t acap = b->acap ? b->acap * 2 : 64;
		struct hbd_ack *a = realloc(b->acks, acap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		b->acks = a;
		b->acap = acap;
	}
	n = hbd_sink_format(b->buf + b->len, b->cap - b->len, device, udp, seq, now, payload, len);
	if (!n)
		return -EINVAL;
	b->len += n;
	b->bytes += len;
	b->acks[b->nacks++] = *ack;
	return 0;
}

struct hbd_sink_batch *hbd_sink_start(struct hbd_sink *s)
{
	struct hbd_sink_batch *b = &s->b[s->fill];

	if (s->busy || !b->nacks)
		return NULL;
	s->fill ^= 1;
	s->busy = true;
	b->done = 0;
	return b;
}

void hbd_sink_done(struct hbd_sink *s)
{
	struct hbd_sink_batch *b = &s->b[s->fill ^ 1];

	b->len = b->done = 0;
	b->nacks = 0;
	b->bytes = 0;
	s->busy = false;
}
