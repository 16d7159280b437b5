// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Typed option tables: getopt_long over the table, defaults, --help and the error messages. */
#include "opt.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define HELP_COL_MAX 30 /* help texts start at most this far right */
#define HELP_WIDTH 80 /* --help lines are wrapped to this */
#define LONG_VAL 256 /* getopt_long's val for entry i is LONG_VAL + i: above every short name */

static void *field(const struct hb_opt *o, void *cfg)
{
	return (char *)cfg + o->off;
}

static bool takes_arg(const struct hb_opt *o)
{
	return o->type >= HB_OPT_UINT;
}

/* The largest value an unsigned field of this many bytes holds (0: not such a size). */
static uint64_t size_max(size_t size)
{
	switch (size) {
	case 1:
		return UINT8_MAX;
	case 2:
		return UINT16_MAX;
	case 4:
		return UINT32_MAX;
	case 8:
		return UINT64_MAX;
	default:
		return 0;
	}
}

/* Integers of every width go through memcpy: the field may be a bool, an enum or a uintN_t. */
static void store_uint(void *p, size_t size, uint64_t v)
{
	uint8_t u8 = (uint8_t)v;
	uint16_t u16 = (uint16_t)v;
	uint32_t u32 = (uint32_t)v;

	switch (size) {
	case 1:
		memcpy(p, &u8, 1);
		break;
	case 2:
		memcpy(p, &u16, 2);
		break;
	case 4:
		memcpy(p, &u32, 4);
		break;
	case 8:
		memcpy(p, &v, 8);
		break;
	}
}

static void set_bool(void *p, bool v)
{
	memcpy(p, &v, sizeof(v));
}

const char *hb_opt_choice_word(const struct hb_opt_choice *c, long value)
{
	for (; c && c->word; c++)
		if (c->value == value)
			return c->word;
	return NULL;
}

/* "a|b|c" (sep "|"), or "a, b or c" (sep NULL). */
static void join_choices(const struct hb_opt_choice *c, const char *sep, char *buf, size_t cap)
{
	size_t n = 0;

	buf[0] = 0;
	for (int i = 0; c[i].word && n < cap; i++) {
		const char *s = i == 0 ? "" : sep ? sep : c[i + 1].word ? ", " : " or ";

		n += (size_t)snprintf(buf + n, cap - n, "%s%s", s, c[i].word);
	}
}

static const char *metavar(const struct hb_opt *o, char *buf, size_t cap)
{
	if (o->metavar || o->type != HB_OPT_CHOICE)
		return o->metavar;
	join_choices(o->choices, "|", buf, cap);
	return buf;
}

void hb_opt_expect(const struct hb_opt *o, char *buf, size_t cap)
{
	if (o->expect) {
		snprintf(buf, cap, "%s", o->expect);
		return;
	}
	switch (o->type) {
	case HB_OPT_UINT:
		snprintf(buf, cap, "an integer in %llu..%llu", (unsigned long long)o->umin,
			 (unsigned long long)o->umax);
		break;
	case HB_OPT_DOUBLE:
		snprintf(buf, cap, "a number in %.15g..%.15g%s%s%s", o->dmin, o->dmax,
			 o->unit ? " (optionally with " : "", o->unit ? o->unit : "",
			 o->unit ? ")" : "");
		break;
	case HB_OPT_CHOICE:
		join_choices(o->choices, NULL, buf, cap);
		break;
	default:
		snprintf(buf, cap, "a value");
		break;
	}
}

