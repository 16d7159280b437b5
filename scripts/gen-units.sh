#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Fills in the paths of the systemd units in contrib/systemd: gen-units.sh OUTDIR SBINDIR
# [SYSCONFDIR] [DOCDIR]. Used by `make install` and by the test that runs systemd-analyze
# verify on them (which needs ExecStart binaries that exist).
set -euo pipefail
out=${1:?usage: gen-units.sh OUTDIR SBINDIR [SYSCONFDIR] [DOCDIR]}
sbindir=${2:?usage: gen-units.sh OUTDIR SBINDIR [SYSCONFDIR] [DOCDIR]}
sysconfdir=${3:-/etc}
docdir=${4:-/usr/local/share/doc/hbeat}
src=$(dirname "$0")/../contrib/systemd
mkdir -p "$out"
for unit in "$src"/*.service; do
	sed -e "s|@SBINDIR@|$sbindir|g" -e "s|@SYSCONFDIR@|$sysconfdir|g" -e "s|@DOCDIR@|$docdir|g" \
		"$unit" >"$out/$(basename "$unit")"
done
