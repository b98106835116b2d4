// CPU emulator for the affine kernels (development tool, not shipped to the GPU):
// every CUDA thread is a fiber (ucontext), scheduled round-robin;
// __syncthreads, warp collectives (shfl, ldmatrix, mma.m16n8k16 per the PTX
// fragment layouts) and cluster barriers/DSMEM are emulated. cp.async is queued
// per thread and performed at wait_group time (EMU_EAGER=1: at issue time), so
// a missing wait reads stale shared memory. The kernels' device primitives sit
// behind #ifndef KCAND_EMU; this header supplies host versions.
// Run: python3 plugins/qmm/kernels/emu/run.py  (needs g++ >= 10, no GPU).
#pragma once
#include <ucontext.h>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <functional>
#include <algorithm>
#include <memory>

#define KCAND_EMU 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define KC_DEV static inline

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

struct emu_dim3 { unsigned x, y, z; };
struct alignas(16) kc_u4 { u32 x, y, z, w; };
struct alignas(16) kc_f4 { float x, y, z, w; };
struct alignas(8) kc_f2 { float x, y; };

void emu_yield();
extern long g_progress;

struct EmuBarrier {
    int n = 0, arrived = 0;
    long gen = 0;
    void wait() {
        long g = gen;
        if (++arrived == n) { arrived = 0; gen++; g_progress++; return; }
        while (gen == g) emu_yield();
    }
};

struct EmuCopy { unsigned char* dst; const unsigned char* src; int size, src_bytes; };

struct EmuWarp {
    EmuBarrier bar;
    u32 data[32][8];
    const unsigned char* ptr[32];
};

struct EmuCluster;
struct EmuBlock {
    emu_dim3 idx;
    std::vector<unsigned char> smem;
    EmuBarrier bar;
    std::vector<EmuWarp> warps;
    int rank = 0;
    EmuCluster* cl = nullptr;
};
struct EmuCluster {
    EmuBarrier bar;
    std::vector<EmuBlock*> blocks;
};

struct EmuFiber {
    ucontext_t ctx;
    std::vector<char> stack;
    bool done = false;
    int tid = 0;
    EmuBlock* blk = nullptr;
    std::vector<std::vector<EmuCopy>> groups;
    std::vector<EmuCopy> open;
};

extern EmuFiber* g_cur;
extern emu_dim3 g_grid, g_bdim;
extern bool g_eager;

inline emu_dim3 emu_tidx() { return emu_dim3{(unsigned)g_cur->tid, 0, 0}; }
#define threadIdx (emu_tidx())
#define blockIdx (g_cur->blk->idx)
#define blockDim g_bdim
#define gridDim g_grid

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }

inline float __uint_as_float(u32 u) { float f; memcpy(&f, &u, 4); return f; }
inline u32 __float_as_uint(float f) { u32 u; memcpy(&u, &f, 4); return u; }
inline u32 __byte_perm(u32 a, u32 b, u32 s) {
    u64 v = ((u64)b << 32) | a;
    u32 r = 0;
    for (int i = 0; i < 4; ++i) {
        u32 sel = (s >> (4 * i)) & 7;   // msb-replicate mode (bit 3) not used here
        r |= (u32)((v >> (8 * sel)) & 0xFF) << (8 * i);
    }
    return r;
}
inline u32 __funnelshift_r(u32 lo, u32 hi, u32 sh) {
    u64 v = ((u64)hi << 32) | lo;
    return (u32)(v >> (sh & 31));
}

// ---- bf16 helpers --------------------------------------------------------------
inline float kc_bf16(u32 h) { return __uint_as_float(h << 16); }
inline u16 emu_f2bf(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (u16)(u >> 16);
}
inline u16 kc_to_bf16(float f) { return emu_f2bf(f); }
inline u32 kc_pack_bf16x2(float lo, float hi) { return (u32)emu_f2bf(lo) | ((u32)emu_f2bf(hi) << 16); }

// ---- loads ---------------------------------------------------------------------
inline kc_u4 kc_ld_stream16(const void* p) { kc_u4 r; memcpy(&r, p, 16); return r; }
inline void kc_ld_stream8(const void* p, u32& a, u32& b) { const u32* q = (const u32*)p; a = q[0]; b = q[1]; }
inline u32 kc_ld_stream4(const void* p) { return *(const u32*)p; }
inline kc_u4 kc_ld_ro16(const void* p) { kc_u4 r; memcpy(&r, p, 16); return r; }
inline u32 kc_ld_ro_u16(const u16* p) { return *p; }
inline u32 kc_prmt(u32 a, u32 b, u32 sel) { return __byte_perm(a, b, sel); }
inline u32 kc_funnel_r(u32 lo, u32 hi, u32 sh) { return __funnelshift_r(lo, hi, sh); }
inline u32 kc_byte_to_half(u32 a, int k) { return __byte_perm(a, 0x3F000000u, 0x7044u | ((u32)k << 8)); }
inline u32 kc_byte_to_one(u32 a, int k) { return __byte_perm(a, 0x3F800000u, 0x7604u | ((u32)k << 4)); }
inline u32 kc_q8_pair(u32 a) {
    const u32 m = (a & 0x007F007Fu) | 0x43004300u;
    const u32 c = (a & 0x00800080u) ^ 0xC380C380u;
    float lo = kc_bf16(m & 0xFFFF) + kc_bf16(c & 0xFFFF);
    float hi = kc_bf16(m >> 16) + kc_bf16(c >> 16);
    return kc_pack_bf16x2(lo, hi);
}

