// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The option-table module (user/common/opt.h) on a table of every type: defaults, values,
 * ranges, the wording of each kind of complaint, --help; then the real hbd, hbload and hbctl:
 * their --help lists every option they have always had, with its default, and a bad command
 * line gets the one message shape and each program's usage exit code. No root needed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "opt.h"

extern char **environ;

/* ------------------------------------------------------------------------------------------ */
/* A table of every type                                                                      */

struct cfg {
	bool flag, on, alpha, beta;
	uint8_t small;
	uint16_t port;
	uint32_t count;
	bool count_given;
	uint64_t big;
	unsigned pow;
	double ratio, rate;
	const char *name, *addr, *need;
	int level;
	bool refuse;
};

static bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static int parse_addr(const char *arg, void *cfg)
{
	if (!strchr(arg, ':') || arg[0] == ':')
		return -EINVAL;
	((struct cfg *)cfg)->addr = arg;
	return 0;
}

/* clang-format off */
static const struct hb_opt_choice levels[] = {
	{ "error", 0 }, { "warn", 1 }, { "info", 2 }, { NULL, 0 },
};

static const struct hb_opt_choice full[] = {
	{ "serve", false }, { "refuse", true }, { NULL, 0 },
};
/* clang-format on */

#define AT(f) HB_OPT_AT(struct cfg, f)

/* clang-format off */
static const struct hb_opt table[] = {
	{ "flag", 'f', NULL, "a flag", HB_OPT_FLAG, AT(flag) },
	{ "no-on", 0, NULL, "clears on", HB_OPT_FLAG_OFF, AT(on) },
	{ "small", 0, "N", "one byte", HB_OPT_UINT, AT(small), .def.u = 7, .umin = 1, .umax = 200 },
	{ "port", 'p', "N", "a port", HB_OPT_UINT, AT(port), .def.u = 7600, .umin = 0,
	  .umax = 65535 },
	{ "count", 'c', "N", "a count", HB_OPT_UINT, AT(count), .umin = 0, .umax = UINT32_MAX,
	  HB_OPT_GIVEN(struct cfg, count_given) },
	{ "big", 0, "ID", "eight bytes", HB_OPT_UINT, AT(big), .def.u = 1, .umin = 1,
	  .umax = UINT64_MAX },
	{ "pow", 0, "N", "a power of 2", HB_OPT_UINT, AT(pow), .def.u = 64, .umin = 16,
	  .umax = 1024, .uint_ok = pow2, .expect = "a power of 2 in 16..1024" },
	{ "ratio", 'r', "X", "a ratio", HB_OPT_DOUBLE, AT(ratio), .def.d = 1.5, .dmin = 0.5,
	  .dmax = 2 },
	{ "rate", 0, "N", "a rate", HB_OPT_DOUBLE, AT(rate), .dmin = 0, .dmax = 1e9, .unit = "/s" },
	{ "name", 'n', "TEXT", "a string", HB_OPT_STRING, AT(name), .def.s = "dflt" },
	{ "level", 0, NULL, "a choice", HB_OPT_CHOICE, AT(level), .choices = levels, .def.i = 2 },
	{ "when-full", 0, "WHAT", "a choice into a bool", HB_OPT_CHOICE, AT(refuse),
	  .choices = full, .def.i = false },
	{ "addr", 0, "HOST:PORT", "custom", HB_OPT_CUSTOM, .parse = parse_addr,
	  .expect = "HOST:PORT", .def_text = "none" },
	{ .type = HB_OPT_HEADING, .help = "More:" },
	{ "alpha", 'a', NULL, "one of two", HB_OPT_FLAG, AT(alpha), .excludes = "beta" },
	{ "beta", 'b', NULL, "the other", HB_OPT_FLAG, AT(beta) },
	{ "help", 'h', NULL, "this text", .type = HB_OPT_HELP },
	{ 0 },
};
/* clang-format on */

static const struct hb_opt_prog prog = {
	.name = "prog",
	.synopsis = "[options] [ARG]",
	.about = "Tests the option module.\n",
	.epilog = "The end.\n",
	.opts = table,
	.max_args = 1,
	.args = "ARG",
};

/* clang-format off */
static const struct hb_opt req_table[] = {
	{ "need", 0, "FILE", "must be given", HB_OPT_STRING, AT(need), .required = true },
	{ 0 },
};
/* clang-format on */

static const struct hb_opt_prog req_prog = {
	.name = "req",
	.synopsis = "--need FILE",
	.opts = req_table,
	.min_args = 1,
	.max_args = 2,
	.args = "A [B]",
};

/* ------------------------------------------------------------------------------------------ */
/* Running the parser with stdout and stderr captured                                         */

static char out_buf[16384], err_buf[4096];

static void slurp(FILE *f, char *buf, size_t cap)
{
	size_t n;

	rewind(f);
	n = fread(buf, 1, cap - 1, f);
	buf[n] = 0;
	fclose(f);
}

/* Parses the NULL-terminated argument list (argv[0] "prog" is added) into c, defaults first. */
static int parse_v(const struct hb_opt_prog *p, struct cfg *c, int *first, va_list ap)
{
	char *argv[32] = { "prog" };
	int argc = 1, rc, so = dup(1), se = dup(2);
	FILE *o = tmpfile(), *e = tmpfile();
	const char *a;

	while ((a = va_arg(ap, const char *)) && argc < 31)
		argv[argc++] = (char *)a;
	argv[argc] = NULL;
	memset(c, 0, sizeof(*c));
	if (!hb_opt_check(p->opts, out_buf, sizeof(out_buf))) /* a broken table: see below */
		hb_opt_defaults(p->opts, c);
	assert_non_null(o);
	assert_non_null(e);
	fflush(stdout);
	fflush(stderr);
	dup2(fileno(o), 1);
	dup2(fileno(e), 2);
	rc = hb_opt_parse(p, argc, argv, c, first);
	fflush(stdout);
	fflush(stderr);
	dup2(so, 1);
	dup2(se, 2);
	close(so);
	close(se);
	slurp(o, out_buf, sizeof(out_buf));
	slurp(e, err_buf, sizeof(err_buf));
	return rc;
}

