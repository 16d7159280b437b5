// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* One-line JSON writer (see hb_json.h). */
#include "hb_json.h"

#include <inttypes.h>

void hbj_init(struct hbj *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->first[0] = true;
}

static void put_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/* Separator and key before a value. */
static void pre(struct hbj *j, const char *key)
{
	if (!j->first[j->depth])
		fputc(',', j->f);
	j->first[j->depth] = false;
	if (key) {
		put_str(j->f, key);
		fputc(':', j->f);
	}
}

static void open_(struct hbj *j, const char *key, char c)
{
	pre(j, key);
	fputc(c, j->f);
	if (j->depth < HBJ_MAX_DEPTH - 1)
		j->depth++;
	j->first[j->depth] = true;
}

static void close_(struct hbj *j, char c)
{
	fputc(c, j->f);
	if (j->depth > 0)
		j->depth--;
}

void hbj_obj(struct hbj *j, const char *key)
{
	open_(j, key, '{');
}

void hbj_obj_end(struct hbj *j)
{
	close_(j, '}');
}

void hbj_arr(struct hbj *j, const char *key)
{
	open_(j, key, '[');
}

void hbj_arr_end(struct hbj *j)
{
	close_(j, ']');
}

void hbj_u64(struct hbj *j, const char *key, uint64_t v)
{
	pre(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void hbj_i64(struct hbj *j, const char *key, int64_t v)
{
	pre(j, key);
	fprintf(j->f, "%" PRId64, v);
}

void hbj_str(struct hbj *j, const char *key, const char *s)
{
	pre(j, key);
	put_str(j->f, s ? s : "");
}

void hbj_bool(struct hbj *j, const char *key, bool v)
{
	pre(j, key);
	fputs(v ? "true" : "false", j->f);
}

void hbj_null(struct hbj *j, const char *key)
{
	pre(j, key);
	fputs("null", j->f);
}

void hbj_end(struct hbj *j)
{
	fputc('\n', j->f);
	fflush(j->f);
}