int hb_opt_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	/* strtoull would take leading blanks, a sign (and wrap "-1"), or nothing at all */
	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end)
		return -EINVAL;
	if (errno || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int hb_opt_parse_double(const char *s, double min, double max, const char *unit, double *out)
{
	char *end;
	double v;

	if (*s == ' ' || *s == '\t') /* as for integers: the value is the whole argument */
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (end == s)
		return -EINVAL;
	if (unit && !strcmp(end, unit))
		end += strlen(end);
	if (*end || !isfinite(v))
		return -EINVAL;
	if (errno || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

static void vmessage(const struct hb_opt_prog *p, const char *fmt, va_list ap)
{
	char msg[512];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	fprintf(stderr, "%s: %s (try '%s --help')\n", p->name, msg, p->name);
}

int hb_opt_error(const struct hb_opt_prog *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(p, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int bad_value(const struct hb_opt_prog *p, const struct hb_opt *o, const char *arg)
{
	char what[256];

	hb_opt_expect(o, what, sizeof(what));
	return hb_opt_error(p, "--%s must be %s, not '%s'", o->name, what, arg);
}

void hb_opt_defaults(const struct hb_opt *opts, void *cfg)
{
	for (const struct hb_opt *o = opts; o->type != HB_OPT_END; o++) {
		void *f = field(o, cfg);

		switch (o->type) {
		case HB_OPT_FLAG:
			set_bool(f, false);
			break;
		case HB_OPT_FLAG_OFF:
			set_bool(f, true);
			break;
		case HB_OPT_UINT:
			store_uint(f, o->size, o->def.u);
			break;
		case HB_OPT_DOUBLE:
			memcpy(f, &o->def.d, sizeof(double));
			break;
		case HB_OPT_STRING:
			memcpy(f, &o->def.s, sizeof(const char *));
			break;
		case HB_OPT_CHOICE:
			store_uint(f, o->size, (uint64_t)o->def.i);
			break;
		default:
			break; /* CUSTOM: the program sets what its parser fills */
		}
		if (o->has_given)
			set_bool((char *)cfg + o->given_off, false);
	}
}

/* One value into its field; 1 after --help, -EINVAL after a message. */
static int take(const struct hb_opt_prog *p, const struct hb_opt *o, const char *arg, void *cfg)
{
	void *f = field(o, cfg);
	uint64_t u;
	double d;

	switch (o->type) {
	case HB_OPT_HELP:
		hb_opt_help(p, stdout);
		return 1;
	case HB_OPT_FLAG:
	case HB_OPT_FLAG_OFF:
		set_bool(f, o->type == HB_OPT_FLAG);
		break;
	case HB_OPT_UINT:
		if (hb_opt_parse_u64(arg, o->umin, o->umax, &u) || (o->uint_ok && !o->uint_ok(u)))
			return bad_value(p, o, arg);
		store_uint(f, o->size, u);
		break;
	case HB_OPT_DOUBLE:
		if (hb_opt_parse_double(arg, o->dmin, o->dmax, o->unit, &d))
			return bad_value(p, o, arg);
		memcpy(f, &d, sizeof(d));
		break;
	case HB_OPT_STRING:
		memcpy(f, &arg, sizeof(arg));
		break;
	case HB_OPT_CHOICE: {
		const struct hb_opt_choice *c = o->choices;

		while (c->word && strcmp(c->word, arg))
			c++;
		if (!c->word)
			return bad_value(p, o, arg);
		store_uint(f, o->size, (uint64_t)c->value);
		break;
	}
	case HB_OPT_CUSTOM:
		if (o->parse(arg, cfg))
			return bad_value(p, o, arg);
		break;
	default:
		break;
	}
	if (o->has_given)
		set_bool((char *)cfg + o->given_off, true);
	return 0;
}

static const struct hb_opt *by_val(const struct hb_opt *opts, int val)
{
	if (val >= LONG_VAL)
		return &opts[val - LONG_VAL];
	for (const struct hb_opt *o = opts; o->type != HB_OPT_END; o++)
		if (o->type != HB_OPT_HEADING && o->short_name == val)
			return o;
	return NULL;
}

static const struct hb_opt *by_name(const struct hb_opt *opts, const char *name)
{
	for (const struct hb_opt *o = opts; o->type != HB_OPT_END; o++)
		if (o->name && !strcmp(o->name, name))
			return o;
	return NULL;
}

/* getopt_long refused argv[optind - 1] (or the short option optopt): say why. */
static int bad_option(const struct hb_opt_prog *p, int c, char **argv)
{
	const struct hb_opt *o = optopt ? by_val(p->opts, optopt) : NULL;
	const char *word = argv[optind - 1];
	char meta[256], shortopt[3] = { '-', (char)optopt, 0 };
	size_t len, matches = 0;

	if (c == ':' && o)
		return hb_opt_error(p, "--%s must be followed by %s", o->name,
				    metavar(o, meta, sizeof(meta)));
	if (o) /* a long flag given "=value" */
		return hb_opt_error(p, "--%s takes no value", o->name);
	if (optopt) /* a short option that is not in the table */
		return hb_opt_error(p, "unknown option '%s'", shortopt);
	if (!strncmp(word, "--", 2)) {
		len = strcspn(word + 2, "=");
		for (o = p->opts; o->type != HB_OPT_END; o++)
			matches += o->name && !strncmp(o->name, word + 2, len);
	}
	return hb_opt_error(p, "%s option '%s'", matches > 1 ? "ambiguous" : "unknown", word);
}

int hb_opt_parse(const struct hb_opt_prog *p, int argc, char **argv, void *cfg, int *first_arg)
{
	struct option lo[HB_OPT_MAX + 1];
	char so[3 * HB_OPT_MAX + 3], err[256];
	bool seen[HB_OPT_MAX] = { false };
	int nl = 0, ns = 0, c, nargs, rc;

	if (hb_opt_check(p->opts, err, sizeof(err))) {
		fprintf(stderr, "%s: bug in the option table: %s\n", p->name, err);
		return -EINVAL;
	}
	if (p->stop_at_arg)
		so[ns++] = '+';
	so[ns++] = ':'; /* a missing argument is ':', not '?' */
	for (int i = 0; p->opts[i].type != HB_OPT_END; i++) {
		const struct hb_opt *o = &p->opts[i];

		if (o->type == HB_OPT_HEADING)
			continue;
		lo[nl++] = (struct option){ o->name, takes_arg(o) ? required_argument : no_argument,
					    NULL, LONG_VAL + i };
		if (o->short_name) {
			so[ns++] = o->short_name;
			if (takes_arg(o))
				so[ns++] = ':';
		}
	}
	lo[nl] = (struct option){ 0 };
	so[ns] = 0;
	optind = 0; /* 0, not 1: also resets getopt's state from an earlier, different table */
	opterr = 0;
	while ((c = getopt_long(argc, argv, so, lo, NULL)) != -1) {
		const struct hb_opt *o;

		if (c == '?' || c == ':')
			return bad_option(p, c, argv);
		o = by_val(p->opts, c);
		seen[o - p->opts] = true;
		rc = take(p, o, optarg, cfg);
		if (rc)
			return rc;
	}
	nargs = argc - optind;
	if (nargs > p->max_args)
		return hb_opt_error(p, "unexpected argument '%s'", argv[optind + p->max_args]);
	if (nargs < p->min_args)
		return hb_opt_error(p, "expected %s", p->args);
	for (int i = 0; p->opts[i].type != HB_OPT_END; i++) {
		const struct hb_opt *o = &p->opts[i];
		char meta[256];

		if (o->required && !seen[i])
			return hb_opt_error(p, "--%s %s is required", o->name,
					    metavar(o, meta, sizeof(meta)));
		if (o->excludes && seen[i] && seen[by_name(p->opts, o->excludes) - p->opts])
			return hb_opt_error(p, "--%s and --%s exclude each other", o->name,
					    o->excludes);
	}
	if (first_arg)
		*first_arg = optind;
	return 0;
}

/* Writes text from column col onward, wrapped at HELP_WIDTH; the cursor is at column *at. */
static void wrap(FILE *f, const char *text, int col, int *at)
{
	const char *w = text;

	while (*w) {
		size_t len = strcspn(w, " \n");

		if (*at > col && *at + 1 + (int)len > HELP_WIDTH) {
			fprintf(f, "\n%*s", col, "");
			*at = col;
		}
		if (*at > col) {
			fputc(' ', f);
			(*at)++;
		}
		fprintf(f, "%.*s", (int)len, w);
		*at += (int)len;
		w += len;
		if (*w == '\n') { /* a line break the author asked for */
			fprintf(f, "\n%*s", col, "");
			*at = col;
		}
		while (*w == ' ' || *w == '\n')
			w++;
	}
}

/* The default as --help shows it, or "" for none. */
static void default_text(const struct hb_opt *o, char *buf, size_t cap)
{
	const char *word;

	buf[0] = 0;
	if (o->def_text) {
		if (*o->def_text)
			snprintf(buf, cap, "default %s", o->def_text);
		return;
	}
	switch (o->type) {
	case HB_OPT_UINT:
		snprintf(buf, cap, "default %llu", (unsigned long long)o->def.u);
		break;
	case HB_OPT_DOUBLE:
		snprintf(buf, cap, "default %.15g", o->def.d);
		break;
	case HB_OPT_STRING:
		if (o->def.s)
			snprintf(buf, cap, "default %s", o->def.s);
		break;
	case HB_OPT_CHOICE:
		word = hb_opt_choice_word(o->choices, o->def.i);
		if (word)
			snprintf(buf, cap, "default %s", word);
		break;
	default:
		break;
	}
}

/* "  -p, --port N", or "      --port N" beside short names, or "  --port N" in a table
 * where only --help has one. */
static int left_column(const struct hb_opt *o, bool shorts, char *buf, size_t cap)
{
	char meta[256];
	const char *m = metavar(o, meta, sizeof(meta));
	char sh[8] = "";

	if (o->short_name)
		snprintf(sh, sizeof(sh), "-%c, ", o->short_name);
	else if (shorts)
		snprintf(sh, sizeof(sh), "    ");
	return snprintf(buf, cap, "  %s--%s%s%s", sh, o->name, m ? " " : "", m ? m : "");
}

void hb_opt_print_list(const struct hb_opt *opts, FILE *f)
{
	const struct hb_opt *o;
	bool shorts = false;
	int col = 0;
	char left[300];

	for (o = opts; o->type != HB_OPT_END; o++)
		shorts |= o->type != HB_OPT_HEADING && o->type != HB_OPT_HELP && o->short_name;
	/* the help texts start in one column, after the widest left side that is not too wide */
	for (o = opts; o->type != HB_OPT_END; o++) {
		int w = o->type == HB_OPT_HEADING ? 0 : left_column(o, shorts, left, sizeof(left));

		if (w <= HELP_COL_MAX - 2 && w + 2 > col)
			col = w + 2;
	}
	for (o = opts; o->type != HB_OPT_END; o++) {
		char def[512];
		int at;

		if (o->type == HB_OPT_HEADING) {
			fprintf(f, "\n%s\n", o->help);
			continue;
		}
		at = left_column(o, shorts, left, sizeof(left));
		fputs(left, f);
		if (at > col - 2) { /* too wide: the help text starts on the next line */
			fputc('\n', f);
			at = 0;
		}
		fprintf(f, "%*s", col - at, "");
		at = col;
		wrap(f, o->help, col, &at);
		default_text(o, def, sizeof(def));
		if (o->required || def[0]) {
			char paren[sizeof(def) + 2];
			int len = snprintf(paren, sizeof(paren), "(%s)",
					   o->required ? "required" : def);

			/* kept on one line when it fits on one */
			if (at + 1 + len > HELP_WIDTH && len <= HELP_WIDTH - col) {
				fprintf(f, "\n%*s", col, "");
				at = col;
			}
			wrap(f, paren, col, &at);
		}
		fputc('\n', f);
	}
}

void hb_opt_help(const struct hb_opt_prog *p, FILE *f)
{
	fprintf(f, "Usage: %s %s\n", p->name, p->synopsis);
	if (p->about)
		fprintf(f, "\n%s", p->about);
	fprintf(f, "\nOptions:\n");
	hb_opt_print_list(p->opts, f);
	if (p->epilog)
		fprintf(f, "\n%s", p->epilog);
}

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int check_one(const struct hb_opt *o, char *err, size_t cap)
{
	uint64_t top = size_max(o->size);
	/* a default --help prints must be a value the option takes */
	bool shows_default = !o->def_text && !o->required;

	if (o->type == HB_OPT_HEADING)
		return o->help ? 0 : fail(err, cap, "a heading without text");
	if (!o->name || !o->help)
		return fail(err, cap, "an entry without a name or help text");
	if (takes_arg(o) && o->type != HB_OPT_CHOICE && !o->metavar)
		return fail(err, cap, "--%s takes a value but names none (metavar)", o->name);
	switch (o->type) {
	case HB_OPT_FLAG:
	case HB_OPT_FLAG_OFF:
		if (o->size != sizeof(bool))
			return fail(err, cap, "--%s: a flag's field must be a bool", o->name);
		break;
	case HB_OPT_UINT:
		if (!top || o->umin > o->umax || o->umax > top)
			return fail(err, cap, "--%s: range %llu..%llu does not fit its field",
				    o->name, (unsigned long long)o->umin,
				    (unsigned long long)o->umax);
		if (shows_default && (o->def.u < o->umin || o->def.u > o->umax ||
				      (o->uint_ok && !o->uint_ok(o->def.u))))
			return fail(err, cap, "--%s: default %llu is not a valid value", o->name,
				    (unsigned long long)o->def.u);
		if (o->uint_ok && !o->expect)
			return fail(err, cap, "--%s: uint_ok needs expect", o->name);
		break;
	case HB_OPT_DOUBLE:
		if (o->size != sizeof(double) || !(o->dmin <= o->dmax))
			return fail(err, cap, "--%s: needs a double field and min <= max", o->name);
		if (shows_default && (o->def.d < o->dmin || o->def.d > o->dmax))
			return fail(err, cap, "--%s: default %g is out of range", o->name,
				    o->def.d);
		break;
	case HB_OPT_STRING:
		if (o->size != sizeof(const char *))
			return fail(err, cap, "--%s: a string's field must be a pointer", o->name);
		break;
	case HB_OPT_CHOICE:
		if (!top || !o->choices || !o->choices[0].word)
			return fail(err, cap, "--%s: no choices, or a field that is not an integer",
				    o->name);
		break;
	case HB_OPT_CUSTOM:
		if (!o->parse || !o->expect)
			return fail(err, cap, "--%s: a custom entry needs parse and expect",
				    o->name);
		break;
	default:
		break;
	}
	return 0;
}

int hb_opt_check(const struct hb_opt *opts, char *err, size_t cap)
{
	int n = 0, helps = 0;

	for (const struct hb_opt *o = opts; o->type != HB_OPT_END; o++, n++) {
		if (n == HB_OPT_MAX)
			return fail(err, cap, "more than %d entries", HB_OPT_MAX);
		if (check_one(o, err, cap))
			return -EINVAL;
		if (o->type == HB_OPT_HEADING)
			continue;
		if (o->excludes && (!by_name(opts, o->excludes) || !strcmp(o->excludes, o->name)))
			return fail(err, cap, "--%s excludes --%s, which is not in the table",
				    o->name, o->excludes);
		helps += o->type == HB_OPT_HELP;
		if (o->short_name && !strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					     "0123456789",
					     o->short_name))
			return fail(err, cap, "--%s: short name must be a letter or digit",
				    o->name);
		for (const struct hb_opt *q = opts; q != o; q++) {
			if (q->type == HB_OPT_HEADING)
				continue;
			if (!strcmp(q->name, o->name) ||
			    (o->short_name && q->short_name == o->short_name))
				return fail(err, cap, "--%s is in the table twice", o->name);
		}
	}
	if (helps > 1)
		return fail(err, cap, "more than one help entry");
	return 0;
}
