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
run() { # run NAME CMD...: one test binary, bounded in time
	local name=$1
	shift
	echo "=== $name"
	if ! timeout --kill-after=10 "$PER_TEST_TIMEOUT" "$@"; then
		failed+=("$name")
	fi
}

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