static int parse(struct cfg *c, ...)
{
	va_list ap;
	int rc;

	va_start(ap, c);
	rc = parse_v(&prog, c, NULL, ap);
	va_end(ap);
	return rc;
}

static int parse_p(const struct hb_opt_prog *p, struct cfg *c, int *first, ...)
{
	va_list ap;
	int rc;

	va_start(ap, first);
	rc = parse_v(p, c, first, ap);
	va_end(ap);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The module                                                                                 */

static void defaults_come_from_the_table(void **state)
{
	struct cfg c;

	(void)state;
	memset(&c, 0xa5, sizeof(c));
	hb_opt_defaults(table, &c);
	assert_false(c.flag);
	assert_true(c.on);
	assert_int_equal(c.small, 7);
	assert_int_equal(c.port, 7600);
	assert_int_equal(c.count, 0);
	assert_false(c.count_given);
	assert_int_equal(c.big, 1);
	assert_int_equal(c.pow, 64);
	assert_true(c.ratio == 1.5);
	assert_true(c.rate == 0);
	assert_string_equal(c.name, "dflt");
	assert_int_equal(c.level, 2);
	assert_false(c.refuse);
	/* a custom entry's field is the program's business */
	assert_true(c.addr == (const char *)(uintptr_t)0xa5a5a5a5a5a5a5a5ull);
	assert_int_equal(parse(&c, NULL), 0);
	assert_string_equal(err_buf, "");
}

static void every_type_takes_its_value(void **state)
{
	struct cfg c;
	int first = -1;

	(void)state;
	assert_int_equal(parse(&c, "--flag", "--no-on", "--small", "200", "-p", "0", "--count=7",
			       "--big", "18446744073709551615", "--pow", "1024", "-r", "0.5",
			       "--rate", "2000/s", "-n", "x y", "--level", "error", "--when-full",
			       "refuse", "--addr", "h:1", NULL),
			 0);
	assert_true(c.flag);
	assert_false(c.on);
	assert_int_equal(c.small, 200);
	assert_int_equal(c.port, 0);
	assert_int_equal(c.count, 7);
	assert_true(c.count_given);
	assert_true(c.big == UINT64_MAX);
	assert_int_equal(c.pow, 1024);
	assert_true(c.ratio == 0.5);
	assert_true(c.rate == 2000);
	assert_string_equal(c.name, "x y");
	assert_int_equal(c.level, 0);
	assert_true(c.refuse);
	assert_string_equal(c.addr, "h:1");
	/* short forms: attached value, clustered flags; a unique prefix of a long name */
	assert_int_equal(parse(&c, "-p7601", "-fa", "--rati", "2", "--rate", "1e3", NULL), 0);
	assert_int_equal(c.port, 7601);
	assert_true(c.flag && c.alpha);
	assert_true(c.ratio == 2 && c.rate == 1000);
	/* options and a positional in any order; "--" ends the options */
	assert_int_equal(parse_p(&prog, &c, &first, "arg", "-p", "1", NULL), 0);
	assert_int_equal(c.port, 1);
	assert_int_equal(first, 3); /* getopt moved "arg" after the options */
	assert_int_equal(parse_p(&prog, &c, &first, "--", "--port", NULL), 0);
	assert_int_equal(c.port, 7600);
	assert_int_equal(first, 2);
	/* the last of a repeated option wins */
	assert_int_equal(parse(&c, "-p", "1", "-p", "2", NULL), 0);
	assert_int_equal(c.port, 2);
}

/* Each value either lands or is refused with the message naming the range. */
static void ranges_and_syntax(void **state)
{
	static const struct {
		const char *opt, *val;
		bool ok;
	} cases[] = {
		{ "--small", "1", true },
		{ "--small", "0", false },
		{ "--small", "201", false },
		{ "--small", "256", false }, /* would wrap in the field */
		{ "--port", "65535", true },
		{ "--port", "65536", false },
		{ "--port", "-1", false },
		{ "--port", "+5", false },
		{ "--port", " 5", false },
		{ "--port", "5x", false },
		{ "--port", "1.5", false },
		{ "--port", "", false },
		{ "--port", "0x10", false },
		{ "--count", "4294967295", true },
		{ "--count", "4294967296", false },
		{ "--big", "18446744073709551616", false }, /* beyond 64 bits */
		{ "--big", "0", false },
		{ "--pow", "16", true },
		{ "--pow", "100", false },
		{ "--pow", "2048", false },
		{ "--ratio", "2", true },
		{ "--ratio", "2.0001", false },
		{ "--ratio", "0.4", false },
		{ "--ratio", "1e0", true },
		{ "--ratio", "nan", false },
		{ "--ratio", "inf", false },
		{ "--ratio", "1.5s", false },
		{ "--ratio", "", false },
		{ "--ratio", " 1", false },
		{ "--rate", "5/s", true },
		{ "--rate", "5/m", false },
		{ "--rate", "/s", false },
		{ "--rate", "1e10", false },
		{ "--level", "warn", true },
		{ "--level", "WARN", false },
		{ "--level", "", false },
		{ "--addr", "a:b", true },
		{ "--addr", "nocolon", false },
	};
	struct cfg c;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = parse(&c, cases[i].opt, cases[i].val, NULL);

		if (rc != (cases[i].ok ? 0 : -EINVAL))
			fail_msg("%s '%s': rc %d, expected %s", cases[i].opt, cases[i].val, rc,
				 cases[i].ok ? "success" : "refusal");
		if (!cases[i].ok) {
			char head[64];

			snprintf(head, sizeof(head), "prog: %s must be ", cases[i].opt);
			if (strncmp(err_buf, head, strlen(head)))
				fail_msg("%s '%s': message '%s'", cases[i].opt, cases[i].val,
					 err_buf);
		}
	}
}

