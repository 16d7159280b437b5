// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* DATA sink batches and their JSON lines (jansson; base64 by libcrypto's EVP_EncodeBlock).
 *
 * Sync policy: a DATA frame is ACKed only after the write() of the batch holding its line has
 * completed, so nothing ACKed is lost if hbd crashes or is killed (the data is in the page
 * cache). Surviving power loss or a kernel crash needs --sink-fsync, which adds an fdatasync
 * after each batch and before its ACKs. Batches group every DATA frame of one event-loop
 * iteration, so the cost is one write (and one fdatasync) per iteration, not per frame.
 * tests/test_durability kills hbd mid-stream and finds every ACKed frame in the file.
 *
 * A crash can leave one cut-short line at the end: a buffered write stops between pages when
 * the process gets SIGKILL, and every other worker's write after that point writes nothing
 * (the signal is pending in all its threads). Those bytes were never ACKed, so on the next
 * start the partial line is cut off (hbd_sink_open with repair) and appending goes on from a
 * clean line boundary. (Lines of two batches can also interleave if a write comes back short
 * while the process lives, which on a regular file means the disk is full: nothing is ACKed
 * then either.)
 */
#include "sink.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hbeat_abi.h"
#include "json_out.h"

/* Cuts a partial last line (no newline at the end) off the file. A line is at most
 * HBD_SINK_LINE_MAX bytes, so the last newline must lie within that of the end; if it does
 * not, the file is not a sink of ours and stays as it is.
 */
static int repair_tail(int fd, size_t *dropped, char *why, size_t whylen)
{
	char buf[HBD_SINK_LINE_MAX];
	struct stat st;
	off_t start;
	ssize_t n;

	*dropped = 0;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size == 0)
		return 0;
	start = st.st_size > (off_t)sizeof(buf) ? st.st_size - (off_t)sizeof(buf) : 0;
	n = pread(fd, buf, (size_t)(st.st_size - start), start);
	if (n <= 0 || buf[n - 1] == '\n')
		return n < 0 ? -errno : 0;
	for (ssize_t i = n - 1; i >= 0; i--) {
		if (buf[i] == '\n' || (i == 0 && start == 0)) {
			off_t keep = start + (buf[i] == '\n' ? i + 1 : 0);

			if (ftruncate(fd, keep)) {
				snprintf(why, whylen, "cutting a partial last line: %s",
					 strerror(errno));
				return -errno;
			}
			*dropped = (size_t)(st.st_size - keep);
			return 0;
		}
	}
	snprintf(why, whylen, "ends without a newline within %zu bytes: not a JSON-lines sink?",
		 sizeof(buf));
	return -EINVAL;
}

int hbd_sink_open(const char *path, bool repair, bool fsync, size_t *dropped, char *why,
		  size_t whylen)
{
	/* O_NOFOLLOW: whoever can write the sink's directory must not be able to point the
	 * writes, and the tail repair's truncation, at another file */
	int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640), rc;
	struct stat st;

	*dropped = 0;
	if (fd < 0) {
		rc = -errno;
		if (rc == -ELOOP)
			snprintf(why, whylen,
				 "is a symbolic link: refused (give --sink the path of "
				 "the file itself)");
		else
			snprintf(why, whylen, "%s%s", strerror(-rc),
				 rc == -ENOENT ? " (create its directory, or give --sink)" : "");
		return rc;
	}
	if (fstat(fd, &st) ||
	    !(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) ||
	    (fsync && !S_ISREG(st.st_mode))) {
		snprintf(why, whylen, "%s",
			 fsync ? "--sink-fsync needs a regular file"
			       : "not a regular file, FIFO or character device");
		close(fd);
		return -EINVAL;
	}
	if (repair && (rc = repair_tail(fd, dropped, why, whylen))) {
		close(fd);
		return rc;
	}
	return fd;
}

void hbd_sink_init(struct hbd_sink *s, int fd, bool fsync)
{
	struct stat st;

	memset(s, 0, sizeof(*s));
	s->fd = fd;
	s->fsync = fsync;
	/* O_APPEND makes a whole write land in one piece on a regular file; a pipe only promises
	 * that for writes up to PIPE_BUF
	 */
	s->max_write = !fstat(fd, &st) && S_ISFIFO(st.st_mode) ? PIPE_BUF : SIZE_MAX;
}

