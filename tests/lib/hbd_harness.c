// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Runs the built hbd for a test and cleans up after it, also after a failed assertion. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hbd_harness.h"
#include "ht_time.h"
#include "run_prog.h"

char ht_netns[64];

/* Daemons started and not yet cleaned up, by value: a failed assertion longjmps out of a test
 * (and its stack), and ht_reap() in the test's teardown still finds and ends them.
 */
#define HT_MAX_LIVE 16
static struct ht_daemon ht_live[HT_MAX_LIVE];

void ht_track(const struct ht_daemon *d, bool on)
{
	for (int i = 0; i < HT_MAX_LIVE; i++) {
		if (on && !ht_live[i].dir[0]) {
			ht_live[i] = *d;
			return;
		}
		if (!on && ht_live[i].dir[0] && !strcmp(ht_live[i].dir, d->dir)) {
			memset(&ht_live[i], 0, sizeof(ht_live[i]));
			return;
		}
	}
}

int ht_reap(void **state)
{
	(void)state;
	for (int i = 0; i < HT_MAX_LIVE; i++) {
		if (ht_live[i].dir[0]) {
			struct ht_daemon d = ht_live[i];

			fprintf(stderr, "reaping hbd %d left by a failed test\n", (int)d.pid);
			ht_cleanup(&d);
		}
	}
	return 0;
}

int ht_write_keys(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	for (uint64_t d = 1; d <= 9; d++) {
		uint8_t s[HB_SECRET_MAX];

		ht_secret(d, s);
		fprintf(f, "%" PRIu64 " ", d);
		for (int i = 0; i < 16; i++)
			fprintf(f, "%02x", s[i]);
		fprintf(f, "\n");
	}
	fprintf(f, "100-199 derive %s\n", HT_MASTER);
	return fclose(f);
}

void ht_hbd_path(char *out, size_t cap)
{
	char exe[PATH_MAX - 16];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *b = getenv("BUILD");

	if (n > 0) {
		char *slash;

		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0; /* .../tests */
			snprintf(out, cap, "%s/../hbd", exe);
			if (access(out, X_OK) == 0)
				return;
		}
	}
	snprintf(out, cap, "%s/hbd", b && *b ? b : "build");
}

int ht_file_contains(const char *path, const char *needle, char *line, size_t cap)
{
	FILE *f = fopen(path, "r");
	char buf[4096];
	int found = 0;

	if (!f)
		return 0;
	while (fgets(buf, sizeof(buf), f)) {
		if (strstr(buf, needle)) {
			if (line && cap) {
				size_t l = strlen(buf) < cap - 1 ? strlen(buf) : cap - 1;

				memcpy(line, buf, l);
				line[l] = 0;
			}
			found = 1;
			break;
		}
	}
	fclose(f);
	return found;
}

