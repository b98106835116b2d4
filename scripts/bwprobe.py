#!/usr/bin/env python3
"""Read-bandwidth ceiling on the GPU: the time a trivial kernel takes to read
the same bytes as an int4 g64 affine weight matrix (packed weights + scales +
biases), timed exactly as scripts/affine_kernels.py times the kernels (CUDA
graphs, copies rotated beyond L2). Prints µs and TB/s per shape, three ways:

  flat    launched plainly: a call starts once the call ahead has ended.
  early   launched with early start (programmatic stream serialization, as
          the decode kernels are): the read starts while the call ahead
          still runs, and each block waits for it (griddepcontrol.wait)
          before it may write, as a kernel whose output follows its input
          must. The ceiling for a kernel with early start. Its four
          512-thread blocks an SM fill the SM's threads, so a call's blocks
          start as the call ahead's leave, a block at a time.
  early1  the same with one 1024-thread block an SM holding 200 KB of shared
          memory, as gemv/bulk's blocks do: a call's block can only start
          once the call ahead has left that SM.

    python3 scripts/bwprobe.py
"""
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402

SRC = r'''
typedef unsigned int u32;
struct alignas(16) u4 { u32 x, y, z, w; };
__device__ __forceinline__ u4 ld(const void* p) {
    u4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
// Grid-stride read of n16 16-byte pieces, four loads in flight per thread.
__device__ __forceinline__ u32 read_all(const unsigned char* w, long long n16) {
    u32 acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        const u4 a = ld(w + 16 * i), b = ld(w + 16 * (i + stride)), c = ld(w + 16 * (i + 2 * stride)), d = ld(w + 16 * (i + 3 * stride));
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n16; i += stride) acc ^= ld(w + 16 * i).x;
    return acc;
}
extern "C" __global__ void flat(const unsigned char* w, long long n16, u32* out) {
    const u32 acc = read_all(w, n16);
    if (acc == 0x12345678u) out[0] = acc;   // keeps the loads
}
// flat under early start: lets the next call start at once, reads, then
// waits for the call ahead before its (never taken) write.
__device__ __forceinline__ void read_early(const unsigned char* w, long long n16, u32* out) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const u32 acc = read_all(w, n16);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (acc == 0x12345678u) out[0] = acc;
}
extern "C" __global__ void early(const unsigned char* w, long long n16, u32* out) { read_early(w, n16, out); }
// The same in 1024-thread blocks (early1).
extern "C" __global__ void __launch_bounds__(1024, 1) early1(const unsigned char* w, long long n16, u32* out) { read_early(w, n16, out); }
'''

EARLY1_SMEM = 200 * 1024   # gemv/bulk's blocks hold 166-200 KB: one block an SM


def main():
    mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    flat, early, early1 = mod.get_function("flat"), mod.get_function("early"), mod.get_function("early1")
    ak._set_max_smem(early1, EARLY1_SMEM)
    out = cp.zeros(4, dtype=cp.uint32)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"flat and early: grid {sms * 4}x512; early1: grid {sms}x1024 with {EARLY1_SMEM // 1024} KB of shared memory; "
          "4 x 16 B in flight per thread")
    print(f"{'shape':>13s} {'MB':>6s} | {'flat us':>8s} {'TB/s':>6s} | {'early us':>8s} {'TB/s':>6s} | {'early1 us':>9s} {'TB/s':>6s}")
    for in_f, out_f in ak.BENCH_SHAPES:
        nbytes = in_f * out_f // 2 + 2 * 2 * out_f * (in_f // 64)
        n16 = nbytes // 16
        copies = [torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(ak._copies(nbytes))]
        def plain(buf):   # on torch's current stream (the capture stream inside a graph)
            with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                flat((sms * 4,), (512,), (np.uint64(buf.data_ptr()), np.int64(n16), out))
        def started(kern, buf, grid, block, smem):
            # n16 as np.uint64: the same bits as the kernel's long long, which launch_ex packs
            ak.launch_ex(kern, (grid, 1, 1), (block, 1, 1), (np.uint64(buf.data_ptr()), np.uint64(n16),
                         np.uint64(out.data.ptr)), smem, programmatic=True)
        row = []
        for fn in (plain, lambda b: started(early, b, sms * 4, 512, 0), lambda b: started(early1, b, sms, 1024, EARLY1_SMEM)):
            t = ak.time_launches([lambda b=b: fn(b) for b in copies])
            row.append(f"{t * 1e6:8.1f} {nbytes / t / 1e12:6.2f}")
        print(f"{in_f:6d}->{out_f:<6d} {nbytes / 1e6:6.1f} | " + " | ".join(row), flush=True)
        del copies


if __name__ == "__main__":
    main()
