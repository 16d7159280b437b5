// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl's load/unload lock is per pin directory: the same directory, however spelled, is one
 * lock and makes a second holder wait; another directory is another lock and waits for nothing.
 * Holders are child processes, as two hbctl runs are. No kernel features needed. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "hb_bpf.h"

struct holder {
	pid_t pid;
	int rd; /* a byte arrives here once the child holds the lock */
};

/* A child that takes the lock of dir, says so, and keeps it until killed. */
static struct holder take_in_child(const char *dir)
{
	struct holder h;
	int p[2];

	assert_int_equal(pipe(p), 0);
	h.pid = fork();
	assert_true(h.pid >= 0);
	if (!h.pid) {
		int fd = hbk_lock(dir);

		if (fd < 0 || write(p[1], "L", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	h.rd = p[0];
	return h;
}

static bool holds_within(const struct holder *h, int ms)
{
	struct pollfd pfd = { .fd = h->rd, .events = POLLIN };
	char c;

	return poll(&pfd, 1, ms) == 1 && read(h->rd, &c, 1) == 1 && c == 'L';
}

static void release(struct holder *h)
{
	int st;

	kill(h->pid, SIGKILL);
	waitpid(h->pid, &st, 0);
	close(h->rd);
}

static void same_dir_waits(void **state)
{
	struct holder a, b;

	(void)state;
	a = take_in_child("/sys/fs/bpf/test_hbk_lock_a");
	assert_true(holds_within(&a, 5000));
	/* another spelling of the same directory */
	b = take_in_child("/sys/fs/bpf//test_hbk_lock_a/");
	assert_false(holds_within(&b, 300));
	release(&a); /* the lock goes with its holder */
	assert_true(holds_within(&b, 5000));
	release(&b);
}

static void other_dir_does_not_wait(void **state)
{
	struct holder a, b;

	(void)state;
	a = take_in_child("/sys/fs/bpf/test_hbk_lock_a");
	assert_true(holds_within(&a, 5000));
	b = take_in_child("/sys/fs/bpf/test_hbk_lock_b");
	assert_true(holds_within(&b, 5000));
	release(&a);
	release(&b);
}

static void lock_file_names(void **state)
{
	char a[PATH_MAX], b[PATH_MAX], dir[] = "/tmp/test_hbk_lock.XXXXXX", link[PATH_MAX + 8];

	(void)state;
	assert_int_equal(hbk_lock_path("/sys/fs/bpf/hbeat", a, sizeof(a)), 0);
	assert_string_equal(strrchr(a, '/'), "/hbctl-sys-fs-bpf-hbeat.lock");
	assert_int_equal(hbk_lock_path("/sys/fs/bpf/hb-eat x", a, sizeof(a)), 0);
	assert_string_equal(strrchr(a, '/'), "/hbctl-sys-fs-bpf-hb\\x2deat\\x20x.lock");
	/* names that a plain '/' -> '_' mapping would fold together stay apart */
	assert_non_null(mkdtemp(dir));
	snprintf(link, sizeof(link), "%s/hb", dir);
	assert_int_equal(mkdir(link, 0700), 0);
	snprintf(link, sizeof(link), "%s/hb_eat", dir);
	assert_int_equal(hbk_lock_path(link, a, sizeof(a)), 0);
	snprintf(link, sizeof(link), "%s/hb/eat", dir);
	assert_int_equal(hbk_lock_path(link, b, sizeof(b)), 0);
	assert_string_not_equal(a, b);
	snprintf(link, sizeof(link), "%s/hb", dir);
	rmdir(link);
	/* a relative path and a symbolic link name the directory they lead to */
	snprintf(link, sizeof(link), "%s.link", dir);
	assert_int_equal(symlink(dir, link), 0);
	assert_int_equal(hbk_lock_path(dir, a, sizeof(a)), 0);
	assert_int_equal(hbk_lock_path(link, b, sizeof(b)), 0);
	assert_string_equal(a, b);
	assert_int_equal(chdir("/tmp"), 0);
	assert_int_equal(hbk_lock_path(dir + strlen("/tmp/"), b, sizeof(b)), 0);
	assert_string_equal(a, b);
	unlink(link);
	rmdir(dir);
	/* a directory that does not exist yet (before a first load) has a lock all the same */
	assert_int_equal(hbk_lock_path(dir, b, sizeof(b)), 0);
	assert_string_equal(a, b);
	assert_true(hbk_lock_path("/nonexistent-parent/x/y", b, sizeof(b)) < 0);
}

/* The lock files the tests made go again (hbctl leaves its own in place, as lock files are). */
static int remove_lock_files(void **state)
{
	char p[PATH_MAX];

	(void)state;
	if (!hbk_lock_path("/sys/fs/bpf/test_hbk_lock_a", p, sizeof(p)))
		unlink(p);
	if (!hbk_lock_path("/sys/fs/bpf/test_hbk_lock_b", p, sizeof(p)))
		unlink(p);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(same_dir_waits),
		cmocka_unit_test(other_dir_does_not_wait),
		cmocka_unit_test(lock_file_names),
	};

	return cmocka_run_group_tests(tests, NULL, remove_lock_files);
}
