// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* DATA durability: devices stream DATA over TCP and UDP, hbd is killed with SIGKILL mid-stream,
 * and every frame the devices saw ACKed must be a complete line in the sink (the sync policy in
 * user/hbd/sink.c). A daemon started again on the same file cuts off a line the kill left
 * half-written, and the file is clean JSON lines after it. Three kill points, with and without
 * --sink-fsync; and once with the sink a FIFO read slowly, so writes wait for their reader and
 * an ACK sent before its line is out would be caught.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "lib/ht_assert.h"
#include "lib/hbd_harness.h"

#define NTCP 4
#define NUDP 4
#define WINDOW 48 /* DATA frames in flight per device */
#define MAXSEQ 60000 /* below the 16-bit wrap: a seq names one frame */

struct dev {
	uint64_t id;
	int fd;
	bool udp;
	uint64_t token;
	uint16_t next; /* next seq to send */
	unsigned inflight;
	uint8_t acked[MAXSEQ / 8 + 1];
	unsigned nacked;
	uint8_t buf[4096]; /* TCP receive reassembly */
	size_t have;
};

static struct dev devs[NTCP + NUDP];

static void on_ack(struct dev *d, uint16_t seq)
{
	if (seq < MAXSEQ && !(d->acked[seq / 8] & (1u << (seq % 8)))) {
		d->acked[seq / 8] |= (uint8_t)(1u << (seq % 8));
		d->nacked++;
		d->inflight--;
	}
}

/* Reads whatever replies are there, without blocking. false once the connection is gone. */
static bool drain_replies(struct dev *d)
{
	uint8_t b[HB_MAX_FRAME];
	struct hb_frame f;
	ssize_t n;

	if (d->udp) {
		while ((n = recv(d->fd, b, sizeof(b), MSG_DONTWAIT)) > 0)
			if (!hb_decode_dgram(b, (size_t)n, &f) && f.type == HB_ACK)
				on_ack(d, f.seq);
		return true;
	}
	for (;;) {
		size_t off = 0;

		n = recv(d->fd, d->buf + d->have, sizeof(d->buf) - d->have, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return false;
		if (n < 0)
			return true;
		d->have += (size_t)n;
		while (hb_decode_stream(d->buf + off, d->have - off, &f) == HB_DECODE_OK) {
			if (f.type == HB_ACK)
				on_ack(d, f.seq);
			off += f.size;
		}
		memmove(d->buf, d->buf + off, d->have - off);
		d->have -= off;
	}
}

static void send_data(struct ht_daemon *hd, struct dev *d)
{
	char payload[48];
	int n;

	while (d->inflight < WINDOW && d->next < MAXSEQ) {
		n = snprintf(payload, sizeof(payload), "device %llu seq %u",
			     (unsigned long long)d->id, d->next);
		if (d->udp) {
			if (ht_udp_send(d->fd, hd->port, false, HB_DATA, d->next, d->token, payload,
					(uint16_t)n))
				return;
		} else {
			uint8_t fr[128];
			size_t len = hb_encode(fr, sizeof(fr), HB_TCP, HB_DATA, d->next, 0, payload,
					       (uint16_t)n);

			if (send(d->fd, fr, len, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)len)
				return; /* a full socket (or a dead daemon): try later */
		}
		d->next++;
		d->inflight++;
	}
}

/* Every line of the sink: a complete object; marks (device, seq) as present. */
static int parse_sink(FILE *f, uint8_t present[][MAXSEQ / 8 + 1], int *bad)
{
	char line[4096];
	int n = 0;

	*bad = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long dev;
		unsigned seq;
		size_t len = strlen(line);

		if (len < 3 || line[0] != '{' || line[len - 2] != '}' || line[len - 1] != '\n' ||
		    sscanf(line, "{\"device\":%llu,\"transport\":\"%*[a-z]\",\"seq\":%u", &dev,
			   &seq) != 2 ||
		    dev < 1 || dev > NTCP + NUDP || seq >= MAXSEQ) {
			(*bad)++;
			continue;
		}
		present[dev - 1][seq / 8] |= (uint8_t)(1u << (seq % 8));
		n++;
	}
	return n;
}

static int read_sink(const char *path, uint8_t present[][MAXSEQ / 8 + 1], int *bad)
{
	FILE *f = fopen(path, "r");
	int n;

	assert_non_null(f);
	n = parse_sink(f, present, bad);
	fclose(f);
	return n;
}

/* The FIFO's reader: 4 KiB every 10 ms (slower than the devices send) into a memory file,
 * until every writer is gone.
 */
struct slow_reader {
	int fd;
	char *mem;
	size_t len;
	FILE *out;
};

static void *slow_read(void *arg)
{
	struct slow_reader *r = arg;
	char buf[4096];
	ssize_t n;

	while ((n = read(r->fd, buf, sizeof(buf))) > 0) {
		fwrite(buf, 1, (size_t)n, r->out);
		ht_sleep_ms(10);
	}
	return NULL;
}

