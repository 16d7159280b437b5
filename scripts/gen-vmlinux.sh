#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Regenerate vmlinux.h from the running kernel's BTF; the file is replaced only when it changed,
# so an unchanged kernel rebuilds nothing.
set -euo pipefail
out=${1:?usage: gen-vmlinux.sh OUT}
btf=/sys/kernel/btf/vmlinux
[ -r "$btf" ] || { echo "gen-vmlinux: $btf missing: this kernel lacks CONFIG_DEBUG_INFO_BTF" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
bpftool btf dump file "$btf" format c > "$tmp"
if cmp -s "$tmp" "$out"; then
	echo "gen-vmlinux: $out unchanged"
else
	mv "$tmp" "$out"
	echo "gen-vmlinux: $out updated"
fi
