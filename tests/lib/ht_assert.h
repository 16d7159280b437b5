/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Assertions for the cmocka tests whose failure message says what was expected and what came.
 *
 * cmocka's assert_true() prints only "Failure!" and assert_int_equal() two hex numbers, which
 * leaves whoever reads a CI log to open the source. These take a printf-style description of
 * what is being checked and print, through cmocka, file:line, the description, the expression
 * and the values, then fail the running test like fail_msg():
 *
 *	HT_EQ(ht_stop(&d), 0, "hbd's exit code after SIGTERM");
 *	  -> ERROR: tests/test_hbd_tcp.c:42: hbd's exit code after SIGTERM:
 *	            ht_stop(&d) is -1 (errno: ...), expected 0
 *
 * Every operand is evaluated exactly once, before the check; the description's arguments only
 * when the check fails. HT_EQ and HT_NE compare as assert_int_equal() and assert_int_not_equal()
 * do (both sides converted to uintmax_t); the ordered comparisons HT_LT, HT_LE, HT_GT, HT_GE as
 * the C operator does on the operands' own types.
 */
#ifndef HT_ASSERT_H
#define HT_ASSERT_H

#include <errno.h>
#include <limits.h>
#include <stdint.h>

/* Prints "file:line: <what>: <detail>" and fails the running test; never returns. */
void ht_fail(const char *file, int line, const char *detail, const char *what, ...)
	__attribute__((format(printf, 4, 5), noreturn));

/* The two values of a failed comparison, printed with their expressions. */
struct ht_val {
	const char *expr;
	uintmax_t v;
	int is_signed;
};

void ht_fail_cmp(const char *file, int line, const char *op, struct ht_val a, struct ht_val b,
		 int err, const char *what, ...) __attribute__((format(printf, 7, 8), noreturn));

/* Whether an integer expression's type is signed, to print its value as it is (not evaluated). */
#define HT_SIGNED(x)                                                                           \
	_Generic((x), char                                                                     \
		 : CHAR_MIN < 0, signed char : 1, short : 1, int : 1, long : 1, long long : 1, \
		   default : 0)

/* Floating-point values do not go through the integer comparisons (HT_TRUE prints them). */
#define HT_NOT_FLOAT(x)                                                                     \
	_Static_assert(!_Generic((x), float : 1, double : 1, long double : 1, default : 0), \
		       "HT_EQ/HT_LT/...: integers only, use HT_TRUE for " #x)

#define HT_TRUE(cond, ...)                                                           \
	do {                                                                         \
		if (!(cond))                                                         \
			ht_fail(__FILE__, __LINE__, "expected " #cond, __VA_ARGS__); \
	} while (0)

#define HT_FALSE(cond, ...)                                                              \
	do {                                                                             \
		if (cond)                                                                \
			ht_fail(__FILE__, __LINE__, "expected not " #cond, __VA_ARGS__); \
	} while (0)

/* a op b with both converted to uintmax_t, as assert_int_equal() / assert_int_not_equal() do;
 * sa and sb are the operands as written (stringified before macro expansion). */
#define HT_UINTMAX_CMP_(a, op, b, sa, sb, ...)                                           \
	do {                                                                             \
		HT_NOT_FLOAT(a);                                                         \
		HT_NOT_FLOAT(b);                                                         \
		const uintmax_t ht_a_ = (uintmax_t)(a), ht_b_ = (uintmax_t)(b);          \
		const int ht_err_ = errno;                                               \
                                                                                         \
		if (!(ht_a_ op ht_b_))                                                   \
			ht_fail_cmp(__FILE__, __LINE__, #op,                             \
				    (struct ht_val){ sa, ht_a_, HT_SIGNED(a) },          \
				    (struct ht_val){ sb, ht_b_, HT_SIGNED(b) }, ht_err_, \
				    __VA_ARGS__);                                        \
	} while (0)

/* a op b on copies of the operands' own types: the same comparison as writing a op b, with the
 * warnings about it that an integer constant operand would not have drawn switched off. */
#define HT_CMP_(a, op, b, sa, sb, ...)                                                         \
	do {                                                                                   \
		_Pragma("GCC diagnostic push");                                                \
		_Pragma("GCC diagnostic ignored \"-Wsign-compare\"");                          \
		_Pragma("GCC diagnostic ignored \"-Wtype-limits\"");                           \
		HT_NOT_FLOAT(a);                                                               \
		HT_NOT_FLOAT(b);                                                               \
		const __typeof__(a) ht_a_ = (a);                                               \
		const __typeof__(b) ht_b_ = (b);                                               \
		const int ht_err_ = errno;                                                     \
                                                                                               \
		if (!(ht_a_ op ht_b_))                                                         \
			ht_fail_cmp(__FILE__, __LINE__, #op,                                   \
				    (struct ht_val){ sa, (uintmax_t)ht_a_, HT_SIGNED(ht_a_) }, \
				    (struct ht_val){ sb, (uintmax_t)ht_b_, HT_SIGNED(ht_b_) }, \
				    ht_err_, __VA_ARGS__);                                     \
		_Pragma("GCC diagnostic pop");                                                 \
	} while (0)

/* HT_EQ(actual, expected, what...): actual == expected, as assert_int_equal() compares. */
#define HT_EQ(a, b, ...) HT_UINTMAX_CMP_(a, ==, b, #a, #b, __VA_ARGS__)
#define HT_NE(a, b, ...) HT_UINTMAX_CMP_(a, !=, b, #a, #b, __VA_ARGS__)
#define HT_LT(a, b, ...) HT_CMP_(a, <, b, #a, #b, __VA_ARGS__)
#define HT_LE(a, b, ...) HT_CMP_(a, <=, b, #a, #b, __VA_ARGS__)
#define HT_GT(a, b, ...) HT_CMP_(a, >, b, #a, #b, __VA_ARGS__)
#define HT_GE(a, b, ...) HT_CMP_(a, >=, b, #a, #b, __VA_ARGS__)

#endif /* HT_ASSERT_H */
