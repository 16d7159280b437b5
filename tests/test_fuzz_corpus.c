// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Replays the committed fuzz corpus (fuzz/corpus/<target>/) and every crash a fuzzer once found
 * (fuzz/regress/<target>/) through the fuzz targets, in the ordinary and the ASan test builds,
 * so a fixed crash stays fixed even where clang is missing. The targets abort on a failed
 * property, which fails this binary.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/ht_assert.h"
#include "targets.h"

static const struct hbf_target targets[] = HBF_TARGETS;

/* Runs every file of dir/<target> through fn; returns how many. */
static int replay_dir(const char *dir, const struct hbf_target *t)
{
	char path[512];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/%s", dir, t->name);
	d = opendir(path);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		static uint8_t buf[1 << 20];
		size_t len;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/%s", dir, t->name, e->d_name);
		f = fopen(path, "rb");
		if (!f)
			continue;
		len = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		t->fn(buf, len);
		n++;
	}
	closedir(d);
	return n;
}

static void replay(void **state)
{
	const struct hbf_target *t = *state;
	int seeds = replay_dir("fuzz/corpus", t), crashes = replay_dir("fuzz/regress", t);

	printf("%s: %d seeds, %d past crashes replayed\n", t->name, seeds, crashes);
	HT_GT(seeds, 0,
	      "seeds replayed from fuzz/corpus (run from the repository root, where the corpus is)");
}

int main(void)
{
	struct CMUnitTest tests[8];
	size_t n = 0;

	for (const struct hbf_target *t = targets; t->name && n < 8; t++, n++) {
		tests[n] = (struct CMUnitTest)cmocka_unit_test_prestate(replay, (void *)t);
		tests[n].name = t->name;
	}
	return _cmocka_run_group_tests("fuzz_corpus", tests, n, NULL, NULL);
}
