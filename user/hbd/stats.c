// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The daemon counters as JSON (jansson), under the ABI's X-macro names (see stats.h). */
#include "stats.h"

#include <errno.h>

#include "json_out.h"

json_t *hbd_stats_obj(const struct hb_ustats *s)
{
	return hb_json_u64_fields(hb_ustat_names, (const uint64_t *)s, HB_USTATS_N);
}

int hbd_stats_json(const struct hb_ustats *s, char *buf, size_t cap)
{
	json_t *o = hbd_stats_obj(s);
	size_t n;

	if (!o)
		return -ENOMEM;
	n = json_dumpb(o, buf, cap, HB_JSON_FLAGS);
	json_decref(o);
	if (!n || n >= cap)
		return -ENOSPC;
	buf[n] = 0;
	return (int)n;
}