static void login_all(struct ht_daemon *d)
{
	memset(devs, 0, sizeof(devs));
	for (int i = 0; i < NTCP + NUDP; i++) {
		struct dev *v = &devs[i];

		v->id = (uint64_t)(1 + i);
		v->udp = i >= NTCP;
		if (v->udp) {
			v->fd = ht_udp(false);
			v->token = ht_udp_login(v->fd, d->port, false, v->id);
			HT_NE(v->token, 0, "UDP login of device %llu", (unsigned long long)v->id);
		} else {
			v->fd = ht_tcp_login(d->port, v->id, false, NULL);
			HT_GE(v->fd, 0, "TCP login of device %llu", (unsigned long long)v->id);
		}
	}
}

/* Streams DATA until kill_after_ms, kills the daemon, keeps reading ACKs a little longer (the
 * ones already on their way still count). Returns the number of frames ACKed.
 */
static unsigned long stream_and_kill(struct ht_daemon *d, unsigned kill_after_ms)
{
	unsigned long acked = 0;
	uint64_t t0 = ht_now_ms();

	while (ht_now_ms() - t0 < kill_after_ms + 300) {
		if (d->pid > 0 && ht_now_ms() - t0 >= kill_after_ms) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, NULL, 0);
			d->pid = 0;
		}
		for (int i = 0; i < NTCP + NUDP; i++) {
			if (d->pid > 0)
				send_data(d, &devs[i]);
			drain_replies(&devs[i]);
		}
		ht_sleep_ms(1);
	}
	for (int i = 0; i < NTCP + NUDP; i++) {
		drain_replies(&devs[i]);
		acked += devs[i].nacked;
		close(devs[i].fd);
	}
	return acked;
}

static void check_acked_present(uint8_t present[][MAXSEQ / 8 + 1])
{
	for (int i = 0; i < NTCP + NUDP; i++)
		for (unsigned s = 0; s < MAXSEQ; s++)
			if ((devs[i].acked[s / 8] & (1u << (s % 8))) &&
			    !(present[i][s / 8] & (1u << (s % 8))))
				fail_msg("device %d seq %u was ACKed but is not in the sink", i + 1,
					 s);
}

static void one_round(bool fsync, unsigned kill_after_ms)
{
	static uint8_t present[NTCP + NUDP][MAXSEQ / 8 + 1];
	/* no DATA rate limit: the devices stream as fast as the daemon ACKs */
	const char *args[] = { "--no-offload",
			       "--workers",
			       "2",
			       "--data-rate",
			       "0",
			       "--log-level",
			       "info",
			       fsync ? "--sink-fsync" : NULL,
			       NULL };
	const char *again[] = { "--no-offload", "--sink", NULL, NULL };
	struct ht_daemon d, d2;
	unsigned long acked;
	int lines, bad;

	HT_EQ(ht_start(&d, args), 0, "hbd with %s started",
	      fsync ? "--sink-fsync" : "default sync");
	login_all(&d);
	acked = stream_and_kill(&d, kill_after_ms);
	memset(present, 0, sizeof(present));
	lines = read_sink(d.sink, present, &bad);
	check_acked_present(present);
	printf("%s, killed after %u ms: %lu DATA ACKed, all of them among the %d lines in the sink"
	       " (%d cut short by the kill)\n",
	       fsync ? "--sink-fsync" : "default sync", kill_after_ms, acked, lines, bad);
	HT_GT(acked, 100, "DATA frames ACKed before the kill after %u ms", kill_after_ms);
	HT_LE(bad, 1, "sink lines cut short by the kill (at most the last, mid-write)");

	/* a new daemon on the same file: the partial line goes, appending goes on cleanly */
	again[2] = d.sink;
	HT_EQ(ht_start(&d2, again), 0, "second hbd on the same sink %s started", d.sink);
	if (bad)
		HT_TRUE(ht_file_contains(d2.err, "cut short by a crash", NULL, 0),
			"the new hbd says it removed a line cut short, in %s", d2.err);
	{
		int fd = ht_tcp_login(d2.port, 1, false, NULL);

		HT_GE(fd, 0, "login of device 1 to the second hbd");
		HT_EQ(ht_send_frame(fd, HB_DATA, 7, "after", 5), 0, "DATA to the second hbd sent");
		HT_TRUE(ht_expect(fd, HB_ACK, -1), "ACK from the second hbd");
		close(fd);
	}
	HT_EQ(ht_stop(&d2), 0, "exit code of the second hbd after SIGTERM");
	memset(present, 0, sizeof(present));
	HT_EQ(read_sink(d.sink, present, &bad), lines + 1,
	      "sink lines after the restart: the old ones and one more");
	HT_EQ(bad, 0, "lines cut short left in the sink after the restart");
	ht_cleanup(&d2);
	ht_cleanup(&d);
}

