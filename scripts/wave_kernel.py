#!/usr/bin/env python3
"""Checks and times plugins/qmm/kernels/wave.cu, qmm/wave's 9-32 token kernel
(development tool; see the kernel's header).

Correctness: fresh random 4-bit g64 weights and x at 9 to 32 tokens, y
poisoned before each call, against the float64 reference (the family's
gate). Bench: 16 tokens (--tokens) at the issue's five shapes against
torch's bf16 matmul and, up to 16 tokens, qmm/bulk in the same run (CUDA
graphs, weights rotated beyond L2, as affine_kernels.py).

    python3 scripts/wave_kernel.py [--only correctness|bench] [--configs NT:WR:WK[:NS[:NSB[:KS]]][:K=V...],...]
        [--variant K=V[:K=V...]] [--shapes INxOUT,...] [--tokens 16] [--main-only] [--once] [--power]
"""
import argparse
import re
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402

WAVE_CU = ak.ROOT / "plugins" / "qmm" / "kernels" / "wave.cu"
ak.ENTRY[WAVE_CU] = "affine_wave"
ak.KIND_OF[WAVE_CU] = "wave"
from wave_rule import smem_bytes, xline  # noqa: E402  (the rule, mirrored from wave.go)
import wave_rule  # noqa: E402

EXTRA = {}   # --define: macros every variant takes (XPL: lines per xprep block, the harness's)
XP_PDL = False   # --xp-pdl: xprep with early start too (the plugin launches it without)


def wave_config(out_f: int, sms: int, in_f: int = 0, tokens: int = 16) -> dict:
    """The plugin's variant (wave_rule.wave_config), with --define's macros."""
    return dict(wave_rule.wave_config(out_f, sms, in_f, tokens), **EXTRA)


def finish(cfg: dict) -> dict:
    """wave_rule.finish (the ring's slots where cfg does not give them), with --define's macros."""
    return wave_rule.finish(dict(cfg, **EXTRA))


