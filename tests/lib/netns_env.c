// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The netns test environment: namespaces up and down, hbctl load/unload, stepping in and out. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hbd_harness.h"
#include "netns_env.h"
#include "sh.h"

/* The names' prefixes: HT_NS_PREFIX (namespaces and veths, at most 5 characters, letters)
 * and HT_PIN_PREFIX (pin directories under /sys/fs/bpf/) let runs on a shared machine keep to
 * names of their own. */
static const char *ns_prefix(void)
{
	const char *p = getenv("HT_NS_PREFIX");

	return p && *p && strlen(p) <= 5 && strspn(p, "abcdefghijklmnopqrstuvwxyz") == strlen(p)
		       ? p
		       : "hbh";
}

static const char *pin_prefix(void)
{
	const char *p = getenv("HT_PIN_PREFIX");

	return p && *p && strlen(p) <= 40 && !strncmp(p, "/sys/fs/bpf/", 12) && !strchr(p, '\'') &&
			       !strstr(p, "..") && !strchr(p + 12, '/')
		       ? p
		       : "/sys/fs/bpf/hbeat-harden-";
}

int hn_up(struct hn_env *e, char tag, int nsrc)
{
	const char *np = ns_prefix(), *pp = pin_prefix(), *build = getenv("BUILD");

	memset(e, 0, sizeof(*e));
	e->orig_ns = -1;
	e->build = build && *build ? build : "build";
	/* the pid in the name is what the stale sweep below goes by */
	snprintf(e->name, sizeof(e->name), "%s%c%d", np, tag, (int)getpid());
	snprintf(e->srv_ns, sizeof(e->srv_ns), "%s-srv", e->name);
	snprintf(e->cli_ns, sizeof(e->cli_ns), "%s-cli", e->name);
	snprintf(e->srv_if, sizeof(e->srv_if), "%s-s", e->name);
	snprintf(e->cli_if, sizeof(e->cli_if), "%s-c", e->name);
	snprintf(e->pin, sizeof(e->pin), "%s%c-%d", pp, tag, (int)getpid());
	e->orig_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (e->orig_ns < 0)
		return -1;
	/* a test killed before its teardown (SIGKILL, a timeout) leaves its namespaces and pins
	 * behind: remove those whose process is gone, so they do not pile up on a CI machine */
	hbt_sh("for d in /run/netns/%s?[0-9]*-srv /run/netns/%s?[0-9]*-cli; do "
	       "[ -e \"$d\" ] || continue; "
	       "n=${d##*/}; n=${n%%-*}; p=${n#%s?}; [ -d /proc/$p ] && continue; "
	       "BUILD=%s scripts/netns.sh down $n >/dev/null 2>&1; done; "
	       "for d in '%s'?-[0-9]*; do [ -e \"$d\" ] || continue; "
	       "[ -d /proc/${d##*-} ] || rm -rf \"$d\"; done",
	       np, np, np, e->build, pp);
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

void hn_aim(const struct hn_env *e)
{
	snprintf(ht_netns, sizeof(ht_netns), "%s", e->srv_ns);
	ht_srv4 = HN_SRV_ADDR_HOST;
}

void hn_unaim(void)
{
	ht_netns[0] = 0;
	ht_srv4 = INADDR_LOOPBACK;
}

void hn_down(struct hn_env *e)
{
	hn_unaim();
	hn_leave(e);
	hn_unload(e);
	if (e->up)
		hbt_sh("BUILD=%s scripts/netns.sh down %s", e->build, e->name);
	e->up = false;
	if (e->pin[0] && !strncmp(e->pin, pin_prefix(), strlen(pin_prefix())))
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
