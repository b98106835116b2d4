#!/usr/bin/env python3
"""Read bandwidth by access pattern (development tool): how fast a kernel
that only reads an int4 weight matrix's packed bytes can go when it walks
them the way a streaming GEMV does, against a flat grid-stride read of the
same bytes. Timed exactly as scripts/affine_kernels.py times the kernels
(CUDA graphs, copies rotated beyond L2).

    python3 scripts/bwpattern.py [--shapes 8192x28672,...]

Patterns (R rows per block, each row in_features/2 bytes):
  flat               grid-stride over all bytes, 4 x 16 B per thread in flight
  tile R/SEG/KW/F    warp w of a block takes steps w, w+KW, ...; a step is
                     R rows x SEG bytes (a warp instruction covers 512
                     consecutive bytes of the step, row by row); F steps in
                     flight per warp (the stream kernel is R=32 SEG=128 F=1)
  rows R/T           a block reads its R rows as one contiguous region with T
                     threads, 4 x 16 B per thread in flight
"""
import argparse
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402
import bwprobe  # noqa: E402

# bwprobe's source (u4, the streaming load ld() and the flat kernel), then
# the walks below.
SRC = bwprobe.SRC + r'''
#ifdef SEG
#define P (R * SEG / 512)
extern "C" __global__ void tile(const unsigned char* w, int rowbytes, u32* out) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned char* base = w + (long long)blockIdx.x * R * rowbytes;
    const int steps = rowbytes / SEG;
    u32 acc = 0;
    for (int s = warp; s < steps; s += KW * F) {
        u4 v[F][P];
#pragma unroll
        for (int f = 0; f < F; ++f) {
            const int ss = s + f * KW < steps ? s + f * KW : s;
#pragma unroll
            for (int p = 0; p < P; ++p) {
                const int j = p * 32 + lane, row = j / (SEG / 16), col = j % (SEG / 16);
                v[f][p] = ld(base + (long long)row * rowbytes + ss * SEG + col * 16);
            }
        }
#pragma unroll
        for (int f = 0; f < F; ++f)
#pragma unroll
            for (int p = 0; p < P; ++p) acc ^= v[f][p].x ^ v[f][p].w;
    }
    if (acc == 0x12345678u) out[0] = acc;
}
#endif
extern "C" __global__ void rows(const unsigned char* w, int rowbytes, int r, u32* out) {
    const unsigned char* base = w + (long long)blockIdx.x * r * rowbytes;
    const int n16 = r * rowbytes / 16, stride = blockDim.x;
    u32 acc = 0;
    int i = threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        const u4 a = ld(base + 16 * i), b = ld(base + 16 * (i + stride)), c = ld(base + 16 * (i + 2 * stride)), d = ld(base + 16 * (i + 3 * stride));
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n16; i += stride) acc ^= ld(base + 16 * i).x;
    if (acc == 0x12345678u) out[0] = acc;
}
'''

TILES = [  # R, SEG, KW, F
    (32, 128, 4, 1), (32, 128, 8, 1), (32, 128, 4, 2), (32, 256, 4, 1), (32, 256, 8, 1),
    (16, 512, 4, 1), (16, 512, 8, 1), (16, 256, 8, 2), (8, 1024, 8, 1), (4, 2048, 8, 1),
]
ROWS = [(32, 256), (16, 512), (8, 512), (4, 256)]  # R, threads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x14336,14336x4096,8192x28672,28672x8192")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    out = cp.zeros(4, dtype=cp.uint32)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    base = cp.RawModule(code=SRC, options=("-std=c++17", "-arch=sm_90"))
    mods = {t: cp.RawModule(code=SRC, options=("-std=c++17", "-arch=sm_90", f"-DR={t[0]}", f"-DSEG={t[1]}",
                                               f"-DKW={t[2]}", f"-DF={t[3]}")) for t in TILES}

    def launcher(fn, grid, block, args):
        def go(buf):
            with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                fn(grid, block, (np.uint64(buf.data_ptr()),) + args)
        return go

    for in_f, out_f in shapes:
        rowbytes, nbytes = in_f // 2, in_f * out_f // 2
        copies = [torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(ak._copies(nbytes))]
        print(f"== {in_f}->{out_f}: {nbytes / 1e6:.1f} MB of packed weights, {out_f} rows of {rowbytes} B", flush=True)

        def report(name, go):
            t = ak.time_launches([lambda b=b: go(b) for b in copies])
            print(f"  {name:28s} {t * 1e6:8.1f} us {nbytes / t / 1e12:6.2f} TB/s", flush=True)

        report("flat", launcher(base.get_function("flat"), (sms * 4,), (512,), (np.int64(nbytes // 16), out)))
        for r, seg, kw, f in TILES:
            if out_f % r or rowbytes % seg:
                continue
            report(f"tile R={r} SEG={seg} KW={kw} F={f}",
                   launcher(mods[(r, seg, kw, f)].get_function("tile"), (out_f // r,), (32 * kw,),
                            (np.int32(rowbytes), out)))
        for r, th in ROWS:
            report(f"rows R={r} T={th}", launcher(base.get_function("rows"), (out_f // r,), (th,),
                                                  (np.int32(rowbytes), np.int32(r), out)))
        del copies


if __name__ == "__main__":
    main()