static void kill_mid_stream(void **state)
{
	(void)state;
	one_round(false, 300);
	one_round(false, 700);
	one_round(false, 1100);
}

static void kill_mid_stream_fsync(void **state)
{
	(void)state;
	one_round(true, 500);
	one_round(true, 900);
}

/* A FIFO as the sink, drained slowly: batch writes wait for the reader, so ACKs must too. */
static void kill_with_slow_consumer(void **state)
{
	static uint8_t present[NTCP + NUDP][MAXSEQ / 8 + 1];
	char fifo[64];
	const char *args[] = { "--no-offload", "--workers", "2", "--data-rate", "0",
			       "--sink",       fifo,	    NULL };
	struct slow_reader r = { 0 };
	struct ht_daemon d;
	unsigned long acked;
	pthread_t th;
	int lines, bad;

	(void)state;
	snprintf(fifo, sizeof(fifo), "/tmp/hbh-sinkfifo-%d", (int)getpid());
	unlink(fifo);
	HT_EQ(mkfifo(fifo, 0600), 0, "mkfifo %s", fifo);
	r.fd = open(fifo, O_RDONLY | O_NONBLOCK); /* opened first, so hbd's open finds a reader */
	HT_GE(r.fd, 0, "open of the FIFO %s for reading", fifo);
	r.out = open_memstream(&r.mem, &r.len);
	HT_EQ(ht_start(&d, args), 0, "hbd with a FIFO sink started");
	fcntl(r.fd, F_SETFL, 0);
	HT_EQ(pthread_create(&th, NULL, slow_read, &r), 0, "slow reader thread started");
	login_all(&d);
	acked = stream_and_kill(&d, 800);
	pthread_join(th, NULL); /* EOF: the killed daemon was the last writer */
	fclose(r.out);
	r.out = fmemopen(r.mem, r.len, "r");
	memset(present, 0, sizeof(present));
	lines = parse_sink(r.out, present, &bad);
	fclose(r.out);
	check_acked_present(present);
	printf("slow FIFO consumer, killed after 800 ms: %lu DATA ACKed, all among %d lines read "
	       "(%d cut short)\n",
	       acked, lines, bad);
	HT_GT(acked, 100, "DATA frames ACKed before the kill with a slow consumer");
	HT_LE(bad, 1, "sink lines cut short by the kill (at most the last)");
	free(r.mem);
	close(r.fd);
	unlink(fifo);
	ht_cleanup(&d);
}

/* The cut-short last line a crash can leave is removed at the next start; a file that is not
 * a sink at all is refused with a clear message instead of being appended to.
 */
static void partial_line_repaired(void **state)
{
	const char *args[] = { "--no-offload", "--sink", NULL, NULL };
	static const char good[] =
		"{\"device\":1,\"transport\":\"tcp\",\"seq\":1,\"payload\":\"\"}\n"
		"{\"device\":1,\"transport\":\"tcp\",\"seq\":2,\"payload\":\"\"}\n";
	char path[64], line[256];
	struct ht_daemon d;
	struct stat st;
	FILE *f;
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "/tmp/hbh-sink-%d", (int)getpid());
	f = fopen(path, "w");
	fputs(good, f);
	fputs("{\"device\":1,\"transport\":\"tcp\",\"se", f); /* the kill came here */
	fclose(f);
	args[2] = path;
	HT_EQ(ht_start(&d, args), 0, "hbd on a sink with a line cut short started");
	HT_TRUE(ht_file_contains(d.err, "cut short by a crash: removed its", line, sizeof(line)),
		"the line-removed message in %s", d.err);
	HT_EQ(stat(path, &st), 0, "stat of the repaired sink %s", path);
	HT_EQ(st.st_size, sizeof(good) - 1, "size of the repaired sink: the whole lines only");
	fd = ht_tcp_login(d.port, 1, false, NULL);
	HT_GE(fd, 0, "login of device 1");
	HT_EQ(ht_send_frame(fd, HB_DATA, 3, "x", 1), 0, "DATA sent");
	HT_TRUE(ht_expect(fd, HB_ACK, -1), "ACK after the repair");
	close(fd);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);

	/* 2000 bytes without a newline: not ours; hbd will not start on it */
	f = fopen(path, "w");
	for (int i = 0; i < 2000; i++)
		fputc('x', f);
	fclose(f);
	HT_NE(ht_start(&d, args), 0, "hbd refused to start on a file that is not a sink");
	HT_EQ(stat(path, &st), 0, "stat of the refused file %s", path);
	HT_EQ(st.st_size, 2000, "size of the refused file, untouched");
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(kill_mid_stream, ht_reap),
		cmocka_unit_test_teardown(kill_mid_stream_fsync, ht_reap),
		cmocka_unit_test_teardown(kill_with_slow_consumer, ht_reap),
		cmocka_unit_test_teardown(partial_line_repaired, ht_reap),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("durability", tests, NULL, NULL);
}
