// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl devices: provisioning in hbd's key store file (list, add, remove) and the reload that
 * makes hbd apply it.
 *
 * The file is edited line by line: lines this command does not touch (comments, ranges, other
 * devices) are kept byte for byte. Every edit is one atomic replacement: the new content goes
 * to a temporary file in the same directory (mode 0600), is fsync'ed, renamed over the old
 * file, and the directory is fsync'ed, all under an exclusive flock on FILE.lock, so a crash
 * leaves either the old or the new store and two concurrent edits never lose one another.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "hbctl.h"
#include "json_out.h"
#include "log.h"
#include "mqtt.h"

#define SECRET_BYTES 32

struct store {
	char **line; /* as read, newline included */
	struct hb_ks_line *kind;
	size_t n;
};

static void store_free(struct store *s)
{
	for (size_t i = 0; i < s->n; i++) {
		OPENSSL_cleanse(s->line[i], strlen(s->line[i]));
		free(s->line[i]);
	}
	free(s->line);
	free(s->kind);
	memset(s, 0, sizeof(*s));
}

static int store_push(struct store *s, const char *text, const struct hb_ks_line *k)
{
	char **l = realloc(s->line, (s->n + 1) * sizeof(*l));
	struct hb_ks_line *kk;

	if (!l)
		return -ENOMEM;
	s->line = l;
	kk = realloc(s->kind, (s->n + 1) * sizeof(*kk));
	if (!kk)
		return -ENOMEM;
	s->kind = kk;
	s->line[s->n] = strdup(text);
	if (!s->line[s->n])
		return -ENOMEM;
	s->kind[s->n++] = *k;
	return 0;
}

/* Reads and checks every line; a store hbd could not load is not edited. A missing file is an
 * empty store when missing_ok. */
static int store_read(const char *path, struct store *s, bool missing_ok)
{
	char line[HB_KS_LINE_MAX + 1], why[256];
	unsigned no = 0;
	FILE *f = fopen(path, "re");
	int rc = 0, got;

	memset(s, 0, sizeof(*s));
	if (!f) {
		if (errno == ENOENT && missing_ok)
			return 0;
		rc = -errno;
		hb_err("%s: %s", path, strerror(errno));
		return rc;
	}
	while ((got = hb_keystore_read_line(f, line))) {
		struct hb_ks_line k;

		no++;
		if (got < 0) {
			/* the same rule as hbd's: a file it would refuse is not edited */
			hb_err("%s:%u: line longer than %d characters; fix the file before editing "
			       "it with hbctl",
			       path, no, HB_KS_LINE_MAX - 1);
			rc = -EINVAL;
			break;
		}
		if (hb_keystore_parse_line(line, &k, why, sizeof(why))) {
			hb_err("%s:%u: %s; fix the file before editing it with hbctl", path, no,
			       why);
			rc = -EINVAL;
			break;
		}
		rc = store_push(s, line, &k);
		if (rc)
			break;
	}
	OPENSSL_cleanse(line, sizeof(line));
	fclose(f);
	if (rc)
		store_free(s);
	return rc;
}

static int store_write(const char *path, const struct store *s, const struct stat *old)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	int fd, dfd, rc = 0;

	snprintf(tmp, sizeof(tmp), "%s.tmp-%d", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		hb_err("%s: %s", tmp, strerror(errno));
		return rc;
	}
	/* the store keeps its owner (hbd may run as another user than root) */
	if (old && fchown(fd, old->st_uid, old->st_gid)) {
	}
	for (size_t i = 0; i < s->n && !rc; i++) {
		size_t len = strlen(s->line[i]);

		bool newline = len && s->line[i][len - 1] != '\n';

		if (write(fd, s->line[i], len) != (ssize_t)len ||
		    (newline && write(fd, "\n", 1) != 1))
			rc = -EIO;
	}
	if (!rc && fsync(fd))
		rc = -errno;
	if (close(fd) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (rc) {
		hb_err("writing %s: %s (the old file is unchanged)", path, strerror(-rc));
		unlink(tmp);
		return rc;
	}
	snprintf(dir, sizeof(dir), "%s", path);
	dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd); /* the rename itself must survive a crash */
		close(dfd);
	}
	return 0;
}