/* Every kind of complaint, word for word: "PROG: what (try 'PROG --help')". */
static void one_message_shape(void **state)
{
	static const struct {
		const char *a, *b, *c;
		const char *msg;
	} cases[] = {
		{ "--port", "70000", NULL, "--port must be an integer in 0..65535, not '70000'" },
		{ "-p", "x", NULL, "--port must be an integer in 0..65535, not 'x'" },
		{ "--ratio=3", NULL, NULL, "--ratio must be a number in 0.5..2, not '3'" },
		{ "--rate", "5/m", NULL,
		  "--rate must be a number in 0..1000000000 (optionally with /s), not '5/m'" },
		{ "--pow", "100", NULL, "--pow must be a power of 2 in 16..1024, not '100'" },
		{ "--level", "loud", NULL, "--level must be error, warn or info, not 'loud'" },
		{ "--when-full", "drop", NULL, "--when-full must be serve or refuse, not 'drop'" },
		{ "--addr", "x", NULL, "--addr must be HOST:PORT, not 'x'" },
		{ "--frob", NULL, NULL, "unknown option '--frob'" },
		{ "--frob=1", NULL, NULL, "unknown option '--frob=1'" },
		{ "-z", NULL, NULL, "unknown option '-z'" },
		{ "--ra", "1", NULL, "ambiguous option '--ra'" },
		{ "--port", NULL, NULL, "--port must be followed by N" },
		{ "-p", NULL, NULL, "--port must be followed by N" },
		{ "--level", NULL, NULL, "--level must be followed by error|warn|info" },
		{ "--flag=yes", NULL, NULL, "--flag takes no value" },
		{ "one", "two", NULL, "unexpected argument 'two'" },
		{ "-a", "-b", NULL, "--alpha and --beta exclude each other" },
	};
	struct cfg c;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char want[512];

		assert_int_equal(parse(&c, cases[i].a, cases[i].b, cases[i].c, NULL), -EINVAL);
		snprintf(want, sizeof(want), "prog: %s (try 'prog --help')\n", cases[i].msg);
		assert_string_equal(err_buf, want);
		assert_string_equal(out_buf, "");
	}
	/* required options and positional counts */
	assert_int_equal(parse_p(&req_prog, &c, NULL, "a", NULL), -EINVAL);
	assert_string_equal(err_buf, "req: --need FILE is required (try 'req --help')\n");
	assert_int_equal(parse_p(&req_prog, &c, NULL, "--need", "f", NULL), -EINVAL);
	assert_string_equal(err_buf, "req: expected A [B] (try 'req --help')\n");
	assert_int_equal(parse_p(&req_prog, &c, NULL, "--need", "f", "a", "b", "c", NULL), -EINVAL);
	assert_string_equal(err_buf, "req: unexpected argument 'c' (try 'req --help')\n");
	assert_int_equal(parse_p(&req_prog, &c, NULL, "--need", "f", "a", "b", NULL), 0);
	assert_string_equal(c.need, "f");
	/* the same shape for a program's own checks */
	{
		int so = dup(2);
		FILE *e = tmpfile();

		fflush(stderr);
		dup2(fileno(e), 2);
		assert_int_equal(hb_opt_error(&prog, "--a %d exceeds --b %d", 2, 1), -EINVAL);
		fflush(stderr);
		dup2(so, 2);
		close(so);
		slurp(e, err_buf, sizeof(err_buf));
		assert_string_equal(err_buf, "prog: --a 2 exceeds --b 1 (try 'prog --help')\n");
	}
}

/* A command's options stop at the command when stop_at_arg is set; parsing again with another
 * table starts afresh (getopt's state is reset). */
static void options_before_a_command(void **state)
{
	/* clang-format off */
	static const struct hb_opt top_table[] = {
		{ "flag", 'f', NULL, "a flag", HB_OPT_FLAG, AT(flag) },
		{ 0 },
	};
	/* clang-format on */
	static const struct hb_opt_prog top = {
		.name = "top",
		.synopsis = "CMD",
		.opts = top_table,
		.max_args = HB_OPT_ARGS_ANY,
		.stop_at_arg = true,
	};
	struct cfg c;
	int first;

	(void)state;
	assert_int_equal(parse_p(&top, &c, &first, "-f", "cmd", "-p", "9", "-f", NULL), 0);
	assert_true(c.flag);
	assert_int_equal(first, 2);
	/* -p is not top's: it stays for the command */
	assert_int_equal(parse_p(&top, &c, &first, "cmd", "-p", "9", NULL), 0);
	assert_false(c.flag);
	assert_int_equal(first, 1);
	assert_int_equal(parse(&c, "-p", "9", NULL), 0);
	assert_int_equal(c.port, 9);
}

