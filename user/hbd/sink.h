/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* DATA sink: JSON lines batched per event-loop iteration, ACKs released after the write. */
#ifndef HBD_SINK_H
#define HBD_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Whom to ACK once a line is durable enough: a TCP connection (slot, gen) or a UDP session
 * (token, looked up again at ACK time since it may have moved or ended).
 */
struct hbd_ack {
	uint64_t token; /* UDP */
	uint64_t device; /* filled in by hbd_sink_add */
	uint32_t end; /* filled in by hbd_sink_add: where its line ends in the batch's buf */
	uint32_t slot; /* TCP */
	uint16_t gen; /* TCP */
	uint16_t seq;
	uint8_t udp;
};

struct hbd_sink_batch {
	char *buf;
	size_t len, cap, done; /* done: bytes the kernel has written */
	struct hbd_ack *acks;
	uint32_t nacks, acap;
	uint64_t bytes; /* DATA payload bytes in this batch */
};

/* Two batches: one fills while the other is written (and fdatasync'ed). */
struct hbd_sink {
	int fd;
	bool fsync;
	size_t max_write; /* bytes a write may carry: PIPE_BUF on a FIFO, else unlimited */
	unsigned fill;
	bool busy;
	struct hbd_sink_batch b[2];
};

#define HBD_SINK_LINE_MAX 1600 /* a line for a payload of HB_MAX_PAYLOAD bytes fits */

/* Opens (creates) the sink for appending: a regular file, a FIFO (a consumer reading it; not
 * with fsync) or a character device (/dev/null for benchmarks). With repair, a last line of a
 * regular file cut short by a crash mid-write is removed first (see sink.c); *dropped says how
 * many bytes that was. A symbolic link is refused (-ELOOP). Returns the fd or -errno (why says
 * what failed).
 */
int hbd_sink_open(const char *path, bool repair, bool fsync, size_t *dropped, char *why,
		  size_t whylen);
void hbd_sink_init(struct hbd_sink *s, int fd, bool fsync);
void hbd_sink_free(struct hbd_sink *s);
/* Appends one frame's line to the filling batch; -ENOMEM leaves the batch as it was. */
int hbd_sink_add(struct hbd_sink *s, uint64_t device, bool udp, uint16_t seq,
		 const struct timespec *now, const void *payload, size_t len,
		 const struct hbd_ack *ack);
/* The same with a topic (MQTT): {"device":ID,"transport":T,"topic":"...","seq":N,...}. The
 * topic is at most HBD_SINK_TOPIC_MAX bytes of characters JSON needs no escape for (the caller
 * checks), so every line stays within HBD_SINK_LINE_MAX.
 */
#define HBD_SINK_TOPIC_MAX 64
int hbd_sink_add_topic(struct hbd_sink *s, uint64_t device, const char *transport,
		       const char *topic, size_t tlen, uint16_t seq, const struct timespec *now,
		       const void *payload, size_t len, const struct hbd_ack *ack);
/* The batch being written, or NULL if none. */
static inline struct hbd_sink_batch *hbd_sink_inflight(struct hbd_sink *s)
{
	return s->busy ? &s->b[s->fill ^ 1] : NULL;
}
/* Starts writing the filling batch if nothing is in flight and it has lines; returns it. */
struct hbd_sink_batch *hbd_sink_start(struct hbd_sink *s);
/* Bytes of the in-flight batch the next write carries: the rest, or on a FIFO the most whole
 * lines that fit in PIPE_BUF (a pipe write that large is atomic, so the lines of several
 * workers never interleave).
 */
size_t hbd_sink_next_len(const struct hbd_sink *s, const struct hbd_sink_batch *b);
/* The in-flight batch was fully handled (ACKs delivered or dropped): reuse it. */
void hbd_sink_done(struct hbd_sink *s);

/* {"device":ID,"transport":"tcp","seq":N,"time":"2026-01-02T03:04:05.678Z","payload":"..."}\n
 * Returns the length, or 0 if it does not fit in cap.
 */
size_t hbd_sink_format(char *out, size_t cap, uint64_t device, bool udp, uint16_t seq,
		       const struct timespec *ts, const void *payload, size_t len);

#endif
