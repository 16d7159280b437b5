// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Runs the built programs for the tests: bounded in time, killed by pid, stdout captured. */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run_prog.h"

int hbt_find(const char *name, const char *argv0, char *path, size_t len)
{
	const char *b = getenv("BUILD");
	char tmp[PATH_MAX];

	snprintf(path, len, "%s/%s", b && *b ? b : "build", name);
	if (!access(path, X_OK))
		return 0;
	snprintf(tmp, sizeof(tmp), "%s", argv0);
	snprintf(path, len, "%s/../%s", dirname(tmp), name);
	return access(path, X_OK);
}

size_t hbt_drain(int fd, char *out, size_t cap, time_t deadline)
{
	size_t got = 0;

	memset(out, 0, cap);
	while (time(NULL) <= deadline) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 200) <= 0)
			continue;
		n = read(fd, out + got, cap - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	return got;
}

pid_t hbt_spawn(const char *path, const char *const *argv, int *out_fd, const char *errpath)
{
	int pfd[2];
	pid_t pid;

	if (pipe(pfd))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		if (errpath)
			freopen(errpath, "w", stderr);
		execvp(path, (char *const *)argv); /* a name without a slash: from PATH */
		_exit(127);
	}
	close(pfd[1]);
	*out_fd = pfd[0];
	return pid;
}

pid_t hbt_spawn_logged(const char *const *argv, const char *log)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		if (fd < 0)
			_exit(126);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

int hbt_reap(pid_t pid, time_t deadline)
{
	int wst;

	while (waitpid(pid, &wst, WNOHANG) == 0) {
		if (time(NULL) > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &wst, 0);
			return -1;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 20000000 }, NULL);
	}
	return WIFEXITED(wst) ? WEXITSTATUS(wst) : -1;
}

int hbt_run(const char *path, const char *const *argv, int timeout_s, char *out, size_t cap)
{
	time_t deadline = time(NULL) + timeout_s;
	int fd;
	pid_t pid = hbt_spawn(path, argv, &fd, NULL);

	if (pid < 0)
		return -1;
	hbt_drain(fd, out, cap, deadline);
	close(fd);
	return hbt_reap(pid, deadline);
}

long long hbt_num(const char *json, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : LLONG_MIN;
}
