/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Key store reload without a restart, and revocation of the sessions it no longer admits. */
#ifndef HBD_RELOAD_H
#define HBD_RELOAD_H

#include <stddef.h>

#include "auth.h"

struct hbd_daemon;

struct hbd_reload_result {
	size_t devices, ranges, revoked; /* what the new store holds */
	unsigned sessions_cut; /* live sessions of devices it no longer admits */
	unsigned sessions_rekeyed; /* live sessions under a key it replaced */
};

/* Control thread (SIGHUP or the control socket's "reload"): loads the key store file again.
 * A file that does not parse changes nothing (-errno, why says file and line). Otherwise the new
 * store replaces the old one for every HELLO from now on, and every live session of a device the
 * new store does not admit (removed or revoked), or admits with another secret than the one its
 * HELLO was signed with, is cut: kernel map entry deleted, BYE(REVOKED), connection closed or
 * UDP session removed.
 */
int hbd_keys_reload(struct hbd_daemon *d, struct hbd_reload_result *res, char *why, size_t whylen);
/* The store loaded at start gets the first tag (the sessions record which store verified them). */
void hbd_keys_tag_first(struct hb_keystore *ks);

#endif
