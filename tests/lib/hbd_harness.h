/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The hbd tests' harness: run the built daemon, find it again after a failed test, and read
 * what it left (its log, its exit counters). The clients that talk to it are in clients.h.
 *
 * The daemon is the real binary ($BUILD/hbd, found next to the test's own build directory),
 * started with --port 0; its "ready" line gives the port. HBD_WRAP="valgrind ..." runs it under
 * a wrapper. Every wait is bounded in time.
 */
#ifndef HT_HBD_HARNESS_H
#define HT_HBD_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clients.h"
#include "ht_time.h"

/* The network namespace ht_start() runs hbd in ("" = this one). */
extern char ht_netns[64];

struct ht_daemon {
	pid_t pid;
	uint16_t port;
	char dir[64];
	char keys[96], sink[96], err[96], out[96];
};

/* Starts hbd with --keys/--sink/--port 0 and the extra arguments (NULL-terminated), waits for
 * its ready line. Returns 0 or -1 (and prints the daemon's log).
 */
int ht_start(struct ht_daemon *d, const char *const *extra);

/* SIGTERM, then waits (bounded) for the exit; returns the exit code, or -1 if it had to be
 * killed or died of a signal.
 */
int ht_stop(struct ht_daemon *d);

/* Removes the daemon's scratch directory (kills it first if still running). */
void ht_cleanup(struct ht_daemon *d);

/* Remembers (on) or forgets a daemon for ht_reap(): ht_start() and ht_cleanup() do, and a test
 * that starts hbd some other way does it itself. */
void ht_track(const struct ht_daemon *d, bool on);

/* After a SIGUSR2: waits for d's daemon to exit (cleanly) and makes d the successor that took
 * over, found in d's log; returns its pid, 0 on failure. */
pid_t ht_await_successor(struct ht_daemon *d);

/* cmocka teardown: kills and removes whatever a failed test left behind. */
int ht_reap(void **state);

/* A counter from the JSON line hbd prints at exit (-1 if absent). */
long long ht_exit_stat(const struct ht_daemon *d, const char *name);

/* The test devices' key file: 1..9 with their secrets, 100..199 derived from HT_MASTER. */
int ht_write_keys(const char *path);

/* $BUILD/hbd: next to the tests directory this binary runs from, else $BUILD, else build. */
void ht_hbd_path(char *out, size_t cap);

/* Runs the built program name (beside hbd: hbd, hbctl) with args to its end, at most 60 s,
 * its stdout and stderr through the file log into out. Returns its exit code, or -1. */
int ht_run_built(const char *name, const char *const *args, const char *log, char *out, size_t cap);

/* Whether a line of the file contains needle; the first such line into line (if given). */
int ht_file_contains(const char *path, const char *needle, char *line, size_t cap);

/* Open regular file descriptors of a process (/proc/PID/fd), -1 if unreadable. */
int ht_fd_count(pid_t pid);

/* Calls fn with the text of each of pid's threads' /proc/PID/task/TID/status (one that ends
 * meanwhile is left out); returns the number of threads read, -1 if pid has no task list. */
int ht_each_thread_status(pid_t pid, void (*fn)(const char *status, void *ctx), void *ctx);
/* The same with another file of /proc/PID/task/TID ("stat"). */
int ht_each_thread_file(pid_t pid, const char *file, void (*fn)(const char *text, void *ctx),
			void *ctx);
/* Context switches so far of pid's threads named name (with prefix, of those whose name starts
 * so), summed: the voluntary ones (sleeps), with involuntary the others too; -1 if none is
 * named so. */
long long ht_thread_switches(pid_t pid, const char *name, bool prefix, bool involuntary);
/* How many of pid's threads are named name (with prefix: whose name starts so). */
int ht_threads_named(pid_t pid, const char *name, bool prefix);

#endif /* HT_HBD_HARNESS_H */
