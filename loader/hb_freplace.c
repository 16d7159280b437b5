// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Can this kernel load a freplace (BPF_PROG_TYPE_EXT) program? libxdp's multi-program
 * dispatcher is built on them: each program on the NIC replaces one of the dispatcher's slot
 * functions. The probe asks exactly that, with nothing else involved: a two-function XDP
 * program whose second function is global, and an EXT program replacing it, both with
 * hand-built BTF (no object files, no libxdp).
 *
 * What it found on Linux 6.18 (this project's machines, see docs/COEXISTENCE.md): the EXT load
 * fails with EPERM before the verifier writes a word, as root with CAP_BPF, CAP_PERFMON and
 * CAP_SYS_ADMIN; fentry and LSM programs fail the same way, while tp_btf, iterators and
 * struct_ops load. The common step of the refused types is the BPF trampoline the kernel sets
 * up at load time, so the refusal comes from the kernel build, not from an attach detail.
 */
#include "hb_env.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <errno.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The two programs, in BTF: int main(void) calls global int hb_probe_sub(void); the EXT
 * program is a function of the same type named like the one it replaces. */
static int make_btf(int *main_id, int *sub_id)
{
	struct btf *b = btf__new_empty();
	int int_id, proto, fd;

	if (!b)
		return -ENOMEM;
	int_id = btf__add_int(b, "int", 4, BTF_INT_SIGNED);
	proto = btf__add_func_proto(b, int_id);
	*main_id = btf__add_func(b, "hb_probe_main", BTF_FUNC_GLOBAL, proto);
	*sub_id = btf__add_func(b, "hb_probe_sub", BTF_FUNC_GLOBAL, proto);
	if (int_id < 0 || proto < 0 || *main_id < 0 || *sub_id < 0 || btf__load_into_kernel(b)) {
		btf__free(b);
		return -EINVAL;
	}
	fd = dup(btf__fd(b));
	btf__free(b);
	return fd < 0 ? -errno : fd;
}

int hbe_probe_freplace(char *why, size_t whylen)
{
	/* main: call hb_probe_sub (2 insns on), exit; hb_probe_sub: r0 = XDP_PASS, exit */
	const struct bpf_insn target[] = {
		{ .code = BPF_JMP | BPF_CALL, .src_reg = BPF_PSEUDO_CALL, .imm = 1 },
		{ .code = BPF_JMP | BPF_EXIT },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = XDP_PASS },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	const struct bpf_insn ext[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = XDP_PASS },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	struct bpf_func_info fi[2];
	int main_id, sub_id, btf_fd, tfd, efd, err;
	char log[256] = "";

	btf_fd = make_btf(&main_id, &sub_id);
	if (btf_fd < 0) {
		snprintf(why, whylen, "the kernel refused the probe's BTF");
		return btf_fd;
	}
	fi[0] = (struct bpf_func_info){ .insn_off = 0, .type_id = (__u32)main_id };
	fi[1] = (struct bpf_func_info){ .insn_off = 2, .type_id = (__u32)sub_id };
	LIBBPF_OPTS(bpf_prog_load_opts, to, .prog_btf_fd = btf_fd, .func_info = fi,
		    .func_info_cnt = 2, .func_info_rec_size = sizeof(fi[0]));
	tfd = bpf_prog_load(BPF_PROG_TYPE_XDP, "hb_probe_tgt", "GPL", target, 4, &to);
	if (tfd < 0) {
		err = -errno;
		snprintf(why, whylen, "loading the probe's XDP target failed: %s", strerror(-err));
		close(btf_fd);
		return err;
	}
	LIBBPF_OPTS(bpf_prog_load_opts, eo, .prog_btf_fd = btf_fd, .func_info = fi + 1,
		    .func_info_cnt = 1, .func_info_rec_size = sizeof(fi[0]),
		    .attach_prog_fd = (__u32)tfd, .attach_btf_id = (__u32)sub_id, .log_buf = log,
		    .log_size = sizeof(log), .log_level = 1);
	fi[1].insn_off = 0;
	efd = bpf_prog_load(BPF_PROG_TYPE_EXT, "hb_probe_sub", "GPL", ext, 2, &eo);
	err = efd < 0 ? -errno : 0;
	if (err) {
		log[strcspn(log, "\n")] = 0;
		snprintf(why, whylen,
			 "the kernel refuses freplace (BPF_PROG_TYPE_EXT) programs: %s%s%s%s",
			 strerror(-err),
			 err == -EPERM && !log[0] ? " before verification, as it refuses every "
						    "program that needs a BPF trampoline"
						  : "",
			 log[0] ? "; verifier: " : "", log);
	} else {
		close(efd);
	}
	close(tfd);
	close(btf_fd);
	return err;
}
