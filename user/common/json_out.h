/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* JSON output for every hbeat program, through jansson: one compact document per line.
 *
 * jansson rather than json-c: json_pack() builds a document from a format string in one call,
 * json_dumpb() writes into a caller's buffer without allocating, strings are checked for valid
 * UTF-8 (so a peer-controlled string can never produce invalid JSON), and keys come out in
 * insertion order. Both are in Debian 12.
 */
#ifndef HB_JSON_OUT_H
#define HB_JSON_OUT_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* Compact, insertion order, reals with 15 significant digits: a value rounded to 3 decimals
 * (2.007) prints as written, not as its nearest double (2.0070000000000001). */
#define HB_JSON_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15))

/* Writes doc as one line (and a newline) to f and releases it. 0, or -EIO / -ENOMEM (doc
 * NULL: a json_pack() that failed). */
int hb_json_print(FILE *f, json_t *doc);

/* Writes doc as one line (and a newline) into buf and releases it. Returns the length written
 * (without a terminating NUL, which is added if it fits), or -ENOSPC / -ENOMEM. */
int hb_json_line(char *buf, size_t cap, json_t *doc);

/* Writes {"key":v,<the members of rest>} (and a newline) into buf and releases rest: an object
 * whose first member is an unsigned 64-bit number written as a number even above INT64_MAX
 * (jansson's integers are signed), for a format that has always carried its device ids so (the
 * sink's JSON lines). key must need no escaping. Returns the length as hb_json_line does. */
int hb_json_line_u64_first(char *buf, size_t cap, const char *key, uint64_t v, json_t *rest);

/* A uint64_t as a JSON integer. jansson's integers are signed 64-bit: values above INT64_MAX
 * (device ids may use the whole range) come out as their decimal digits in a string instead
 * of wrapping to a negative number. */
json_t *hb_json_u64(uint64_t v);

/* The uint64_t a document holds as hb_json_u64 writes it: an integer from 0 up, or a string
 * of decimal digits. 0, or -EINVAL if v is neither. */
int hb_json_to_u64(const json_t *v, uint64_t *out);

/* A C string that may not be UTF-8, as hb_json_bytes; NULL is "". */
json_t *hb_json_str(const char *s);

/* An object of n uint64_t members (hb_json_u64), names[i] the key of v[i]: a counter struct of
 * hbeat_abi.h under its X-macro names. */
json_t *hb_json_u64_fields(const char *const names[], const uint64_t *v, size_t n);

/* Writes doc without a newline to f and releases it: one member of an array written piece by
 * piece, where a listing too long to hold as one document is streamed. 0, -EIO or -ENOMEM. */
int hb_json_dump(FILE *f, json_t *doc);

/* A byte string that may not be UTF-8 (a peer's bytes): invalid sequences replaced by U+FFFD. */
json_t *hb_json_bytes(const void *p, size_t n);

#endif