static void help_lists_every_entry_with_its_default(void **state)
{
	static const char *const want[] = {
		"  -f, --flag            a flag\n",
		"      --no-on           clears on\n",
		"      --small N         one byte (default 7)\n",
		"  -p, --port N          a port (default 7600)\n",
		"  -c, --count N         a count (default 0)\n",
		"      --big ID          eight bytes (default 1)\n",
		"      --pow N           a power of 2 (default 64)\n",
		"  -r, --ratio X         a ratio (default 1.5)\n",
		"      --rate N          a rate (default 0)\n",
		"  -n, --name TEXT       a string (default dflt)\n",
		/* too wide for the column: the text goes under it */
		"      --level error|warn|info\n                        a choice (default info)\n",
		"      --when-full WHAT  a choice into a bool (default serve)\n",
		"      --addr HOST:PORT  custom (default none)\n",
		"\nMore:\n",
		"  -a, --alpha           one of two\n",
		"  -b, --beta            the other\n",
		"  -h, --help            this text\n",
	};

	static const char head[] = "Usage: prog [options] [ARG]\n\nTests the option module.\n\n"
				   "Options:\n";
	char *buf = NULL, *p;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct cfg c;

	(void)state;
	hb_opt_help(&prog, f);
	fclose(f);
	assert_true(!strncmp(buf, head, strlen(head)));
	p = buf + strlen(head);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		if (strncmp(p, want[i], strlen(want[i])))
			fail_msg("help entry %zu: expected\n%s\ngot\n%.*s", i, want[i],
				 (int)strlen(want[i]), p);
		p += strlen(want[i]);
	}
	assert_string_equal(p, "\nThe end.\n");
	/* --help prints the same to stdout and parsing stops there */
	assert_int_equal(parse(&c, "--help", "--port", "bad", NULL), 1);
	assert_string_equal(out_buf, buf);
	assert_string_equal(err_buf, "");
	assert_int_equal(parse(&c, "-h", NULL), 1);
	assert_string_equal(out_buf, buf);
	free(buf);
	/* required options say so; a def_text of "" hides the default */
	{
		/* clang-format off */
		static const struct hb_opt t[] = {
			{ "need", 0, "FILE", "must be given", HB_OPT_STRING, AT(need),
			  .required = true },
			{ "off", 0, "S", "negative means off", HB_OPT_DOUBLE, AT(ratio),
			  .def.d = -1, .dmin = 0, .dmax = 10, .def_text = "" },
			{ 0 },
		};
		/* clang-format on */

		buf = NULL;
		f = open_memstream(&buf, &len);
		hb_opt_print_list(t, f);
		fclose(f);
		assert_string_equal(buf, "  --need FILE  must be given (required)\n"
					 "  --off S      negative means off\n");
		free(buf);
	}
}

/* Long help texts wrap at 80 columns under their column; a default is not split. */
static void help_wraps_at_80_columns(void **state)
{
	/* clang-format off */
	static const struct hb_opt t[] = {
		{ "long", 0, "N", "a help text long enough to need two lines when it is wrapped at "
		  "eighty columns, which is what every terminal shows you", HB_OPT_UINT, AT(port),
		  .def.u = 65535, .umin = 0, .umax = 65535 },
		{ "a-very-long-option-name", 0, "WITH-A-METAVAR", "starts on the next line",
		  HB_OPT_STRING, AT(name) },
		{ 0 },
	};
	/* clang-format on */
	char *buf = NULL, *line, *save;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int n = 0;

	(void)state;
	hb_opt_print_list(t, f);
	fclose(f);
	/* "(default" would still fit on the second line: the default moves to a third whole */
	assert_non_null(strstr(buf, "terminal shows you\n            (default 65535)\n"));
	assert_non_null(strstr(buf, "  --a-very-long-option-name WITH-A-METAVAR\n"
				    "            starts on the next line\n"));
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++)
		assert_true(strlen(line) <= 80);
	assert_int_equal(n, 5);
	free(buf);
}

/* Mistakes in a table are found before it parses anything. */
static void check_finds_table_mistakes(void **state)
{
	static const struct hb_opt_choice none[] = { { NULL, 0 } };
	static const struct {
		struct hb_opt bad;
		const char *why;
	} cases[] = {
		{ { "x", 0, NULL, "flag in a u32", HB_OPT_FLAG, AT(count) }, "must be a bool" },
		{ { "x", 0, "N", "u8 to 256", HB_OPT_UINT, AT(small), .def.u = 1, .umin = 0,
		    .umax = 256 },
		  "does not fit" },
		{ { "x", 0, "N", "min > max", HB_OPT_UINT, AT(port), .def.u = 1, .umin = 2,
		    .umax = 1 },
		  "does not fit" },
		{ { "x", 0, "N", "default out", HB_OPT_UINT, AT(port), .def.u = 9, .umin = 1,
		    .umax = 5 },
		  "not a valid value" },
		{ { "x", 0, "N", "default not ok", HB_OPT_UINT, AT(pow), .def.u = 17, .umin = 16,
		    .umax = 1024, .uint_ok = pow2, .expect = "a power of 2" },
		  "not a valid value" },
		{ { "x", 0, "N", "uint_ok alone", HB_OPT_UINT, AT(pow), .def.u = 16, .umin = 16,
		    .umax = 1024, .uint_ok = pow2 },
		  "needs expect" },
		{ { "x", 0, "X", "double in a u32", HB_OPT_DOUBLE, AT(count) }, "double field" },
		{ { "x", 0, "X", "default out", HB_OPT_DOUBLE, AT(ratio), .def.d = 5, .dmin = 0,
		    .dmax = 1 },
		  "out of range" },
		{ { "x", 0, "S", "string in a u16", HB_OPT_STRING, AT(port) }, "pointer" },
		{ { "x", 0, NULL, "no choices", HB_OPT_CHOICE, AT(level), .choices = none },
		  "no choices" },
		{ { "x", 0, "A", "custom without parse", HB_OPT_CUSTOM, .expect = "A" }, "custom" },
		{ { "x", 0, NULL, "value without metavar", HB_OPT_UINT, AT(port), .umax = 1 },
		  "metavar" },
		{ { "x", '?', NULL, "bad short name", HB_OPT_FLAG, AT(flag) }, "letter or digit" },
		{ { "flag", 0, NULL, "twice", HB_OPT_FLAG, AT(flag) }, "twice" },
		{ { "x", 'f', NULL, "short twice", HB_OPT_FLAG, AT(beta) }, "twice" },
		{ { "x", 0, NULL, "excludes a stranger", HB_OPT_FLAG, AT(beta),
		    .excludes = "nobody" },
		  "not in the table" },
	};
	char err[256];
	struct cfg c;

	(void)state;
	assert_int_equal(hb_opt_check(table, err, sizeof(err)), 0);
	assert_int_equal(hb_opt_check(req_table, err, sizeof(err)), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct hb_opt t[3] = { { "flag", 'f', NULL, "a flag", HB_OPT_FLAG, AT(flag) },
				       cases[i].bad,
				       { 0 } };
		const struct hb_opt_prog p = { .name = "broken", .opts = t };

		err[0] = 0;
		if (hb_opt_check(t, err, sizeof(err)) != -EINVAL || !strstr(err, cases[i].why))
			fail_msg("case '%s': got '%s', expected '%s'", cases[i].bad.help, err,
				 cases[i].why);
		/* and the parser refuses to run on it */
		assert_int_equal(parse_p(&p, &c, NULL, NULL), -EINVAL);
		assert_non_null(strstr(err_buf, "broken: bug in the option table: "));
	}
}