// ---- warp collectives ------------------------------------------------------------
inline EmuWarp& emu_warp() { return g_cur->blk->warps[g_cur->tid / 32]; }
inline int emu_lane() { return g_cur->tid & 31; }
inline float kc_shfl_xor(float v, int m) {
    EmuWarp& w = emu_warp();
    int l = emu_lane();
    w.data[l][0] = __float_as_uint(v);
    w.bar.wait();
    u32 r = w.data[l ^ m][0];
    w.bar.wait();
    return __uint_as_float(r);
}
inline void kc_ldmatrix_x4(u32 (&r)[4], const void* p) {
    EmuWarp& w = emu_warp();
    int l = emu_lane();
    w.ptr[l] = (const unsigned char*)p;
    w.bar.wait();
    for (int j = 0; j < 4; ++j) {
        const unsigned char* row = w.ptr[8 * j + l / 4];
        if (((uintptr_t)row & 15) != 0) { fprintf(stderr, "ldmatrix: misaligned row address\n"); abort(); }
        r[j] = *(const u32*)(row + 4 * (l % 4));
    }
    w.bar.wait();
}
inline void kc_mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1, const float (&c)[4]) {
    EmuWarp& w = emu_warp();
    int l = emu_lane();
    for (int i = 0; i < 4; ++i) w.data[l][i] = a[i];
    w.data[l][4] = b0;
    w.data[l][5] = b1;
    w.bar.wait();
    auto A = [&](int row, int k) {
        int owner = (row % 8) * 4 + (k % 8) / 2, reg = (row / 8) + 2 * (k / 8), half = k % 2;
        return kc_bf16((w.data[owner][reg] >> (16 * half)) & 0xFFFF);
    };
    auto B = [&](int k, int col) {
        int owner = col * 4 + (k % 8) / 2, reg = 4 + k / 8, half = k % 2;
        return kc_bf16((w.data[owner][reg] >> (16 * half)) & 0xFFFF);
    };
    float out[4];
    int g = l / 4, cc = l % 4;
    for (int e = 0; e < 4; ++e) {
        int row = g + 8 * (e / 2), col = 2 * cc + (e % 2);
        double s = 0;
        for (int k = 0; k < 16; ++k) s += (double)A(row, k) * (double)B(k, col);
        out[e] = (float)((double)c[e] + s);
    }
    w.bar.wait();
    for (int e = 0; e < 4; ++e) d[e] = out[e];
}

// ---- cp.async ------------------------------------------------------------------
inline void emu_do_copy(const EmuCopy& c) {
    if (c.src_bytes) memcpy(c.dst, c.src, c.src_bytes);
    if (c.size > c.src_bytes) memset(c.dst + c.src_bytes, 0, c.size - c.src_bytes);
}
inline void emu_cp(void* dst, const void* src, int size, u32 src_bytes) {
    if (((uintptr_t)dst % size) || (src_bytes && ((uintptr_t)src % size))) {
        fprintf(stderr, "cp.async misaligned (size %d)\n", size); abort();
    }
    unsigned char* base = g_cur->blk->smem.data();
    if ((unsigned char*)dst < base || (unsigned char*)dst + size > base + g_cur->blk->smem.size()) {
        fprintf(stderr, "cp.async outside shared memory\n"); abort();
    }
    EmuCopy c{(unsigned char*)dst, (const unsigned char*)src, size, (int)src_bytes};
    if (g_eager) emu_do_copy(c); else g_cur->open.push_back(c);
}
inline void kc_cp_async16(void* d, const void* s, u32 n) { emu_cp(d, s, 16, n); }
inline void kc_cp_async8(void* d, const void* s, u32 n) { emu_cp(d, s, 8, n); }
inline void kc_cp_async4(void* d, const void* s, u32 n) { emu_cp(d, s, 4, n); }
inline void kc_cp_commit() { g_cur->groups.push_back(std::move(g_cur->open)); g_cur->open.clear(); }
template <int N> inline void kc_cp_wait() {
    auto& gs = g_cur->groups;
    while ((int)gs.size() > N) {
        for (auto& c : gs.front()) emu_do_copy(c);
        gs.erase(gs.begin());
    }
}

// ---- cluster ---------------------------------------------------------------------
inline u32 kc_cluster_rank() { return g_cur->blk->rank; }
inline void kc_cluster_sync() { g_cur->blk->cl->bar.wait(); }
inline void kc_ld_dsmem_f2(const float* p, u32 rank, float& a, float& b) {
    EmuBlock* me = g_cur->blk;
    size_t off = (const unsigned char*)p - me->smem.data();
    const float* q = (const float*)(me->cl->blocks[rank]->smem.data() + off);
    a = q[0];
    b = q[1];
}

#define KC_DYNAMIC_SMEM(name) unsigned char* name = g_cur->blk->smem.data()
#define KC_SYNC() g_cur->blk->bar.wait()

// ---- launcher --------------------------------------------------------------------
void emu_launch(emu_dim3 grid, int threads, size_t smem, int cluster_x, std::function<void()> kernel);
#define KC_AND_OR(a, m, C) (((a) & (m)) | (C))
#define KC_AND_XOR(a, m, C) (((a) & (m)) ^ (C))
inline u32 kc_lop3_and_or_r(u32 a, u32 m, u32 c) { return (a & m) | c; }
#define KC_SCHED_FENCE() ((void)0)
#define KC_LAUNDER(v) ((void)0)
