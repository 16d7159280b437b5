#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""What a first write to fresh memory costs on this VM, per 4 KiB page.

Maps MIB MiB of anonymous memory, writes one byte in each page, unmaps it, ROUNDS times; with
--wait S it sleeps S seconds between rounds. Unmapped pages go back to the guest kernel's free
lists; this VM's kernel reports free memory to its host (page_reporting), which takes it
back, and a page the host took back costs a hypervisor fault when it is written again. Back to
back, the next round gets pages the guest still has; after a wait it may not. A 500k setup
allocates a few GiB of socket slabs, so the same cost shows there (docs/SETUP.md).

    scripts/page-touch.py [--mib 2048] [--rounds 4] [--wait 0]

Prints one JSON line a round, and the page_reporting counters before and after if the
kernel has them.
"""
import argparse
import json
import mmap
import time

REPORTED = "/sys/module/page_reporting/parameters/reported_kib"


def reported_kib():
    try:
        with open(REPORTED, encoding="ascii") as f:
            return int(f.read())
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--wait", type=float, default=0)
    a = ap.parse_args()
    size = a.mib << 20
    pages = size // mmap.PAGESIZE
    before = reported_kib()
    for r in range(a.rounds):
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        m.madvise(mmap.MADV_NOHUGEPAGE)  # 4 KiB pages, as slabs mostly get
        t0 = time.perf_counter()
        for off in range(0, size, mmap.PAGESIZE):
            m[off] = 1
        took = time.perf_counter() - t0
        m.close()
        print(json.dumps({"round": r, "mib": a.mib, "wait_s": a.wait, "seconds": round(took, 3),
                          "us_per_page": round(took * 1e6 / pages, 2)}))
        if a.wait and r + 1 < a.rounds:
            time.sleep(a.wait)
    after = reported_kib()
    if before is not None:
        print(json.dumps({"page_reporting_reported_kib": {"before": before, "after": after}}))


if __name__ == "__main__":
    main()
