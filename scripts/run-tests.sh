#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Runs the whole test suite: every cmocka binary in $BUILD/tests (unit, BPF, daemon, end to end),
# a bounded libFuzzer run of each fuzz target (FUZZ_SECONDS each, default 20; SKIP_FUZZ=1 skips),
# then the userspace tests again under ASan/UBSan/LSan (SKIP_SAN=1 skips). Before them: the
# layering, static analysis and format checks (SKIP_LAYERS=1, SKIP_ANALYZE=1, SKIP_FORMAT=1).
# Exit status is nonzero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PER_TEST_TIMEOUT=${PER_TEST_TIMEOUT:-600}

if [ "$(id -u)" -ne 0 ]; then
	echo "run-tests: the BPF and netns tests need root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)" >&2
	exit 2
fi
if ! mountpoint -q /sys/fs/bpf || [ "$(stat -f -c %T /sys/fs/bpf)" != bpf_fs ]; then
	mkdir -p /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf
	echo "run-tests: mounted bpffs at /sys/fs/bpf"
fi

failed=()
# The processes of process group $1 that still run (zombies waiting for their reaper do not).
running_in_group() {
	ps -eo pid=,pgid=,stat=,args= | awk -v g="$1" '$2 == g && $3 !~ /^Z/'
}

# run NAME CMD...: one test binary, bounded in time. timeout (not --foreground) leads a process
# group of its own, and everything the test starts stays in it: a server, a daemon or an hbd's
# upgrade successor that a crashed test or a failed teardown left running is found there
# afterwards, ended, and fails the test, so no run leaves processes behind on the machine.
run() {
	local name=$1 group left rc
	shift
	echo "=== $name"
	timeout --kill-after=10 "$PER_TEST_TIMEOUT" "$@" &
	group=$!
	wait "$group"
	rc=$?
	for _ in 1 2 3 4 5; do # a process its parent is ending may linger a moment
		left=$(running_in_group "$group")
		[ -z "$left" ] && break
		sleep 0.2
	done
	if [ -n "$left" ]; then
		echo "$name left processes running; ending them:" >&2
		echo "$left" >&2
		pkill -KILL -g "$group"
		rc=1
	fi
	[ "$rc" -eq 0 ] || failed+=("$name")
	return "$rc"
}

# The sweep above, checked on a test that crashes and leaves a child behind (the way a
# crashed test_fleet left its nats-server running): run must fail it and end the child.
check_run_sweeps() {
	local pidfile saved=("${failed[@]}") child
	pidfile=$(mktemp)
	failed=()
	echo "=== runner"
	run sweep-fixture bash -c "sleep 300 & echo \$! > $pidfile; kill -SEGV \$\$" 2>/dev/null
	child=$(cat "$pidfile")
	rm -f "$pidfile"
	if [ "${failed[*]}" != sweep-fixture ] || [ -z "$child" ] ||
		ps -o stat= -p "$child" | grep -qv '^Z'; then
		[ -n "$child" ] && kill -KILL "$child" 2>/dev/null
		saved+=("runner")
		echo "run did not fail a crashed test or did not end the child it left" >&2
	fi
	failed=("${saved[@]}")
}
check_run_sweeps

# Code health first (a failure counts, nothing stops): no call cycle over 3 files, clang-tidy
# (SKIP_ANALYZE=1 skips it), the format of the C files changed since scripts/format-base.
if [ "${SKIP_LAYERS:-0}" != 1 ]; then
	echo "=== layers"
	scripts/check-layers.sh || failed+=("layers")
fi
if [ "${SKIP_ANALYZE:-0}" != 1 ]; then
	echo "=== analyze"
	make --no-print-directory BUILD="$BUILD" analyze || failed+=("analyze")
fi
if [ "${SKIP_FORMAT:-0}" != 1 ]; then
	echo "=== format"
	scripts/check-format.sh || failed+=("format")
fi

# unit tests first (fast), the end-to-end test last
mapfile -t all < <(find "$BUILD/tests" -maxdepth 1 -type f -name 'test_*' ! -name '*.d' | sort)
for t in "${all[@]}"; do
	case $t in *e2e*) continue ;; esac
	run "$(basename "$t")" "$t"
done
for t in "${all[@]}"; do
	case $t in *e2e*) BUILD=$BUILD run "$(basename "$t")" "$t" ;; esac
done

# The fuzz targets, coverage-guided, for a bounded time (scripts/fuzz.sh for long campaigns).
if [ "${SKIP_FUZZ:-0}" != 1 ]; then
	echo "=== fuzz (${FUZZ_SECONDS:-20} s a target)"
	BUILD=$BUILD scripts/fuzz.sh "${FUZZ_SECONDS:-20}" || failed+=("fuzz")
fi

# Userspace code again under sanitizers: the same tests, built with SAN=1. BPF-only tests are
# not rebuilt (the sanitizers see nothing of kernel code).
if [ "${SKIP_SAN:-0}" != 1 ]; then
	echo "=== building with ASan/UBSan (make SAN=1)"
	if make --no-print-directory SAN=1 BUILD="$BUILD/asan" -j"$(nproc)" tests >/dev/null; then
		export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
		for t in $(find "$BUILD/asan/tests" -maxdepth 1 -type f -name 'test_*' ! -name '*.d' | sort); do
			case $(basename "$t") in
			test_xdp* | test_sockmap* | test_e2e* | test_mqtt_kernel*) continue ;;
			esac
			BUILD=$BUILD/asan run "asan:$(basename "$t")" "$t"
		done
	else
		failed+=("asan-build")
	fi
fi

echo
if [ ${#failed[@]} -ne 0 ]; then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
echo "all tests passed"
