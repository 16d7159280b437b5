// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include "nats_auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <nats/nats.h>

const char *hb_nats_auth_check(const struct hb_nats_auth *a)
{
	if (!!a->user != !!a->password_file)
		return "--nats-user and --nats-password-file go together";
	if (!!a->cert != !!a->key)
		return "--nats-cert and --nats-key go together";
	return NULL;
}

const char *hb_nats_last_error(const char *fallback)
{
	const char *text = nats_GetLastError(NULL);

	return text && *text ? text : fallback;
}

static const char *reason(natsStatus s)
{
	return hb_nats_last_error(natsStatus_GetText(s));
}

int hb_nats_auth_apply(natsOptions *o, const struct hb_nats_auth *a, char *why, size_t whylen)
{
	char pw[256] = "";
	natsStatus s = NATS_OK;

	if (a->creds && (s = natsOptions_SetUserCredentialsFromFiles(o, a->creds, NULL))) {
		snprintf(why, whylen, "--nats-creds %s: %s", a->creds, reason(s));
		return -EINVAL;
	}
	if (a->user) {
		FILE *f = fopen(a->password_file, "re");

		if (!f || !fgets(pw, sizeof(pw), f)) {
			snprintf(why, whylen, "--nats-password-file %s: %s", a->password_file,
				 f ? "empty" : strerror(errno));
			if (f)
				fclose(f);
			return -EINVAL;
		}
		fclose(f);
		pw[strcspn(pw, "\r\n")] = 0;
		s = natsOptions_SetUserInfo(o, a->user, pw);
		memset(pw, 0, sizeof(pw));
		if (s) {
			snprintf(why, whylen, "--nats-user %s: %s", a->user, reason(s));
			return -EINVAL;
		}
	}
	if ((a->ca || a->cert) && (s = natsOptions_SetSecure(o, true))) {
		snprintf(why, whylen, "TLS: %s", reason(s));
		return -EINVAL;
	}
	if (a->ca && (s = natsOptions_LoadCATrustedCertificates(o, a->ca))) {
		snprintf(why, whylen, "--nats-ca %s: %s", a->ca, reason(s));
		return -EINVAL;
	}
	if (a->cert && (s = natsOptions_LoadCertificatesChain(o, a->cert, a->key))) {
		snprintf(why, whylen, "--nats-cert %s, --nats-key %s: %s", a->cert, a->key,
			 reason(s));
		return -EINVAL;
	}
	return 0;
}