/* ------------------------------------------------------------------------------------------ */
/* The programs                                                                               */

static char bin_dir[PATH_MAX];

/* The binaries next to this test's build directory (tests/..), else $BUILD. */
static int find_binaries(void **state)
{
	char exe[PATH_MAX - 16];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *b = getenv("BUILD");
	char *slash;

	(void)state;
	if (n > 0) {
		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			snprintf(bin_dir, sizeof(bin_dir), "%s/..", exe);
		}
	}
	char hbctl_path[PATH_MAX + 8];

	snprintf(hbctl_path, sizeof(hbctl_path), "%s/hbctl", bin_dir);
	if (access(hbctl_path, X_OK))
		snprintf(bin_dir, sizeof(bin_dir), "%s", b && *b ? b : "build");
	return 0;
}

/* Runs a program of the build with the NULL-terminated arguments; returns its exit status. */
static int run(const char *prog_name, ...)
{
	char path[PATH_MAX + 16], *argv[32];
	int argc = 0, st = -1;
	posix_spawn_file_actions_t fa;
	FILE *o = tmpfile(), *e = tmpfile();
	va_list ap;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/%s", bin_dir, prog_name);
	argv[argc++] = path;
	va_start(ap, prog_name);
	while (argc < 31 && (argv[argc] = va_arg(ap, char *)))
		argc++;
	va_end(ap);
	argv[argc] = NULL;
	assert_non_null(o);
	assert_non_null(e);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fileno(o), 1);
	posix_spawn_file_actions_adddup2(&fa, fileno(e), 2);
	if (posix_spawn(&pid, path, &fa, NULL, argv, environ))
		fail_msg("cannot run %s (build it first, or set BUILD)", path);
	posix_spawn_file_actions_destroy(&fa);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	slurp(o, out_buf, sizeof(out_buf));
	slurp(e, err_buf, sizeof(err_buf));
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* An option a program has always had: how its --help line starts, and its default as --help
 * prints it (NULL: none to check). */
struct known {
	const char *left;
	const char *def;
};

/* The help text of the option whose line starts with left, whitespace folded. */
static bool help_block(const char *help, const char *left, char *out, size_t cap)
{
	const char *p = help;
	size_t n = 0, len = strlen(left);

	for (;;) {
		p = strstr(p, left);
		if (!p)
			return false;
		if ((p == help || p[-1] == '\n') && (p[len] == ' ' || p[len] == '\n'))
			break;
		p += len;
	}
	/* the entry's first line, then the lines indented under it */
	do {
		const char *eol = strchr(p, '\n');
		size_t l = eol ? (size_t)(eol - p) : strlen(p);

		for (size_t i = 0; i < l && n + 1 < cap; i++)
			if (p[i] != ' ' || (n && out[n - 1] != ' '))
				out[n++] = p[i];
		if (n + 1 < cap && n && out[n - 1] != ' ')
			out[n++] = ' ';
		p = eol ? eol + 1 : p + l;
	} while (!strncmp(p, "       ", 7));
	out[n] = 0;
	return true;
}

