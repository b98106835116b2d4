#!/usr/bin/env python3
"""Where a qmm/wgmma call's time goes, block by block (development tool).

Builds wg.cu with -DKC_TIMELINE, times the whole call (xprep, main and,
with split-K sums, reduce) as scripts/wg_parts.py does (CUDA graph,
weights rotated beyond L2, early start), and reads the timeline the last
call recorded (wg.cu, KC_TIMELINE): when each xprep block started and
ended, and when each main block's consumer thread 0 started, passed its
grid wait, had its first weight stage and its first x stage, ended the
main loop, passed the epilogue's first barrier and ended. Times are in
microseconds from the first xprep block's start. It also times the call
without the timeline, so the cost of recording shows.

    python3 scripts/wg_timeline.py --tokens 256 --shapes 4096x4096 [--define K=V] [--blocks]
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402

SLOTS = ("start", "grid", "weights", "x", "loop", "barrier", "end", "xwarp", "sm", "barrier2")


def read_global(mod, name, shape):
    import numpy as np
    import cupy
    ptr = mod.get_global(name)
    host = np.empty(shape, dtype=np.uint64)
    cupy.cuda.runtime.memcpy(host.ctypes.data, ptr.ptr, host.nbytes, cupy.cuda.runtime.memcpyDeviceToHost)
    return host.astype(np.int64)


def clear_global(mod, name, nbytes):
    import cupy
    cupy.cuda.runtime.memset(mod.get_global(name).ptr, 0, nbytes)


def spread(vals):
    vals = sorted(vals)
    return f"{vals[0]:6.2f} {statistics.median(vals):6.2f} {vals[-1]:6.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--shapes", default="4096x4096")
    ap.add_argument("--define", action="append", default=[], help="extra wg.cu macro K=V")
    ap.add_argument("--blocks", action="store_true", help="print every main block's row too")
    ap.add_argument("--carveout", type=int, help="every kernel's preferred shared-memory carveout, percent (-1: the driver's default)")
    args = ap.parse_args()
    if args.carveout is not None:
        ak.set_carveout(args.carveout)
    ak.SMS = torch.cuda.get_device_properties(0).multi_processor_count
    extra = {k: int(v) for k, v in (d.split("=") for d in args.define)}
    t = args.tokens
    for shape in args.shapes.split(","):
        in_f, out_f = (int(v) for v in shape.split("x"))
        cfg = dict(ak.wg_choose(t, out_f, in_f=in_f), **extra)
        tcfg = dict(cfg, KC_TIMELINE=1)
        wt = ak.Weights(4, 64, in_f, out_f, False, seed=1, keep_dense=False)
        copies = ak.rotated_copies(wt)
        x = (torch.rand((t, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
        y = torch.empty((t, out_f), device="cuda", dtype=torch.int16)
        plain = ak.time_launches([ak.wg_launch_fns(cfg, wt, x, y, t, w, s, b)[0] for (w, s, b) in copies])
        runs = [ak.wg_launch_fns(tcfg, wt, x, y, t, w, s, b) for (w, s, b) in copies]
        mod = ak._modules[ak.variant_key(ak.WG_CU, tcfg)]["module"]
        clear_global(mod, "kc_tl", 4096 * 10 * 8)   # no rows left from an earlier shape
        timed = ak.time_launches([r for r, _ in runs])
        torch.cuda.synchronize()
        full, splits, grid = cfg.get("_full", 0), cfg.get("_splits", 1), runs[0][0].grid
        prep_grid = -(-t // cfg["BN"]) * cfg["BN"] // cfg.get("XPREP_TOKENS", 2)
        tl = read_global(mod, "kc_tl", (4096, 10))[:grid]
        tlp = read_global(mod, "kc_tlp", (8192, 2))[:prep_grid]
        t0 = int(tlp[:, 0].min())
        us = lambda v: (int(v) - t0) / 1e3
        macros = " ".join(f"{k}={v}" for k, v in cfg.items() if not k.startswith("_"))
        log = ak._modules[ak.variant_key(ak.WG_CU, tcfg)]["artifact"].get("log", "")
        print(f"\n{in_f}->{out_f} t={t} {macros} [ptxas {ak.ptxas_summary(log)}]"
              f" splits={splits} full={full} grid={grid}: call {plain * 1e6:.1f} us, with the timeline {timed * 1e6:.1f} us")
        print(f"  {'(us from the first xprep start)':34s}    min median    max")
        print(f"  {'xprep block start':34s} {spread([us(v) for v in tlp[:, 0]])}")
        print(f"  {'xprep block end':34s} {spread([us(v) for v in tlp[:, 1]])}")
        names = {0: "main block start", 7: "x warp past its grid wait", 1: "consumers past their grid wait",
                 2: "first weight stage in", 3: "first x stage in", 4: "main loop ended",
                 5: "past the epilogue's first barrier", 9: "past its second barrier", 6: "block end"}
        for k in (0, 7, 1, 2, 3, 4, 5, 9, 6):
            vals = [us(v) for v in tl[:, k] if v > 0]
            if vals:
                print(f"  {names[k]:34s} {spread(vals)}")
        dur = lambda a, b: [(int(r[b]) - int(r[a])) / 1e3 for r in tl if r[a] > 0 and r[b] > 0]
        print(f"  {'(durations per block, us)':34s}")
        for a, b, name in ((3, 4, "x in to loop end (the main loop)"), (0, 3, "start to first x"),
                           (4, 5, "loop end to first barrier"), (5, 9, "first to second barrier"),
                           (9, 6, "second barrier to end"), (0, 6, "start to end")):
            vals = dur(a, b)
            if vals:
                print(f"  {name:34s} {spread(vals)}")
        print(f"  {'span: first xprep start to last end':34s} {max(us(v) for v in tl[:, 6] if v > 0):6.2f}"
              f"   SMs used {len(set(int(v) for v in tl[:, 8]))}")
        if args.blocks:
            for b, r in enumerate(tl):
                print(f"    block {b:4d} sm {int(r[8]):3d} " + " ".join(f"{SLOTS[k]}={us(r[k]):6.2f}" for k in (0, 1, 2, 3, 4, 5, 9, 6, 7) if r[k] > 0))
        del runs, copies, wt
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
