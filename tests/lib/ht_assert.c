// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The failure side of ht_assert.h: formats what was expected and what came, fails the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ht_assert.h"

static void ht_vfail(const char *file, int line, const char *detail, const char *what, va_list ap)
	__attribute__((format(printf, 4, 0), noreturn));
static void ht_vfail(const char *file, int line, const char *detail, const char *what, va_list ap)
{
	char msg[2048];

	vsnprintf(msg, sizeof(msg), what, ap);
	print_error("ERROR: %s:%d: %s: %s\n", file, line, msg, detail);
	_fail(file, line);
	abort(); /* _fail longjmps back into cmocka; never here */
}

void ht_fail(const char *file, int line, const char *detail, const char *what, ...)
{
	va_list ap;

	va_start(ap, what);
	ht_vfail(file, line, detail, what, ap);
}

/* A value as its type has it, and what a small negative one means when it is a return code:
 * a negative errno, or -1 with errno (err, the actual side only) set. */
static void ht_fmt_val(char *out, size_t cap, const struct ht_val *x, int err)
{
	intmax_t s = (intmax_t)x->v;

	if (!x->is_signed) {
		snprintf(out, cap, x->v > 0xffff ? "%ju (%#jx)" : "%ju", x->v, x->v);
		return;
	}
	if (s == -1 && err)
		snprintf(out, cap, "-1 (errno: %s)", strerror(err));
	else if (s < -1 && s >= -4095)
		snprintf(out, cap, "%jd (-%s: %s)", s, strerrorname_np((int)-s) ?: "?",
			 strerror((int)-s));
	else
		snprintf(out, cap, "%jd", s);
}

void ht_fail_cmp(const char *file, int line, const char *op, struct ht_val a, struct ht_val b,
		 int err, const char *what, ...)
{
	char va[96], vb[96], detail[1024];
	va_list ap;

	ht_fmt_val(va, sizeof(va), &a, err);
	ht_fmt_val(vb, sizeof(vb), &b, 0);
	/* "x is 3, expected 5", and the expected side's expression unless it is the number */
	if (!strcmp(op, "=="))
		snprintf(detail, sizeof(detail), "%s is %s, expected %s", a.expr, va, vb);
	else
		snprintf(detail, sizeof(detail), "%s is %s, expected it %s %s", a.expr, va, op, vb);
	if (!strstr(vb, b.expr))
		snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail), " (%s)", b.expr);
	va_start(ap, what);
	ht_vfail(file, line, detail, what, ap);
}
