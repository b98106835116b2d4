#!/usr/bin/env python3
"""Read-bandwidth probe on the GPU: how fast can a kernel stream a weight
matrix [rows][row_bytes] under different access patterns? (Development tool
for affine_stream; prints TB/s per pattern.)"""
import sys
import cupy as cp
import torch

SRC = r'''
typedef unsigned int u32;
struct alignas(16) u4 { u32 x, y, z, w; };
__device__ __forceinline__ u4 ld(const void* p) {
    u4 r; asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p)); return r;
}
// flat: grid-stride over 16-byte pieces, UN loads in flight per thread.
extern "C" __global__ void flat(const unsigned char* w, long long n16, u32* out) {
    u32 acc = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        u4 a = ld(w + 16 * i), b = ld(w + 16 * (i + stride)), c = ld(w + 16 * (i + 2 * stride)), d = ld(w + 16 * (i + 3 * stride));
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n16; i += stride) { u4 a = ld(w + 16 * i); acc ^= a.x; }
    if (acc == 0x12345678u) out[0] = acc;
}
// rows: block = 16*MT rows; warps split each row into SEG-byte steps
// (step s goes to warp s % warps); a warp's lanes cover its rows' SEG bytes.
extern "C" __global__ void rows(const unsigned char* w, int nrows, int row_bytes, int rpb, int seg, u32* out) {
    u32 acc = 0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int lpr = seg / 16;             // lanes per row
    const int rpi = 32 / lpr;             // rows per warp instruction
    const int row0 = blockIdx.x * rpb;
    const int nsteps = row_bytes / seg;
    for (int s = warp; s < nsteps; s += 2 * nw) {
        u4 v[8];
        #pragma unroll
        for (int j = 0; j < 8; ++j) {
            int r = lane / lpr + j * rpi; int ss = s + (j >= 4 ? nw : 0);
            if (r < rpb && ss < nsteps) v[j] = ld(w + (long long)min(row0 + r % rpb, nrows - 1) * row_bytes + (long long)ss * seg + (lane % lpr) * 16);
            else v[j].x = 0;
        }
        #pragma unroll
        for (int j = 0; j < 8; ++j) acc ^= v[j].x;
    }
    if (acc == 0x12345678u) out[0] = acc;
}
'''
mod = cp.RawModule(code=SRC, options=("-std=c++17",))
flat, rows = mod.get_function("flat"), mod.get_function("rows")
out = cp.zeros(4, dtype=cp.uint32)
big = cp.zeros(2 << 30, dtype=cp.uint8)

def timeit(fn, nbytes, copies):
    s, e = cp.cuda.Event(), cp.cuda.Event()
    for k in range(copies): fn(k)
    cp.cuda.Device().synchronize()
    best = 1e9
    for rep in range(5):
        s.record()
        for k in range(copies): fn(k)
        e.record(); e.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(s, e) * 1e-3 / copies)
    return best, nbytes / best / 1e12

for (nr, rb) in [(14336, 2048), (4096, 7168), (28672, 4096), (8192, 14336)]:
    nbytes = nr * rb
    copies = max(4, (2 << 30) // nbytes - 1)
    copies = min(copies, 30)
    base = lambda k: big.data.ptr + (k * nbytes) % ((2 << 30) - nbytes)
    res = []
    for blocks, threads in [(132 * 4, 512), (132 * 8, 256)]:
        t, bw = timeit(lambda k: flat((blocks,), (threads,), (cp.uint64(base(k)), cp.int64(nbytes // 16), out)), nbytes, copies)
        res.append(f"flat {blocks}x{threads}: {t*1e6:.1f}us {bw:.2f}")
    for rpb, seg, nw in [(16, 128, 4), (16, 256, 4), (32, 128, 4), (16, 512, 8), (64, 512, 8), (32, 256, 8)]:
        if rb % seg: continue
        grid = -(-nr // rpb)
        t, bw = timeit(lambda k: rows((grid,), (32 * nw,), (cp.uint64(base(k)), cp.int32(nr), cp.int32(rb), cp.int32(rpb), cp.int32(seg), out)), nbytes, copies)
        res.append(f"rows r{rpb} seg{seg} w{nw}: {t*1e6:.1f}us {bw:.2f}")
    print(f"{nr}x{rb}B ({nbytes/1e6:.0f} MB): " + " | ".join(res), flush=True)