int ht_start(struct ht_daemon *d, const char *const *extra)
{
	char hbd[PATH_MAX], line[1024], *p;
	const char *argv[64];
	char *wrap = getenv("HBD_WRAP"), *wcopy = NULL;
	int argc = 0;
	uint64_t deadline;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/hbdtest.XXXXXX");
	if (!mkdtemp(d->dir))
		return -1;
	snprintf(d->keys, sizeof(d->keys), "%s/keys", d->dir);
	snprintf(d->sink, sizeof(d->sink), "%s/sink.jsonl", d->dir);
	snprintf(d->err, sizeof(d->err), "%s/hbd.err", d->dir);
	snprintf(d->out, sizeof(d->out), "%s/hbd.out", d->dir);
	if (ht_write_keys(d->keys))
		return -1;
	ht_hbd_path(hbd, sizeof(hbd));
	if (wrap && *wrap) {
		wcopy = strdup(wrap);
		for (char *t = strtok(wcopy, " "); t && argc < 16; t = strtok(NULL, " "))
			argv[argc++] = t;
	}
	argv[argc++] = hbd;
	argv[argc++] = "--keys";
	argv[argc++] = d->keys;
	argv[argc++] = "--sink";
	argv[argc++] = d->sink;
	argv[argc++] = "--port";
	argv[argc++] = "0";
	argv[argc++] = "--log-level";
	argv[argc++] = "debug";
	bool own_pins = false;
	for (int i = 0; extra && extra[i] && argc < 60; i++) {
		own_pins |= !strcmp(extra[i], "--pin-path");
		argv[argc++] = extra[i];
	}
	/* Never the default pin path: a test daemon must not adopt (and stamp, and count into)
	 * the maps of an hbeat that is really loaded on this machine, such as a running demo.
	 * The scratch dir holds no pins, so the daemon runs in userspace mode.
	 */
	if (!own_pins) {
		argv[argc++] = "--pin-path";
		argv[argc++] = d->dir;
	}
	argv[argc] = NULL;

	d->pid = fork();
	if (d->pid < 0) {
		free(wcopy);
		return -1;
	}
	if (d->pid == 0) {
		int e = open(d->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int o = open(d->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (ht_netns[0]) {
			char ns[96];
			int nfd;

			snprintf(ns, sizeof(ns), "/run/netns/%s", ht_netns);
			nfd = open(ns, O_RDONLY | O_CLOEXEC);
			if (nfd < 0 || setns(nfd, CLONE_NEWNET))
				_exit(126);
		}
		dup2(e, STDERR_FILENO);
		dup2(o, STDOUT_FILENO);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	free(wcopy);
	ht_track(d, true);
	deadline = ht_now_ms() + 20000;
	while (ht_now_ms() < deadline) {
		int st;

		if (ht_file_contains(d->err, "ready:", line, sizeof(line)) &&
		    (p = strstr(line, "port="))) {
			d->port = (uint16_t)atoi(p + 5);
			return 0;
		}
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			break;
		}
		ht_sleep_ms(10);
	}
	fprintf(stderr, "hbd did not become ready; its log:\n");
	snprintf(line, sizeof(line), "cat %s >&2", d->err);
	if (system(line)) {
	}
	ht_cleanup(d);
	return -1;
}

int ht_stop(struct ht_daemon *d)
{
	uint64_t deadline = ht_now_ms() + 30000;
	int st;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, SIGTERM);
	while (ht_now_ms() < deadline) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			ht_track(d, false);
			ht_track(d, true); /* the files stay until ht_cleanup; the pid is gone */
			if (!WIFEXITED(st) || WEXITSTATUS(st)) {
				char cmd[160];

				snprintf(cmd, sizeof(cmd), "tail -n 40 %s >&2", d->err);
				if (system(cmd)) {
				}
			}
			return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		}
		ht_sleep_ms(10);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
	ht_track(d, false);
	ht_track(d, true);
	return -1;
}

void ht_cleanup(struct ht_daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = 0;
	}
	if (d->dir[0] && !getenv("HT_KEEP")) {
		unlink(d->keys);
		unlink(d->sink);
		unlink(d->err);
		unlink(d->out);
		rmdir(d->dir);
	}
	ht_track(d, false);
}

long long ht_exit_stat(const struct ht_daemon *d, const char *name)
{
	char line[4096], key[64], *p;

	if (!ht_file_contains(d->out, "\"pings_user\"", line, sizeof(line)))
		return -1;
	snprintf(key, sizeof(key), "\"%s\":", name);
	p = strstr(line, key);
	return p ? atoll(p + strlen(key)) : -1;
}

int ht_fd_count(pid_t pid)
{
	char path[64], cmd[96], line[32];
	FILE *p;
	int n = -1;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	snprintf(cmd, sizeof(cmd), "ls %s 2>/dev/null | wc -l", path);
	p = popen(cmd, "r");
	if (p && fgets(line, sizeof(line), p))
		n = atoi(line);
	if (p)
		pclose(p);
	return n;
}

