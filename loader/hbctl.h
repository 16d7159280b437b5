/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbctl: the command-line front end of the loader library. Commands in the xdp-tools style: each
 * has an options table (which also prints its --help), defaults, and a do_<cmd>() function; the
 * dispatcher checks the environment a command needs before running it.
 */
#ifndef HBCTL_H
#define HBCTL_H

#include <stdbool.h>
#include <stddef.h>

/* Exit codes (also printed by hbctl --help). */
enum hbctl_exit {
	HBCTL_OK = 0,
	HBCTL_USAGE = 1, /* bad command line */
	HBCTL_ENV = 2, /* environment or kernel feature missing: not root, no bpffs, no BTF, ... */
	HBCTL_FAIL = 3, /* the operation failed: load/attach/pin error, already loaded, not loaded */
};

/* One option of a command. */
struct hbctl_opt {
	const char *name; /* long name, also the key for hbctl_arg() */
	char short_name; /* 0 if none */
	const char *metavar; /* NULL: a flag without argument */
	const char *help;
	const char *def; /* default shown in --help, NULL if none */
};

#define HBCTL_MAX_OPTS 14
#define HBCTL_MAX_ARGS 4

struct hbctl_args {
	const struct hbctl_opt *opts;
	const char *val[HBCTL_MAX_OPTS]; /* NULL if not given; "1" for given flags */
	int argc; /* positional arguments after the command */
	const char *argv[HBCTL_MAX_ARGS];
};

/* Value of an option (or its default), NULL if neither. */
const char *hbctl_arg(const struct hbctl_args *a, const char *name);
bool hbctl_flag(const struct hbctl_args *a, const char *name);

int hbctl_do_load(const struct hbctl_args *a);
int hbctl_do_unload(const struct hbctl_args *a);
int hbctl_do_status(const struct hbctl_args *a);
int hbctl_do_conns(const struct hbctl_args *a);
int hbctl_do_stats(const struct hbctl_args *a);
int hbctl_do_devices(const struct hbctl_args *a); /* hbctl_devices.c */
int hbctl_do_send(const struct hbctl_args *a); /* hbctl_app.c */
int hbctl_do_events(const struct hbctl_args *a);

/* Defaults shared by the commands that talk to hbd or edit its files. */
#define HBCTL_DEFAULT_KEYS "/etc/hbeat/keys"
#define HBCTL_DEFAULT_CONTROL "/run/hbeat/hbd.sock"

/* hbctl_app.c: one request on hbd's control socket; the first reply line (without newline)
 * goes to reply. Returns 0, or -errno (ENOENT/ECONNREFUSED: hbd not listening there). */
int hbctl_ctl_request(const char *path, const char *request, char *reply, size_t cap,
		      int timeout_ms);

/* Entry point used by loader/main.c (and usable from tests). */
int hbctl_main(int argc, char **argv);

#endif
