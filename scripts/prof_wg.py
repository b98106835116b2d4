#!/usr/bin/env python3
"""Launches the wgmma kernel (plugins/qmm/kernels/wg.cu) once so that Nsight
Compute can profile it (development tool):

    SHAPE=4096x14336 TOK=4096 CFG=128:6:2:3:16 [BITS=8] ncu --clock-control none -k regex:'^affine_wg$' -c 1 \\
        --section SpeedOfLight --section WarpStateStats python3 scripts/prof_wg.py
"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402


def main():
    tokens = int(os.environ.get("TOK", "4096"))
    in_f, out_f = (int(v) for v in os.environ.get("SHAPE", "4096x14336").split("x"))
    bits = int(os.environ.get("BITS", "4"))
    cfg = ak.wg_with_bits(ak.wg_config(*(int(v) for v in os.environ.get("CFG", "128:6:2:3:16").split(":"))), bits)
    wt = ak.Weights(bits, 64, in_f, out_f, False, seed=1, keep_dense=False)
    x = (torch.rand((tokens, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
    y = torch.empty((tokens, out_f), device="cuda", dtype=torch.int16)
    run, _ws = ak.wg_launch_fns(cfg, wt, x, y, tokens)
    run()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
