#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Install the Debian 12 packages hbeat builds, tests and demos with, if any are missing.
set -euo pipefail

pkgs=(
	clang llvm make gcc pkg-config          # BPF and user builds
	libbpf-dev bpftool libxdp-dev xdp-tools # BPF loading, skeletons, libxdp dispatcher
	liburing-dev libssl-dev libelf-dev zlib1g-dev
	libmicrohttpd-dev libsystemd-dev        # hbd: /metrics, sd_notify
	libjansson-dev                          # JSON output of every program (user/common/json_out.h)
	python3                                 # scripts/callcycles.py: the layering check
	clang-tidy-14 clang-format-14           # make analyze and the format check, in make test
	systemd curl                            # tests: systemd-analyze verify, scraping /metrics
	libcmocka-dev                           # tests
	procps                                  # run-tests.sh: ps, pgrep, pkill (a test's leftovers)
	libclang-rt-14-dev                      # ASan/UBSan/libFuzzer runtimes for clang
	iproute2 ethtool jq valgrind            # netns tests and demo
	gnuplot-nox rt-tests                    # benchmark plot, the machine's wakeup-latency floor
	mosquitto mosquitto-clients             # MQTT: the peer broker, and real clients in the tests
	python3-paho-mqtt                       # MQTT: a second real client library in the tests
	nats-server libnats-dev                 # fleet mode: JetStream presence, downlink, DATA
	openssl                                 # test_fleet_tls: a CA and certificates made for the test
	nftables                                # keepalive bench (dropping a device's packets), fleet balancer
)

# Packages only one target needs: scripts/deps.sh coverage (make coverage)
case ${1:-} in
coverage) pkgs+=(gcovr) ;;
esac

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing packages: ${missing[*]}; run as root or install them with apt-get" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
