// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Writes the seed corpus (fuzz/corpus/<target>/) from the real codec, so seeds stay valid
 * frames when the protocol changes: `make fuzz-seeds`, then commit what changed.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "proto.h"

static const char *dir;

static void put(const char *target, const char *name, const void *b, size_t n)
{
	char path[512];
	int short_write;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, target);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", dir, target, name);
	f = fopen(path, "wb");
	if (!f) {
		perror(path);
		return;
	}
	short_write = fwrite(b, 1, n, f) != n;
	if (fclose(f) || short_write) /* closed either way */
		perror(path);
}

/* One TCP frame of each kind a client or server sends, back to back. */
static size_t stream(uint8_t *b)
{
	uint8_t p[HB_MAX_PAYLOAD];
	size_t n = 0;

	memset(p, 0x5a, sizeof(p));
	n += hb_encode(b + n, 4096, HB_TCP, HB_HELLO, 1, 0, p, sizeof(struct hb_hello));
	n += hb_encode(b + n, 4096, HB_TCP, HB_WELCOME, 1, 0, p, sizeof(struct hb_welcome));
	n += hb_encode(b + n, 4096, HB_TCP, HB_PING, 2, 0, p, sizeof(struct hb_ping));
	n += hb_encode(b + n, 4096, HB_TCP, HB_PONG, 2, 0, p, sizeof(struct hb_ping));
	n += hb_encode(b + n, 4096, HB_TCP, HB_ECHO, 3, 0, p, 0);
	n += hb_encode(b + n, 4096, HB_TCP, HB_DATA, 4, 0, p, 17);
	n += hb_encode(b + n, 4096, HB_TCP, HB_ACK, 4, 0, NULL, 0);
	n += hb_encode(b + n, 4096, HB_TCP, HB_BYE, 5, 0, p, sizeof(struct hb_bye));
	n += hb_encode(b + n, 4096, HB_TCP, HB_ERROR, 6, 0, p, sizeof(struct hb_error));
	return n;
}

static void frame_seeds(void)
{
	static const char http_get[] = "GET / HTTP/1.1\r\n\r\n";
	uint8_t b[8192], p[HB_MAX_PAYLOAD];
	size_t n;

	memset(p, 0xa5, sizeof(p));
	n = stream(b);
	put("frame", "stream-all-types", b, n);
	put("frame", "stream-truncated", b, n - 3);
	n = hb_encode(b, sizeof(b), HB_UDP, HB_PING, 9, 0x1122334455667788ull, p, 8);
	put("frame", "udp-ping", b, n);
	n = hb_encode(b, sizeof(b), HB_UDP, HB_HELLO, 1, 0, p, sizeof(struct hb_hello));
	put("frame", "udp-hello", b, n);
	n = hb_encode(b, sizeof(b), HB_UDP, HB_ECHO, 1, 42, p, HB_MAX_PAYLOAD);
	put("frame", "udp-echo-max", b, n);
	n = hb_encode(b, sizeof(b), HB_TCP, HB_DATA, 1, 0, p, HB_MAX_PAYLOAD);
	b[4] = 0x04, b[5] = 0x01; /* declares HB_MAX_PAYLOAD + 1 */
	put("frame", "tcp-oversized", b, n);
	n = hb_encode(b, sizeof(b), HB_TCP, HB_PING, 1, 0, p, 8);
	b[0] = 'G', b[1] = 'E'; /* an HTTP client on the wrong port */
	put("frame", "bad-magic", b, n);
	put("frame", "http", http_get, sizeof(http_get) - 1);
}

static void reasm_seeds(void)
{
	uint8_t b[8192], p[HB_MAX_PAYLOAD];
	size_t n;

	memset(p, 0x3c, sizeof(p));
	/* k cut sizes, stop-after, payload limit selector, cuts, stream */
	b[0] = 0, b[1] = 0xff, b[2] = 0xff;
	n = 3 + stream(b + 3);
	put("reasm", "whole", b, n);
	b[0] = 1, b[1] = 0xff, b[2] = 0xff, b[3] = 0; /* one byte a receive */
	n = 4 + stream(b + 4);
	put("reasm", "byte-by-byte", b, n);
	b[0] = 3, b[1] = 0xff, b[2] = 0xff, b[3] = 6, b[4] = 9, b[5] = 200;
	n = 6 + stream(b + 6);
	put("reasm", "cuts-6-9-200", b, n);
	b[0] = 2, b[1] = 3, b[2] = 0xff, b[3] = 4, b[4] = 30; /* connection ends after frame 3 */
	n = 5 + stream(b + 5);
	put("reasm", "stop-after-3", b, n);
	b[0] = 1, b[1] = 0xff, b[2] = 0x10, b[3] = 100; /* limit 128 bytes, a 1024-byte ECHO */
	n = 4 + hb_encode(b + 4, 4096, HB_TCP, HB_ECHO, 1, 0, p, HB_MAX_PAYLOAD);
	put("reasm", "over-limit", b, n);
	b[0] = 1, b[1] = 0xff, b[2] = 0xff, b[3] = 2; /* a frame, then garbage mid-receive */
	n = 4 + hb_encode(b + 4, 4096, HB_TCP, HB_PING, 1, 0, p, 8);
	memcpy(b + n, "\x48\x42\x01\x06\x7f\xff", 6);
	put("reasm", "bad-after-good", b, n + 6);
}

static void hello_seeds(void)
{
	/* byte 0: replay floor (odd: on); then op bytes: bits 0-1 kind, bit 2 sign, bits 3-5 ts
	 * kind, bits 6-7 clock step
	 */
	static const uint8_t ok[] = { 0, 0x04, 3, 0, 0x04 | (1 << 3), 3 }; /* accept, then replay */
	static const uint8_t derived[] = { 0, 0x05, 42, 0, 0x45, 42, 5, 0xff, 1, 42, 0x85, 42, 0 };
	static const uint8_t edges[] = { 0,
					 0x04 | (6 << 3),
					 2,
					 0x04 | (7 << 3),
					 2,
					 0x04 | (3 << 3),
					 2,
					 0,
					 0x04 | (4 << 3),
					 2,
					 0,
					 0xfe,
					 0xc4,
					 2,
					 0 };
	static const uint8_t unknown[] = { 0, 0x06, 0, 0, 0, 0, 0, 0, 0x10, 0x01 };
	/* a restart 5 s ago: HELLOs stamped before it are refused for one window */
	static const uint8_t floor[] = { 101, 0x04 | (6 << 3), 4, 0x04, 4, 0xc4, 4, 0 };
	uint8_t raw[2 + 56] = { 0, 0x03 };

	put("hello", "accept-then-replay", ok, sizeof(ok));
	put("hello", "derived-release-supersede", derived, sizeof(derived));
	put("hello", "window-edges-sweep", edges, sizeof(edges));
	put("hello", "unknown-device", unknown, sizeof(unknown));
	raw[9] = 5; /* device 5, zero timestamp and MAC */
	put("hello", "raw-payload", raw, sizeof(raw));
	put("hello", "restart-floor", floor, sizeof(floor));
}

int main(int argc, char **argv)
{
	dir = argc > 1 ? argv[1] : "fuzz/corpus";
	mkdir(dir, 0755);
	frame_seeds();
	reasm_seeds();
	hello_seeds();
	return 0;
}
