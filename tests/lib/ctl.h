/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Helpers for the tests of hbd's application side: a daemon with a control socket (and
 * optionally metrics), a control-socket client, base64, scraping /metrics with curl, and the
 * paths of the built hbctl and example device.
 */
#ifndef HT_CTL_H
#define HT_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hbd_harness.h"

/* A built program next to this test's build directory ($BUILD/NAME). */
void tc_bin(const char *name, char *out, size_t cap);

/* hbd with --control (in its scratch dir) and the extra arguments; *ctl gets the socket path.
 * metrics: also --metrics 127.0.0.1:0, the port lands in *mport.
 */
int tc_start(struct ht_daemon *d, char *ctl, size_t cap, bool metrics, uint16_t *mport,
	     const char *const *extra);

/* ht_cleanup, and whatever else a test put into the daemon's scratch directory (outputs of
 * the example device and hbctl, the key store's lock file), so the directory goes too. */
void tc_cleanup(struct ht_daemon *d);

/* cmocka teardown: ht_reap, and the control sockets a killed daemon could not remove. */
int tc_reap(void **state);

/* Another socket path for tc_reap to remove if the test fails before it does. */
void tc_track_sock(const char *path);

int tc_connect(const char *path);
int tc_write(int fd, const char *line);

/* One line (no newline) within ms; 0, or -1 on timeout/EOF. */
int tc_line(int fd, char *out, size_t cap, int ms);

/* Request and its first reply line. */
int tc_req(const char *path, const char *req, char *out, size_t cap);

/* The number after "key": in a JSON line (-1 if absent). */
long long tc_num(const char *json, const char *key);

/* Standard base64 of len bytes into out (4 * ceil(len / 3) + 1 bytes). */
void tc_b64(const void *in, int len, char *out);

/* A value from the exposition text: the line that starts with "name{labels} " or "name ". */
long long tc_metric(const char *text, const char *series);

/* GET http://127.0.0.1:port/path with curl into a malloc'd string; NULL on failure. *status
 * gets the HTTP status. */
char *tc_curl(uint16_t port, const char *path, int *status);

#endif /* HT_CTL_H */