size_t hbd_sink_next_len(const struct hbd_sink *s, const struct hbd_sink_batch *b)
{
	size_t left = b->len - b->done, n;

	if (left <= s->max_write)
		return left;
	/* the longest run of whole lines within max_write (a line is < HBD_SINK_LINE_MAX) */
	for (n = s->max_write; n > 0 && b->buf[b->done + n - 1] != '\n'; n--)
		;
	return n ? n : s->max_write;
}

void hbd_sink_free(struct hbd_sink *s)
{
	for (int i = 0; i < 2; i++) {
		free(s->b[i].buf);
		free(s->b[i].acks);
	}
	memset(s->b, 0, sizeof(s->b));
}

/* The line of a frame; topic (MQTT) is ASCII the caller checked, or NULL for none. */
static size_t format_line(char *out, size_t cap, uint64_t device, const char *transport,
			  const char *topic, size_t tlen, uint16_t seq, const struct timespec *ts,
			  const void *payload, size_t len)
{
	char b64[(HB_MAX_PAYLOAD + 2) / 3 * 4 + 1], time[96]; /* 24 bytes for any real date */
	struct tm tm;
	json_t *o;
	int n;

	if (len > HB_MAX_PAYLOAD || !gmtime_r(&ts->tv_sec, &tm))
		return 0;
	n = EVP_EncodeBlock((unsigned char *)b64, payload, (int)len);
	snprintf(time, sizeof(time), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 ts->tv_nsec / 1000000);
	/* the device id stays a number over the whole u64 range, as consumers have always read it;
	 * base64 and the time are ASCII, which the library need not check */
	o = topic ? json_pack("{s:s,s:o,s:i,s:o,s:o}", "transport", transport, "topic",
			      json_stringn_nocheck(topic, tlen), "seq", (int)seq, "time",
			      json_string_nocheck(time), "payload",
			      json_stringn_nocheck(b64, (size_t)n))
		  : json_pack("{s:s,s:i,s:o,s:o}", "transport", transport, "seq", (int)seq, "time",
			      json_string_nocheck(time), "payload",
			      json_stringn_nocheck(b64, (size_t)n));
	n = hb_json_line_u64_first(out, cap, "device", device, o);
	return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

size_t hbd_sink_format(char *out, size_t cap, uint64_t device, bool udp, uint16_t seq,
		       const struct timespec *ts, const void *payload, size_t len)
{
	return format_line(out, cap, device, udp ? "udp" : "tcp", NULL, 0, seq, ts, payload, len);
}

/* Room in the filling batch for one more line and its ACK: 0 or -ENOMEM. */
static int batch_room(struct hbd_sink_batch *b)
{
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
	return 0;
}

static void batch_put(struct hbd_sink_batch *b, size_t n, size_t len, const struct hbd_ack *ack,
		      uint64_t device)
{
	b->len += n;
	b->bytes += len;
	b->acks[b->nacks] = *ack;
	/* fleet mode publishes each line on its own subject (fleet_data.c) */
	b->acks[b->nacks].device = device;
	b->acks[b->nacks++].end = (uint32_t)b->len;
}

int hbd_sink_add(struct hbd_sink *s, uint64_t device, bool udp, uint16_t seq,
		 const struct timespec *now, const void *payload, size_t len,
		 const struct hbd_ack *ack)
{
	struct hbd_sink_batch *b = &s->b[s->fill];
	size_t n;

	if (batch_room(b))
		return -ENOMEM;
	n = hbd_sink_format(b->buf + b->len, b->cap - b->len, device, udp, seq, now, payload, len);
	if (!n)
		return -EINVAL;
	batch_put(b, n, len, ack, device);
	return 0;
}

int hbd_sink_add_topic(struct hbd_sink *s, uint64_t device, const char *transport,
		       const char *topic, size_t tlen, uint16_t seq, const struct timespec *now,
		       const void *payload, size_t len, const struct hbd_ack *ack)
{
	struct hbd_sink_batch *b = &s->b[s->fill];
	size_t n;

	if (tlen > HBD_SINK_TOPIC_MAX)
		return -EINVAL;
	if (batch_room(b))
		return -ENOMEM;
	n = format_line(b->buf + b->len, b->cap - b->len, device, transport, topic, tlen, seq, now,
			payload, len);
	if (!n)
		return -EINVAL;
	batch_put(b, n, len, ack, device);
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