static int lock_store(const char *path)
{
	char lp[PATH_MAX];
	int fd;

	snprintf(lp, sizeof(lp), "%s.lock", path);
	fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX)) {
		int rc = -errno;

		hb_err("locking %s: %s", lp, strerror(errno));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	return fd;
}

static int parse_id(const char *s, uint64_t *id)
{
	char *end;

	errno = 0;
	*id = strtoull(s, &end, 10);
	if (!*s || *s == '-' || *end || errno || !*id) {
		hb_err("device id '%s': expected a nonzero decimal number", s);
		return -EINVAL;
	}
	return 0;
}

static const struct hb_ks_line *covering_range(const struct store *s, uint64_t id)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->kind[i].kind == HB_KS_RANGE && id >= s->kind[i].first &&
		    id <= s->kind[i].last)
			return &s->kind[i];
	return NULL;
}

static void drop_lines(struct store *s, enum hb_ks_kind kind, uint64_t id, unsigned *dropped)
{
	size_t k = 0;

	*dropped = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (s->kind[i].kind == kind && s->kind[i].first == id) {
			OPENSSL_cleanse(s->line[i], strlen(s->line[i]));
			free(s->line[i]);
			(*dropped)++;
			continue;
		}
		s->line[k] = s->line[i];
		s->kind[k++] = s->kind[i];
	}
	s->n = k;
}

/* Asks hbd to reload; prints what happened. Returns the number of sessions cut, or -1 if hbd
 * could not be asked. */
static long reload(const struct hbctl_devices_opts *o, bool json, char *reply, size_t cap)
{
	const char *path = o->control;
	int rc = hbctl_ctl_request(path, "reload", reply, cap, 10000);
	json_t *doc, *cut;
	long n = -1;

	if (rc) {
		if (!json)
			hb_warn("hbd not reachable at %s (%s): it applies the change at its next "
				"reload (systemctl reload hbd, or kill -HUP its pid)",
				path, strerror(-rc));
		return -1;
	}
	doc = json_loads(reply, 0, NULL);
	if (json_is_true(json_object_get(doc, "ok"))) {
		cut = json_object_get(doc, "revoked_sessions");
		n = json_is_integer(cut) ? (long)json_integer_value(cut) : 0;
	} else {
		hb_err("hbd refused the reload: %s", reply);
	}
	json_decref(doc);
	return n;
}

static int do_list(const struct hbctl_devices_opts *o, const char *keys, bool json)
{
	json_t *entries = NULL;
	struct store s;

	if (store_read(keys, &s, false))
		return HBCTL_FAIL;
	if (json) {
		entries = json_array();
	} else {
		printf("%-8s %-41s\n", "KIND", "DEVICE(S)");
	}
	for (size_t i = 0; i < s.n; i++) {
		const struct hb_ks_line *k = &s.kind[i];
		static const char *const name[] = { [HB_KS_DEVICE] = "device",
						    [HB_KS_RANGE] = "range",
						    [HB_KS_REVOKED] = "revoked" };

		if (k->kind == HB_KS_BLANK)
			continue;
		if (json) {
			json_t *e;

			if (k->kind == HB_KS_RANGE)
				e = json_pack("{s:s,s:o,s:o}", "kind", name[k->kind], "first",
					      hb_json_u64(k->first), "last", hb_json_u64(k->last));
			else
				e = json_pack("{s:s,s:o}", "kind", name[k->kind], "device",
					      hb_json_u64(k->first));

			if (json_array_append_new(entries, e)) {
				json_decref(entries);
				entries = NULL; /* out of memory: hb_json_print says so */
			}
		} else if (k->kind == HB_KS_RANGE) {
			printf("%-8s %" PRIu64 "-%" PRIu64 " (derived keys, %" PRIu64 " devices)\n",
			       name[k->kind], k->first, k->last, k->last - k->first + 1);
		} else {
			printf("%-8s %" PRIu64 "\n", name[k->kind], k->first);
		}
	}
	store_free(&s);
	if (json && hb_json_print(stdout, json_pack("{s:o,s:o}", "keys", hb_json_str(keys),
						    "entries", entries))) {
		hb_err("writing the JSON listing: out of memory");
		return HBCTL_FAIL;
	}
	return HBCTL_OK;
}

