# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Helpers for the scripts that run benchmarks several times side by side and summarise them
# (default-mode-bench.sh, peer-bench.sh, setup-cost.sh and the *-ab.sh; sourced): their log
# lines and checks, the jq functions of their summaries, and a run of scripts/bench.sh with
# its report kept beside its outputs. DRIVER names the script in every message.

driver_log() {
	printf '%s %s: %s\n' "$(date +%T)" "$DRIVER" "$*" >&2
}

# Exits 2 (a usage error) unless VALUE is a whole number of at least MIN.
driver_need_count() { # OPTION VALUE MIN
	[[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] && return 0
	echo "$DRIVER: $1 takes a whole number >= $3, not '$2'" >&2
	exit 2
}

driver_need_root() { # WHY
	[ "$(id -u)" -eq 0 ] && return 0
	echo "$DRIVER: needs root ($1)" >&2
	exit 1
}

driver_loadavg() {
	cut -d' ' -f1-3 /proc/loadavg
}

# The two sides of an A/B of builds and hbd options (fleet-login-ab.sh, fleet-storm-ab.sh),
# alternated so that a drift of the machine's speed favours neither: round R runs "before
# after" when R is odd, "after before" when it is even.
driver_ab_order() { # ROUND
	if [ $(($1 % 2)) = 1 ]; then echo before after; else echo after before; fi
}

# SIDE's build and hbd options into SIDE_BUILD and SIDE_ARGS: BEFORE and BEFORE_ARGS for
# before, AFTER and AFTER_ARGS for after (the caller's options).
driver_ab_side() { # SIDE
	if [ "$1" = after ]; then
		SIDE_BUILD=$AFTER SIDE_ARGS=$AFTER_ARGS
	else
		SIDE_BUILD=$BEFORE SIDE_ARGS=$BEFORE_ARGS
	fi
}

# The jq functions the summaries share, to put before a program: r2 and r3 round to 2 and 3
# decimals, median is of the values that are not null, ratio($num; $den) is null when either
# is missing or den is 0.
# shellcheck disable=SC2016 # jq's variables, not the shell's
DRIVER_JQ='
  def r2: if . == null then null else (. * 100 | round) / 100 end;
  def r3: if . == null then null else (. * 1000 | round) / 1000 end;
  def median: map(select(. != null)) | sort
    | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
      else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def ratio($num; $den): if $num and $den and $den > 0 then $num / $den else null end;
'

# scripts/bench.sh ARGS... with its outputs, report (not over docs/BENCHMARKS.md) and log
# (bench.log) in DIR. If it fails, the log's tail is shown and the script exits: what it has
# summarised so far holds the runs before. WHAT names the run in that message. bench.sh
# removes what it made (namespaces, pins, processes), also when interrupted.
driver_bench() { # DIR WHAT ARGS...
	local dir=$1 what=$2
	shift 2
	mkdir -p "$dir"
	if ! BENCH_OUT=$dir BENCH_DOC=$dir/BENCHMARKS.md BENCH_PNG=$dir/bench-rtt.png \
		scripts/bench.sh "$@" > "$dir/bench.log" 2>&1; then
		tail -n 20 "$dir/bench.log" >&2
		driver_log "bench.sh failed in $what; the summary has the runs before it"
		exit 1
	fi
}
