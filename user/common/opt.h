/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Command-line options from one typed table per program (or per hbctl command): parsing,
 * defaults, the --help option list and one shape of message for every bad command line.
 *
 * A table entry names an option, says what type its value has (with the range it must fall in
 * and its default, both typed) and where in the program's configuration struct the value goes.
 * The same entry is parsed, prints its own --help line with the default taken from the typed
 * value, and words the error for a bad value, so usage text, defaults and checks cannot drift
 * apart. Every complaint has the shape
 *
 *	PROG: --port must be an integer in 0..65535, not '70000' (try 'PROG --help')
 *
 * Parsing is getopt_long's (GNU permutation: options may follow positional arguments; unique
 * prefixes of long names are accepted; "--" ends the options).
 */
#ifndef HB_OPT_H
#define HB_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum hb_opt_type {
	HB_OPT_END = 0, /* terminates a table ({ 0 }) */
	HB_OPT_HEADING, /* not an option: help is a heading line in --help */
	HB_OPT_HELP, /* prints --help to stdout; hb_opt_parse returns 1 */
	HB_OPT_FLAG, /* no argument: sets a bool field */
	HB_OPT_FLAG_OFF, /* no argument: clears a bool field (whose default is true) */
	HB_OPT_UINT, /* decimal integer in [umin, umax] (and uint_ok) into an unsigned field of
		      * 1, 2, 4 or 8 bytes */
	HB_OPT_DOUBLE, /* number in [dmin, dmax] (strtod syntax, then optionally unit) into a
			* double */
	HB_OPT_STRING, /* any text: a const char * field that points into argv */
	HB_OPT_CHOICE, /* one word of choices: its value goes into an integer, enum or bool field */
	HB_OPT_CUSTOM, /* parse(arg, cfg) takes it or returns -EINVAL; expect says what it takes */
};

struct hb_opt_choice {
	const char *word; /* NULL ends the list */
	long value;
};

struct hb_opt {
	const char *name; /* long name without "--" */
	char short_name; /* 0 if none */
	const char *metavar; /* the argument in --help and messages; CHOICE: NULL joins the words */
	const char *help; /* one sentence; --help wraps it and appends the default */
	enum hb_opt_type type;
	size_t off, size; /* the field in the config struct: HB_OPT_AT(struct, field) */
	union {
		uint64_t u;
		double d;
		const char *s;
		long i; /* CHOICE: a value of the list, or one outside it for "none" */
	} def; /* written by hb_opt_defaults; FLAG defaults to false, FLAG_OFF to true */
	uint64_t umin, umax; /* UINT range */
	double dmin, dmax; /* DOUBLE range */
	bool (*uint_ok)(uint64_t v); /* UINT: a further condition (NULL: none); expect says it */
	const char *unit; /* DOUBLE: a suffix that may follow the number ("/s"), or NULL */
	const struct hb_opt_choice *choices; /* CHOICE */
	int (*parse)(const char *arg, void *cfg); /* CUSTOM */
	const char *expect; /* what a valid value is ("PORT or ADDR:PORT"): CUSTOM, uint_ok; for
			     * the others it is worked out from the range or the choices */
	const char *def_text; /* --help shows this as the default instead of the typed value
			       * (for defaults worked out at run time); "" shows none */
	bool required; /* the command line must give it */
	const char *excludes; /* the long name of an option it may not be given with, or NULL */
	bool has_given; /* also set the bool at given_off when the option is given: */
	size_t given_off; /* HB_OPT_GIVEN(struct, field) */
};

#define HB_OPT_AT(type, field) .off = offsetof(type, field), .size = sizeof(((type *)0)->field)
#define HB_OPT_GIVEN(type, field) .has_given = true, .given_off = offsetof(type, field)

#define HB_OPT_MAX 64 /* entries in one table */
#define HB_OPT_ARGS_ANY 0x7fffffff /* max_args: the rest of argv (a command and its options) */

/* A program (or hbctl command) and its table. --help prints
 *	Usage: NAME SYNOPSIS
 *	<about>
 *	Options:
 *	<one entry per table line>
 *	<epilog>
 */
struct hb_opt_prog {
	const char *name; /* "hbd", "hbctl load": starts every message */
	const char *synopsis; /* after "Usage: NAME " */
	const char *about; /* paragraphs after the usage line (each line ending in \n), or NULL */
	const char *epilog; /* after the option list, or NULL */
	const struct hb_opt *opts;
	int min_args, max_args; /* positional arguments allowed */
	const char *args; /* their names, for "expected ARGS" */
	bool stop_at_arg; /* options end at the first positional (a command follows) */
};

/* Writes every entry's default into cfg (fields without an entry are left alone). */
void hb_opt_defaults(const struct hb_opt *opts, void *cfg);

/* Parses argv[1..argc-1] into cfg (argv[0] is the program or command name; argv may be
 * permuted). On success *first_arg (if not NULL) is the index of the first positional argument.
 * Returns 0, 1 if --help was printed, or -EINVAL after printing one message to stderr.
 */
int hb_opt_parse(const struct hb_opt_prog *p, int argc, char **argv, void *cfg, int *first_arg);

/* The whole --help text, and the option list alone. */
void hb_opt_help(const struct hb_opt_prog *p, FILE *f);
void hb_opt_print_list(const struct hb_opt *opts, FILE *f);

/* "NAME: <message> (try 'NAME --help')" on stderr, for checks that span options. Returns
 * -EINVAL. */
int hb_opt_error(const struct hb_opt_prog *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The word of a choice value, or NULL. */
const char *hb_opt_choice_word(const struct hb_opt_choice *c, long value);

/* What a bad value of this entry gets told: "an integer in 0..65535", "kernel or user". */
void hb_opt_expect(const struct hb_opt *o, char *buf, size_t cap);

/* Checks a table for mistakes a compiler cannot see (field sizes that do not fit the type,
 * ranges that do not fit the field, a default outside its range, names given twice). Returns
 * 0, or -EINVAL with the first problem in err. hb_opt_parse refuses a table that fails it.
 */
int hb_opt_check(const struct hb_opt *opts, char *err, size_t cap);

/* The number parsers the entries use, for custom parsers: 0 or -EINVAL (-ERANGE: out of
 * [min, max]). */
int hb_opt_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int hb_opt_parse_double(const char *s, double min, double max, const char *unit, double *out);

#endif