static int do_add(const struct hbctl_devices_opts *o, const char *keys, uint64_t id, bool json)
{
	uint8_t secret[HB_SECRET_MAX];
	char hex[2 * HB_SECRET_MAX + 1], line[HB_KS_LINE_MAX + 1], reply[512];
	const char *given = o->secret;
	struct hb_ks_line k = { .kind = HB_KS_DEVICE, .first = id, .last = id };
	const struct hb_ks_line *range;
	struct store s;
	struct stat st;
	unsigned dropped;
	int len, lock, rc = HBCTL_FAIL;
	bool exists;
	long cut;

	if (given) {
		len = hb_hex_decode(given, secret, sizeof(secret));
		if (len < HB_SECRET_MIN) {
			hb_err("--secret: expected %d..%d bytes of hex", HB_SECRET_MIN,
			       HB_SECRET_MAX);
			return HBCTL_USAGE;
		}
	} else {
		len = SECRET_BYTES;
		if (hb_random(secret, (size_t)len)) {
			hb_err("no randomness from libcrypto");
			return HBCTL_FAIL;
		}
	}
	for (int i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", secret[i]);
	lock = lock_store(keys);
	if (lock < 0)
		goto out_secret;
	exists = !stat(keys, &st);
	if (store_read(keys, &s, true))
		goto out_lock;
	for (size_t i = 0; i < s.n; i++)
		if (s.kind[i].kind == HB_KS_DEVICE && s.kind[i].first == id) {
			hb_err("device %" PRIu64 " already has a secret in %s; remove it first to "
			       "give it a new one",
			       id, keys);
			goto out_store;
		}
	/* re-provisioning a revoked device takes its revocation away */
	drop_lines(&s, HB_KS_REVOKED, id, &dropped);
	range = covering_range(&s, id);
	snprintf(line, sizeof(line), "%" PRIu64 " %s\n", id, hex);
	if (store_push(&s, line, &k) || store_write(keys, &s, exists ? &st : NULL))
		goto out_store;
	rc = HBCTL_OK;
	cut = o->no_reload ? -1 : reload(o, json, reply, sizeof(reply));
	if (json) {
		json_t *doc = json_pack("{s:o,s:s,s:o,s:b}", "device", hb_json_u64(id), "secret",
					hex, "keys", hb_json_str(keys), "reloaded", cut >= 0);
		json_t *sec = json_object_get(doc, "secret");

		/* the library's copy of the secret is wiped like ours before it is freed */
		json_incref(doc);
		hb_json_print(stdout, doc);
		if (sec)
			OPENSSL_cleanse((char *)json_string_value(sec), json_string_length(sec));
		json_decref(doc);
	} else {
		printf("device %" PRIu64 " added to %s%s%s\n", id, keys,
		       dropped ? " (its revocation is lifted)" : "",
		       range ? " (its own secret overrides the range's derived key)" : "");
		printf("secret (shown once; store it in the device): %s\n", hex);
		if (cut >= 0)
			printf("hbd reloaded the key store\n");
	}
out_store:
	store_free(&s);
out_lock:
	close(lock);
out_secret:
	OPENSSL_cleanse(secret, sizeof(secret));
	OPENSSL_cleanse(hex, sizeof(hex));
	OPENSSL_cleanse(line, sizeof(line));
	return rc;
}

static int do_remove(const struct hbctl_devices_opts *o, const char *keys, uint64_t id, bool json)
{
	struct hb_ks_line k = { .kind = HB_KS_REVOKED, .first = id, .last = id };
	char line[64], reply[512];
	struct store s;
	struct stat st;
	unsigned dropped, revoked;
	int lock, rc = HBCTL_FAIL;
	bool add_revoke;
	long cut;

	lock = lock_store(keys);
	if (lock < 0)
		return HBCTL_FAIL;
	if (stat(keys, &st)) {
		hb_err("%s: %s", keys, strerror(errno));
		close(lock);
		return HBCTL_FAIL;
	}
	if (store_read(keys, &s, false)) {
		close(lock);
		return HBCTL_FAIL;
	}
	drop_lines(&s, HB_KS_DEVICE, id, &dropped);
	/* a device inside a derive range keeps a valid derived key unless revoked by name */
	add_revoke = covering_range(&s, id) != NULL;
	drop_lines(&s, HB_KS_REVOKED, id, &revoked);
	if (!dropped && !add_revoke) {
		hb_err("device %" PRIu64 " is not in %s%s", id, keys,
		       revoked ? " (it was revoked already; its revocation line is kept)" : "");
		goto out;
	}
	if (add_revoke) {
		snprintf(line, sizeof(line), "%" PRIu64 " revoked\n", id);
		if (store_push(&s, line, &k))
			goto out;
	}
	if (store_write(keys, &s, &st))
		goto out;
	rc = HBCTL_OK;
	cut = o->no_reload ? -1 : reload(o, json, reply, sizeof(reply));
	if (json) {
		hb_json_print(stdout, json_pack("{s:o,s:o,s:b,s:b,s:I}", "device", hb_json_u64(id),
						"keys", hb_json_str(keys), "revoked_in_range",
						add_revoke, "reloaded", cut >= 0, "sessions_cut",
						(json_int_t)(cut > 0 ? cut : 0)));
	} else {
		printf("device %" PRIu64 " %s %s\n", id,
		       add_revoke ? "revoked (inside a derive range) in" : "removed from", keys);
		if (cut >= 0)
			printf("hbd reloaded the key store; %ld live session(s) cut\n", cut);
	}
out:
	store_free(&s);
	close(lock);
	return rc;
}

/* The device's MQTT password, one line on stdout and nothing else (scripts read it). */
static int do_mqtt_password(const struct hbctl_devices_opts *o, const char *keys, uint64_t id)
{
	uint8_t secret[HB_SECRET_MAX];
	char pw[HB_MQTT_PW_LEN + 1], err[256];
	struct hb_keystore *ks;
	uint32_t today = (uint32_t)(time(NULL) / 86400);
	int slen, n;

	if (hb_keystore_load(keys, &ks, err, sizeof(err))) {
		hb_err("%s", err);
		return HBCTL_FAIL;
	}
	slen = hb_keystore_secret(ks, id, secret);
	hb_keystore_free(ks);
	if (slen < 0) {
		hb_err("device %" PRIu64 " has no secret in %s%s", id, keys,
		       slen == -EKEYREVOKED ? " (revoked)" : "");
		return HBCTL_FAIL;
	}
	if (strlen(o->mqtt_realm) > HB_MQTT_REALM_MAX) {
		hb_err("--realm is longer than %d bytes", HB_MQTT_REALM_MAX);
		OPENSSL_cleanse(secret, sizeof(secret));
		return HBCTL_USAGE;
	}
	n = hb_mqtt_password(secret, (size_t)slen, o->mqtt_realm, id, today + o->mqtt_days, pw);
	OPENSSL_cleanse(secret, sizeof(secret));
	if (n < 0) {
		hb_err("deriving the password: %s", strerror(-n));
		return HBCTL_FAIL;
	}
	printf("%s\n", pw);
	OPENSSL_cleanse(pw, sizeof(pw));
	return HBCTL_OK;
}

int hbctl_do_devices(const void *opts, int argc, char **argv)
{
	const struct hbctl_devices_opts *o = opts;
	const char *keys = o->keys, *sub = argv[0];
	bool json = o->json;
	uint64_t id;

	if (!strcmp(sub, "list") && argc == 1)
		return do_list(o, keys, json);
	if (!strcmp(sub, "mqtt-password") && argc == 2) {
		if (parse_id(argv[1], &id))
			return HBCTL_USAGE;
		return do_mqtt_password(o, keys, id);
	}
	if ((!strcmp(sub, "add") || !strcmp(sub, "remove")) && argc == 2) {
		if (parse_id(argv[1], &id))
			return HBCTL_USAGE;
		return !strcmp(sub, "add") ? do_add(o, keys, id, json)
					   : do_remove(o, keys, id, json);
	}
	fprintf(stderr, "hbctl devices: expected 'list', 'add ID', 'remove ID' or 'mqtt-password "
			"ID' (try --help)\n");
	return HBCTL_USAGE;
}
