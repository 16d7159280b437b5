/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A minimal one-line JSON writer for hbctl's --json output.
 *
 * Hand-written rather than a library: Debian 12's JSON libraries are not among hbeat's
 * dependencies, and the output is flat objects of numbers and short strings. Strings are
 * escaped per RFC 8259. Nesting is bounded by HBJ_MAX_DEPTH.
 */
#ifndef HB_JSON_H
#define HB_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define HBJ_MAX_DEPTH 8

struct hbj {
	FILE *f;
	int depth;
	bool first[HBJ_MAX_DEPTH];
};

/* key is NULL at the top level and inside arrays. */
void hbj_init(struct hbj *j, FILE *f);
void hbj_obj(struct hbj *j, const char *key);
void hbj_obj_end(struct hbj *j);
void hbj_arr(struct hbj *j, const char *key);
void hbj_arr_end(struct hbj *j);
void hbj_u64(struct hbj *j, const char *key, uint64_t v);
void hbj_i64(struct hbj *j, const char *key, int64_t v);
void hbj_str(struct hbj *j, const char *key, const char *s);
void hbj_bool(struct hbj *j, const char *key, bool v);
void hbj_null(struct hbj *j, const char *key);
/* Ends the document with a newline. */
void hbj_end(struct hbj *j);

#endif