def launcher(cfg, wt, x, y, tokens, w=None, scales=None, biases=None, pdl=True):
    """A callable that runs one call (sigma, xprep, main) and its workspace."""
    w = wt.w if w is None else w
    scales = wt.scales if scales is None else scales
    biases = wt.biases if biases is None else biases
    r = 8 * cfg["NT"] * cfg["WR"]
    words, groups = wt.in_f // 8, wt.in_f // 64
    maps = [ak.TensorMap(w.data_ptr(), 2, words, wt.out_f, words * 4, 32, r, swizzle=3),
            ak.TensorMap(scales.data_ptr(), 1, groups, wt.out_f, groups * 2, 8, r),
            ak.TensorMap(biases.data_ptr(), 1, groups, wt.out_f, groups * 2, 8, r)]
    ws = torch.full(((wt.in_f // 256) * xline(cfg),), 0xFF, dtype=torch.uint8, device="cuda")   # poisoned
    smem = smem_bytes(cfg)
    main = ak.get_kernel(WAVE_CU, cfg, smem)
    prep = ak.get_kernel(WAVE_CU, cfg, 0, name="affine_wave_xprep")
    xgrid = -(-(wt.in_f // 256 * cfg.get("TT", 1)) // cfg.get("XPL", 1))   # a block a line's token tile
    p = lambda t: np.uint64(t.data_ptr())
    bias = p(wt.bias) if wt.bias is not None else np.uint64(0)
    xa = [p(x), p(ws), np.int32(tokens), np.int32(wt.in_f)]
    margs = [m.map for m in maps] + [p(ws), bias, p(y), np.int32(tokens), np.int32(wt.in_f), np.int32(wt.out_f)]
    grid = (-(-wt.out_f // r) * cfg.get("KS", 1), 1, 1)
    block = (32 * (cfg["WR"] * cfg["WK"] + 1), 1, 1)

    def run():
        ak.launch_ex(prep, (xgrid, 1, 1), (256, 1, 1), xa, 0, programmatic=XP_PDL)
        ak.launch_ex(main, grid, block, margs, smem, programmatic=pdl)
        return maps, ws

    def run_main():   # the main kernel alone, on x prepared by an earlier run()
        ak.launch_ex(main, grid, block, margs, smem, programmatic=pdl)
        return maps, ws

    def run_prep():   # xprep alone
        ak.launch_ex(prep, (xgrid, 1, 1), (256, 1, 1), xa, 0, programmatic=XP_PDL)
        return maps, ws

    def run_prep_plain():   # xprep alone, without early start
        ak.launch_ex(prep, (xgrid, 1, 1), (256, 1, 1), xa, 0, programmatic=False)
        return maps, ws

    def run_plain():   # the call without early start
        ak.launch_ex(prep, (xgrid, 1, 1), (256, 1, 1), xa, 0, programmatic=False)
        ak.launch_ex(main, grid, block, margs, smem, programmatic=False)
        return maps, ws
    run.main, run.prep, run.plain, run.prep_plain = run_main, run_prep, run_plain, run_prep_plain
    return run, (maps, ws)


CASES = [   # (in, out, tokens, bias, x scale[, weight scale: scales and biases times it])
    (4096, 4096, 16, False, 1.0), (8192, 28672, 16, False, 1.0), (28672, 8192, 16, True, 1.0),
    (4096, 14336, 9, True, 1.0), (14336, 4096, 13, False, 1.0), (5120, 13824, 16, True, 1.0),
    (2048, 1032, 11, True, 1.0), (1024, 264, 16, False, 2.0 ** 17), (512, 8, 10, True, 2.0 ** -20),
    (3072, 8200, 15, False, 1.0), (4096, 2056, 12, True, 2.0 ** 17), (8192, 1024, 16, False, 1.0),
    # scales of 3e-5 to 1e-4 (fp16 subnormals in part), checked against a tolerance scaled alike
    (4096, 8192, 16, False, 1.0, 2.0 ** -11),
    # two token tiles (TT 2): 17 to 32 tokens
    (4096, 14336, 24, True, 1.0), (8192, 28672, 32, False, 1.0), (28672, 8192, 17, True, 1.0),
    (1024, 264, 32, False, 2.0 ** 17), (512, 8, 20, True, 2.0 ** -20), (3072, 8200, 31, False, 1.0),
    (14336, 4096, 29, False, 1.0), (4096, 4096, 32, True, 1.0),
]


MAIN_ONLY = False
VARIANTS = []   # --variant: macro sets, each also run on top of the rule's configuration


def shape_configs(configs, out_f: int, in_f: int, tokens: int = 16):
    """The configurations to run at one shape and token count: --configs,
    or the rule's and each --variant on top of it."""
    if configs:
        fits = []
        for cfg in configs:   # each block of a cluster takes whole pairs of lines
            if in_f % (512 * cfg.get("KS", 1)):
                print(f"# {in_f}->{out_f}: {cfg} skipped: in_features is not a multiple of {512 * cfg.get('KS', 1)}",
                      flush=True)
            elif tokens > 16 * cfg.get("TT", 1):
                print(f"# {in_f}->{out_f}: {cfg} skipped: {tokens} tokens need TT={-(-tokens // 16)}", flush=True)
            else:
                fits.append(cfg)
        return fits
    base = wave_config(out_f, ak.SMS, in_f, tokens)
    out = [base]
    for v in VARIANTS:
        cfg = dict(base, **v)
        if any(k in v for k in ("NT", "WR", "WK", "KS", "TT")):   # other rows, warps or token tiles: size the rings anew
            for k in ("NS", "NSB"):
                if k not in v:
                    cfg.pop(k)
        try:
            out.append(finish(cfg))
        except ValueError as e:   # a variant whose rings cannot fit at this shape
            print(f"# {in_f}->{out_f}: variant {v} skipped: {e}", flush=True)
    return out


def sass_mix(cubin, function: str) -> str:
    """Opcode counts of one function's SASS (cuobjdump), most frequent first."""
    import collections
    import subprocess
    out = subprocess.run(["cuobjdump", "-sass", "-fun", function, str(cubin)], capture_output=True, text=True).stdout
    ops = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            ops[m.group(1)] += 1
    return f"{sum(ops.values())} instructions: " + " ".join(f"{k} {v}" for k, v in ops.most_common(18))


def run_correctness(configs) -> bool:
    ok_all = True
    for in_f, out_f, t, bias, xs, *rest in CASES:
        ws_ = rest[0] if rest else 1.0
        wt = ak.Weights(4, 64, in_f, out_f, bias and ws_ == 1.0, seed=in_f * 31 + out_f + t)
        if ws_ != 1.0:
            wt.scales = (wt.scales.float() * ws_).to(torch.bfloat16)
            wt.biases = (wt.biases.float() * ws_).to(torch.bfloat16)
            sd = wt.scales.double().repeat_interleave(64, dim=1)
            wt.dense = sd * wt.q.double() + wt.biases.double().repeat_interleave(64, dim=1)
        x = torch.rand((t, in_f), device="cuda") * 2 - 1
        x[1::2] *= xs   # odd tokens scaled (checked against a tolerance scaled alike)
        x[0] *= 1e-3
        x = x.to(torch.bfloat16)
        ref = wt.reference(x)
        for cfg in shape_configs(configs, out_f, in_f, t):
            y = torch.full((t, out_f), -1, dtype=torch.int16, device="cuda")   # bf16 NaN
            run, keep = launcher(cfg, wt, x, y, t)
            run()
            run()   # back to back with early start
            torch.cuda.synchronize()
            yb = y.view(torch.bfloat16).double() / ws_
            ok, detail = ak.check(yb[0::2], ref[0::2] / ws_)
            ok_o, detail_o = ak.check(yb[1::2] / xs, ref[1::2] / (xs * ws_))
            ok, detail = ok and ok_o, f"even tokens {detail}; odd tokens /{xs:g}: {detail_o}"
            ok_all &= ok
            print(f"{'ok  ' if ok else 'FAIL'} {in_f:6d}->{out_f:<6d} t{t:<3d} bias={int(bias)} x*{xs:g} w*{ws_:g} {cfg}: {detail}",
                  flush=True)
        del wt
        torch.cuda.empty_cache()
    return ok_all


def run_bench(configs, tokens: int):
    print(f"{'shape':>13s} {'tok':>4s} {'torch us':>9s} | {'kernel':8s} {'us':>8s} {'speedup':>7s} {'TB/s':>6s}")
    for in_f, out_f in ak.BENCH_SHAPES:
        wt = ak.Weights(4, 64, in_f, out_f, False, seed=in_f * 7 + out_f, keep_dense=False)
        copies = ak.rotated_copies(wt)
        nd = ak._copies(in_f * out_f * 2)
        dense = [torch.randn((out_f, in_f), device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(nd)]
        x = (torch.rand((tokens, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
        ya = torch.empty((tokens, out_f), device="cuda", dtype=torch.bfloat16)
        torch_fns = [lambda W=W: torch.matmul(x, W.t(), out=ya) for W in dense]
        before = ak.time_launches(torch_fns)
        power_before = ak.LAST_POWER
        rows = []
        timed = lambda fns: (ak.time_launches(fns), ak.LAST_POWER)
        bcfg = ak.bulk_config(4, 64, tokens, in_f, out_f)
        if bcfg:
            rows.append(("bulk", bcfg, (ak.bench_kernel("bulk", wt, copies, x, tokens, bcfg), ak.LAST_POWER)))
        for cfg in shape_configs(configs, out_f, in_f, tokens):
            y = torch.empty((tokens, out_f), dtype=torch.int16, device="cuda")
            fns, keep = ak.rotated_launchers(copies, lambda w, s, b: launcher(cfg, wt, x, y, tokens, w, s, b))
            rows.append(("wave", cfg, timed(fns)))
            if MAIN_ONLY:
                for f in fns:
                    f()
                rows.append(("wave main", cfg, timed([f.main for f in fns])))
                rows.append(("wave prep", cfg, timed([f.prep for f in fns])))
                rows.append(("wave nopdl", cfg, timed([f.plain for f in fns])))
                rows.append(("prep nopdl", cfg, timed([f.prep_plain for f in fns])))
        after = ak.time_launches(torch_fns)
        anchor = (before + after) / 2
        if ak.POWER:
            print(f"{in_f:6d}->{out_f:<6d} {tokens:4d}  torch: {power_before} / {ak.LAST_POWER}", flush=True)
        for kind, cfg, (ts, power) in rows:
            extra = " ".join(f"{k}={v}" for k, v in cfg.items())
            if ak.POWER:
                extra += f"  [{power}]"
            print(f"{in_f:6d}->{out_f:<6d} {tokens:4d} {anchor * 1e6:9.1f} | {kind:8s} {ts * 1e6:8.1f} "
                  f"{anchor / ts:7.2f} {wt.nbytes() / ts / 1e12:6.2f}  {extra}", flush=True)
        del copies, dense, wt
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("correctness", "bench"))
    ap.add_argument("--configs", help="NT:WR:WK[:NS[:NSB[:KS]]][:K=V...],... in place of the rule's (NS 0: as many as fit; "
                                      "K=V: a wave.cu macro)")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--shapes", help="INxOUT,... in place of the five benchmark shapes")
    ap.add_argument("--main-only", action="store_true", help="also time the main kernel alone")
    ap.add_argument("--once", action="store_true",
                    help="only launch one call of the last variant (--configs', else --variant's, else the rule's) "
                         "at --shapes' first shape, else 8192x28672, for Nsight Compute "
                         "(ncu --clock-control none -k regex:'^affine_wave$' -c 1 ...)")
    ap.add_argument("--sass", action="store_true", help="print the main kernel's SASS instruction mix")
    ap.add_argument("--define", action="append", default=[], help="extra wave.cu macro K=V on every variant")
    ap.add_argument("--variant", action="append", default=[],
                    help="K=V[:K=V...]: also run the rule's configuration with these macros (repeatable; "
                         "the KC_DIAG_ ones give wrong outputs, so pair them with --only bench)")
    ap.add_argument("--xp-pdl", action="store_true", help="launch xprep with early start too")
    ap.add_argument("--power", action="store_true",
                    help="after each timing, replay it for a second with the SM clock and power draw sampled (nvidia-smi)")
    ap.add_argument("--carveout", type=int, help="every kernel's preferred shared-memory carveout, percent (-1: the driver's default)")
    args = ap.parse_args()
    ak.POWER = args.power
    if args.carveout is not None:
        ak.set_carveout(args.carveout)
    if args.configs and args.variant:
        ap.error("--variant applies to the rule's variant; with --configs, put the macros in each entry (NT:WR:WK:...:K=V)")
    EXTRA.update({k: int(v) for k, v in (d.split("=") for d in args.define)})
    global XP_PDL
    XP_PDL = args.xp_pdl
    VARIANTS.extend({k: int(v) for k, v in (f.split("=") for f in var.split(":"))} for var in args.variant)
    global MAIN_ONLY
    MAIN_ONLY = args.main_only
    ak.SMS = torch.cuda.get_device_properties(0).multi_processor_count
    if args.shapes:
        ak.BENCH_SHAPES = [tuple(int(v) for v in sh.split("x")) for sh in args.shapes.split(",")]
    configs = None
    if args.configs:
        configs = []
        for c in args.configs.split(","):
            fields = c.split(":")
            v = [int(f) for f in fields if "=" not in f]
            cfg = dict(NT=v[0], WR=v[1], WK=v[2], **{k: int(x) for k, x in (f.split("=") for f in fields if "=" in f)})
            if len(v) > 3 and v[3]:
                cfg["NS"] = v[3]
            if len(v) > 4 and v[4]:
                cfg["NSB"] = v[4]
            if len(v) > 5 and v[5] > 1:
                cfg["KS"] = v[5]
            configs.append(finish(cfg))
    if args.once:
        in_f, out_f = ak.BENCH_SHAPES[0] if args.shapes else (8192, 28672)
        runnable = shape_configs(configs, out_f, in_f, args.tokens)
        if not runnable:
            sys.exit(f"no configuration to launch at {in_f}->{out_f}")
        cfg = runnable[-1]
        print(f"# one call of {cfg} at {in_f}->{out_f}, {args.tokens} tokens", flush=True)
        wt = ak.Weights(4, 64, in_f, out_f, False, seed=1, keep_dense=False)
        x = (torch.rand((args.tokens, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
        y = torch.empty((args.tokens, out_f), device="cuda", dtype=torch.int16)
        run, _keep = launcher(cfg, wt, x, y, args.tokens)
        run()
        torch.cuda.synchronize()
        return
    seen = set()
    for in_f, out_f, t in sorted({(i, o, t) for i, o, t, *_ in CASES} | {(i, o, args.tokens) for i, o in ak.BENCH_SHAPES}):
        for cfg in shape_configs(configs, out_f, in_f, t):
            key = ak.variant_key(WAVE_CU, cfg)
            if key in seen:
                continue
            seen.add(key)
            ak.compile_all([(WAVE_CU, cfg)])
            art = ak._modules[key]["artifact"]
            log = art.get("log", "")
            regs = "; ".join(f"{f} {r} regs" for f, r in
                             re.findall(r"Compiling entry function '(\w+)'[\s\S]*?Used (\d+) registers", log))
            spills = re.findall(r"(\d+) bytes spill stores", log)
            print(f"# {cfg}: {regs}; spill stores {spills}", flush=True)
            if args.sass and "cubin" in art:
                print("#   " + sass_mix(art["cubin"], "affine_wave"), flush=True)
    ok = True
    if args.only != "bench":
        ok = run_correctness(configs)
        print(f"# wave correctness: {'PASS' if ok else 'FAIL'}", flush=True)
    if args.only != "correctness":
        run_bench(configs, args.tokens)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
