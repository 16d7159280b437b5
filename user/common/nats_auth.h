/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Who a NATS client of hbeat (hbd --nats, hbctl fleet) is and whom it talks to: the options
 * both take, checked and applied to libnats' options in one place. */
#ifndef HB_NATS_AUTH_H
#define HB_NATS_AUTH_H

#include <stddef.h>

/* libnats' own name for its options (nats/nats.h), repeated so that hbd.h, which holds the
 * struct below in hbd's config, does not bring libnats into every file of hbd */
typedef struct __natsOptions natsOptions;

struct hb_nats_auth {
	const char *creds; /* --nats-creds: a user's JWT and NKey seed */
	const char *user, *password_file; /* --nats-user, --nats-password-file */
	/* TLS: --nats-ca, the certificates the servers' must chain to (it turns TLS on);
	 * --nats-cert and --nats-key, this client's, for servers that verify clients */
	const char *ca, *cert, *key;
};

/* The options' combinations that make no sense: NULL, or what is wrong (for a usage error). */
const char *hb_nats_auth_check(const struct hb_nats_auth *a);

/* libnats' words for its last error in this thread (a file's or OpenSSL's reason, a refused
 * certificate), or fallback if it has none. */
const char *hb_nats_last_error(const char *fallback);

/* Applies a to o: credentials, user and password (the file's first line), TLS. 0, or -EINVAL
 * with why filled in (which option, and libnats' or the file's reason). */
int hb_nats_auth_apply(natsOptions *o, const struct hb_nats_auth *a, char *why, size_t whylen);

#endif
