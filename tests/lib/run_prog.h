/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Helpers for tests that run the built programs: find them, run one bounded in time with its
 * stdout captured, pick numbers out of a one-line JSON summary.
 */
#ifndef HT_RUN_PROG_H
#define HT_RUN_PROG_H

#include <stddef.h>
#include <sys/types.h>
#include <time.h>

/* $BUILD/name (BUILD defaults to build), else next to the directory this test lives in
 * ($BUILD/tests/..). Returns 0 if an executable was found.
 */
int hbt_find(const char *name, const char *argv0, char *path, size_t len);

/* Reads fd into out until EOF or the deadline; returns bytes read. */
size_t hbt_drain(int fd, char *out, size_t cap, time_t deadline);

/* Starts path (a name without a slash: found in PATH) with argv, stdout to a pipe (returned
 * in *out_fd), stderr to errpath (or inherited if NULL). Returns the pid, or -1.
 */
pid_t hbt_spawn(const char *path, const char *const *argv, int *out_fd, const char *errpath);

/* Starts argv[0] (found in PATH if it has no slash) with its stdout and stderr appended to
 * log (a server or a load the test watches through its log). Returns the pid, or -1. */
pid_t hbt_spawn_logged(const char *const *argv, const char *log);

/* Waits for pid until deadline; kills it (SIGKILL, by pid) if it is still there. Returns its
 * exit code, or -1 if it did not exit normally.
 */
int hbt_reap(pid_t pid, time_t deadline);

/* Runs a program to completion (at most timeout_s), its stdout into out. Returns its exit
 * code, or -1 (killed at the deadline, or did not exit normally).
 */
int hbt_run(const char *path, const char *const *argv, int timeout_s, char *out, size_t cap);

/* The integer after "key": (first occurrence) in a JSON text; LLONG_MIN if absent. */
long long hbt_num(const char *json, const char *key);

#endif /* HT_RUN_PROG_H */
