// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbload: simulates a fleet of heartbeating devices against an hbeat server (see --help).
 *
 * Exit status: 0 the run completed (even if it measured losses or failures); 1 bad arguments
 * or a local setup failure; 2 the server was unreachable or refused every client.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log.h"
#include "run.h"

/* Used when neither --keys nor $HBEAT_KEYS names a key store, so the bare interface works
 * against a server provisioned with the same line. A published key: tests and demos only.
 */
#define HBL_DEMO_MASTER "68626561742d64656d6f2d6d61737465722d6b6579"

enum { EXIT_DONE = 0, EXIT_SETUP = 1, EXIT_UNREACHABLE = 2 };

static int load_keys(struct hbl_cfg *cfg)
{
	const char *path = cfg->o.keys ? cfg->o.keys : getenv("HBEAT_KEYS");
	char err[256], tmp[] = "/tmp/hbload-demo-keys.XXXXXX";
	FILE *f;
	int fd, rc;

	if (path && *path) {
		rc = hb_keystore_load(path, &cfg->ks, err, sizeof(err));
		if (rc)
			hb_err("key store: %s", err);
		return rc;
	}
	hb_warn("no --keys and no $HBEAT_KEYS: using the published demo key "
		"'1-16777215 derive %s' (tests and demos only)",
		HBL_DEMO_MASTER);
	fd = mkstemp(tmp);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		hb_err("demo key store: %s", strerror(errno));
		return -errno;
	}
	fprintf(f, "1-16777215 derive %s\n", HBL_DEMO_MASTER);
	fclose(f);
	rc = hb_keystore_load(tmp, &cfg->ks, err, sizeof(err));
	unlink(tmp);
	if (rc)
		hb_err("demo key store: %s", err);
	return rc;
}

/* Every device must have a secret; checking both ends of the id range catches the usual
 * mistake (a key range shorter than --clients) before any connection is made.
 */
static int check_keys(const struct hbl_cfg *cfg)
{
	uint8_t s[HB_SECRET_MAX];
	uint64_t first = cfg->o.first_device, last = first + cfg->o.clients - 1;

	if (hb_keystore_secret(cfg->ks, first, s) < 0 || hb_keystore_secret(cfg->ks, last, s) < 0) {
		hb_err("the key store has no secret for device %llu or %llu: devices %llu..%llu "
		       "must all be provisioned (see --first-device, --clients)",
		       (unsigned long long)first, (unsigned long long)last,
		       (unsigned long long)first, (unsigned long long)last);
		return -ENOENT;
	}
	return 0;
}

static int configure(struct hbl_cfg *cfg)
{
	struct hbl_opts *o = &cfg->o;
	struct rlimit rl;
	char err[256];
	int n;

	if (hbl_resolve(o->server, o->port, &cfg->server, &cfg->server_len))
		return -EINVAL;
	cfg->family = cfg->server.ss_family;
	if (o->source) {
		n = hbl_parse_sources(o->source, cfg->family, &cfg->src, err, sizeof(err));
		if (n < 0) {
			hb_err("--source: %s", err);
			return n;
		}
		cfg->nsrc = (unsigned)n;
		cfg->src_len = cfg->family == AF_INET ? sizeof(struct sockaddr_in)
						      : sizeof(struct sockaddr_in6);
	}
	/* a ring's fixed-file table may not exceed RLIMIT_NOFILE (field notes): TCP needs a slot
	 * per client, so enough rings to hold them all
	 */
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur <= HBL_FD_MARGIN + 64)
		rl.rlim_cur = 1024;
	cfg->slots = (uint32_t)(rl.rlim_cur > 1000000 ? 1000000 : rl.rlim_cur) - HBL_FD_MARGIN;
	cfg->rings = o->threads;
	if (o->proto == HB_TCP && (uint64_t)cfg->rings * cfg->slots < o->clients) {
		cfg->rings = (o->clients + cfg->slots - 1) / cfg->slots;
		hb_info("%u TCP clients need %u rings of at most %u sockets (RLIMIT_NOFILE %llu): "
			"using %u threads",
			o->clients, cfg->rings, cfg->slots, (unsigned long long)rl.rlim_cur,
			cfg->rings);
	}
	if (cfg->rings > o->clients)
		cfg->rings = o->clients;
	cfg->interval_ns = (uint64_t)(o->interval_s * 1e9);
	cfg->hello_timeout_ns = (uint64_t)(o->hello_timeout_s * 1e9);
	cfg->connect_timeout_ns = (uint64_t)(o->connect_timeout_s * 1e9);
	cfg->storm_window_ns = (uint64_t)(o->storm_window_s * 1e9);
	/* reconnects after a failure: 0.5 s doubling to 30 s, full jitter (spreads a fleet) */
	cfg->backoff = (struct hbc_backoff){ .base_ms = 500, .max_ms = 30000, .jitter_pct = 100 };
	if (load_keys(cfg) || check_keys(cfg) || hbl_probe_kernel(cfg))
		return -EINVAL;
	return 0;
}

/* What to check first, from what failed most. */
static const char *unreachable_hint(const struct hbl_stats *t)
{
	if (t->err_addrnotavail && t->err_addrnotavail >= t->err_connrefused)
		return "binds failed: do the --source addresses exist on this host?";
	if (t->auth_failed)
		return "the server refused the HELLOs: does it use the same key store (--keys)?";
	if (t->err_connrefused)
		return "connection refused: is the server running on that address and port?";
	if (t->timeouts || t->err_timeout)
		return "no answer in time: is the server running and reachable (firewall, route)?";
	return "is the server running on that address and port?";
}

int main(int argc, char **argv)
{
	struct hbl_cfg cfg = { 0 };
	struct hbl_result *res;
	int rc;

	hb_log_init("hbload", HB_LOG_INFO);
	rc = hbl_parse_args(argc, argv, &cfg.o);
	if (rc)
		return rc > 0 ? EXIT_DONE : EXIT_SETUP;
	if (cfg.o.verbose)
		hb_log_set_level(HB_LOG_DEBUG);
	if (configure(&cfg)) {
		hb_keystore_free(cfg.ks);
		free(cfg.src);
		return EXIT_SETUP;
	}
	res = malloc(sizeof(*res));
	if (!res || hbl_run(&cfg, res)) {
		free(res);
		hb_keystore_free(cfg.ks);
		free(cfg.src);
		return EXIT_SETUP;
	}
	if (cfg.o.json)
		hbl_report_json(stdout, &cfg, res);
	else
		hbl_report_text(stdout, &cfg, res);
	if (cfg.o.hist && (rc = hbl_report_hist(&cfg, res)))
		hb_err("--hist %s: %s", cfg.o.hist, strerror(-rc));
	rc = res->unreachable ? EXIT_UNREACHABLE : EXIT_DONE;
	if (res->unreachable)
		hb_err("no client authenticated: %llu connect failures, %llu auth refusals, %llu "
		       "HELLO timeouts; %s",
		       (unsigned long long)res->tot.connect_failed,
		       (unsigned long long)res->tot.auth_failed,
		       (unsigned long long)res->tot.timeouts, unreachable_hint(&res->tot));
	free(res);
	hb_keystore_free(cfg.ks);
	free(cfg.src);
	return rc;
}