/* Every known option is in the program's --help with its default, and nothing else is. */
static void expect_help(const char *what, const struct known *k, size_t nk, int rc)
{
	size_t lines = 0;
	char block[1024];

	if (rc != 0)
		fail_msg("%s --help: exit %d", what, rc);
	assert_string_equal(err_buf, "");
	for (size_t i = 0; i < nk; i++) {
		if (!help_block(out_buf, k[i].left, block, sizeof(block)))
			fail_msg("%s --help lacks '%s':\n%s", what, k[i].left, out_buf);
		if (k[i].def && !strstr(block, k[i].def))
			fail_msg("%s --help: '%s' should say '%s': %s", what, k[i].left, k[i].def,
				 block);
	}
	/* option lines: "  -x, --name", "      --name" or "  --name" */
	for (const char *p = out_buf; (p = strstr(p, "\n  ")); p++) {
		const char *q = p + 1;
		size_t indent = strspn(q, " ");

		/* not the continuation lines of a help text, which may start with an option too */
		q += indent;
		if ((indent == 2 && (!strncmp(q, "--", 2) || (q[0] == '-' && q[2] == ','))) ||
		    (indent == 6 && !strncmp(q, "--", 2)))
			lines++;
	}
	if (lines != nk)
		fail_msg("%s --help lists %zu options, %zu known:\n%s", what, lines, nk, out_buf);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void hbd_help_lists_every_option(void **state)
{
	static const struct known k[] = {
		{ "  --keys FILE", "(required)" },
		{ "  --bind ADDR", "(default ::" },
		{ "  --port N", "(default 7600)" },
		{ "  --mqtt-port N", "(default 0)" },
		{ "  --mqtt-realm NAME", "(default hbeat)" },
		{ "  --mqtt-max-days N", "(default 30)" },
		{ "  --workers N", "(default one per CPU" },
		{ "  --ring-threads N", "(default 0: one thread per ring)" },
		{ "  --cpus LIST", "(default off: workers float" },
		{ "  --max-clients N", "(default 10000)" },
		{ "  --interval SEC", "(default 30)" },
		{ "  --expiry-mult X", "(default 1.5)" },
		{ "  --keepalive-probes N", "(default 2)" },
		{ "  --clock-window SEC", "(default 30)" },
		{ "  --server-id ID", "(default 0" },
		{ "  --require-udp-mac", NULL },
		{ "  --grace SEC", "(default 5)" },
		{ "  --sink FILE",
		  "(default $STATE_DIRECTORY/data.jsonl under systemd, else /var/lib/hbeat/data.jsonl)" },
		{ "  --sink-fsync", NULL },
		{ "  --pin-path DIR", "(default /sys/fs/bpf/hbeat)" },
		{ "  --no-offload", NULL },
		{ "  --no-defer-taskrun", NULL },
		{ "  --batch-wait USEC", "(default 1000)" },
		{ "  --drain-timeout SEC", "(default 10)" },
		{ "  --rx-buffers N", "(default 128)" },
		{ "  --rx-buf-size B", "(default 512)" },
		{ "  --control PATH", "(default none" },
		{ "  --control-group NAME", "(default none: root and hbd's user only)" },
		{ "  --metrics ADDR:PORT", "(default off)" },
		{ "  --log-level error|warn|info|debug", "(default info)" },
		{ "  --max-per-source N", "(default 1024)" },
		{ "  --accept-rate N", "(default 50000)" },
		{ "  --hello-timeout SEC", "(default 10)" },
		{ "  --max-pending N", "(default --max-clients / 16, at least 1024)" },
		{ "  --auth-fail-rate R", "(default 1)" },
		{ "  --auth-fail-burst N", "(default 10)" },
		{ "  --data-rate R", "(default 100)" },
		{ "  --data-burst N", "(default 200)" },
		{ "  --max-payload B", "(default 1024)" },
		{ "  --max-output B", "(default 65536)" },
		{ "  --on-map-full userspace|refuse", "(default userspace)" },
		{ "  --nats URL[,URL...]", "(default off: single node, DATA to --sink)" },
		{ "  --nats-creds FILE", NULL },
		{ "  --nats-user USER", NULL },
		{ "  --nats-password-file FILE", NULL },
		{ "  --nats-ca FILE", "(default plain TCP, unless a URL is tls://)" },
		{ "  --nats-cert FILE", NULL },
		{ "  --nats-key FILE", NULL },
		{ "  --nats-node NAME", "(default HOSTNAME-PORT)" },
		{ "  --nats-replicas N", "(default 1)" },
		{ "  --nats-node-ttl SEC", "(default 6)" },
		{ "  --nats-timeout SEC", "(default 2)" },
		{ "  --nats-down-timeout SEC", "(default 5)" },
		{ "  --nats-priority N", "(default 0)" },
		{ "  --nats-presence-window N", "(default 32768)" },
		{ "  -h, --help", NULL },
	};

	(void)state;
	expect_help("hbd", k, N(k), run("hbd", "--help", NULL));
	assert_non_null(strstr(out_buf, "Exit codes: 0 clean shutdown, 1 runtime failure, "
					"2 usage"));
}

static void hbload_help_lists_every_option(void **state)
{
	static const struct known k[] = {
		{ "      --server ADDR", "(required)" },
		{ "      --port N", "(default 7600)" },
		{ "      --clients N", "(required)" },
		{ "      --proto tcp|udp|mqtt", "(default tcp)" },
		{ "      --mqtt-realm NAME", "(default hbeat)" },
		{ "      --mqtt-days N", "(default 30)" },
		{ "      --force-pings", NULL },
		{ "      --beat", NULL },
		{ "      --udp-version N", "(default 2)" },
		{ "      --interval S", "(required)" },
		{ "      --duration S", "(required)" },
		{ "      --json", NULL },
		{ "      --keys FILE", "(default $HBEAT_KEYS" },
		{ "      --first-device ID", "(default 1)" },
		{ "      --source LIST", "the kernel chooses" },
		{ "      --threads N", "(default one per CPU)" },
		{ "      --jitter FRAC", "(default 0.1)" },
		{ "      --connect-rate N", "(default 0)" },
		{ "      --inflight N", "(default 1024)" },
		{ "      --data-every N", "(default 0)" },
		{ "      --echo-every N", "(default 0)" },
		{ "      --payload BYTES", "(default 16)" },
		{ "      --silent N", "(default 0)" },
		{ "      --drain S", "(default 2)" },
		{ "      --warmup S", "(default keep all)" },
		{ "      --storm-at S", NULL },
		{ "      --storm-window S", "(default 30)" },
		{ "      --setup-timeout S", "(default 60)" },
		{ "      --connect-timeout S", "(default 5)" },
		{ "      --hello-timeout S", "(default 5)" },
		{ "      --udp-sockets N", "(default 1024)" },
		{ "      --udp-rehello-after N", "(default 3)" },
		{ "      --steady S", "(default until --duration ends)" },
		{ "      --steps R1,R2,...", NULL },
		{ "      --steps-at S", "(default --duration)" },
		{ "      --step-s S", "(default 15)" },
		{ "      --step-settle S", "(default 3)" },
		{ "      --step-stop-p99 MS", "(default 10)" },
		{ "      --events FILE", NULL },
		{ "      --hist FILE", NULL },
		{ "      --no-progress", NULL },
		{ "  -v, --verbose", NULL },
		{ "  -h, --help", NULL },
	};

	(void)state;
	expect_help("hbload", k, N(k), run("hbload", "--help", NULL));
}

#define PIN                                                           \
	{                                                             \
		"      --pin-path DIR", "(default /sys/fs/bpf/hbeat)" \
	}
#define JSON                         \
	{                            \
		"  -j, --json", NULL \
	}
#define HELP                         \
	{                            \
		"  -h, --help", NULL \
	}
#define CONTROL                                                         \
	{                                                               \
		"  -c, --control PATH", "(default /run/hbeat/hbd.sock)" \
	}

static void hbctl_help_lists_every_option(void **state)
{
	static const struct known top[] = { { "  -v, --verbose", NULL }, HELP };
	static const struct known load[] = {
		{ "  -d, --dev IFACE", "(required)" },
		{ "  -m, --mode native|skb", "(default native)" },
		{ "  -p, --port N", "(default 7600)" },
		{ "      --mqtt-port N", "(default 0)" },
		PIN,
		{ "  -c, --cgroup PATH", "(default /sys/fs/cgroup/unified)" },
		{ "  -t, --then FILE[:PROG]", NULL },
		{ "      --tcp kernel|user|keepalive", "(default user)" },
		{ "      --max-conns N", "(default 1048576)" },
		{ "      --max-sessions N", "(default 1048576)" },
		JSON,
		HELP,
	};
	static const struct known unload[] = { { "  -d, --dev IFACE", "(required)" },
					       PIN,
					       JSON,
					       HELP };
	static const struct known show[] = { JSON, PIN, HELP };
	static const struct known conns[] = {
		JSON,
		PIN,
		{ "  -n, --limit N", "(default 0)" },
		{ "  -D, --device ID", NULL },
		{ "  -s, --state new|authed|closing", NULL },
		{ "  -t, --transport tcp|udp", NULL },
		{ "  -S, --silent SECONDS", NULL },
		{ "  -o, --sort KEY", NULL },
		HELP,
	};
	static const struct known devices[] = {
		{ "  -k, --keys FILE", "(default /etc/hbeat/keys)" },
		{ "      --secret HEX", NULL },
		{ "      --realm NAME", "(default hbeat)" },
		{ "      --days N", "(default 30)" },
		CONTROL,
		{ "      --no-reload", NULL },
		JSON,
		HELP,
	};
	static const struct known send[] = {
		CONTROL,
		{ "  -x, --hex", NULL },
		{ "  -b, --base64", NULL },
		{ "  -T, --timeout MS", "(default 5000)" },
		JSON,
		HELP,
	};
	static const struct known events[] = { CONTROL,
					       { "  -n, --count N", "(default 0)" },
					       JSON,
					       HELP };
	static const struct {
		const char *cmd;
		const struct known *k;
		size_t n;
	} cmds[] = {
		{ "load", load, N(load) },   { "unload", unload, N(unload) },
		{ "status", show, N(show) }, { "conns", conns, N(conns) },
		{ "stats", show, N(show) },  { "devices", devices, N(devices) },
		{ "send", send, N(send) },   { "events", events, N(events) },
	};

	(void)state;
	expect_help("hbctl", top, N(top), run("hbctl", "--help", NULL));
	for (size_t i = 0; i < N(cmds); i++) {
		char what[32];

		snprintf(what, sizeof(what), "hbctl %s", cmds[i].cmd);
		expect_help(what, cmds[i].k, cmds[i].n, run("hbctl", cmds[i].cmd, "--help", NULL));
		assert_true(!strncmp(out_buf, "Usage: hbctl ", 13));
		/* the top-level help names every command */
		run("hbctl", "--help", NULL);
		snprintf(what, sizeof(what), "\n  %-8s ", cmds[i].cmd);
		assert_non_null(strstr(out_buf, what));
	}
}

/* The first line of stderr is "PROG: <msg> (try 'PROG --help')". */
static void expect_complaint(int rc, int want_rc, const char *prog_name, const char *msg)
{
	char want[512];

	snprintf(want, sizeof(want), "%s: %s (try '%s --help')\n", prog_name, msg, prog_name);
	if (rc != want_rc || strncmp(err_buf, want, strlen(want)))
		fail_msg("exit %d (expected %d), stderr:\n%s\nexpected:\n%s", rc, want_rc, err_buf,
			 want);
}

static void bad_command_lines_get_one_shape(void **state)
{
	static const char *const bad_cpus[] = { "3-1", "0,,1", "1024", "" };
	int rc;

	(void)state;
	/* hbd: exit 2 on a usage error */
	expect_complaint(run("hbd", "--keys", "k", "--port", "70000", NULL), 2, "hbd",
			 "--port must be an integer in 0..65535, not '70000'");
	expect_complaint(run("hbd", "--keys", "k", "--interval", "0", NULL), 2, "hbd",
			 "--interval must be a number in 0.01..86400, not '0'");
	expect_complaint(run("hbd", "--keys", "k", "--rx-buffers", "100", NULL), 2, "hbd",
			 "--rx-buffers must be a power of 2 in 16..32768, not '100'");
	for (size_t i = 0; i < N(bad_cpus); i++) {
		char msg[96];

		snprintf(msg, sizeof(msg), "--cpus must be a CPU list such as 0-3,6, not '%s'",
			 bad_cpus[i]);
		expect_complaint(run("hbd", "--keys", "k", "--cpus", bad_cpus[i], NULL), 2, "hbd",
				 msg);
	}
	/* a CPU hbd may not run on: usage, before anything starts (the allowed list varies) */
	rc = run("hbd", "--keys", "k", "--cpus", "0,1023", NULL);
	if (rc != 2 || !strstr(err_buf, "hbd: --cpus: CPU 1023 is not one hbd may run on "
					"(online and allowed: "))
		fail_msg("--cpus 0,1023: exit %d (expected 2), stderr:\n%s", rc, err_buf);
	expect_complaint(run("hbd", "--keys", "k", "--log-level", "loud", NULL), 2, "hbd",
			 "--log-level must be error, warn, info or debug, not 'loud'");
	expect_complaint(run("hbd", "--keys", "k", "--metrics", "x:y", NULL), 2, "hbd",
			 "--metrics must be PORT, :PORT, ADDR:PORT or [V6ADDR]:PORT, not 'x:y'");
	expect_complaint(run("hbd", "--frob", NULL), 2, "hbd", "unknown option '--frob'");
	expect_complaint(run("hbd", "--keys", NULL), 2, "hbd", "--keys must be followed by FILE");
	expect_complaint(run("hbd", NULL), 2, "hbd", "--keys FILE is required");
	expect_complaint(run("hbd", "--keys", "k", "--interval", "86400", "--expiry-mult", "100",
			     NULL),
			 2, "hbd", "--interval x --expiry-mult is too long");
	/* hbload: exit 1 */
	expect_complaint(run("hbload", "--server", "x", "--clients", "10k", "--interval", "1",
			     "--duration", "1", NULL),
			 1, "hbload", "--clients must be an integer in 1..10000000, not '10k'");
	expect_complaint(run("hbload", "--proto", "sctp", NULL), 1, "hbload",
			 "--proto must be tcp, udp or mqtt, not 'sctp'");
	expect_complaint(run("hbload", "--connect-rate", "5/m", NULL), 1, "hbload",
			 "--connect-rate must be a number in 0..1000000000 (optionally with /s), "
			 "not '5/m'");
	expect_complaint(run("hbload", "--steps", "1,,2", NULL), 1, "hbload",
			 "--steps must be a comma-separated list of at most 32 rates per second "
			 "above 0 (e.g. 20000,30000), not '1,,2'");
	expect_complaint(run("hbload", "-x", NULL), 1, "hbload", "unknown option '-x'");
	expect_complaint(run("hbload", "--server", "x", "--clients", "10", "--interval", "1",
			     "--duration", "1", "--silent", "11", NULL),
			 1, "hbload", "--silent 11 exceeds --clients 10");
	/* hbctl: exit 1, before any environment check (no root needed) */
	expect_complaint(run("hbctl", "load", "--dev", "lo", "--port", "0", NULL), 1, "hbctl load",
			 "--port must be an integer in 1..65535, not '0'");
	expect_complaint(run("hbctl", "load", "--dev", "lo", "--max-sessions", "16777217", NULL), 1,
			 "hbctl load",
			 "--max-sessions must be an integer in 1..16777216, not "
			 "'16777217'");
	expect_complaint(run("hbctl", "load", "-m", "fast", NULL), 1, "hbctl load",
			 "--mode must be native or skb, not 'fast'");
	expect_complaint(run("hbctl", "load", NULL), 1, "hbctl load", "--dev IFACE is required");
	expect_complaint(run("hbctl", "conns", "--state", "x", NULL), 1, "hbctl conns",
			 "--state must be new, authed or closing, not 'x'");
	expect_complaint(run("hbctl", "conns", "-D", "-1", NULL), 1, "hbctl conns",
			 "--device must be a decimal device id, not '-1'");
	expect_complaint(run("hbctl", "conns", "--limit", "all", NULL), 1, "hbctl conns",
			 "--limit must be an integer in 0..4294967295, not 'all'");
	expect_complaint(run("hbctl", "send", "1", "x", "--timeout", "0", NULL), 1, "hbctl send",
			 "--timeout must be an integer in 1..600000, not '0'");
	expect_complaint(run("hbctl", "send", "1", "x", "-x", "-b", NULL), 1, "hbctl send",
			 "--hex and --base64 exclude each other");
	expect_complaint(run("hbctl", "devices", "add", "7", "--secret", "12", NULL), 1,
			 "hbctl devices", "--secret must be 16..64 bytes of hex, not '12'");
	expect_complaint(run("hbctl", "events", "-n", NULL), 1, "hbctl events",
			 "--count must be followed by N");
	expect_complaint(run("hbctl", "stats", "extra", NULL), 1, "hbctl stats",
			 "unexpected argument 'extra'");
	expect_complaint(run("hbctl", "devices", NULL), 1, "hbctl devices",
			 "expected list | add ID | remove ID | mqtt-password ID");
	expect_complaint(run("hbctl", "--frob", NULL), 1, "hbctl", "unknown option '--frob'");
	expect_complaint(run("hbctl", "frob", NULL), 1, "hbctl", "unknown command 'frob'");
	expect_complaint(run("hbctl", "unload", "--frob", NULL), 1, "hbctl unload",
			 "unknown option '--frob'");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults_come_from_the_table),
		cmocka_unit_test(every_type_takes_its_value),
		cmocka_unit_test(ranges_and_syntax),
		cmocka_unit_test(one_message_shape),
		cmocka_unit_test(options_before_a_command),
		cmocka_unit_test(help_lists_every_entry_with_its_default),
		cmocka_unit_test(help_wraps_at_80_columns),
		cmocka_unit_test(check_finds_table_mistakes),
		cmocka_unit_test_setup(hbd_help_lists_every_option, find_binaries),
		cmocka_unit_test_setup(hbload_help_lists_every_option, find_binaries),
		cmocka_unit_test_setup(hbctl_help_lists_every_option, find_binaries),
		cmocka_unit_test_setup(bad_command_lines_get_one_shape, find_binaries),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
