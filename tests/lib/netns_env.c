// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The netns test environment: namespaces up and down, hbctl load/unload, stepping in and out. */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netns_env.h"
#include "sh.h"

int hn_up(struct hn_env *e, char tag, int nsrc)
{
	memset(e, 0, sizeof(*e));
	e->orig_ns = -1;
	e->build = getenv("BUILD") && *getenv("BUILD") ? getenv("BUILD") : "build";
	/* the pid in the name is what the stale sweep below goes by */
	snprintf(e->name, sizeof(e->name), "hbh%c%d", tag, (int)getpid());
	snprintf(e->srv_ns, sizeof(e->srv_ns), "%s-srv", e->name);
	snprintf(e->cli_ns, sizeof(e->cli_ns), "%s-cli", e->name);
	snprintf(e->srv_if, sizeof(e->srv_if), "%s-s", e->name);
	snprintf(e->cli_if, sizeof(e->cli_if), "%s-c", e->name);
	snprintf(e->pin, sizeof(e->pin), "/sys/fs/bpf/hbeat-harden-%c-%d", tag, (int)getpid());
	e->orig_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (e->orig_ns < 0)
		return -1;
	/* a test killed before its teardown (SIGKILL, a timeout) leaves its namespaces and pins
	 * behind: remove those whose process is gone, so they do not pile up on a CI machine */
	hbt_sh("for d in /run/netns/hbh?[0-9]*-srv /run/netns/hbh?[0-9]*-cli; do "
	       "[ -e \"$d\" ] || continue; "
	       "n=${d##*/}; n=${n%%-*}; p=${n#hbh?}; [ -d /proc/$p ] && continue; "
	       "BUILD=%s scripts/netns.sh down $n >/dev/null 2>&1; done; "
	       "for d in /sys/fs/bpf/hbeat-harden-?-[0-9]*; do [ -e \"$d\" ] || continue; "
	       "[ -d /proc/${d##*-} ] || rm -rf \"$d\"; done",
	       e->build);
	if (hbt_sh("BUILD=%s scripts/netns.sh up %s %d >&2", e->build, e->name, nsrc))
		return -1;
	e->up = true;
	return 0;
}

int hn_load(struct hn_env *e, unsigned port, const char *extra)
{
	if (hbt_sh("nsenter --net=/run/netns/%s %s/hbctl load --dev %s --mode native --port %u "
		   "--tcp kernel --pin-path %s %s >&2",
		   e->srv_ns, e->build, e->srv_if, port, e->pin, extra))
		return -1;
	e->loaded = true;
	return 0;
}

void hn_unload(struct hn_env *e)
{
	if (!e->loaded)
		return;
	hbt_sh("nsenter --net=/run/netns/%s %s/hbctl unload --dev %s --pin-path %s >/dev/null 2>&1",
	       e->srv_ns, e->build, e->srv_if, e->pin);
	e->loaded = false;
}

int hn_enter(struct hn_env *e, const char *ns)
{
	char path[96];
	int fd, rc;

	snprintf(path, sizeof(path), "/run/netns/%s", ns);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	rc = setns(fd, CLONE_NEWNET);
	close(fd);
	(void)e;
	return rc;
}

int hn_enter_cli(struct hn_env *e)
{
	return hn_enter(e, e->cli_ns);
}

void hn_leave(struct hn_env *e)
{
	if (e->orig_ns >= 0)
		setns(e->orig_ns, CLONE_NEWNET);
}

void hn_down(struct hn_env *e)
{
	hn_leave(e);
	hn_unload(e);
	if (e->up)
		hbt_sh("BUILD=%s scripts/netns.sh down %s", e->build, e->name);
	e->up = false;
	if (e->pin[0] && !strncmp(e->pin, "/sys/fs/bpf/hbeat-harden-", 25))
		hbt_sh("rm -rf '%s'", e->pin); /* only if unload could not run */
	if (e->orig_ns >= 0)
		close(e->orig_ns);
	e->orig_ns = -1;
}

long long hn_stat(struct hn_env *e, const char *path)
{
	char cmd[512], line[64] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "nsenter --net=/run/netns/%s %s/hbctl stats --json --pin-path %s 2>/dev/null | "
		 "jq -r '.%s'",
		 e->srv_ns, e->build, e->pin, path);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	if (!fgets(line, sizeof(line), p))
		line[0] = 0;
	pclose(p);
	return line[0] >= '0' && line[0] <= '9' ? atoll(line) : -1;
}