int ht_each_thread_status(pid_t pid, void (*fn)(const char *status, void *ctx), void *ctx)
{
	return ht_each_thread_file(pid, "status", fn, ctx);
}

int ht_each_thread_file(pid_t pid, const char *file, void (*fn)(const char *text, void *ctx),
			void *ctx)
{
	char path[320], status[4096];
	struct dirent *e;
	int n = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((e = readdir(dir))) {
		size_t len;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/%s", (int)pid, e->d_name, file);
		f = fopen(path, "r");
		if (!f)
			continue;
		len = fread(status, 1, sizeof(status) - 1, f);
		fclose(f);
		status[len] = 0;
		fn(status, ctx);
		n++;
	}
	closedir(dir);
	return n;
}

pid_t ht_await_successor(struct ht_daemon *d)
{
	char line[1024], cmd[256], *p;
	int st = -1;
	pid_t old = d->pid, next = 0;
	uint64_t end = ht_now_ms() + 30000;
	FILE *f;

	while (ht_now_ms() < end && waitpid(old, &st, WNOHANG) != old)
		ht_sleep_ms(5);
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "old hbd exit status %#x\n", st);
		return 0;
	}
	/* the last ready line is the successor's */
	snprintf(cmd, sizeof(cmd), "grep 'upgrade: taking over' %s | tail -1", d->err);
	f = popen(cmd, "r");
	if (f && fgets(line, sizeof(line), f) && (p = strstr(line, "pid=")))
		next = atoi(p + 4);
	if (f)
		pclose(f);
	d->pid = next;
	/* a failed test's teardown (ht_reap) ends the daemon now serving, not the one gone */
	ht_track(d, false);
	ht_track(d, true);
	return next;
}

struct switches_query {
	const char *name;
	bool prefix, involuntary;
	int matched;
	long long sum;
};

static void add_switches(const char *status, void *ctx)
{
	static const char *const fields[] = { "\nvoluntary_ctxt_switches:",
					      "\nnonvoluntary_ctxt_switches:" };
	struct switches_query *q = ctx;
	size_t len = strlen(q->name);
	long long v;

	if (strncmp(status, "Name:\t", 6) || strncmp(status + 6, q->name, len) ||
	    (!q->prefix && status[6 + len] != '\n'))
		return;
	q->matched++;
	for (size_t i = 0; i < (q->involuntary ? 2u : 1u); i++) {
		const char *p = strstr(status, fields[i]);

		if (p && sscanf(p + strlen(fields[i]), "%lld", &v) == 1)
			q->sum += v;
	}
}

long long ht_thread_switches(pid_t pid, const char *name, bool prefix, bool involuntary)
{
	struct switches_query q = { .name = name, .prefix = prefix, .involuntary = involuntary };

	ht_each_thread_status(pid, add_switches, &q);
	return q.matched ? q.sum : -1;
}

int ht_threads_named(pid_t pid, const char *name, bool prefix)
{
	struct switches_query q = { .name = name, .prefix = prefix };

	ht_each_thread_status(pid, add_switches, &q);
	return q.matched;
}

int ht_run_built(const char *name, const char *const *args, const char *log, char *out, size_t cap)
{
	char path[PATH_MAX], *slash;
	const char *argv[24];
	int rc, n = 0;
	FILE *f;
	size_t r;
	pid_t pid;

	ht_hbd_path(path, sizeof(path) - 8);
	slash = strrchr(path, '/');
	snprintf(slash ? slash + 1 : path, 8, "%s", name);
	argv[n++] = path;
	for (int i = 0; args[i] && n < 23; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	unlink(log);
	pid = hbt_spawn_logged(argv, log);
	if (pid < 0)
		return -1;
	rc = hbt_reap(pid, time(NULL) + 60);
	f = fopen(log, "r");
	r = f ? fread(out, 1, cap - 1, f) : 0;
	out[r] = 0;
	if (f)
		fclose(f);
	return rc;
}
