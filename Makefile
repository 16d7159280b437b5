# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# hbeat build: bpf/x.bpf.c -> build/bpf/x.bpf.o -> build/skel/x.skel.h -> user objects -> binaries.
#
#   make            build hbctl, hbd, hbload and the BPF objects
#   make test       install missing packages, build, run the whole test suite
#   make demo       install missing packages, build, run the veth/netns demo end to end
#   make fleet      the same for fleet mode: NATS cluster, 3 hbd nodes, nftables balancer
#   make SAN=1      build with ASan+UBSan into build/asan (tests under sanitizers)
#   make fuzz       libFuzzer binaries (clang) in build/fuzz; scripts/fuzz.sh runs them
#   make install    binaries, device library, systemd units (PREFIX, DESTDIR, SYSCONFDIR)
#   make V=1        show full commands
#   BUILD=dir       build elsewhere (parallel builds must not share a directory)

SAN ?=
ifeq ($(SAN),1)
BUILD ?= build/asan
else
BUILD ?= build
endif

ARCH ?= $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
CLANG ?= clang
BPFTOOL ?= bpftool
CC := $(if $(filter default,$(origin CC)),gcc,$(CC))
VMLINUX := vmlinux/$(ARCH)/vmlinux.h

ifeq ($(V),1)
Q =
msg =
else
Q = @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

.DELETE_ON_ERROR:
.SUFFIXES:
.SECONDARY:

INCLUDES := -Ibpf -Iuser/common -Iuser/device -Iuser/hbd -Iuser/hbload -Iloader -Ifuzz -I$(BUILD)/skel \
	    -I$(BUILD)/gen
CFLAGS ?= -O2 -g
CFLAGS += -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter \
	  -fno-omit-frame-pointer -MMD -MP $(INCLUDES)
LDLIBS := -lbpf -lxdp -luring -lcrypto -lmicrohttpd -lsystemd -ljansson -lelf -lz -lpthread -lm
# Fleet mode (hbd --nats, hbctl fleet) talks to NATS through libnats: only the binaries that
# hold that code link it (hbd, hbctl and the tests, which link hbd's library).
NATS_LIBS := $(shell pkg-config --libs libnats 2>/dev/null || echo -lnats)
ifeq ($(SAN),1)
CFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif

BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Wall -Wextra -Werror \
	      -Wno-unused-parameter -Wno-missing-field-initializers \
	      -I$(dir $(VMLINUX)) -Ibpf -MMD -MP

