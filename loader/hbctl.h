/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbctl: the command-line front end of the loader library. Commands in the xdp-tools style: each
 * has an options table (which also prints its --help), defaults, and a do_<cmd>() function; the
 * dispatcher checks the environment a command needs before running it.
 */
#ifndef HBCTL_H
#define HBCTL_H

#include <stdbool.h>

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

#define HBCTL_MAX_OPTS 12

struct hbctl_args {
	const struct hbctl_opt *opts;
	const char *val[HBCTL_MAX_OPTS]; /* NULL if not given; "1" for given flags */
};

/* Value of an option (or its default), NULL if neither. */
const char *hbctl_arg(const struct hbctl_args *a, const char *name);
bool hbctl_flag(const struct hbctl_args *a, const char *name);

int hbctl_do_load(const struct hbctl_args *a);
int hbctl_do_unload(const struct hbctl_args *a);
int hbctl_do_status(const struct hbctl_args *a);
int hbctl_do_conns(const struct hbctl_args *a);
int hbctl_do_stats(const struct hbctl_args *a);

/* Entry point used by loader/main.c (and usable from tests). */
int hbctl_main(int argc, char **argv);

#endif
