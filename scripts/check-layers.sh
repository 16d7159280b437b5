#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Keeps the layers: fails if any program's files call each other in a cycle of more than
# LAYER_MAX_CYCLE files (default 3), printing every cycle and the calls that make it.
# usage: scripts/check-layers.sh        (LAYER_MAX_CYCLE=N to change the limit)
set -uo pipefail
cd "$(dirname "$0")/.."
max=${LAYER_MAX_CYCLE:-3}

# One call graph per program: its own folder and the common code it links.
programs=(
	"user/hbd user/common"
	"user/hbload user/common"
	"loader user/common"
)

bad=0
for p in "${programs[@]}"; do
	# shellcheck disable=SC2086 # the folders are meant to split
	if out=$(python3 scripts/callcycles.py --max "$max" -v $p); then
		echo "layers: $p: largest cycle ${out##*largest cycle: } (limit $max)"
	else
		rc=$?
		echo "layers: $p: largest cycle ${out##*largest cycle: }, more than $max:"
		printf '%s\n' "$out" | sed '$d' | sed 's/^/  /'
		[ "$rc" -eq 1 ] || echo "layers: callcycles.py failed (status $rc)"
		bad=1
	fi
done
if [ "$bad" -ne 0 ]; then
	echo "layers: split the files in a cycle so that calls go one way (lower layers never" \
	     "call up); scripts/callcycles.py -v DIR... lists the calls" >&2
fi
exit "$bad"
