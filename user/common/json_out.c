// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* JSON output through jansson (see json_out.h). */
#include "json_out.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int hb_json_print(FILE *f, json_t *doc)
{
	int rc;

	if (!doc)
		return -ENOMEM;
	rc = json_dumpf(doc, f, HB_JSON_FLAGS);
	json_decref(doc);
	if (rc || fputc('\n', f) == EOF)
		return -EIO;
	return 0;
}

int hb_json_dump(FILE *f, json_t *doc)
{
	int rc;

	if (!doc)
		return -ENOMEM;
	rc = json_dumpf(doc, f, HB_JSON_FLAGS);
	json_decref(doc);
	return rc ? -EIO : 0;
}

int hb_json_line(char *buf, size_t cap, json_t *doc)
{
	size_t n;

	if (!doc)
		return -ENOMEM;
	n = json_dumpb(doc, buf, cap, HB_JSON_FLAGS);
	json_decref(doc);
	if (!n || n + 1 > cap)
		return -ENOSPC;
	buf[n++] = '\n';
	if (n < cap)
		buf[n] = '\0';
	return (int)n;
}

int hb_json_line_u64_first(char *buf, size_t cap, const char *key, uint64_t v, json_t *rest)
{
	size_t head, n;
	int k;

	if (!rest)
		return -ENOMEM;
	k = snprintf(buf, cap, "{\"%s\":%llu", key, (unsigned long long)v);
	if (k < 0 || (size_t)k >= cap) {
		json_decref(rest);
		return -ENOSPC;
	}
	head = (size_t)k;
	/* rest comes out as {...}: its brace becomes the comma after the first member */
	n = json_dumpb(rest, buf + head, cap - head, HB_JSON_FLAGS);
	json_decref(rest);
	if (n < 2 || head + n + 1 > cap)
		return -ENOSPC;
	if (n == 2) { /* {} */
		buf[head] = '}';
		n = 1;
	} else {
		buf[head] = ',';
	}
	n += head;
	buf[n++] = '\n';
	if (n < cap)
		buf[n] = '\0';
	return (int)n;
}

json_t *hb_json_u64(uint64_t v)
{
	char s[24];

	if (v <= (uint64_t)INT64_MAX)
		return json_integer((json_int_t)v);
	snprintf(s, sizeof(s), "%llu", (unsigned long long)v);
	return json_string(s);
}

int hb_json_to_u64(const json_t *v, uint64_t *out)
{
	const char *s;
	char *end;

	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	s = json_string_value(v);
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if it is not one. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	size_t len;
	uint32_t cp;

	if (p[0] < 0x80)
		return 1;
	if ((p[0] & 0xe0) == 0xc0)
		len = 2, cp = p[0] & 0x1f;
	else if ((p[0] & 0xf0) == 0xe0)
		len = 3, cp = p[0] & 0x0f;
	else if ((p[0] & 0xf8) == 0xf0)
		len = 4, cp = p[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	/* overlong forms, surrogates and values beyond U+10FFFF are not UTF-8 */
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return len;
}

json_t *hb_json_bytes(const void *p, size_t n)
{
	const unsigned char *s = p;
	char *out = malloc(n * 3 + 1); /* U+FFFD is 3 bytes, for each invalid byte at worst */
	size_t o = 0;
	json_t *j;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t len = utf8_seq(s + i, n - i);

		if (len) {
			memcpy(out + o, s + i, len);
			o += len;
			i += len;
		} else {
			/* NOLINTNEXTLINE(bugprone-not-null-terminated-result): out is length-counted */
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	j = json_stringn(out, o);
	free(out);
	return j;
}

json_t *hb_json_str(const char *s)
{
	return s ? hb_json_bytes(s, strlen(s)) : json_string("");
}

json_t *hb_json_u64_fields(const char *const names[], const uint64_t *v, size_t n)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < n; i++) {
		if (json_object_set_new(o, names[i], hb_json_u64(v[i]))) {
			json_decref(o);
			o = NULL;
		}
	}
	return o;
}
