#!/usr/bin/env python3
"""Where affine_bulk's time goes, block by block (development tool).

Builds the bulk kernel with -DKC_TIMELINE, times it as the benchmark does
(CUDA graph, weights rotated beyond L2, early start), and reads the
timeline its warps recorded in the graph's last launch: when each block
started and ended, how long its producer warps waited for free slots (the
consumers behind), how long its consumer warps waited for full ones (the
feed behind), and how long the consumers ran after their last stage came
(the tail). It also times the same variant without the timeline, so the
cost of recording shows.

    python3 scripts/bulk_timeline.py --shapes 4096x14336,8192x28672 \\
        --variants "rule;wk=2,parts=1;fp16=0"

A variant is the rule's config with bulk_config keywords (lower case) or
macros (upper case) changed: "rule" changes nothing.
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402


def parse_variant(text: str):
    kw, macros = {}, {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        if item == "rule":
            continue
        k, v = item.split("=")
        (macros if k.isupper() else kw)[k] = int(v)
    return kw, macros


def timeline(mod, grid: int, warps: int):
    import numpy as np
    import cupy
    ptr = mod.get_global("kc_tl")
    host = np.empty((1024, 32, 16), dtype=np.uint64)
    cupy.cuda.runtime.memcpy(host.ctypes.data, ptr.ptr, host.nbytes, cupy.cuda.runtime.memcpyDeviceToHost)
    return host[:grid, :warps].astype(np.int64)


def summarise(tl, cw: int, parts: int):
    """Per block, in microseconds from the kernel's first start."""
    g0 = tl[:, :, 0]
    g1 = tl[:, :, 1]
    c0, c1, wait, n, first, last, ready, flush = (tl[:, :, k] for k in range(2, 10))
    mk = [tl[:, :, k] for k in range(10, 14)]   # the kernel's marks (0: not set)
    cycles = float((c1 - c0).sum())
    ns = float((g1 - g0).sum())
    ghz = cycles / ns if ns > 0 else 1.0
    t0 = int(g0.min())
    us = lambda cyc: cyc / ghz / 1e3
    rows = []
    for b in range(tl.shape[0]):
        cons = slice(0, cw)
        prod = slice(cw, cw + parts)
        start = (int(g0[b].min()) - t0) / 1e3
        end = (int(g1[b].max()) - t0) / 1e3
        cdur = (c1[b, cons] - c0[b, cons]).astype(float)
        cwait = wait[b, cons].astype(float)
        has = n[b, cons] > 0                     # warps without stages record no waits
        if not has.any():
            has = n[b, cons] >= 0
        first_data = us(float((first[b, cons] - c0[b, cons])[has].min()))
        last_data = us(float((last[b, cons] - c0[b, cons])[has].max()))
        tail = us(float((c1[b, cons] - c0[b, cons]).max())) - last_data
        # the last stage's arithmetic: from the last wait to the latest flush
        lastcalc = us(float((flush[b, cons] - c0[b, cons])[has].max())) - last_data
        pdur = (c1[b, prod] - c0[b, prod]).astype(float)
        pwait = wait[b, prod].astype(float)
        def since(k, w, base):   # mark k of warp w, us after base (a clock64), or nan when unset
            return us(float(mk[k][b, w] - base)) if mk[k][b, w] else float("nan")
        rows.append(dict(gw=since(0, 0, c0[b, 0]), xcv=since(1, 0, c0[b, 0]), xld=since(3, 0, c0[b, 0]),
                         hold=since(2, cw, c0[b, cw]),
                         start=start, end=end, first=first_data, last=last_data, tail=tail,
                         cwait=float(cwait.sum() / max(cdur.sum(), 1)),
                         pwait=float(pwait.sum() / max(pdur.sum(), 1)),
                         pend=us(float(pdur.max())), waits=int(n[b, cons].sum()),
                         ready=float(ready[b, cons].sum() / max(n[b, cons].sum(), 1)), calc=lastcalc,
                         stage=us(float(statistics.median(((cdur - cwait) / n[b, cons].clip(1)).tolist())))))
    return ghz, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="4096x14336,14336x4096,8192x28672,28672x8192")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--quant", default="4:64")
    ap.add_argument("--variants", default="rule")
    ap.add_argument("--blocks", action="store_true", help="print every block's row too")
    args = ap.parse_args()
    import torch
    ak.SMS = torch.cuda.get_device_properties(0).multi_processor_count
    bits, group = (int(v) for v in args.quant.split(":"))
    t = args.tokens
    print(f"{'shape':>12s} {'variant':24s} {'us':>6s} {'us tl':>6s} {'GHz':>5s} | {'span':>5s} {'start':>5s} "
          f"{'first':>5s} {'last':>5s} {'tail':>5s} {'tailmx':>6s} {'calc':>5s} {'stage':>5s} {'ready':>5s} {'pend':>5s} "
          f"{'cwait':>5s} {'pwait':>5s} {'end':>5s} {'endmn':>5s} | {'gw':>5s} {'xcv':>5s} {'hold':>5s} {'xld':>5s}")
    for shape in args.shapes.split(","):
        in_f, out_f = (int(v) for v in shape.split("x"))
        wt = ak.Weights(bits, group, in_f, out_f, False, seed=in_f * 7 + out_f, keep_dense=False)
        copies = ak.rotated_copies(wt)
        x = (torch.rand((t, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
        for vtext in args.variants.split(";"):
            kw, macros = parse_variant(vtext)
            cfg = ak.bulk_config(bits, group, t, in_f, out_f, **kw)
            if cfg is None:
                print(f"{shape:>12s} {vtext:24s} no config")
                continue
            cfg.update(macros)
            plain = ak.bench_kernel("bulk", wt, copies, x, t, cfg)
            tcfg = dict(cfg, KC_TIMELINE=1)
            timed = ak.bench_kernel("bulk", wt, copies, x, t, tcfg)
            torch.cuda.synchronize()
            mod = ak._modules[ak.variant_key(ak.BULK_CU, tcfg)]["module"]
            grid, block, _ = ak.bulk_launch(tcfg, t, in_f, out_f)
            cw, parts = tcfg["CW"], tcfg.get("PARTS", 1)
            ghz, rows = summarise(timeline(mod, grid[0], cw + parts), cw, parts)
            med = lambda k: statistics.median(r[k] for r in rows)
            span = max(r["end"] for r in rows)
            print(f"{shape:>12s} {vtext:24s} {plain * 1e6:6.1f} {timed * 1e6:6.1f} {ghz:5.2f} | {span:5.1f} "
                  f"{max(r['start'] for r in rows):5.2f} {med('first'):5.2f} {med('last'):5.2f} {med('tail'):5.2f} "
                  f"{max(r['tail'] for r in rows):6.2f} {med('calc'):5.2f} {med('stage'):5.2f} {med('ready'):5.2f} {med('pend'):5.2f} {med('cwait'):5.2f} {med('pwait'):5.2f} "
                  f"{med('end'):5.2f} {min(r['end'] for r in rows):5.2f} | {med('gw'):5.2f} {med('xcv'):5.2f} {med('hold'):5.2f} {med('xld'):5.2f}  "
                  f"[MT={cfg['MT']} CW={cw} U={cfg['U']} NS={cfg['NS']} PARTS={parts} WK={cfg.get('WK', 1)} "
                  f"FP16={cfg.get('FP16', 0)} grid={grid[0]}]", flush=True)
            if args.blocks:
                for b, r in enumerate(rows):
                    print("    block %3d " % b + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                                         for k, v in r.items()))
        del copies, wt
        torch.cuda.empty_cache()
    print("columns: us plain and with the timeline; span: first start to last end (us); start: the latest "
          "block start; first/last: when a block's consumers' first/last wait ended (median over blocks, us from "
          "each warp's start; warps without stages left out); tail: block end after its last stage came (median, max); calc: of that, until the last flush began (rough: the compiler may move the clock read across the arithmetic); stage: a consumer warp's busy time per wait; ready: share of consumer waits whose data was there at the first poll; pend: producer's last "
          "copy issued; cwait/pwait: share of consumer/producer time spent waiting; end: block end (median, min); "
          "gw/xcv: when consumer warp 0's wait for the grid ahead ended and x was converted; hold: when the producer "
          "went past its hold; xld: when consumer warp 0's first loads of x landed (medians, us from each "
          "warp's start; nan: not recorded)")


if __name__ == "__main__":
    main()
