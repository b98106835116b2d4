#!/usr/bin/env python3
"""Launches affine_stream (or, with KIND=bulk, affine_bulk) once per shape so
that Nsight Compute can profile it (development tool; the default variant of
scripts/affine_kernels.py):

    SHAPES=4096x14336,28672x8192 TOK=1 ncu --clock-control none -k regex:affine_stream \\
        --section SpeedOfLight --section WarpStateStats python3 scripts/prof_stream.py

(with KIND=bulk, -k regex:affine_bulk).
"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402


def main():
    ak.SMS = torch.cuda.get_device_properties(0).multi_processor_count
    tokens = int(os.environ.get("TOK", "1"))
    for shape in os.environ.get("SHAPES", "4096x14336,28672x8192").split(","):
        in_f, out_f = (int(v) for v in shape.split("x"))
        wt = ak.Weights(4, 64, in_f, out_f, False, seed=1, keep_dense=False)
        x = (torch.rand((tokens, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
        ak.run_kernel(os.environ.get("KIND", "stream"), wt, x, tokens)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
