#!/usr/bin/env python3
"""Launches qmm/wave's kernels (plugins/qmm/kernels/wave.cu) once so that
Nsight Compute can profile the product (development tool):

    SHAPE=8192x28672 TOK=16 [DEF=K=V:K=V] ncu --clock-control none -k regex:'^affine_wave$' -c 1 \\
        --section SpeedOfLight --section WarpStateStats python3 scripts/prof_wave.py

DEF adds wave.cu macros on top of the rule's configuration (wave_kernel.py's
--variant).
"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402
import wave_kernel as wk  # noqa: E402


def main():
    tokens = int(os.environ.get("TOK", "16"))
    in_f, out_f = (int(v) for v in os.environ.get("SHAPE", "8192x28672").split("x"))
    ak.SMS = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = wk.wave_config(out_f, ak.SMS, in_f)
    if os.environ.get("DEF"):
        cfg = wk.finish(dict(cfg, **{k: int(v) for k, v in (f.split("=") for f in os.environ["DEF"].split(":"))}))
    print(cfg, flush=True)
    wt = ak.Weights(4, 64, in_f, out_f, False, seed=1, keep_dense=False)
    x = (torch.rand((tokens, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
    y = torch.empty((tokens, out_f), device="cuda", dtype=torch.int16)
    run, _keep = wk.launcher(cfg, wt, x, y, tokens)
    run()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
