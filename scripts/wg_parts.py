#!/usr/bin/env python3
"""Times each launch of the wgmma path (xprep, main, reduce) alone and the
whole call, at the variant qmm/wgmma picks (development tool):

    python3 scripts/wg_parts.py [--tokens 256] [--shapes 4096x4096,...]

Each part is timed like scripts/affine_kernels.py times kernels (CUDA
graphs; the main kernel's weights rotated beyond L2), so the parts' sum
against the whole call shows what the launches between them cost. The
whole call is timed before and after the parts, which shows how much the
order of timing moves a figure. A stream-K variant's main kernel is not
timed alone (its column reads 0): without xprep to clear its tile
counters and ticket, the launches after the first would not wait for
partials, and the kernel stops on a ticket past its blocks.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--shapes", default="4096x4096,4096x14336,14336x4096,8192x28672,28672x8192")
    ap.add_argument("--define", action="append", default=[], help="extra wg.cu macro K=V (diagnostics)")
    ap.add_argument("--no-pdl", action="store_true", help="main and reduce without early start")
    ap.add_argument("--source", help="another wg.cu to time (an A/B against an older copy)")
    ap.add_argument("--no-streamk", action="store_true", help="the rule without stream-K (split tails instead)")
    ap.add_argument("--carveouts", help="comma-separated preferred shared-memory carveouts (percent, -1 the driver's "
                    "default; write --carveouts=-1,100): the whole call is also timed under each, in this order, after the parts")
    args = ap.parse_args()
    if args.source:
        ak.WG_CU = Path(args.source).resolve()
        ak.ENTRY[ak.WG_CU] = "affine_wg"
        ak.KIND_OF[ak.WG_CU] = "wg"
    ak.WG_PDL = not args.no_pdl
    ak.WG_STREAMK = not args.no_streamk
    extra = {k: int(v) for k, v in (d.split("=") for d in args.define)}
    ak.SMS = torch.cuda.get_device_properties(0).multi_processor_count
    t = args.tokens
    print(f"{'shape':>13s} {'tok':>5s} | {'variant':24s} | {'prep':>6s} {'main':>7s} {'reduce':>6s} "
          f"{'sum':>7s} {'call':>7s} {'again':>7s} us")
    for shape in args.shapes.split(","):
        in_f, out_f = (int(v) for v in shape.split("x"))
        cfg = dict(ak.wg_choose(t, out_f, in_f=in_f), **extra)
        wt = ak.Weights(4, 64, in_f, out_f, False, seed=1, keep_dense=False)
        copies = ak.rotated_copies(wt)
        x = (torch.rand((t, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
        y = torch.empty((t, out_f), device="cuda", dtype=torch.int16)
        runs = [ak.wg_launch_fns(cfg, wt, x, y, t, w, s, b) for (w, s, b) in copies]
        call = ak.time_launches([r for r, _ in runs])
        times = {}
        for name, _ in runs[0][0].parts:
            if name == "main" and cfg.get("_sk"):
                continue   # stream-K's main alone would find its counters full from the launch before (xprep clears them)
            fns = [dict(r.parts)[name] for r, _ in runs] if name == "main" else [dict(runs[0][0].parts)[name]]
            times[name] = ak.time_launches(fns)
        again = ak.time_launches([r for r, _ in runs])
        carve = []
        for v in (args.carveouts.split(",") if args.carveouts else ()):
            ak.set_carveout(int(v))
            carve.append(f"{int(v)}: {ak.time_launches([r for r, _ in runs]) * 1e6:.1f}")
        if carve:
            ak.set_carveout(-1)
        label = f"S={cfg['_splits']} full={cfg['_full']} SK={cfg.get('_sk', 0)} BN={cfg['BN']}" + "".join(f" {k}={v}" for k, v in extra.items())
        if args.source:
            label += f" {Path(args.source).name}"
        print(f"{in_f:6d}->{out_f:<6d} {t:5d} | {label:24s} | " + " ".join(
            f"{times.get(k, 0) * 1e6:{7 if k == 'main' else 6}.1f}"
            for k in ("xprep", "main", "reduce"))
            + f" {sum(times.values()) * 1e6:7.1f} {call * 1e6:7.1f} {again * 1e6:7.1f}"
            + (" | carveout " + ", ".join(carve) if carve else ""), flush=True)
        del runs, copies, wt
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