BPF_SRCS := $(wildcard bpf/*.bpf.c)
BPF_OBJS := $(patsubst bpf/%.bpf.c,$(BUILD)/bpf/%.bpf.o,$(BPF_SRCS))
SKELS := $(patsubst bpf/%.bpf.c,$(BUILD)/skel/%.skel.h,$(BPF_SRCS))

# Each program is main.c plus a static library of the rest of its folder, so tests can link
# the same code the binaries run.
COMMON_SRCS := $(wildcard user/common/*.c)
HBD_SRCS := $(filter-out user/hbd/main.c,$(wildcard user/hbd/*.c))
HBLOAD_SRCS := $(filter-out user/hbload/main.c,$(wildcard user/hbload/*.c))
HBCTL_SRCS := $(filter-out loader/main.c,$(wildcard loader/*.c))
TEST_SRCS := $(wildcard tests/test_*.c)
# The tests' own helpers (harness, clients, assertions), linked into every test binary.
TEST_LIB_SRCS := $(wildcard tests/lib/*.c)
# Fuzz targets (fuzz/targets.h): linked into the tests too, which replay the corpus with gcc.
FUZZ_TARGET_SRCS := $(filter-out fuzz/entry.c fuzz/seeds.c,$(wildcard fuzz/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
LIBCOMMON := $(BUILD)/libhbcommon.a
LIBHBD := $(BUILD)/libhbd.a
LIBHBLOAD := $(BUILD)/libhbload.a
LIBHBCTL := $(BUILD)/libhbctl.a
LIBFUZZ := $(BUILD)/libhbfuzz.a
LIBTEST := $(BUILD)/libhbtest.a
# The device library is self-contained (link it with -lcrypto alone): the blocking wrapper and
# the protocol core it drives.
LIBDEVICE := $(BUILD)/libhbdevice.a
DEVICE_SRCS := $(wildcard user/device/*.c) user/common/hbclient.c user/common/proto.c \
	       user/common/auth.c user/common/sesskey.c user/common/siphash.c
BINS := $(BUILD)/hbd $(BUILD)/hbload $(BUILD)/hbctl
# Benchmark tools, one C file each, linking the common library (scripts/peer-bench.sh)
TOOLS := $(patsubst tools/%.c,$(BUILD)/tools/%,$(wildcard tools/*.c))
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(filter-out %.bpf.c,$(wildcard examples/*.c)))
EXAMPLE_BPF := $(patsubst examples/%.bpf.c,$(BUILD)/examples/%.bpf.o,$(wildcard examples/*.bpf.c))
TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))

.PHONY: all bpf tests test demo fleet deps vmlinux clean bench peer-bench fuzz fuzz-seeds install FORCE
all: $(BINS) $(BPF_OBJS) $(LIBDEVICE) $(EXAMPLES) $(EXAMPLE_BPF) $(TOOLS)
bpf: $(BPF_OBJS) $(SKELS)
tests: $(TESTS) all

$(BUILD)/bpf/%.bpf.o: bpf/%.bpf.c $(VMLINUX)
	$(call msg,BPF,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/examples/%.bpf.o: examples/%.bpf.c $(VMLINUX)
	$(call msg,BPF,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/skel/%.skel.h: $(BUILD)/bpf/%.bpf.o
	$(call msg,SKEL,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(BPFTOOL) gen skeleton $< name $* > $@

# The version string (git describe), rewritten only when it changes so nothing rebuilds for
# nothing; objects that include it depend on it through -MMD.
VERSION_H := $(BUILD)/gen/version.h
$(VERSION_H): FORCE
	$(Q)mkdir -p $(@D)
	$(Q)v=$$(git describe --always --dirty 2>/dev/null || echo unknown); \
	printf '#define HBEAT_VERSION "%s"\n' "$$v" > $@.tmp; \
	if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
FORCE:

# Every user object may include a skeleton; -MMD records which one it really uses.
$(BUILD)/obj/%.o: %.c | $(SKELS) $(VERSION_H)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(LIBCOMMON): $(call obj,$(COMMON_SRCS))
$(LIBHBD): $(call obj,$(HBD_SRCS))
$(LIBHBLOAD): $(call obj,$(HBLOAD_SRCS))
$(LIBHBCTL): $(call obj,$(HBCTL_SRCS))
$(LIBFUZZ): $(call obj,$(FUZZ_TARGET_SRCS))
$(LIBTEST): $(call obj,$(TEST_LIB_SRCS))
$(LIBDEVICE): $(call obj,$(DEVICE_SRCS))
$(BUILD)/%.a:
	$(call msg,AR,$@)
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

ALL_LIBS := -Wl,--start-group $(LIBFUZZ) $(LIBHBD) $(LIBHBLOAD) $(LIBHBCTL) $(LIBDEVICE) \
	    $(LIBCOMMON) -Wl,--end-group

$(BUILD)/hbd: $(call obj,user/hbd/main.c) $(LIBHBD) $(LIBCOMMON)
$(BUILD)/hbload: $(call obj,user/hbload/main.c) $(LIBHBLOAD) $(LIBCOMMON)
$(BUILD)/hbctl: $(call obj,loader/main.c) $(LIBHBCTL) $(LIBCOMMON)
$(BUILD)/hbd $(BUILD)/hbctl: LDLIBS += $(NATS_LIBS)
$(BINS):
	$(call msg,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< -Wl,--start-group $(filter %.a,$^) -Wl,--end-group $(LDLIBS)

$(BUILD)/tools/%: $(call obj,tools/%.c) $(LIBCOMMON)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Examples use only what a device has: the device library and libcrypto.
$(BUILD)/examples/%: $(call obj,examples/%.c) $(LIBDEVICE)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lcrypto

$(BUILD)/tests/%: $(call obj,tests/%.c) $(LIBTEST) $(LIBFUZZ) $(LIBHBD) $(LIBHBLOAD) $(LIBHBCTL) $(LIBDEVICE) $(LIBCOMMON) $(BPF_OBJS)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIBTEST) $(ALL_LIBS) $(LDLIBS) $(NATS_LIBS) -lcmocka

# The presence test runs the reclaim inside a publish and a publish inside the reclaim
# (tests/test_fleet_presence.c).
$(BUILD)/tests/test_fleet_presence: LDFLAGS += -Wl,--wrap=js_PublishAsync \
	-Wl,--wrap=js_PublishAsyncGetPendingList

# libFuzzer: the userspace code again, built by clang with coverage and ASan+UBSan, one binary
# per target in fuzz/targets.h (fuzz/entry.c with -DHBF_TARGET).
FZ := $(BUILD)/fuzz
FZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FZ_BASE := -g -O1 -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter \
	   -fno-omit-frame-pointer $(INCLUDES) $(FZ_SAN)
fzobj = $(patsubst %.c,$(FZ)/obj/%.o,$(1))
FZ_LIB := $(FZ)/libfz.a
FUZZERS := $(patsubst fuzz/%.c,$(FZ)/fuzz_%,$(FUZZ_TARGET_SRCS))

$(FZ)/obj/%.o: %.c | $(SKELS)
	$(call msg,FUZZCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(FZ_BASE) -MMD -MP -fsanitize=fuzzer-no-link -c $< -o $@

$(FZ_LIB): $(call fzobj,$(COMMON_SRCS) $(HBD_SRCS) $(FUZZ_TARGET_SRCS))

$(FZ)/fuzz_%: fuzz/entry.c fuzz/targets.h $(FZ_LIB)
	$(call msg,FUZZER,$@)
	$(Q)$(CLANG) $(FZ_BASE) -fsanitize=fuzzer -DHBF_TARGET=hbf_$* -o $@ $< $(FZ_LIB) $(LDLIBS)

fuzz: $(FUZZERS)

# Regenerates the seed corpus from the real codec (commit what changed).
$(BUILD)/fuzz-seeds: $(call obj,fuzz/seeds.c) $(LIBCOMMON)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
fuzz-seeds: $(BUILD)/fuzz-seeds
	$(Q)$(BUILD)/fuzz-seeds fuzz/corpus

# The two README commands. Both install what a fresh Debian 12 machine lacks first.
test: deps
	$(Q)$(MAKE) --no-print-directory tests
	$(Q)BUILD=$(BUILD) scripts/run-tests.sh

demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)BUILD=$(BUILD) scripts/demo.sh

bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)BUILD=$(BUILD) scripts/bench.sh

fleet: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)BUILD=$(BUILD) scripts/fleet.sh

peer-bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)BUILD=$(BUILD) scripts/peer-bench.sh --publish

deps:
	$(Q)scripts/deps.sh

# Code-health tools (scripts/run-tests.sh runs the first three in `make test`):
#   make analyze    clang-tidy over user/, loader/, fuzz/, examples/ (scripts/analyze.sh)
#   make layers     no call cycle of more than 3 files in a program (scripts/check-layers.sh)
#   make format-check / make format   clang-format: check / rewrite (scripts/check-format.sh)
#   make coverage   the suite built with --coverage, then line and branch figures (in build/cov)
ANALYZE_SRCS := $(sort $(wildcard user/*/*.c loader/*.c fuzz/*.c tools/*.c) \
		$(filter-out %.bpf.c,$(wildcard examples/*.c)))
# fuzz/entry.c is one binary per target; analysing it once, as the frame target, is enough
analyze_cflags = $(filter-out -MMD -MP,$(CFLAGS))$(if $(filter fuzz/entry.c,$(1)), \
		 -DHBF_TARGET=hbf_frame)
$(BUILD)/compile_commands.json: Makefile FORCE | $(SKELS) $(VERSION_H)
	$(Q)mkdir -p $(@D)
	$(Q)(sep='['; $(foreach f,$(ANALYZE_SRCS),printf '%s\n{"directory": "%s", "file": "%s", \
		"command": "%s -c %s -o /dev/null"}' "$$sep" "$(CURDIR)" "$(f)" \
		"$(CC) $(call analyze_cflags,$(f))" "$(f)"; sep=',';) printf '\n]\n') > $@.tmp
	$(Q)if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
analyze: $(BUILD)/compile_commands.json
	$(Q)BUILD=$(BUILD) scripts/analyze.sh
layers:
	$(Q)scripts/check-layers.sh
format-check:
	$(Q)scripts/check-format.sh
format:
	$(Q)scripts/check-format.sh --fix
coverage:
	$(Q)scripts/coverage.sh
.PHONY: analyze layers format-check format coverage

PREFIX ?= /usr/local
SBINDIR ?= $(PREFIX)/sbin
SYSCONFDIR ?= /etc
DOCDIR ?= $(PREFIX)/share/doc/hbeat
UNITDIR ?= /etc/systemd/system
install: all
	$(Q)install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/hbeat \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)
	$(Q)install -m 0755 $(BINS) $(DESTDIR)$(SBINDIR)
	$(Q)install -m 0644 $(LIBDEVICE) $(DESTDIR)$(PREFIX)/lib
	$(Q)install -m 0644 user/device/hbdev.h user/common/hbclient.h user/common/proto.h \
		user/common/auth.h bpf/hbeat_abi.h $(DESTDIR)$(PREFIX)/include/hbeat
	$(Q)scripts/gen-units.sh $(DESTDIR)$(UNITDIR) $(SBINDIR) $(SYSCONFDIR) $(DOCDIR)
	$(Q)install -m 0644 README.md docs/*.md $(DESTDIR)$(DOCDIR)

# Regenerate vmlinux.h from the running kernel's BTF; replaces the file only if it changed.
vmlinux:
	$(Q)scripts/gen-vmlinux.sh $(VMLINUX)

clean:
	$(Q)rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj $(BUILD)/bpf $(BUILD)/fuzz $(BUILD)/examples -name '*.d' 2>/dev/null)
