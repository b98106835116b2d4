#!/usr/bin/env python3
"""Standalone GPU checker and benchmark for the affine family's CUDA kernels.

    plugins/gemv/kernels/gemv.cu   affine_gemv  (decode, tokens 1..8)
    plugins/qmm/kernels/qmm.cu     affine_qmm   (tensor cores, any token count)
    internal/affinegpu/kernels/stream.cu affine_stream (weight streaming, 2..8 bits, 1..32 tokens)
    internal/affinegpu/kernels/bulk.cu   affine_bulk  (4/8-bit weights fed by tensor copies, 1..16
                                   tokens; gemv/bulk serves it at 1..8 tokens, qmm/bulk at 9..16 in K slices)
    plugins/qmm/kernels/wg.cu      affine_wg    (Hopper wgmma, 2..8 bits g64, 17+ tokens)

Run on the H200 (Python 3.12, torch, cupy; nothing else needed):

    python3 scripts/affine_kernels.py                 # correctness + benchmark (< ~4 min)
    python3 scripts/affine_kernels.py --quick         # a few shapes of each
    python3 scripts/affine_kernels.py --only correctness
    python3 scripts/affine_kernels.py --only bench
    python3 scripts/affine_kernels.py --sweep         # also time alternative launch configs
    python3 scripts/affine_kernels.py --kernel qmm    # one kernel only (gemv|qmm|stream|wg|bulk)
    python3 scripts/affine_kernels.py --resources     # ptxas registers/spills per variant

Kernels are compiled with NVRTC exactly as the Go host does (sm_90 cubin, -D
macros, no headers), through libnvrtc loaded with ctypes (cupy's own NVRTC
path is the fallback), cached under ~/.cache/kcand-affine, and launched with
cupy on torch's current stream. Timing uses CUDA graphs of many launches that
rotate through several weight copies so the working set exceeds the 60 MB L2.

The functions gemv_config / qmm_config / bulk_config (+ *_launch) below are the
variant and launch-configuration logic the Go plugins mirror; keep them in sync
with the comments at the top of each .cu file.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import ctypes
import glob
import hashlib
import math
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GEMV_CU = ROOT / "plugins" / "gemv" / "kernels" / "gemv.cu"
QMM_CU = ROOT / "plugins" / "qmm" / "kernels" / "qmm.cu"
STREAM_CU = ROOT / "internal" / "affinegpu" / "kernels" / "stream.cu"
BULK_CU = ROOT / "internal" / "affinegpu" / "kernels" / "bulk.cu"   # tensor maps as parameters
WG_CU = ROOT / "plugins" / "qmm" / "kernels" / "wg.cu"   # sm_90a only
ENTRY = {GEMV_CU: "affine_gemv", QMM_CU: "affine_qmm", STREAM_CU: "affine_stream", WG_CU: "affine_wg",
         BULK_CU: "affine_bulk"}
KIND_OF = {GEMV_CU: "gemv", QMM_CU: "qmm", STREAM_CU: "stream", WG_CU: "wg", BULK_CU: "bulk"}

SMS = 132                 # H200 streaming multiprocessors (replaced by the device's count)
KERNELS = ()              # --kernel filter: () = all five
STREAM_ONLY = False       # --sweep times alternative configs of affine_stream only
STREAM_CONFIGS = None     # --stream-configs: [(MT, KW, U, D, MINB, XT)] replacing the stream sweep
STREAM_OVER = {}          # --stream-over: macros every affine_stream variant takes (e.g. COOP=1)
BULK_CONFIGS = None       # --bulk-configs: [(MT, CW, SEG, NS, BPS, FP16, PARTS, WK)] timed with --sweep
BULK_OVER = {}            # --bulk-over: macros every affine_bulk variant takes (e.g. UNR=2)
BENCH_QUANT = (4, 64)     # --quant: the benchmark's bits and group size
WG_OVER = {}              # --wg-over: macros every wg.cu variant takes (e.g. AW=3)
PEAK_BW = 4.3e12          # bytes/s, cuBLAS GEMV weight-read ceiling measured on the H200
ON_H200 = True            # the bandwidth target is the H200's (replaced by the device's name)
NVRTC_OPTIONS = ("-arch=sm_90", "-std=c++17")


# =============================================================================
# Variant and launch-configuration logic (the Go side mirrors this).
# =============================================================================

def _gcd(a: int, b: int) -> int:
    return math.gcd(a, b)


def gemv_config(bits: int, group: int, tokens: int, in_f: int, out_f: int, sms: int | None = None) -> dict:
    """Macros for affine_gemv. tokens must be 1..8 (the candidate admits no more)."""
    assert 1 <= tokens <= 8
    sms = sms or SMS
    # Values per lane chunk: the smallest run of whole values that is a whole
    # number of 16-byte loads, when it divides the row and leaves >= 16 chunks.
    vmin = {2: 64, 3: 128, 4: 32, 5: 128, 6: 64, 8: 32}[bits]
    if in_f % vmin == 0 and in_f // vmin >= 16:
        vals, loadw = vmin, 16
    else:
        vals, loadw = 32, _gcd(16, 4 * bits)     # in % 32 == 0 always; 8,4,16,4,8,16
    chunk = vals * bits // 8
    rows = 4 if tokens <= 2 else (2 if tokens <= 4 else 1)
    warps = 8
    # Small outputs: fewer rows per warp so that every SM gets a block.
    while rows > 1 and -(-out_f // (warps * rows)) < sms:
        rows //= 2
    # Register budget: at most 128 bytes of packed weights per lane and step,
    # and ROWS*UNROLL*TOKENS <= 8 (measured: no spills at 128 registers).
    rows = max(1, min(rows, 128 // chunk))
    unroll = max(1, min(4 if vals == 32 else 2, 128 // (rows * chunk)))
    while unroll > 1 and rows * unroll * tokens > 8:
        unroll -= 1
    nch = in_f // vals
    unroll = max(1, min(unroll, -(-nch // 32)))
    sub = min(vals, group)
    xs_bytes = 4 * tokens * (in_f // vals) * (vals + 4)
    xsmem = 1 if xs_bytes + 4 * tokens * (in_f // sub) <= 96 * 1024 else 0
    # Register budget: two resident 256-thread blocks (128 regs) up to 4 tokens.
    minb = 2 if tokens <= 4 else 1
    return dict(BITS=bits, GROUP=group, TOKENS=tokens, ROWS=rows, UNROLL=unroll,
                VALS=vals, LOADW=loadw, XSMEM=xsmem, WARPS=warps, GV_MINB=minb)


def gemv_launch(cfg: dict, tokens: int, in_f: int, out_f: int, occ: int = 2, sms: int | None = None):
    """(grid, block, dynamic shared bytes) for affine_gemv. occ = resident blocks
    per SM (the driver's occupancy for this variant); warps loop over row sets,
    so grid.x is capped at the resident capacity sms*occ (any grid.x >= 1 is correct).
    cfg['_grid'] == 'full' (sweep only) launches one block per WARPS row sets instead."""
    sms = sms or SMS
    warps, rows, vals, group, T = cfg["WARPS"], cfg["ROWS"], cfg["VALS"], cfg["GROUP"], cfg["TOKENS"]
    sub = min(vals, group)
    smem = 4 * ((T * (in_f // sub) + 3) // 4 * 4)
    if cfg["XSMEM"]:
        smem += 4 * T * (in_f // vals) * (vals + 4)
    blocks = -(-(-(-out_f // rows)) // warps)
    gx = blocks if cfg.get("_grid") == "full" else min(blocks, sms * max(1, occ))
    return (gx, -(-tokens // T), 1), (warps * 32, 1, 1), smem


# Named QMM tile configurations: BM, BN, BK, WARPS_M, WARPS_N, WARPS_K, STAGES.
QMM_CONFIGS = {
    "s16": (16, 64, 256, 1, 1, 4, 4),    # tokens <= 16: memory bound
    "s32": (32, 64, 256, 1, 2, 4, 3),    # 17..32
    "s64": (64, 64, 128, 1, 2, 2, 3),    # 33..64
    "m128": (64, 128, 128, 1, 4, 2, 3),  # 65..192
    "l": (128, 128, 64, 2, 4, 1, 4),     # > 192
}


STREAM_BITS = (2, 3, 4, 5, 6, 8)


def stream_config(bits: int, group: int, tokens: int, in_f: int, out_f: int, sms: int | None = None,
                  **over) -> dict | None:
    """Macros for affine_stream (tokens 1..32), or None when it does not apply (no step of
    whole 16-byte pieces per row dividing the groups, stream_step_groups, nor a last step
    of fewer groups in whole pieces, stream_tail_step: TAIL).

    Measured on the H200 (bench/NOTES.md): 9-16 tokens at 4 bits as two 8-token tiles of
    the decode rule's blocks where all are resident at once and rows hold at most 8192 inputs
    (x is then read from memory, so they start early: stream_early_start); two 16-row tiles
    per warp (one at 9-32 tokens where that takes more SMs, or at 9-16 tokens where two leave
    one to one and a half blocks per SM, so the busiest SM has 48 rows, not 64; one at decode
    at 4 bits in groups of 64 and 128 over rows of more than 4096 inputs where one leaves at
    most half the SMs a block; one in 8-token tiles in groups of 128 where one leaves under
    two blocks a SM), 128-byte
    steps, two ring slots, four warps per block (eight when that
    leaves fewer than 8 warps per SM, 4 above 8 tokens), at least two steps per warp (one
    where every block is resident at once with one step a warp, stream_resident, or where
    the grid takes MINB); at decode, registers for 16 warps per SM (MINB) once the grid has
    more blocks than SMs (4 and 8 bits, not group 32, which would spill); at decode (1-8 tokens)
    with at most a block per SM, x through the ring slots (XT) after the first steps' weights
    (XE, so the kernel starts early), three slots (two at one token over rows of at most 4096
    inputs with more than half the SMs a block) and one block an SM (_SOLO), but at 2-8 tokens
    and 4 bits over rows of at most 4096 inputs, where x read from memory stays ahead; at 9-16
    tokens in 4-bit groups of 32 over rows of at least 2048 inputs where one 16-token tile takes
    at most a block per SM, that tile with XE, three slots and _SOLO: two row tiles and four warps
    where they take at least a quarter of the SMs (more than half above 12 tokens), else at 9-12
    tokens and at least 512 outputs the rule's row tiles and warps."""
    if bits not in STREAM_BITS or tokens > 32:
        return None
    sms = sms or SMS
    groups = in_f // group
    gbytes = group * bits // 8
    u, tail = stream_step_groups(bits, group, groups), 0
    if u is None:
        u, tail = stream_tail_step(bits, group, groups)
        if u is None:
            return None
    nt = 1 if tokens <= 8 else (2 if tokens <= 16 else 4)
    rows32 = -(-out_f // 32)
    if nt == 2 and bits == 4 and group != 32 and rows32 <= sms and in_f <= 8192:
        # 9-16 tokens at 4 bits as two 8-token tiles of the decode rule's blocks where all of
        # them are resident at once (registers for two a SM), rows of at most 8192 inputs; x
        # is read from memory (no XT, below), so each block may start early
        nt = 1
    def blocks_of(mt):
        return -(-out_f // (16 * mt)) * -(-tokens // (8 * nt))
    general = bits not in (4, 8)
    # the other widths at decode: twice the blocks rather than x through the ring
    mt = 1 if general and nt == 1 and blocks_of(2) <= sms else 2
    if nt > 1 and (blocks_of(1) <= sms or (nt == 2 and sms < blocks_of(2) <= 3 * sms // 2)):
        mt = 1
    if bits == 4 and nt == 1 and tokens <= 8 and in_f > 4096 and 2 * blocks_of(1) <= sms:
        mt = 1   # few rows at decode, x through the ring (below): twice the blocks, still at most half the SMs
    if nt == 1 and tokens > 8 and group == 128 and blocks_of(1) < 2 * sms:
        mt = 1   # 8-token tiles in groups of 128 with few rows: under two blocks a SM, of 8 warps
    blocks = blocks_of(mt)
    kw = 4 if blocks * 4 >= (4 if nt > 1 else 8) * sms else 8
    def minb_of(kw, cfg):   # 16 warps per SM in 8-token tiles once the grid exceeds the SMs (if they fit)
        if (not general and nt == 1 and blocks > sms and kw in (4, 8) and not (bits == 4 and group == 32)
                and (16 // kw) * (stream_smem_bytes(cfg) + 1024) <= 228 * 1024):
            return 16 // kw
        return 1
    cfg = dict(BITS=bits, GROUP=group, MT=mt, NT=nt, KW=kw, U=u, D=2)
    if tail:
        cfg["TAIL"] = tail
    steps = -(-groups // u)
    def halved(per_warp):
        k = kw
        while k > 1 and steps < per_warp * k:
            k //= 2
        return k
    one = dict(cfg, KW=halved(1))
    per_warp = 1 if minb_of(kw, cfg) > 1 or blocks <= sms * stream_resident(one, minb_of(one["KW"], one)) else 2
    kw = halved(per_warp)
    cfg["KW"] = kw
    if minb_of(kw, cfg) > 1:
        cfg["MINB"] = minb_of(kw, cfg)
    cfg.update(STREAM_OVER)
    cfg.update(over)
    if nt == 1 and tokens <= 8 and blocks <= sms and not (bits == 4 and in_f <= 4096 and tokens > 1) and "XT" not in cfg:
        # at most one block per SM at decode (stream_ring; Go: streamRing): x through the ring
        # after the first steps' weights (XE: early start), three slots, one block an SM
        # (_SOLO: shared memory past half an SM); x from memory where it does not fit
        # where x does not fit the slots, and two where three do not fit at all; two at one
        # token over rows of at most 4096 inputs with more than half the SMs a block
        slots = [2] if tokens == 1 and in_f <= 4096 and 2 * blocks > sms else [3, 2]
        for d in ([cfg["D"]] if "D" in over or "D" in STREAM_OVER else slots):
            ring = dict(cfg, D=d)
            ring.setdefault("_SOLO", 1)
            with_x = dict(ring, XT=min(8 * nt, tokens))
            with_x.setdefault("XE", 1)
            if stream_smem_bytes(with_x) <= 227 * 1024:
                cfg = with_x
                break
            if group == 32:   # x from memory lost there: x in two slots from the first copy, no early start
                two = dict(cfg, XT=with_x["XT"])
                if stream_smem_bytes(two) <= 227 * 1024:
                    cfg = two
                break
            if stream_smem_bytes(ring) <= 227 * 1024:
                cfg = ring
                break
    if (bits == 4 and group == 32 and 8 < tokens <= 16 and in_f >= 2048 and rows32 <= sms
            and not any(k in over or k in STREAM_OVER for k in ("MT", "NT", "KW", "D", "XT"))):
        # 9-16 tokens in 4-bit groups of 32 (Go: streamTileRing): one 16-token tile, x through
        # the ring after the first steps' weights (XE: early start), three slots, one block an SM;
        # two row tiles and four warps where they take a quarter of the SMs or more (above 12
        # tokens more than half), else at 9-12 tokens and 512 outputs or more the rule's row tiles
        # and warps
        tile = None
        if sms <= 4 * rows32 and (tokens <= 12 or 2 * rows32 > sms):
            tile = dict(cfg, MT=2, NT=2, KW=4, D=3, XT=tokens, XE=1, _SOLO=1)
            tile.pop("MINB", None)
        elif 4 * rows32 < sms and tokens <= 12 and out_f >= 512:
            tile = dict(cfg, D=3, XT=tokens, XE=1, _SOLO=1)
        if tile and stream_smem_bytes(tile) <= 227 * 1024:
            cfg = tile
    if cfg.get("XT", 0) < 0:    # -1: x through the ring for every token of the tile
        cfg["XT"] = min(8 * nt, tokens)
    if cfg.get("XT", 1) == 0:
        del cfg["XT"]
    elif "XT" in cfg and cfg["XT"] < min(8 * cfg["NT"], tokens):
        raise ValueError(f"XT={cfg['XT']} leaves tokens of an {8 * cfg['NT']}-token tile without x")
    if not cfg.get("XE", 1) or "XT" not in cfg:
        cfg.pop("XE", None)   # XE (the first steps' x after their weights) only with x in the ring
    if cfg.get("SPK", 0):
        del cfg["SPK"]   # the kernel's default
    line = 128 if bits in (4, 8) else 16
    if (groups % cfg["U"] != cfg.get("TAIL", 0) or cfg["U"] < 2 or (cfg["U"] * gbytes) % line or cfg["U"] * gbytes > 512
            or (cfg["MT"] == 4 and cfg["NT"] != 1)):
        return None
    return cfg


def stream_resident(cfg: dict, minb: int) -> int:
    """Blocks of an affine_stream variant sure to be resident on an SM at once (Go:
    streamResident): registers for max(MINB, 8 // KW) (a thread holds at most 255, so 8 warps
    an SM at worst), within an SM's 228 KiB of shared memory, 1 KiB of it reserved a block."""
    return min(max(minb, 8 // cfg["KW"]), 228 * 1024 // (stream_smem_bytes(cfg) + 1024))


def stream_early_start(cfg: dict, tokens: int) -> bool:
    """Whether the plugins launch affine_stream with early start (Go: StreamConfig.EarlyStart):
    x through the ring after the first steps' weights (XE), or x read from memory (no XT) at
    decode (up to --stream-pdl-tokens) or in 8-token tiles."""
    return bool(cfg.get("XE")) or (not cfg.get("XT") and (tokens <= STREAM_PDL_TOKENS or cfg["NT"] == 1))


def stream_step_groups(bits: int, group: int, groups: int) -> int | None:
    """Groups per step (U) of affine_stream that divide the row's groups (stream_step; Go:
    streamStepGroups), or None."""
    return stream_step(bits, group, lambda v: groups % v == 0)


def stream_step(bits: int, group: int, fit) -> int | None:
    """The step (groups a row) affine_stream prefers among those fit(v) accepts. 4 and 8
    bits: the first of 128 (else 256) packed bytes per row. The other widths: the fewest
    groups (a power of two up to 16) making at least 64 bytes in whole 16-byte pieces (at
    most 512), else the most (Go: streamStep)."""
    gbytes = group * bits // 8
    if bits in (4, 8):
        return next((v for v in (128 // gbytes, 256 // gbytes) if v >= 2 and fit(v)), None)
    ok = [u for u in (2, 4, 8, 16) if fit(u) and (u * gbytes) % 16 == 0 and u * gbytes <= 512]
    return next((u for u in ok if u * gbytes >= 64), ok[-1] if ok else None)


def stream_tail_step(bits: int, group: int, groups: int) -> tuple[int | None, int]:
    """(U, TAIL) of affine_stream where no step divides the row's groups: the step
    stream_step prefers without asking it to divide them, where a row and the last step's
    TAIL groups are whole 16-byte pieces; (None, 0) where not (Go: streamTailStep)."""
    gbytes = group * bits // 8
    if groups * gbytes % 16:
        return None, 0
    u = stream_step(bits, group, lambda v: True)
    if u is None or groups % u * gbytes % 16:
        return None, 0
    return u, groups % u


def stream_smem_bytes(cfg: dict) -> int:
    rows = 16 * cfg["MT"]
    gbytes = cfg["GROUP"] * cfg["BITS"] // 8
    wpt = cfg["GROUP"] * cfg["BITS"] // 128
    seg = cfg["U"] * gbytes
    wstride = seg + (16 if wpt == 8 or cfg["BITS"] not in (4, 8) else 16 * wpt)
    sstride = max(16, 2 * cfg["U"])
    if cfg.get("TAIL"):
        sstride = (2 * cfg["U"] + 4 + 15) // 16 * 16   # a window of U + 2 entries
    slot = rows * wstride + 2 * rows * sstride + cfg.get("XT", 0) * (2 * cfg["U"] * cfg["GROUP"] + 16)
    ring = cfg["KW"] * cfg["D"] * slot
    red = 4 * cfg["KW"] * rows * 8 * cfg["NT"] if cfg["KW"] > 1 else 0
    return max(ring, red)


STREAM_SOLO_SMEM = 228 * 1024 // 2 - 1024 + 16   # the least that keeps a second block off an SM (1 KiB reserved each)


def stream_launch(cfg: dict, tokens: int, in_f: int, out_f: int):
    """(grid, block, dynamic shared bytes) for affine_stream."""
    mt, nt, kw = cfg["MT"], cfg["NT"], cfg["KW"]
    grid = (-(-out_f // (16 * mt)), -(-tokens // (8 * nt)), 1)
    smem = stream_smem_bytes(cfg)
    if cfg.get("_SOLO"):   # one block an SM: more than half its shared memory (Go: Solo, streamSoloShared)
        smem = max(smem, STREAM_SOLO_SMEM)
    return grid, (32 * kw, 1, 1), smem


BULK_MAX_SMEM = 227 * 1024


def bulk_config(bits: int, group: int, tokens: int, in_f: int, out_f: int, sms: int | None = None,
                mt: int | None = None, cw: int = 8, seg: int | None = None, ns: int | None = None, bps: int = 1,
                fp16: int | None = None, parts: int | None = None, wk: int | None = None,
                ks: int | None = None) -> dict | None:
    """Macros for affine_bulk (tokens 1..16, 4 or 8 bits), or None when it does not apply.
    By default its fastest variant on the H200 at one token (bench/NOTES.md, seventh to
    eleventh sessions): 64-row tiles when 16-row ones would leave no shorter last wave (4 bits,
    groups <= 64, and only where eight warps' stages fit), else 32-row unless 16 leave a
    shorter last wave (with fp16 operands: unless 32-row tiles give the busiest block more
    than a third more m-tiles); 8 consumer warps; 512-byte row pieces (256 with
    64-row tiles, or above 8 tokens); as many stages as fit; stages in two parts where blocks
    take several tiles or tiles have 64 rows, but not in 16- and 32-row tiles with fp16
    operands; and fp16 operands with x resident at 4 bits
    when in_features <= 8192 and tokens <= 8 (beyond, converting x up front costs more than
    it saves, or x does not fit). Above 8 tokens at 4 bits: K in slices (bulk_splits), fp16 x
    resident per slice, no 64-row tiles, 512-byte row pieces (twelfth session, 16 tokens:
    faster than the stream kernel at 4096->14336, 8192->28672 and 28672->8192; with all of K
    per block, ninth session, 95-150 us at the 132 MB shapes against its 70).

    seg: packed bytes of each row per stage (U = want, seg / bytes per group rounded down to
    a multiple of 8, where that divides the row's groups; else, in 16- and 32-row tiles of
    which blocks take several, the next multiple of 8 above it, up to 64, that does, leaves
    room for four consumer warps' stages and gives the busiest block four stages; else half
    or a quarter of want). mt: 16-row m-tiles per tile (above).
    ns: ring stages, a multiple of cw; by default as many as fit (at most 16;
    cw halves when not even cw stages fit). bps: resident
    blocks per SM the grid is sized for (the '_BPS' entry, not a macro; a
    '_GRID' entry caps the grid, so that blocks take many tiles).
    fp16: fp16 operands, x converted once per block by the consumer warps and kept resident
    (4 bits only). parts: copies per stage, each released once used (PARTS); by default 2
    when blocks take several tiles or tiles have 64 rows, and a stage halves into whole
    swizzled lines, except in 16- and 32-row tiles with fp16 operands, else 1 (eleventh
    session, with constant offsets in the consumer loop, fp16: one part with two warps per
    stage 8192->28672 33.0 us against two parts' 34.0, 4096->28672 18.6 against 19.5; bf16:
    two parts stay faster, 13824->5120 17.5 against 19.1; eighth session: 2 shortens
    8192->28672 from 37.4 to 35.3 us and 4096->14336 from 16.2 to 14.3, but lengthens 32-row
    one-tile-per-block shapes by 0.2-1 us; ninth: 28672->8192 in 64-row tiles 37.1 -> 35.1;
    4 is slower than 2).
    wk: consumer warps sharing each stage, each taking a run of U/PARTS/wk consecutive groups
    of each part (every wk-th group where the runs are not whole steps of UG groups: FASTADDR
    in bulk.cu); by default 2 where 16- or 32-row tiles' stages come in one part and the
    warps pair up, else 1.
    ks: K slices (SPLITK in bulk.cu: blockIdx.y takes in_f/ks inputs, the sums go through a
    float workspace); by default bulk_splits.
    Contradictory settings (also through --bulk-over) give None."""
    if bits not in (4, 8) or not 1 <= tokens <= 16 or in_f % group or out_f % 8:
        return None
    sms = sms or SMS
    if ks is None:
        ks = bulk_splits(bits, group, tokens, in_f, sms)
    if ks < 1 or in_f % (ks * group):
        return None
    kin = in_f // ks
    # one token, 4 bits, unsliced, 8192 < in_f <= 16384 (Go bulkWideOneToken): fp16 operands (and
    # with them DP2A) where the variant keeps tiles of at most 32 rows and a ring of 8 stages of
    # 8 warps (twenty-fifth session: 14336->4096 11.0 us, 10.5 before the residuals, against
    # 11.1-11.2 with bf16 x staged; not 13824->5120, four warps, 18.1-18.3 against 17.7)
    if (fp16 is None and "FP16" not in BULK_OVER and tokens == 1 and bits == 4 and ks == 1
            and 8192 < in_f <= 16384):
        c = bulk_config(bits, group, tokens, in_f, out_f, sms, mt, cw, seg, ns, bps, 1, parts, wk, ks)
        if c is not None and c["MT"] <= 2 and c["CW"] == 8 and c["NS"] == 8 and c.get("DP2A"):
            return c
    use16 = fp16 if fp16 is not None else bulk_fp16(bits, tokens, kin, ks)
    use16 = BULK_OVER.get("FP16", use16)   # as the variant will be built
    if mt is None:
        g = max(1, sms * bps // ks)   # blocks per slice
        t1, t2, t4 = -(-out_f // 16), -(-out_f // 32), -(-out_f // 64)
        # 64-row tiles only where 256-byte row pieces exist (4 bits, groups <= 64) and eight
        # warps' stages fit in them (else the narrower tiles' rule, below)
        # (not with K slices: 16 tokens, 4096->14336, 22.7-25.9 us against 32-row tiles' 19.8)
        if bits == 4 and group <= 64 and ks == 1 and -(-t4 // g) * 4 <= -(-t1 // g):
            c = bulk_config(bits, group, tokens, in_f, out_f, sms, 4, cw, seg, ns, bps, fp16, parts, wk, ks)
            if c is None or c["CW"] == cw:
                return c
        # with fp16 operands 32-row tiles may take up to a third more m-tiles than 16-row ones
        # (eleventh session: 4096->14336 11.6 us against 13.4; see bulkTileRows in Go)
        w1, w2 = -(-t1 // g), -(-t2 // g) * 2
        mt = 2 if w2 <= w1 or use16 and 3 * w2 <= 4 * w1 else 1
    if seg is None:   # 64-row tiles, or x staged and outweighing the weights (above 8 tokens): half the row pieces
        seg = 256 if mt == 4 or tokens > 8 and not use16 else 512
    groups = kin // group
    gbytes = group * bits // 8
    want = max(8, seg // gbytes // 8 * 8)
    # U: want where it divides the row's groups. Else, in 16- and 32-row tiles of which blocks
    # take several, the first larger multiple of 8 (up to 64) that divides them, leaves room
    # for four consumer warps' stages and gives the busiest block four stages; else half or a
    # quarter of want. Tenth session, 1 token, g64: 13824 inputs, 24 groups per stage
    # 19.4-19.6 us against 8 groups' 31.1-31.2; 3584->18944, 56 groups (nine stages per
    # block) with four warps 17.3 against 8 with eight 20.1; g32: 3584->18944 56 groups 15.5
    # against 16 groups' 21.9, 13824->5120 48 against 16 22.5 against 33.1; 8 bits g32:
    # 2304->4240 24 groups 8.5 against 8 groups' 11.3. But with two stages per block,
    # 768->8192 at 8 bits 7.0 against 5.5 and 1536->4240 g32 5.0 against 4.8; one 32-row
    # tile per block, 4608->4096 g32 48 groups with four warps 8.2 against 16 with eight 6.4;
    # 64-row tiles were not measured with larger stages.
    fit = [v for v in (want,) if v <= 64 and groups % v == 0]
    above = [v for v in range(want + 8, 65, 8) if groups % v == 0]
    below = [v for v in (want // 2, want // 4) if 8 <= v <= 64 and v % 8 == 0 and groups % v == 0]
    tiles = -(-out_f // (16 * mt))
    per_block = -(-tiles // max(1, sms * bps // ks))   # tiles the busiest block takes
    if mt == 4 or per_block < 2:
        above = []
    for u in fit + above + below:
        c = _bulk_config_u(bits, group, tokens, in_f, out_f, sms, mt, cw, u, ns, bps, fp16, parts, wk, ks)
        if c is not None and (u not in above or c["CW"] >= min(4, cw) and per_block * (groups // u) >= 4):
            return c
    return None


def bulk_splits(bits: int, group: int, tokens: int, in_f: int, sms: int | None = None) -> int:
    """K slices for affine_bulk: 1 up to 8 tokens (and at 8 bits); above, of the slice counts
    whose slices are whole stages of 8 groups and whose x (fp16, resident) is at most 64 KiB
    (so that the ring keeps room), of at most sms slices, the one that leaves the fewest SMs
    idle (sms // ks blocks per slice), and of those the most slices (twelfth session, 16 tokens: 4096->14336 19.8 us
    in 4 slices against 21.1 in 2; 14336->4096 20.5 in 14 against 21.1 in 7; 28672->8192 60.9
    in 14 against 68.7 in 28, which leaves 20 SMs idle); 0 where none fits (not served)."""
    if tokens <= 8 or bits != 4:
        return 1
    sms = sms or SMS
    best, used = 0, -1
    for ks in range(2, min(in_f // (8 * group), sms) + 1):
        if in_f % (ks * 8 * group) == 0 and 2 * tokens * (in_f // ks) <= 64 * 1024:
            u = max(1, sms // ks) * ks
            if u >= used:
                best, used = ks, u
    return best


def bulk_fp16(bits: int, tokens: int, kin: int, ks: int) -> int:
    """Whether affine_bulk takes fp16 operands with x resident (kin: the inputs of a block)."""
    return int(bits == 4 and kin <= 8192 and (tokens <= 8 or ks > 1))


def _bulk_config_u(bits, group, tokens, in_f, out_f, sms, mt, cw, u, ns, bps, fp16, parts, wk, ks=1):
    """bulk_config with the groups per stage (U) chosen."""
    gbytes = group * bits // 8
    kin = in_f // ks
    cfg = dict(BITS=bits, GROUP=group, MT=mt, CW=cw, U=u, NS=cw, XT=tokens, _BPS=bps)
    if ks > 1:
        cfg["SPLITK"], cfg["_KS"] = 1, ks
    if fp16 is None:
        fp16 = bulk_fp16(bits, tokens, kin, ks)
    fp16 = BULK_OVER.get("FP16", fp16)   # as the variant will be built (cfg.update below)
    if parts is None:
        # not with fp16 in 16- and 32-row tiles: one part, two warps per stage (eleventh session,
        # 8192->28672 33.0 us against 34.0; without fp16 two parts stay faster, 13824->5120
        # 17.5 against 19.1)
        parts = 2 if ((-(-out_f // (16 * mt)) > sms * bps // ks or mt == 4) and u * gbytes % 256 == 0
                      and (not fp16 or mt == 4)) else 1
    if parts > 1:
        cfg["PARTS"] = parts
    if fp16:
        if bits != 4:
            return None
        cfg["FP16"] = 1
    cfg.update(BULK_OVER)
    if cfg.get("FP16") and bits != 4:
        return None
    while cfg.get("PARTS", 1) > 1 and u * gbytes % (128 * cfg["PARTS"]):
        cfg["PARTS"] //= 2   # a stage splits only into parts of whole swizzled lines

    def fits(c):   # one block: 227 KiB; several: the SM's 228 KiB, 1 KiB reserved per block
        b = bulk_smem_bytes(c, in_f)
        if (kin // group) % c["U"]:
            return False
        return b <= BULK_MAX_SMEM and (bps == 1 or (b + 1024) * bps <= 228 * 1024)

    if ns is None:
        # the most stages that fit, a multiple of the consumer warps (at most 16);
        # fewer consumer warps when not even one round of stages fits
        while True:
            ns = 0
            for v in range(cfg["CW"], 17, cfg["CW"]):
                if v >= 2 and fits(dict(cfg, NS=v)):
                    ns = v
            if ns or cfg["CW"] == 1:
                break
            cfg["CW"] //= 2
        if not ns:
            return None
    cfg["NS"] = ns
    # Stages in one part (blocks that take one tile each, stages that do not halve into
    # 256-byte lines, or fp16 operands) of 16- and 32-row tiles: two warps share each, each
    # with half its groups. Tenth
    # session: 14336->4096 11.6-11.8 us against 12.5-12.6, 4096^2 5.2 against 5.5,
    # 3584->18944 g32 15.5 against 17.1; 18944->3584 19.5 against 19.3; with two parts it is
    # slower; 64-row tiles were not measured
    if wk is None:
        wk = 2 if cfg.get("PARTS", 1) == 1 and mt < 4 and cfg["CW"] % 2 == 0 else 1
    if wk > 1:
        cfg["WK"] = wk
    if cfg["CW"] % wk or ns % (cfg["CW"] // wk) or u % (wk * cfg.get("PARTS", 1)) or not fits(cfg):
        return None
    # x ahead of half the ring (Go bulkXHold): one token, fp16, unsliced, a ring of 8 stages and a
    # busiest block of more than half a ring and at most three rings of stages (twenty-first
    # session: 4096->14336 10.9-11.0 us against 11.6-11.7, 4096->6144 6.3 against 7.3-7.4)
    # (and 1 KiB of shared memory to spare: the hold's mbarrier is static, ahead of the 1024-aligned dynamic part)
    # (not past 8192 inputs, where x's conversion is the longer hold: twenty-sixth session,
    # 14336->4096 9.7 us without against 9.8-9.9 with)
    if ("XHOLD" not in BULK_OVER and tokens == 1 and cfg.get("FP16") and ks == 1 and ns == 8
            and in_f <= 8192 and bulk_smem_bytes(cfg, in_f) + 1024 <= BULK_MAX_SMEM):
        tiles = -(-out_f // (16 * mt))
        stages = -(-tiles // max(1, sms * bps)) * (kin // (u * group))   # the busiest block's
        if ns // 2 < stages <= 3 * ns:
            cfg["XHOLD"] = ns // 2
    # one token on the integer pipes (Go bulkDP2A): fp16 operands (x converted per block) at one
    # token, unsliced, take x as int16 and its int8 residuals, dp2a and dp4a, no mma (twenty-fifth
    # session: the SM at 1.97 GHz against 1.79; 4096->14336 10.3 us against 10.6 with the mma,
    # both with 8 groups unrolled where a warp's run is a multiple of 8 in 16- and 32-row tiles;
    # twenty-sixth: the residuals only in groups that need them (the kernel's XLO), x converted
    # on four lanes a group (XPC): 9.7 us)
    # (where x's int8 residuals still fit beside the ring, and the hold's 1 KiB)
    dp2a = dict(cfg, DP2A=1)
    if ("DP2A" not in BULK_OVER and tokens == 1 and cfg.get("FP16") and ks == 1
            and bulk_smem_bytes(dp2a, in_f) + (1024 if cfg.get("XHOLD") else 0) <= BULK_MAX_SMEM):
        cfg["DP2A"] = 1
        if "UNR" not in BULK_OVER and mt <= 2 and (u // cfg.get("PARTS", 1) // wk) % 8 == 0:
            cfg["UNR"] = 8
    # x's loads in one round at one token (Go bulkXLoads): each consumer thread loads
    # ceil(pieces*groups / threads) pieces at once, a group in quarters with DP2A (the kernel's
    # XPC), else in halves (14336->4096, before the residuals: 10.5 us with 2 against 11.0-11.1)
    if "XCB" not in BULK_OVER and tokens == 1 and cfg.get("FP16") and ks == 1:
        pieces = (BULK_OVER.get("XPC", 4) if cfg.get("DP2A") else 2)
        n = -(-pieces * (kin // group) // (32 * cfg["CW"]))
        if n > 1:
            cfg["XCB"] = n
    return cfg


def bulk_smem_bytes(cfg: dict, in_f: int = 0) -> int:
    """Dynamic shared memory of an affine_bulk launch (in_f: the FP16 variant keeps x resident):
    unpadded swizzled rows, stages on 1024-byte boundaries, +1024 slack (see the kernel)."""
    tr = 16 * cfg["MT"]
    seg = cfg["U"] * cfg["GROUP"] * cfg["BITS"] // 8
    xbytes = cfg["XT"] * (2 * cfg["U"] * cfg["GROUP"] + 16)
    ns = cfg["NS"]
    fp16 = cfg.get("FP16", 0)
    parts = cfg.get("PARTS", 1)   # PARTS > 1: two scale buffers per slot, a barrier pair per part
    nsbuf = 2 if parts > 1 else 1
    stage = -(-(tr * seg + nsbuf * 2 * tr * 2 * cfg["U"] + (0 if fp16 else xbytes)) // 1024) * 1024
    kin = in_f // cfg.get("_KS", 1)   # a block's inputs (SPLITK: one slice)
    resident = cfg["XT"] * (2 * kin + 16) + 16 * (kin // cfg["GROUP"]) * cfg["XT"] if fp16 else 0
    if cfg.get("DP2A") and fp16 and cfg["XT"] == 1:   # DP2A: x's int8 residuals beside its int16 values
        resident += kin
    nt = -(-cfg["XT"] // 8)   # n-tiles of 8 tokens: one tile's sums are [8*nt][tr] floats
    per_tile = cfg["CW"] * tr if cfg["XT"] == 1 and cfg.get("DETRED", 1) else 8 * nt * tr   # one token: [CW][tr], a slot per warp (DETRED)
    red = 0 if cfg.get("SPLITK") else ns * 4 * per_tile   # none with SPLITK
    return ns * stage + red + -(-4 * ns // 16) * 16 + 16 * ns * parts + 1024 + resident


def bulk_launch(cfg: dict, tokens: int, in_f: int, out_f: int):
    """(grid, block, dynamic shared bytes) for affine_bulk: resident blocks that walk the tiles,
    CW consumer warps and one producer warp per part (PARTS)."""
    tiles = -(-out_f // (16 * cfg["MT"]))
    ks = cfg.get("_KS", 1)   # SPLITK: blockIdx.y is the slice of the inputs
    grid = (min(tiles, cfg.get("_GRID") or max(1, SMS * cfg.get("_BPS", 1) // ks)), ks, 1)
    return grid, (32 * (cfg["CW"] + cfg.get("PARTS", 1)), 1, 1), bulk_smem_bytes(cfg, in_f)


# Resident blocks per SM each tile is sized for (shared memory / registers).
QMM_RESIDENT = {"s16": 2, "s32": 1, "s64": 2, "m128": 1, "l": 1}


def qmm_tile_for_tokens(tokens: int) -> str:
    if tokens <= 16:
        return "s16"
    if tokens <= 32:
        return "s32"
    if tokens <= 64:
        return "s64"
    if tokens <= 192:
        return "m128"
    return "l"


def qmm_config(bits: int, group: int, tokens: int, in_f: int, out_f: int, sms: int | None = None,
               tile: str | None = None, ksplit: int | None = None) -> dict:
    """Macros for affine_qmm."""
    sms = sms or SMS
    name = tile or qmm_tile_for_tokens(tokens)
    bm, bn, bk, wm, wn, wk, stages = QMM_CONFIGS[name]
    wrow = bk * bits // 8
    g = _gcd(in_f * bits // 8, wrow)
    wcp = 16 if g % 16 == 0 else (8 if g % 8 == 0 else 4)
    if ksplit is None:
        # Split K over a cluster of 2 or 4 blocks while the doubled grid still
        # fits in one wave of resident blocks, keeping >= 2 k-tiles per block.
        blocks = -(-out_f // bn) * -(-tokens // bm)
        nkt = -(-in_f // bk)
        slots = sms * QMM_RESIDENT[name]
        ksplit = 1
        while ksplit < 4 and blocks * ksplit * 2 <= slots and nkt >= 4 * ksplit:
            ksplit *= 2
    cfg = dict(BITS=bits, GROUP=group, BM=bm, BN=bn, BK=bk, WARPS_M=wm, WARPS_N=wn,
               WARPS_K=wk, STAGES=stages, KSPLIT=ksplit, WCP=wcp)
    # s16 wants two resident blocks per SM: drop to 3 stages if 4 do not fit in half an SM.
    if name == "s16" and qmm_smem_bytes(cfg) > 113 * 1024:
        cfg["STAGES"] = 3
    return cfg


def qmm_smem_bytes(cfg: dict) -> int:
    def r16(v):
        return (v + 15) // 16 * 16
    bm, bn, bk, bits, group = cfg["BM"], cfg["BN"], cfg["BK"], cfg["BITS"], cfg["GROUP"]
    xrowb = 2 * (bk + 8)
    wrow = bk * bits // 8
    wsb = wrow if wrow % 16 else wrow + 16 * ((wrow // 16 + 1) % 2)
    gt = max(1, bk // group)
    scw = gt // 2 + 1
    foldk = min(group, bk // cfg["WARPS_K"], 64)
    nf = bk // foldk
    stage = r16(bm * xrowb) + r16(bn * wsb + 16) + 2 * r16(4 * bn * scw)
    pipe = cfg["STAGES"] * stage + 2 * bm * xrowb + 2 * 8 * nf * bn + 2 * 4 * nf * bm
    red = 4 * cfg["WARPS_K"] * bm * bn if (cfg["WARPS_K"] > 1 or cfg["KSPLIT"] > 1) else 0
    return max(pipe, red)


def qmm_launch(cfg: dict, tokens: int, in_f: int, out_f: int):
    """(grid, block, dynamic shared bytes) for affine_qmm."""
    threads = 32 * cfg["WARPS_M"] * cfg["WARPS_N"] * cfg["WARPS_K"]
    grid = (-(-out_f // cfg["BN"]) * cfg["KSPLIT"], -(-tokens // cfg["BM"]), 1)
    return grid, (threads, 1, 1), qmm_smem_bytes(cfg)


# =============================================================================
# NVRTC (ctypes), module cache, cupy launch.
# =============================================================================

class NVRTC:
    def __init__(self):
        names = []
        if os.environ.get("KCAND_LIBNVRTC"):
            names.append(os.environ["KCAND_LIBNVRTC"])
        names += ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                  "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12",
                  "/usr/local/cuda/lib64/libnvrtc.so"]
        for p in sys.path:
            names += sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib", "libnvrtc.so*")), reverse=True)
        self.lib = None
        for n in names:
            try:
                self.lib = ctypes.CDLL(n)
                self.path = n
                break
            except OSError:
                continue
        if self.lib is None:
            raise OSError("libnvrtc not found (set KCAND_LIBNVRTC)")
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = (major.value, minor.value)

    def compile(self, src: str, name: str, options) -> tuple[bytes, str]:
        lib = self.lib
        prog = ctypes.c_void_p()
        r = lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None)
        if r != 0:
            raise RuntimeError(f"nvrtcCreateProgram failed: {r}")
        try:
            opts = [o.encode() for o in options]
            arr = (ctypes.c_char_p * len(opts))(*opts)
            r = lib.nvrtcCompileProgram(prog, len(opts), arr)
            n = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            logbuf = ctypes.create_string_buffer(n.value + 1)
            lib.nvrtcGetProgramLog(prog, logbuf)
            log = logbuf.value.decode(errors="replace")
            if r != 0:
                raise RuntimeError(f"NVRTC failed for {name} {' '.join(options)}:\n{log}")
            size = ctypes.c_size_t()
            lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
            cubin = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetCUBIN(prog, cubin)
            return cubin.raw, log
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


_CACHE = Path(os.environ.get("KCAND_AFFINE_CACHE", Path.home() / ".cache" / "kcand-affine"))
_nvrtc = None
_modules = {}


def _nvrtc_or_none():
    global _nvrtc
    if _nvrtc is None:
        try:
            _nvrtc = NVRTC()
        except OSError as e:
            print(f"# ctypes NVRTC unavailable ({e}); using cupy's compiler", flush=True)
            _nvrtc = False
    return _nvrtc or None


def variant_key(path: Path, cfg: dict):
    return (path.name, tuple(sorted(_macros(cfg).items())))


def _macros(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if not k.startswith("_")}


def _options(cfg: dict):
    base = list(NVRTC_OPTIONS)
    if cfg.get("_arch"):
        base = [f"-arch={cfg['_arch']}"] + [o for o in base if not o.startswith("-arch")]
    return base + [f"-D{k}={v}" for k, v in sorted(_macros(cfg).items())]


def compile_variant(path: Path, cfg: dict) -> dict:
    """Compile one variant to a cached cubin; returns {'cubin': path, 'log': ptxas log}."""
    src = path.read_text()
    opts = _options(cfg)
    nv = _nvrtc_or_none()
    tag = f"nvrtc{nv.version if nv else 'cupy'}"
    h = hashlib.sha256((src + "\0" + " ".join(opts) + "\0" + tag).encode()).hexdigest()[:24]
    _CACHE.mkdir(parents=True, exist_ok=True)
    cub, logp = _CACHE / f"{h}.cubin", _CACHE / f"{h}.log"
    if nv is None:
        return {"source": src, "options": opts, "log": ""}
    if not cub.exists():
        cubin, log = nv.compile(src, path.name, opts + ["--ptxas-options=-v"])
        tmp = cub.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(cubin)
        tmp.replace(cub)
        logp.write_text(log)
    return {"cubin": cub, "log": logp.read_text() if logp.exists() else ""}


def ptxas_summary(log: str) -> str:
    regs = re.findall(r"Used (\d+) registers", log)
    spill = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    out = []
    if regs:
        out.append(f"{regs[-1]} regs")
    if spill:
        f, s, l = spill[-1]
        out.append(f"stack {f} spill {s}/{l}")
    return ", ".join(out)


def compile_all(variants, jobs: int | None = None):
    """variants: iterable of (path, cfg). Compiles in parallel threads (NVRTC releases the GIL)."""
    todo = {}
    for path, cfg in variants:
        k = variant_key(path, cfg)
        if k not in _modules and k not in todo:
            todo[k] = (path, cfg)
    if not todo:
        return
    t0 = time.time()
    jobs = jobs or min(16, os.cpu_count() or 4)
    with futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = {k: ex.submit(compile_variant, p, c) for k, (p, c) in todo.items()}
        for k, f in futs.items():
            _modules[k] = {"artifact": f.result(), "kernel": None, "smem": 0, "cfg": todo[k][1], "path": todo[k][0]}
    print(f"# compiled {len(todo)} variants in {time.time() - t0:.1f}s", flush=True)


# --carveout: every kernel's preferred shared-memory carveout (percent of
# the unified L1 / shared memory, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
# -1 the driver's default), for timing whether a kernel's blocks wait for an
# SM's split to change (bench/NOTES.md, twenty-ninth session: they did not).
CARVEOUT = None
_carveout_set = {}   # CUfunction -> the carveout it has
_loaded = {}         # CUfunction -> kernel, every kernel get_kernel returned


def _apply_carveout(kern):
    """Sets CARVEOUT on kern once (no-op while CARVEOUT is None)."""
    fn = getattr(kern, "kernel", kern)
    _loaded[fn.ptr] = kern
    if CARVEOUT is None:
        return
    from cupy.cuda import driver
    if _carveout_set.get(fn.ptr) != CARVEOUT:
        driver.funcSetAttribute(fn.ptr, 9, CARVEOUT)  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
        _carveout_set[fn.ptr] = CARVEOUT


def set_carveout(percent: int):
    """CARVEOUT = percent, on every kernel loaded so far and every later one
    (an A/B in one process; graphs captured after the call take it)."""
    global CARVEOUT
    CARVEOUT = percent
    for kern in list(_loaded.values()):
        _apply_carveout(kern)


def get_kernel(path: Path, cfg: dict, smem: int, name: str | None = None):
    kern = _get_kernel(path, cfg, smem, name)
    _apply_carveout(kern)
    return kern


def _get_kernel(path: Path, cfg: dict, smem: int, name: str | None = None):
    import cupy
    k = variant_key(path, cfg)
    if k not in _modules:
        compile_all([(path, cfg)])
    m = _modules[k]
    if m.get("module") is None:
        art = m["artifact"]
        if "cubin" in art:
            m["module"] = cupy.RawModule(path=str(art["cubin"]))
        else:
            opts = tuple(o for o in art["options"] if not o.startswith("-arch"))
            m["module"] = cupy.RawModule(code=art["source"], options=opts, backend="nvrtc")
    if name is not None and name != ENTRY[path]:
        kern = m["module"].get_function(name)
        if smem > 48 << 10:
            _set_max_smem(kern, smem)
        return kern
    if m["kernel"] is None:
        m["kernel"] = m["module"].get_function(ENTRY[path])
    kern = m["kernel"]
    if smem > m["smem"]:
        _set_max_smem(kern, smem)
        m["smem"] = smem
    return kern


def _set_max_smem(kern, smem: int):
    """Lets kern launch with smem bytes of dynamic shared memory."""
    try:
        kern.max_dynamic_shared_size_bytes = smem
    except Exception:
        from cupy.cuda import driver
        fn = getattr(kern, "kernel", kern)
        driver.funcSetAttribute(fn.ptr, 8, smem)  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def occupancy(path: Path, cfg: dict, threads: int, smem: int) -> int:
    """Resident blocks per SM for a variant (driver occupancy), 2 if unknown."""
    kern = get_kernel(path, cfg, smem)
    m = _modules[variant_key(path, cfg)]
    if "occ" not in m or m.get("occ_smem") != smem:
        occ = 2
        try:
            from cupy.cuda import driver
            fn = getattr(kern, "kernel", kern)
            occ = int(driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, threads, smem))
        except Exception:
            pass
        m["occ"], m["occ_smem"] = max(1, occ), smem
    return m["occ"]


def gemv_launch_for(cfg: dict, tokens: int, in_f: int, out_f: int):
    """gemv_launch with the variant's measured occupancy."""
    _, block, smem = gemv_launch(cfg, tokens, in_f, out_f)
    occ = occupancy(GEMV_CU, cfg, block[0], smem)
    return gemv_launch(cfg, tokens, in_f, out_f, occ=occ)


def launch(path: Path, cfg: dict, grid, block, smem, args):
    import cupy
    import torch
    kern = get_kernel(path, cfg, smem)
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    with stream:
        kern(grid, block, args, shared_mem=smem)


# =============================================================================
# Data: quantised weights, packing, reference.
# =============================================================================

def pack_rows(q, bits: int):
    """q: uint8 [out, in] (< 2^bits) -> int32 [out, in*bits/32], MLX bit-stream packing."""
    import torch
    out, n = q.shape
    if bits == 8:
        return q.contiguous().view(torch.int32)
    v = q.view(out, n // 8, 8).to(torch.int64)
    shifts = torch.arange(8, device=q.device, dtype=torch.int64) * bits
    acc = (v << shifts).sum(-1)                       # 8 values -> 8*bits <= 48 bits
    bsh = torch.arange(bits, device=q.device, dtype=torch.int64) * 8
    by = ((acc.unsqueeze(-1) >> bsh) & 0xFF).to(torch.uint8)   # [out, n/8, bits]
    return by.reshape(out, n * bits // 8).contiguous().view(torch.int32)


def pack_row_slow(qrow, bits):
    """Literal port of affine.Pack (Go) for a self-check."""
    row = bytearray((len(qrow) * bits + 7) // 8)
    for i, v in enumerate(qrow):
        bit = i * bits
        b, sh = bit >> 3, bit & 7
        w = (int(v) << sh) & 0xFFFF
        row[b] |= w & 0xFF
        if sh + bits > 8:
            row[b + 1] |= (w >> 8) & 0xFF
    return bytes(row)


def self_check_packing():
    import torch
    g = torch.Generator(device="cpu").manual_seed(7)
    for bits in (2, 3, 4, 5, 6, 8):
        q = torch.randint(0, 1 << bits, (3, 96), generator=g, dtype=torch.uint8)
        fast = pack_rows(q.cuda(), bits).cpu().contiguous().view(torch.uint8).numpy().tobytes()
        slow = b"".join(pack_row_slow(q[r].tolist(), bits) for r in range(3))
        if fast != slow:
            raise SystemExit(f"packing self-check failed for bits={bits}")


class Weights:
    """Random quantised weights in the affine layout, plus the dense float64 W."""

    def __init__(self, bits, group, in_f, out_f, bias: bool, seed: int, keep_dense=True):
        import torch
        gen = torch.Generator(device="cuda").manual_seed(seed)
        self.bits, self.group, self.in_f, self.out_f = bits, group, in_f, out_f
        G = in_f // group
        levels = (1 << bits) - 1
        self.q = torch.randint(0, 1 << bits, (out_f, in_f), generator=gen, device="cuda", dtype=torch.uint8)
        self.w = pack_rows(self.q, bits)
        s = (torch.rand((out_f, G), generator=gen, device="cuda") + 0.5) * (2.0 / levels)
        b = -s * (levels / 2.0) + (torch.rand((out_f, G), generator=gen, device="cuda") - 0.5) * 0.2
        self.scales = s.to(torch.bfloat16)
        self.biases = b.to(torch.bfloat16)
        self.bias = ((torch.rand(out_f, generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
                     if bias else None)
        self.dense = None
        if keep_dense:
            sd = self.scales.double().repeat_interleave(group, dim=1)
            bd = self.biases.double().repeat_interleave(group, dim=1)
            self.dense = sd * self.q.double() + bd      # [out, in] float64

    def nbytes(self):
        return self.w.numel() * 4 + self.scales.numel() * 2 + self.biases.numel() * 2

    def reference(self, x):
        r = x.double() @ self.dense.t()
        if self.bias is not None:
            r = r + self.bias.double()
        return r


def kernel_args(wt, x, y, tokens, w=None, scales=None, biases=None):
    import numpy as np
    w = wt.w if w is None else w
    scales = wt.scales if scales is None else scales
    biases = wt.biases if biases is None else biases
    p = lambda t: np.uint64(t.data_ptr())
    return (p(x), p(w), p(scales), p(biases),
            np.uint64(wt.bias.data_ptr()) if wt.bias is not None else np.uint64(0),
            p(y), np.int32(tokens), np.int32(wt.in_f), np.int32(wt.out_f))


def run_kernel(kind, wt, x, tokens, cfg=None, poison=-1):
    """Launch once into a poisoned y (bulk: poison's int16 bits, by default 0xFFFF, a bf16 NaN;
    0x7F7F is a finite one, for inputs whose reference holds NaN); returns y (bf16) and the
    config used."""
    import torch
    bits, group, in_f, out_f = wt.bits, wt.group, wt.in_f, wt.out_f
    if kind == "gemv":
        cfg = cfg or gemv_config(bits, group, tokens, in_f, out_f)
        grid, block, smem = gemv_launch_for(cfg, tokens, in_f, out_f)
        path = GEMV_CU
    elif kind == "stream":
        cfg = cfg or stream_config(bits, group, tokens, in_f, out_f)
        grid, block, smem = stream_launch(cfg, tokens, in_f, out_f)
        path = STREAM_CU
        if WG_PDL and stream_early_start(cfg, tokens):
            # as the plugins launch it: with early start, behind a kernel that releases its
            # dependents at once and writes x over NaN only later (write_x_late), so a read
            # of x before the kernel's grid wait would show
            y = torch.full((tokens, out_f), -1, dtype=torch.int16, device="cuda")
            xs = write_x_late(x)
            launch_programmatic(get_kernel(path, cfg, smem), grid, block, kernel_args(wt, xs, y, tokens), smem)
            return y.view(torch.bfloat16), cfg
    elif kind == "bulk":
        cfg = cfg or bulk_config(bits, group, tokens, in_f, out_f)
        y = torch.full((tokens, out_f), poison, dtype=torch.int16, device="cuda")
        run = bulk_tma_launcher(cfg, wt, x, y, tokens)
        run()
        run()   # back to back, with early start: a call must not see the last one's sums (SPLITK)
        return y.view(torch.bfloat16), cfg
    else:
        cfg = cfg or qmm_config(bits, group, tokens, in_f, out_f)
        grid, block, smem = qmm_launch(cfg, tokens, in_f, out_f)
        path = QMM_CU
    y = torch.full((tokens, out_f), -1, dtype=torch.int16, device="cuda")   # 0xFFFF: bf16 NaN
    launch(path, cfg, grid, block, smem, kernel_args(wt, x, y, tokens))
    return y.view(torch.bfloat16), cfg


# =============================================================================
# Correctness.
# =============================================================================

# (in, out): odd and model shapes; group sizes must divide in.
CORRECTNESS_SHAPES = [
    (4096, 4096), (5120, 13824), (2880, 2880), (1152, 1032), (14336, 4096),
    (4096, 14336), (2048, 2048), (3072, 8192), (8192, 1024), (2560, 6912),
    (6912, 2560), (1536, 256), (896, 4864), (4864, 896), (7168, 2048),
    (2048, 7168), (1056, 520), (96, 8), (160, 64), (2880, 4104),
    (1024, 3072), (640, 1280), (3584, 512), (288, 200),
]
BITS_ALL = (2, 3, 4, 5, 6, 8)
GROUPS_ALL = (32, 64, 128)
# Rows whose groups no stream step divides (the stream kernel's TAIL):
# gpt-oss's 2880 inputs (45 groups of 64, whose scales start at odd entries
# on odd rows) at 4, 8, 6 and 2 bits, and 9 groups of 128.
TAIL_CASES = [(2880, 5120, 4, 64, False), (2880, 1032, 8, 64, True), (2880, 2056, 6, 64, False),
              (2880, 520, 2, 64, True), (1152, 1032, 4, 128, True)]
# The stream kernel at 9-16 tokens in 8-token tiles (streamTokenTiles): 4096^2, the rule's
# edge (8192->4224 in groups of 128: 132 tiles of 32 rows, one a SM on the H200), and
# 8192->1024, whose blocks take x through the ring at decode but not in tiles. Launched with
# early start as the plugins launch them (run_kernel).
TOKEN_TILE_CASES = [(4096, 4096, 4, 64, False), (8192, 4224, 4, 128, True), (8192, 1024, 4, 64, True)]
# 9-16 tokens in 4-bit groups of 32 (streamTileRing): one 16-token tile with x through the ring
# after the first steps' weights, launched with early start; gpt-oss's 2880 with a last step of
# fewer groups; 8192->1024 with few rows (one row tile a warp at 11 tokens, and at decode).
TILE_RING_CASES = [(4096, 4096, 4, 32, True), (2880, 2880, 4, 32, False), (8192, 1024, 4, 32, True)]


def correctness_cases(quick: bool):
    """(in, out, bits, group, bias): every (bits, group) pair appears; odd shapes included."""
    cases = []
    combos = [(b, g) for g in GROUPS_ALL for b in BITS_ALL]
    ci = 0
    for si, (in_f, out_f) in enumerate(CORRECTNESS_SHAPES):
        # find the next (bits, group) combo whose group divides in
        for _ in range(len(combos)):
            b, g = combos[ci % len(combos)]
            ci += 1
            if in_f % g == 0:
                break
        cases.append((in_f, out_f, b, g, si % 2 == 0))
    seen = {(b, g) for _, _, b, g, _ in cases}
    for b, g in combos:   # top up any pair the shape list skipped
        if (b, g) not in seen:
            cases.append((1024, 1032, b, g, True))
    cases += TAIL_CASES + TOKEN_TILE_CASES + TILE_RING_CASES
    if quick:
        cases = [c for c in cases if c[0] * c[1] <= 8192 * 8192][:8] + TOKEN_TILE_CASES[:1] + TILE_RING_CASES[:1]
    return cases


def dp2a_residual_groups(x, group):
    """How many (token, group)s of x DP2A's conversion gives their int8 residuals
    (bulk.cu XLO 2: sum|residual| * sigma/XQ > 2^-10 * (sum|x| - max|x|)), of how
    many; float64 here, so a group right at the line may fall the other way."""
    import torch
    xq = 8192.0 if group == 128 else 16384.0
    g = x.double().reshape(x.shape[0], -1, group)
    mx = g.abs().amax(dim=2, keepdim=True)
    sigma = torch.where(mx > 0, torch.exp2(torch.ceil(torch.log2(mx.clamp_min(1e-300)))), torch.ones_like(mx))
    v = g / sigma
    rest = v * xq - torch.round(v * xq)
    need = rest.abs().sum(dim=2) > (xq / 1024) * (v.abs().sum(dim=2) - (mx / sigma).squeeze(2))
    return int(need.sum()), need.numel()


def check(y, ref):
    import torch
    yd = y.double()
    finite = bool(torch.isfinite(yd).all())
    diff = (yd - ref).abs()
    tol = torch.clamp(ref.abs() * 0.01, min=0.125)
    excess = (diff / tol)
    if not finite:
        excess = torch.where(torch.isfinite(yd), excess, torch.full_like(excess, float("inf")))
    worst = float(excess.max())
    rel = float(torch.linalg.vector_norm(yd - ref) / max(float(torch.linalg.vector_norm(ref)), 1e-30)) if finite else float("inf")
    idx = int(excess.argmax())
    ok = finite and worst <= 1.0 and rel <= 1e-2
    detail = f"rel {rel:.2e} worst {worst:.2f}xtol"
    if not ok:
        t, o = divmod(idx, y.shape[1])
        detail += f" at [t={t}, o={o}] got {float(yd.reshape(-1)[idx]):.5g} want {float(ref.reshape(-1)[idx]):.5g}"
        if not finite:
            detail += f" ({int((~torch.isfinite(yd)).sum())} non-finite)"
    return ok, detail


def check_nonfinite(y, ref, bad: str):
    """check for an x whose token 0 holds bad ("nan", "inf" or "-inf"): token 0's outputs must
    all be NaN (for an infinity, NaN or the reference's infinity), the other tokens' as check."""
    import torch
    y0, r0 = y[0].double(), ref[0]
    if bad == "nan":
        ok0 = bool(torch.isnan(y0).all())
    else:
        ok0 = bool((torch.isnan(y0) | (torch.isinf(r0) & (y0 == r0))).all())
    detail = f"token 0: {int(torch.isnan(y0).sum())} NaN, {int(torch.isinf(y0).sum())} inf of {y0.numel()}"
    if not ok0:
        detail += f" (want every one NaN{'' if bad == 'nan' else ' or the reference infinity'})"
    if y.shape[0] == 1:
        return ok0, detail
    ok, rest = check(y[1:], ref[1:])
    return ok0 and ok, detail + "; other tokens " + rest


_LATE_SRC = r'''
__device__ unsigned long long kc_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void kc_write_late(const unsigned short* src, unsigned short* dst, int n, long long spin_ns) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    unsigned long long t0 = kc_now();
    while (kc_now() - t0 < (unsigned long long)spin_ns) { }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
}
extern "C" __global__ void kc_read_early(const unsigned short* src, unsigned short* dst, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
}
'''
_late = {}


def _late_kernel(name: str):
    import cupy
    if "module" not in _late:
        _late["module"] = cupy.RawModule(code=_LATE_SRC, options=("-std=c++17",), backend="nvrtc")
    return _late["module"].get_function(name)


def write_x_late(x, spin_ns: int = 3_000_000):
    """A NaN-filled copy of x (bf16) that one block of a kernel on torch's current stream fills
    with x's values after spin_ns (3 ms: longer than the host takes to launch the next kernel
    from Python), having released its dependents (griddepcontrol.launch_dependents) as it
    started: a kernel launched next with early start runs beside it, and reads x's values
    only if it waits for the grid ahead first."""
    import numpy as np
    import torch
    xs = torch.full_like(x, float("nan"))
    n = xs.numel()
    launch_ex(_late_kernel("kc_write_late"), (1, 1, 1), (256, 1, 1),
              (np.uint64(x.data_ptr()), np.uint64(xs.data_ptr()), np.int32(n), np.int64(spin_ns)),
              programmatic=False)
    return xs


def check_early_start_setup() -> bool:
    """write_x_late's control: a kernel launched with early start behind it that copies x
    without waiting for the grid ahead must see NaN (else the stream kernel's early-start cases
    could not fail)."""
    import numpy as np
    import torch
    x = torch.ones((8, 4096), dtype=torch.bfloat16, device="cuda")
    out = torch.zeros_like(x)
    args = (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()), np.int32(x.numel()))
    launch_ex(_late_kernel("kc_read_early"), (16, 1, 1), (256, 1, 1), args, programmatic=False)   # loaded
    torch.cuda.synchronize()
    xs = write_x_late(x)
    launch_ex(_late_kernel("kc_read_early"), (16, 1, 1), (256, 1, 1),
              (np.uint64(xs.data_ptr()), np.uint64(out.data_ptr()), np.int32(x.numel())), programmatic=True)
    torch.cuda.synchronize()
    seen = int(torch.isnan(out.float()).sum())
    ok = seen > 0 and bool(torch.equal(xs, x))
    print(f"{'PASS' if ok else 'FAIL'} early start: a kernel that reads x without waiting for the grid ahead saw "
          f"{seen} of {x.numel()} values unwritten; x written in the end: {bool(torch.equal(xs, x))}", flush=True)
    return ok


def run_correctness(quick: bool) -> bool:
    import torch
    self_check_packing()
    early_ok = not WG_PDL or check_early_start_setup()
    cases = correctness_cases(quick)
    tokens_q = (1, 3, 7, 33)
    tokens_g = (1, 3, 7)
    tokens_s = (1, 3, 7, 11, 16, 29)   # 11 and 16: two 8-token tiles where streamTokenTiles takes them
    variants = []
    for in_f, out_f, b, g, _ in cases:
        if not KERNELS or "gemv" in KERNELS:
            for t in tokens_g:
                variants.append((GEMV_CU, gemv_config(b, g, t, in_f, out_f)))
        if not KERNELS or "qmm" in KERNELS:
            for t in tokens_q:
                variants.append((QMM_CU, qmm_config(b, g, t, in_f, out_f)))
        if not KERNELS or "stream" in KERNELS:
            for t in tokens_s:
                c = stream_config(b, g, t, in_f, out_f)
                if c:
                    variants.append((STREAM_CU, c))
    compile_all(variants)
    n_ok = n_all = 0
    t0 = time.time()
    for ci, (in_f, out_f, b, g, bias) in enumerate(cases):
        wt = Weights(b, g, in_f, out_f, bias, seed=1000 + ci)
        gen = torch.Generator(device="cuda").manual_seed(ci)
        for t in sorted(set(tokens_q) | set(tokens_s)):
            x = (torch.rand((t, in_f), generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
            ref = wt.reference(x)
            kinds = tuple(k for k, ts in (("gemv", tokens_g), ("qmm", tokens_q), ("stream", tokens_s)) if t in ts)
            if stream_config(b, g, t, in_f, out_f) is None:
                kinds = tuple(k for k in kinds if k != "stream")
            for kind in kinds:
                if KERNELS and kind not in KERNELS:
                    continue
                try:
                    y, cfg = run_kernel(kind, wt, x, t)
                    torch.cuda.synchronize()
                except Exception as e:   # a launch failure poisons the context: report and stop
                    print(f"FAIL {kind:4s} {in_f:5d}->{out_f:<5d} q{b} g{g:<3d} t={t:<2d} bias={int(bias)}  "
                          f"{type(e).__name__}: {e}", flush=True)
                    raise
                ok, detail = check(y, ref)
                n_all += 1
                n_ok += ok
                extra = (f"tile={qmm_tile_for_tokens(t)} ksplit={cfg['KSPLIT']} wcp={cfg['WCP']}" if kind == "qmm"
                         else " ".join(f"{k}={v}" for k, v in cfg.items() if k not in ("BITS", "GROUP")) if kind == "stream"
                         else f"rows={cfg['ROWS']} unroll={cfg['UNROLL']} vals={cfg['VALS']} loadw={cfg['LOADW']} xsmem={cfg['XSMEM']}")
                print(f"{'PASS' if ok else 'FAIL'} {kind:6s} {in_f:5d}->{out_f:<5d} q{b} g{g:<3d} t={t:<2d} "
                      f"bias={int(bias)}  {detail}  [{extra}]", flush=True)
        del wt
    print(f"correctness: {n_ok}/{n_all} passed ({time.time() - t0:.1f}s)", flush=True)
    if not KERNELS or "bulk" in KERNELS:
        return run_bulk_correctness() and n_ok == n_all and early_ok
    return n_ok == n_all and early_ok


def bulk_correctness_cases():
    """(in, out, bits, group, bias, tokens, cfg overrides; fp16 only where given) for affine_bulk: every shape it takes
    from the correctness list and the benchmark shapes, 4 and 8 bits, every group size, and
    variants that make blocks take many tiles (a grid of 7), one chunk per tile (the
    accumulators of NS tiles in flight at once), one-tile m-tiles, few stages and few warps."""
    cases = []
    shapes = CORRECTNESS_SHAPES + [sh for sh in BENCH_SHAPES if sh not in CORRECTNESS_SHAPES]
    combos = [(4, 64), (8, 32), (4, 128), (8, 64), (4, 32), (8, 128)]
    ci = 0
    for si, (in_f, out_f) in enumerate(shapes):
        for _ in range(2):
            for _ in range(len(combos)):
                b, g = combos[ci % len(combos)]
                ci += 1
                if bulk_config(b, g, 1, in_f, out_f):
                    break
            else:
                continue
            t = (1, 3, 8)[ci % 3]
            cases.append((in_f, out_f, b, g, si % 2 == 0, t, {}))
    cases += [   # grids that make blocks take many tiles, few warps and stages, odd warp counts
        (4096, 4104, 4, 64, True, 1, dict(_GRID=7)),
        (1024, 3072, 4, 64, False, 1, dict(_GRID=5, mt=1, ns=16)),   # one chunk per tile: 16 tiles in flight
        (1024, 3072, 4, 64, False, 2, dict(_GRID=5, mt=1, ns=8)),    # 16 stages of 2 token rows do not fit
        (1024, 1032, 8, 32, True, 8, dict(_GRID=3, mt=1, cw=3, ns=6)),
        (8192, 1000, 4, 64, True, 2, dict(mt=1, cw=1, ns=3, seg=256)),
        (2048, 520, 4, 128, False, 1, dict(cw=5, seg=2048, _GRID=11)),
        (8192, 4096, 4, 64, True, 1, dict(mt=4, seg=256, _GRID=20)),
        (8192, 4104, 4, 64, True, 1, dict(mt=4, seg=256, _GRID=11)),
        (4096, 3080, 4, 64, False, 3, dict(mt=2, _GRID=9)),
        (2048, 1032, 8, 64, True, 2, dict(mt=2)),
        (8192, 28672, 4, 64, True, 1, dict(fp16=1)),
        (14336, 4096, 4, 64, False, 1, dict(fp16=1)),
        (4096, 4104, 4, 32, True, 3, dict(fp16=1, _GRID=7)),
        (2048, 1000, 4, 128, False, 8, dict(fp16=1, cw=4)),
        (1024, 3072, 4, 64, True, 5, dict(fp16=1, mt=1, _GRID=5)),
        (8192, 2056, 4, 64, True, 1, dict(_GRID=9)),
        (4096, 1032, 4, 32, False, 4, dict(mt=1, _GRID=13)),
        (3072, 776, 8, 64, True, 1, dict(seg=1024)),
        (5120, 2048, 4, 64, False, 1, dict(seg=1024)),
        (8192, 28672, 4, 64, True, 1, {}),
        (14336, 4096, 4, 64, False, 1, {}),
        (8192, 1000, 4, 64, True, 3, dict(mt=2, _GRID=5)),
        (4096, 1032, 8, 32, False, 2, dict(mt=1)),
        (2048, 776, 4, 128, True, 8, dict(cw=4, seg=1024)),
        # stages copied and released in parts, with blocks that take many tiles
        (4096, 4104, 4, 64, True, 1, dict(_GRID=7, parts=2)),
        (1024, 3072, 4, 64, False, 1, dict(_GRID=5, mt=1, ns=16, parts=2)),
        (8192, 1000, 4, 64, True, 3, dict(mt=2, _GRID=5, parts=4)),
        (2048, 1032, 8, 64, True, 2, dict(_GRID=3, parts=2)),
        (4096, 4104, 4, 32, True, 1, dict(fp16=1, _GRID=7, parts=4)),
        # fp16 at large in_features (x resident: 57 KB); 64-row tiles, one and many per block
        (28672, 8192, 4, 64, True, 1, dict(fp16=1, parts=1)),
        (28672, 8192, 4, 64, False, 1, {}),
        (8192, 4104, 4, 64, True, 2, dict(mt=4, _GRID=17)),
        # 9..16 tokens: two n-tiles of 8 (the second partly empty below 16)
        (4096, 4104, 4, 64, True, 16, {}),
        (8192, 1000, 4, 64, False, 11, dict(mt=2, _GRID=5, parts=2)),
        (2048, 1032, 8, 32, True, 16, dict(_GRID=3)),
        (1024, 3072, 4, 64, True, 9, dict(mt=1, _GRID=5, ns=8)),
        (2048, 1000, 4, 128, False, 13, dict(fp16=1, cw=4)),
        (4096, 4104, 4, 64, True, 16, dict(fp16=1, cw=4, _GRID=7)),
        (14336, 4096, 4, 64, True, 16, {}),
        # 64-row tiles as the plugin picks them at in_features <= 8192 (fp16, two parts), many
        # tiles per block, and at 16 tokens (the largest accumulators)
        (1024, 8192, 4, 64, True, 1, dict(fp16=None)),
        (10240, 8192, 4, 32, False, 1, dict(_GRID=40)),
        (4096, 4104, 4, 64, True, 16, dict(mt=4, _GRID=7)),
        (2048, 8192, 4, 64, False, 5, dict(fp16=1, mt=4, _GRID=9)),
        # one token as the rule takes it (fp16 operands, DP2A), every group size, with input
        # channels 100 and 1000 times the rest (x's small values must keep their precision
        # beside a group's outlier), at 14336 inputs too; and the fp16 mma path beside outliers
        (4096, 4104, 4, 64, True, 1, dict(fp16=None, _OUTLIER=100)),
        (4096, 1032, 4, 128, False, 1, dict(fp16=None, _OUTLIER=1000)),
        (2048, 1000, 4, 32, True, 1, dict(fp16=None, _OUTLIER=1000)),
        (14336, 4096, 4, 64, False, 1, dict(fp16=None, _OUTLIER=1000)),
        (8192, 1032, 4, 128, True, 1, dict(fp16=None)),
        (4096, 4104, 4, 64, True, 3, dict(fp16=1, _OUTLIER=1000)),
        # DP2A takes x's residuals only in groups that need them (XLO 2; the cases above take
        # them in some groups, not others): channels 16 and 30 times the rest, where every group
        # goes without (bf16 values of at least sigma/128 are exact in int16); XLO 1 takes them
        # everywhere
        (4096, 4104, 4, 64, False, 1, dict(fp16=None, _OUTLIER=30)),
        (4096, 1032, 4, 128, True, 1, dict(fp16=None, _OUTLIER=16)),
        (8192, 1032, 4, 32, True, 1, dict(fp16=None, _OUTLIER=30)),
        (4096, 4104, 4, 64, True, 1, dict(fp16=None, _OUTLIER=1000, XLO=1)),
        # two or more warps per stage, each with a run of its groups (WK), 16 consumer warps
        (4096, 14336, 4, 64, True, 1, dict(fp16=1, cw=16, wk=2)),
        (8192, 28672, 4, 64, False, 1, dict(fp16=1, cw=16, wk=2, ns=8)),
        (28672, 8192, 4, 64, True, 1, dict(cw=16, wk=2, ns=8)),
        (14336, 4096, 4, 64, False, 3, dict(cw=16, wk=2, ns=8, _GRID=9)),
        (4096, 4104, 4, 64, True, 8, dict(fp16=1, cw=8, wk=4, _GRID=7)),
        (3072, 1032, 8, 32, False, 2, dict(cw=12, wk=3, seg=768, parts=1, _GRID=5)),
        # the rule's two warps per stage with many tiles per block, and its larger stages
        # where want does not divide the row's groups (24 and 56 groups; 24 at 8 bits)
        (4096, 4104, 4, 64, True, 1, dict(parts=1, _GRID=7)),
        (14336, 4096, 4, 64, True, 1, dict(_GRID=11)),
        (13824, 5120, 4, 64, False, 1, {}),
        (3584, 18944, 4, 64, True, 1, dict(fp16=None)),
        (2304, 4240, 8, 32, True, 1, dict(_GRID=9)),
        # offsets computed per group (FASTADDR 0: runs of 20 groups of 32 at 4 bits, or forced),
        # the last tile's shares through atomics (ENDR 0 with DETRED 0: at one token ENDR 0 is
        # the default, through the warps' slots), the end path at one token (ENDR 1) and with many tiles per
        # block, and 8 bits in groups of 128 (one group per line; with UNR 2 two per step)
        (1280, 4104, 4, 32, True, 1, dict(seg=640, parts=1, wk=2)),
        (4096, 14336, 4, 64, True, 1, dict(FASTADDR=0)),
        (14336, 4096, 4, 64, False, 3, dict(FASTADDR=0, _GRID=9)),
        (3072, 1032, 8, 32, False, 2, dict(cw=12, wk=3, seg=768, parts=1, _GRID=5, FASTADDR=0)),
        (28672, 8192, 4, 64, True, 1, dict(ENDR=0, DETRED=0)),
        (28672, 8192, 4, 64, False, 1, dict(ENDR=1)),   # the end path at one token (by default 0 there)
        (4096, 14336, 4, 64, True, 1, dict(fp16=None, ENDR=1)),
        (8192, 4104, 4, 64, False, 8, dict(mt=2, _GRID=19)),
        (4096, 4096, 8, 128, True, 1, {}),
        (2048, 1032, 8, 128, False, 3, dict(UNR=2)),
        (4096, 4104, 4, 128, False, 1, dict(FASTADDR=0)),   # 16-byte weight loads, rows reordered
        # K slices (SPLITK): sums added into a poisoned float workspace, which the clear
        # kernel must zero, then rounded by the finish kernel (with the bias); fp16 and bf16
        # operands, 8 bits, slices of one stage, odd token counts, tiles past out_features,
        # many tiles per block, and a grid of one block per slice
        (4096, 14336, 4, 64, True, 16, dict(ks=2, fp16=1)),
        (8192, 28672, 4, 64, False, 16, dict(ks=4, fp16=1)),
        (14336, 4096, 4, 64, True, 16, dict(ks=7, fp16=1)),
        (28672, 8192, 4, 64, False, 13, dict(ks=14, fp16=1)),
        (4096, 4104, 4, 64, True, 9, dict(ks=8, fp16=1, _GRID=7)),
        (4096, 4104, 4, 32, False, 16, dict(ks=2, fp16=1, mt=1)),
        (2048, 1032, 4, 128, True, 11, dict(ks=2, fp16=1)),
        (4096, 4104, 4, 64, True, 16, dict(ks=4)),
        (2048, 1032, 8, 32, True, 16, dict(ks=2, _GRID=3)),
        (8192, 1000, 8, 64, False, 5, dict(ks=4, mt=2)),
        (4096, 1032, 4, 64, True, 1, dict(ks=2, fp16=1, _GRID=1)),
        (14336, 4096, 4, 64, False, 16, dict(ks=7, fp16=1, mt=4)),
        # a NaN or an infinity in one token's x: every output of that token is NaN (DP2A has
        # no int16 form for it; for an infinity the float product may be an infinity, and
        # either passes), the other tokens' are as without it
        (4096, 4104, 4, 64, True, 1, dict(fp16=None, _NONFINITE="nan")),
        (4096, 4104, 4, 64, False, 1, dict(fp16=None, _NONFINITE="inf")),
        (14336, 4096, 4, 64, True, 1, dict(fp16=None, _NONFINITE="-inf")),
        (4096, 4104, 4, 64, True, 3, dict(fp16=None, _NONFINITE="nan")),
        (4096, 4104, 4, 64, False, 3, dict(fp16=None, _NONFINITE="inf")),
        (4096, 14336, 4, 64, True, 16, dict(ks=2, fp16=1, _NONFINITE="nan")),
    ]
    return cases


BULK_MATCH = ""   # --bulk-match: only the bulk cases whose overrides' text contains it


def run_bulk_correctness() -> bool:
    import torch
    cases = [c for c in bulk_correctness_cases() if BULK_MATCH in str(c[6])]
    cfgs = []
    for in_f, out_f, b, g, bias, t, over in cases:
        grid = over.get("_GRID")
        kw = {k: v for k, v in over.items() if not k.startswith("_") and not k.isupper()}
        kw.setdefault("fp16", 0)   # the fp16 variant where a case asks for it
        kw.setdefault("ks", 1)     # K slices where a case asks for them
        c = bulk_config(b, g, t, in_f, out_f, **kw)
        if c is None:
            raise SystemExit(f"bulk case {in_f}->{out_f} q{b} g{g} t={t} {over}: no config")
        c.update({k: v for k, v in over.items() if k.isupper()})   # macros (FASTADDR, ENDR)
        if grid:
            c["_GRID"] = grid
        c["KC_HANG_TRAP"] = 1   # a stuck barrier wait traps instead of hanging the run
        cfgs.append(c)
    compile_all([(BULK_CU, c) for c in cfgs])
    n_ok = 0
    t0 = time.time()
    for ci, ((in_f, out_f, b, g, bias, t, over), cfg) in enumerate(zip(cases, cfgs)):
        wt = Weights(b, g, in_f, out_f, bias, seed=5000 + ci)
        gen = torch.Generator(device="cuda").manual_seed(500 + ci)
        x = (torch.rand((t, in_f), generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
        if over.get("_OUTLIER"):   # every 97th input channel that many times larger
            x[:, ::97] *= over["_OUTLIER"]
        bad = over.get("_NONFINITE")
        if bad:   # token 0's input 1000 (the other tokens stay finite)
            x[0, 1000] = float(bad)
        ref = wt.reference(x)
        y, _ = run_kernel("bulk", wt, x, t, cfg, poison=0x7F7F if bad else -1)   # a finite poison: NaN must be written
        torch.cuda.synchronize()
        if bad:
            ok, detail = check_nonfinite(y, ref, bad)
        else:
            ok, detail = check(y, ref)
        n_ok += ok
        if cfg.get("DP2A") and cfg.get("XLO", 2) == 2:
            detail += " residuals in %d of %d groups" % dp2a_residual_groups(x, g)
        grid, _, smem = bulk_launch(cfg, t, in_f, out_f)
        desc = " ".join(f"{k}={v}" for k, v in cfg.items() if k not in ("BITS", "GROUP"))
        print(f"{'PASS' if ok else 'FAIL'} bulk   {in_f:5d}->{out_f:<5d} q{b} g{g:<3d} t={t:<2d} bias={int(bias)}  "
              f"{detail}  [{desc} grid={grid[0]} smem={smem}]", flush=True)
        del wt
    print(f"bulk correctness: {n_ok}/{len(cases)} passed ({time.time() - t0:.1f}s)", flush=True)
    repeat = run_bulk_repeat()   # (whatever --bulk-match says)
    return n_ok == len(cases) and repeat


# One token, the rule's variants (in, out, bits, group, outlier factor): blocks of several tiles on
# the integer path (DP2A), there with x's residuals in some groups (every 97th input channel 1000
# times the rest), one tile per block, 64-row tiles in two parts with bf16 x, 8 bits in 16-row tiles.
BULK_REPEAT_SHAPES = [(4096, 14336, 4, 64, 1), (4096, 14336, 4, 64, 1000), (5120, 13824, 4, 64, 1),
                      (3584, 18944, 4, 64, 1), (14336, 4096, 4, 64, 1), (28672, 8192, 4, 64, 1), (2304, 4240, 8, 32, 1)]


def run_bulk_repeat(runs: int = 10) -> bool:
    """The bulk kernel at one token, run runs times on the same inputs into poisoned outputs:
    the first run must pass check against the float64 reference, and every run must give its
    bits (the warps' sums are added in warp order, DETRED; --bulk-over DETRED=0 shows what the
    shared atomics gave)."""
    import torch
    ok_all = True
    for in_f, out_f, b, g, outlier in BULK_REPEAT_SHAPES:
        cfg = bulk_config(b, g, 1, in_f, out_f)
        wt = Weights(b, g, in_f, out_f, True, seed=in_f + out_f)
        x = (torch.rand((1, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
        x[:, ::97] *= outlier
        first, _ = run_kernel("bulk", wt, x, 1, cfg)
        first = first.clone()
        right, detail = check(first, wt.reference(x))
        differ = 0
        for _ in range(runs - 1):
            y, _ = run_kernel("bulk", wt, x, 1, cfg)
            differ += not torch.equal(y.view(torch.int16), first.view(torch.int16))
        torch.cuda.synchronize()
        ok = right and (differ == 0 or cfg.get("DETRED") == 0)
        ok_all &= ok
        extra = f", x x{outlier} at every 97th input: residuals in %d of %d groups" % dp2a_residual_groups(x, g) if outlier > 1 else ""
        print(f"{'PASS' if ok else 'FAIL'} bulk   {in_f:5d}->{out_f:<5d} q{b} g{g:<3d} t=1  "
              f"{detail}; {runs - 1 - differ} of {runs - 1} runs gave the first run's bits{extra}", flush=True)
        del wt
    return ok_all


# =============================================================================
# Benchmark.
# =============================================================================

BENCH_SHAPES = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 28672), (28672, 8192)]
BENCH_TOKENS = (1, 4, 16, 256, 4096)
L2_BYTES = 60 * 2**20


def _copies(nbytes: int) -> int:
    return max(2, -(-3 * L2_BYTES // max(nbytes, 1)))


POWER = False     # --power: time_launches also samples the SM clock and power draw (scripts/gpu_power.py)
LAST_POWER = ""   # the last time_launches' sample under --power


def time_launches(fns, target_s=0.02, reps=5) -> float:
    """Median seconds per launch of the callables fns (each one launch), via a CUDA graph
    that repeats the list enough times to run ~target_s. Under POWER it then
    replays the graph for about a second with the clock and power sampled
    (LAST_POWER)."""
    global LAST_POWER
    import torch
    for f in fns:           # warm-up (module load, attributes) outside capture
        f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for f in fns:
        f()
    e.record()
    torch.cuda.synchronize()
    est = max(s.elapsed_time(e) * 1e-3 / len(fns), 1e-6)
    m = max(1, min(int(target_s / (est * len(fns))), max(1, 2000 // len(fns))))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(m):
            for f in fns:
                f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e-3 / (m * len(fns)))
    if POWER:   # --power: replay for about a second more while the clock and power are sampled
        import gpu_power
        with gpu_power.Sampler(gpu_power.device_id(torch)) as sampler:
            for _ in range(max(1, int(1.0 / max(min(times), 1e-9) / (m * len(fns))))):
                g.replay()
            torch.cuda.synchronize()
        LAST_POWER = sampler.summary()
    del g
    times.sort()
    return times[len(times) // 2]


def rotated_copies(wt):
    """The weights and enough copies of them to rotate beyond L2: [(w, scales, biases)]."""
    n = _copies(wt.nbytes())
    return [(wt.w, wt.scales, wt.biases)] + [(wt.w.clone(), wt.scales.clone(), wt.biases.clone()) for _ in range(n - 1)]


def rotated_launchers(copies, make):
    """One launcher per copy of the weights: make(w, s, b) returns (launch, what it needs kept alive);
    returns the launchers and the kept objects (hold them while timing)."""
    fns, keep = [], []
    for (w, s, b) in copies:
        run, k = make(w, s, b)
        fns.append(run)
        keep.append(k)
    return fns, keep


def bench_kernel(kind, wt, copies, x, tokens, cfg):
    import torch
    in_f, out_f = wt.in_f, wt.out_f
    if kind == "gemv":
        grid, block, smem = gemv_launch_for(cfg, tokens, in_f, out_f)
        path = GEMV_CU
    elif kind == "stream":
        grid, block, smem = stream_launch(cfg, tokens, in_f, out_f)
        path = STREAM_CU
    elif kind == "bulk":
        y = torch.empty((tokens, out_f), dtype=torch.bfloat16, device="cuda")
        return time_launches([bulk_tma_launcher(cfg, wt, x, y, tokens, w, s, b) for (w, s, b) in copies])
    elif kind == "wg":
        y = torch.empty((tokens, out_f), dtype=torch.int16, device="cuda")
        fns, keep = rotated_launchers(copies, lambda w, s, b: wg_launch_fns(cfg, wt, x, y, tokens, w, s, b))
        return time_launches(fns)
    elif kind == "wave":
        import wave_kernel   # scripts/wave_kernel.py (imports this module)
        y = torch.empty((tokens, out_f), dtype=torch.int16, device="cuda")
        fns, keep = rotated_launchers(copies, lambda w, s, b: wave_kernel.launcher(cfg, wt, x, y, tokens, w, s, b))
        return time_launches(fns)
    else:
        grid, block, smem = qmm_launch(cfg, tokens, in_f, out_f)
        path = QMM_CU
    y = torch.empty((tokens, out_f), dtype=torch.bfloat16, device="cuda")
    kern = get_kernel(path, cfg, smem)
    fns = []
    for (w, s, b) in copies:
        args = kernel_args(wt, x, y, tokens, w, s, b)
        # the plugins launch the stream kernel with early start at decode when x is read from memory
        if kind == "stream" and WG_PDL and stream_early_start(cfg, tokens):
            fns.append(lambda a=args: launch_programmatic(kern, grid, block, a, smem))
        else:
            fns.append(lambda a=args: launch(path, cfg, grid, block, smem, a))
    return time_launches(fns)


def run_bench(quick: bool, sweep: bool):
    import torch
    shapes = BENCH_SHAPES if not quick else [(4096, 14336), (8192, 28672)]
    tokens_list = BENCH_TOKENS if not quick else (1, 16, 256)
    bits, group = BENCH_QUANT
    # compile everything first
    variants = []
    for in_f, out_f in shapes:
        for t in tokens_list:
            variants.append((QMM_CU, qmm_config(bits, group, t, in_f, out_f)))
            if t <= 8:
                variants.append((GEMV_CU, gemv_config(bits, group, t, in_f, out_f)))
            if stream_config(bits, group, t, in_f, out_f):
                variants.append((STREAM_CU, stream_config(bits, group, t, in_f, out_f)))
            if bulk_config(bits, group, t, in_f, out_f):
                variants.append((BULK_CU, bulk_config(bits, group, t, in_f, out_f)))
            if wg_serves(t, in_f, bits, group):
                variants.append((WG_CU, wg_choose(t, out_f, in_f=in_f, bits=bits, group=group)))
            if sweep:
                variants += [(p, c) for _, p, c in sweep_configs(bits, group, t, in_f, out_f)]
    if KERNELS:
        variants = [v for v in variants if KIND_OF[v[0]] in KERNELS]
    compile_all(variants)

    print()
    print(f"{'shape':>13s} {'tok':>4s} {'torch us':>9s} | {'kernel':6s} {'us':>8s} {'speedup':>7s} {'TB/s':>6s}  target")
    results = []
    for in_f, out_f in shapes:
        wt = Weights(bits, group, in_f, out_f, False, seed=in_f * 7 + out_f, keep_dense=False)
        qcopies = rotated_copies(wt)
        nd = _copies(in_f * out_f * 2)
        dense = [torch.randn((out_f, in_f), device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(nd)]
        for t in tokens_list:
            x = (torch.rand((t, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
            ya = torch.empty((t, out_f), device="cuda", dtype=torch.bfloat16)
            torch_fns = [lambda W=W: torch.matmul(x, W.t(), out=ya) for W in dense]
            before = time_launches(torch_fns)
            power_before = LAST_POWER
            rows = []
            if t <= 8:
                rows.append(("gemv", gemv_config(bits, group, t, in_f, out_f), True))
            rows.append(("qmm", qmm_config(bits, group, t, in_f, out_f), True))
            if stream_config(bits, group, t, in_f, out_f):
                rows.append(("stream", stream_config(bits, group, t, in_f, out_f), True))
            if bulk_config(bits, group, t, in_f, out_f):
                rows.append(("bulk", bulk_config(bits, group, t, in_f, out_f), True))
            if wg_serves(t, in_f, bits, group):
                rows.append(("wg", wg_choose(t, out_f, in_f=in_f, bits=bits, group=group), True))
            if wave_serves(t, in_f, out_f, bits, group):
                import wave_kernel
                rows.append(("wave", wave_kernel.wave_config(out_f, SMS, in_f, t), True))
            if sweep:
                rows += [(k, c, False) for k, p, c in sweep_configs(bits, group, t, in_f, out_f)]
            if KERNELS:
                rows = [r for r in rows if r[0] in KERNELS]
            # The kernels are timed between two timings of the anchor, whose
            # mean is the ratio's denominator: the card's clocks drift over a
            # run (torch's own time moved by up to 12 % between runs), and
            # this way the anchor sees the same drift as the kernels. Both
            # anchor timings are printed with each row.
            timed = []
            for kind, cfg, default in rows:
                try:
                    timed.append((kind, cfg, default, bench_kernel(kind, wt, qcopies, x, t, cfg), LAST_POWER))
                except Exception as e:   # a sweep variant may fail to launch
                    print(f"{in_f:6d}->{out_f:<6d} {t:4d}  {kind} {cfg}: {type(e).__name__}: {e}")
            after = time_launches(torch_fns)
            anchor = (before + after) / 2
            if POWER:
                print(f"{in_f:6d}->{out_f:<6d} {t:4d}  torch: {power_before} / {LAST_POWER}", flush=True)
            for kind, cfg, default, ts, power in timed:
                sp = anchor / ts
                bw = wt.nbytes() / ts / 1e12
                label = kind if default else kind + "*"
                tgt = target_mark(label, in_f, out_f, t, sp, bw * 1e12)
                extra = ""
                if sweep:
                    extra = "  " + " ".join(f"{k}={v}" for k, v in cfg.items() if k not in ("BITS", "GROUP"))
                if POWER:
                    extra += f"  [{power}]"
                print(f"{in_f:6d}->{out_f:<6d} {t:4d} {anchor * 1e6:9.1f} | {label:6s} {ts * 1e6:8.1f} {sp:7.2f} {bw:6.2f}  "
                      f"{tgt}  (torch {before * 1e6:.1f} / {after * 1e6:.1f}){extra}", flush=True)
                results.append((in_f, out_f, t, label, anchor, ts, sp, bw, tgt))
        del qcopies, dense, wt
        torch.cuda.empty_cache()
    return results


def wave_serves(tokens: int, in_f: int, out_f: int, bits: int, group: int) -> bool:
    """qmm/wave's admission (plugins/qmm/wave.go, waveAdmit) on this GPU."""
    if not (9 <= tokens <= 32 and bits == 4 and group == 64 and in_f % 512 == 0 and out_f % 8 == 0):
        return False
    import wave_kernel
    cfg = wave_kernel.wave_config(out_f, SMS, in_f, tokens)
    return 8 * cfg["NT"] * cfg["WR"] >= 64


def target_mark(kind, in_f, out_f, t, sp, bw):
    """DESIGN.md targets (int4 g64): GEMV tokens=1 on shapes with >= 64 MB of bf16
    weights: >= 3.2x the bf16 anchor and >= 85% of 4.3 TB/s; QMM: >= 2.5x at 16
    tokens, >= 1.0x at 256, >= 0.8x at 4096. Other quantisations (--quant) have none."""
    if BENCH_QUANT != (4, 64):
        return ""
    if kind.startswith(("gemv", "stream", "bulk")) and t == 1 and in_f * out_f * 2 >= 64 * 2**20:
        # another card's memory is not 4.3 TB/s: there the speed-up is judged alone
        ok = sp >= 3.2 and (bw >= 0.85 * PEAK_BW or not ON_H200)
        bw_part = " and >=3.66 TB/s" if ON_H200 else "; the 3.66 TB/s part is the H200's"
        return f"{'MET ' if ok else 'MISS'} (>=3.2x{bw_part})"
    if kind.startswith(("qmm", "stream", "wg", "bulk", "wave")):
        need = {16: 2.5, 256: 1.0, 4096: 0.8}.get(t)
        if need is not None:
            return f"{'MET ' if sp >= need else 'MISS'} (>={need}x)"
    return ""


def sweep_configs(bits, group, t, in_f, out_f):
    """Alternative launch configurations to time with --sweep: (kind, path, cfg)."""
    out = []
    if t <= 8:
        base = gemv_config(bits, group, t, in_f, out_f)
        out.append(("gemv", GEMV_CU, dict(base, _grid="full")))
        for rows, unroll, warps in ((2, 2, 8), (4, 1, 8), (4, 4, 8), (8, 1, 8), (4, 2, 4), (2, 4, 4)):
            if rows * t > 32:
                continue
            c = dict(base, ROWS=rows, UNROLL=unroll, WARPS=warps)
            if c != base:
                out.append(("gemv", GEMV_CU, c))
    sbase = stream_config(bits, group, t, in_f, out_f)
    if sbase and STREAM_CONFIGS:
        for mt, kw, u, d, minb, xt in STREAM_CONFIGS:
            left = (in_f // group) % u   # a step that does not divide the row's groups takes TAIL
            c = stream_config(bits, group, t, in_f, out_f, MT=mt, KW=kw, U=u, D=d, MINB=minb, XT=xt, TAIL=left)
            if c and not c.get("TAIL"):
                c.pop("TAIL", None)
            if c and c.get("MINB") == 1:
                del c["MINB"]   # the kernel's default
            if c and c != sbase and stream_smem_bytes(c) * minb <= 227 * 1024:
                out.append(("stream", STREAM_CU, c))
    elif sbase:
        for mt in (1, 2):
            for kw in (4, 8):
                for d in (2, 3):
                    for minb in ((1, 5, 6) if kw == 4 else (1, 2, 3)):
                        c = stream_config(bits, group, t, in_f, out_f, MT=mt, KW=kw, D=d)
                        if c and minb > 1:
                            c["MINB"] = minb
                        elif c:
                            c.pop("MINB", None)
                        if c and c != sbase and stream_smem_bytes(c) * minb <= 227 * 1024:
                            out.append(("stream", STREAM_CU, c))
    bbase = bulk_config(bits, group, t, in_f, out_f)
    if BULK_CONFIGS and bbase:
        for mt, cw, seg, ns, bps, fp16, parts, wk, ks in BULK_CONFIGS:
            c = bulk_config(bits, group, t, in_f, out_f, mt=mt or None, cw=cw, seg=seg or None, ns=ns or None, bps=bps,
                            fp16=None if fp16 < 0 else fp16, parts=parts or None, wk=wk or None, ks=ks or None)
            if c and c != bbase:
                out.append(("bulk", BULK_CU, c))
    if STREAM_ONLY:
        return out
    base = qmm_config(bits, group, t, in_f, out_f)
    for ks in (1, 2, 4):
        if ks != base["KSPLIT"] and -(-in_f // base["BK"]) >= 2 * ks:
            out.append(("qmm", QMM_CU, dict(base, KSPLIT=ks)))
    if t <= 64:
        for tile in ("s16", "s32", "s64"):
            if QMM_CONFIGS[tile][0] >= t and tile != qmm_tile_for_tokens(t):
                out.append(("qmm", QMM_CU, qmm_config(bits, group, t, in_f, out_f, tile=tile)))
    elif t >= 192:
        for tile in ("m128", "l"):
            if tile != qmm_tile_for_tokens(t):
                out.append(("qmm", QMM_CU, qmm_config(bits, group, t, in_f, out_f, tile=tile)))
    return out


# -----------------------------------------------------------------------------
# The Hopper wgmma kernel (plugins/qmm/kernels/wg.cu, candidate qmm/wgmma), every width, group 64.
# -----------------------------------------------------------------------------

def wg_config(bn: int = 128, stages: int = 6, wgs: int = 2, ast: int = 3, band: int = 16, fsets: int = 0,
              splits: int = 1, full: int = 0, sms: int = 0, cluster: int = 0, sk: int = 0) -> dict:
    """A variant of wg.cu; the defaults are plugins/qmm/wgmma.go's wgMid
    (fsets 0 keeps the kernel's FSETS; splits > 1 splits K across blocks;
    full: leading tiles left whole, -1 for the plugin's rule, of whole
    waves of `sms` (default the GPU's) unsplit and the rest split or
    shared by stream-K, with a single token tile unless stream-K; cluster
    = splits: a tile's shares are one thread-block cluster that sums them
    in shared memory, the CLUSTER macro; sk: the tiles after `full` shared
    by sk stream-K blocks, -1 for `sms`, clamped to at least those tiles
    and at most their weight stages)."""
    cfg = dict(BN=bn, STAGES=stages, WGS=wgs, AST=ast, _band=band, _splits=splits, _full=full, _sms=sms, _sk=sk,
               _arch="sm_90a")
    if fsets:
        cfg["FSETS"] = fsets
    if cluster:
        cfg["CLUSTER"] = cluster
    if sk:
        cfg["STREAMK"] = 1
    cfg.update(WG_OVER)
    return cfg


def wg_choose(tokens: int, out_f: int, sms: int | None = None, in_f: int = 1 << 30, bits: int = 4,
              group: int = 64) -> dict:
    """wg_rule's variant for `bits`-bit weights in groups of `group` (wg_with_bits)."""
    return wg_with_bits(wg_rule(tokens, out_f, sms, in_f), bits, group, in_f)


def wg_rule(tokens: int, out_f: int, sms: int | None = None, in_f: int = 1 << 30) -> dict:
    """The variant qmm/wgmma runs (chooseWG in plugins/qmm/wgmma.go):
    wg_tile_rule's tiles and shares, with xprep in blocks of 256 threads
    (the XPREP_THREADS macro) at up to 256 tokens and 4096 to 8192 input
    features, else of the kernel's 128."""
    cfg = wg_tile_rule(tokens, out_f, sms, in_f)
    if tokens <= 256 and 4096 <= in_f <= 8192:
        cfg.setdefault("XPREP_THREADS", 256)   # --wg-over XPREP_THREADS=128 keeps the default
    return cfg


def wg_tile_rule(tokens: int, out_f: int, sms: int | None = None, in_f: int = 1 << 30) -> dict:
    """chooseWGTile in plugins/qmm/wgmma.go: the
    token tile (256 tokens above 128, else 128 above 64, else 64) in pairs
    (64-row tiles in 2 K shares summed within a cluster) where 4 shares of
    its blocks would fit one wave, the pairs' 2 each at least 16 groups; else the tile's
    K in 2 shares, each tile's two blocks a cluster, where they fit one
    wave (each at least 16 groups); else above 128 tokens 256-token tiles,
    or, past whole waves of a single token tile, the whole waves unsplit
    and the last partial wave's tiles split in the smallest of 2, 3 or 4
    shares that most shortens it; up to 128 tokens, 128-token tiles when
    those give more than one block per two SMs, else 64-token tiles.
    With WG_STREAMK (--no-streamk turns it off), at 129-256 tokens the
    tiles past whole waves are instead shared by one stream-K block per SM
    where they hold at least 4 weight stages (of 8 groups) per SM. A last
    wave at least two thirds full runs whole, neither split nor shared."""
    sms = sms or SMS
    blocks = lambda bn: -(-out_f // 128) * -(-tokens // bn)
    groups = in_f // 64
    bn = 256 if tokens > 128 else 128 if tokens > 64 else 64
    if blocks(bn) * 4 <= sms and groups >= 32:   # wgWidePairs, wgMidPairs, wgNarrowPairs (two shares of 16 groups or more)
        return wg_config(256, 4, 1, 3, 16, 2, 2, 0, 0, 2) if bn == 256 else wg_config(bn, 6, 1, 3, 16, 3, 2, 0, 0, 2)
    if blocks(bn) * 2 <= sms and groups >= 32:   # the tile's two K shares a cluster
        return wg_config(256, 3, 2, 3, 16, 2, 2, 0, 0, 2) if bn == 256 else wg_config(bn, 6, 2, 3, 16, 3, 2, 0, 0, 2)
    if tokens > 128:
        tiles = blocks(256)
        rest, stages = tiles % sms, -(-groups // 8)
        if 3 * rest >= 2 * sms:   # a last wave at least two thirds full: whole tiles (wgWholeTailThirds)
            return wg_config(256, 3, 2, 3, 16, 2)
        if WG_STREAMK and in_f < 1 << 30 and tokens <= 256 and tiles > sms and rest * stages >= 4 * sms:
            # stream-K: whole waves, then the rest shared by one block per SM
            return wg_config(256, 3, 2, 3, 16, 2, 1, tiles - rest, 0, 0, sms)
        if tiles <= sms:
            return wg_config(256, 3, 2, 3, 16, 2)
        rest, best = tiles % sms, (1, 1)   # (rounds, shares) of the tail
        if rest and tokens <= 256:
            for s in (2, 3, 4):
                rounds = -(-rest * s // sms)
                if groups >= 16 * s and rounds * best[1] < best[0] * s:
                    best = (rounds, s)
        if best[1] > 1:
            return wg_config(256, 3, 2, 3, 16, 2, best[1], tiles - rest)
        return wg_config(256, 3, 2, 3, 16, 2)
    if tokens > 64 and 2 * blocks(128) > sms:
        return wg_config(128, 6, 2, 3, 16, 3)
    return wg_config(64, 6, 2, 3, 16, 3)


def wg_stage_bytes(cfg: dict) -> int:
    return 4 * cfg["BN"] * 32


WG_MAX_SMEM = 232448 - 2048   # wgMaxSharedBytes in plugins/qmm/wgmma.go


def wg_oddk(in_f: int, group: int = 64) -> bool:
    """Whether wg.cu needs ODDK for in_f inputs in groups of `group`: in_f
    not a multiple of 2 * max(64, group) (wgmma.go's OddK)."""
    return in_f % (2 * max(64, group)) != 0


def wg_with_bits(cfg: dict, bits: int, group: int = 64, in_f: int = 0) -> dict:
    """cfg (a variant as at 4 bits in groups of 64) for `bits`-bit weights in
    groups of `group`, as plugins/qmm/wgmma.go's chooseWG and variant: BITS
    8 with two weight-copying warps (AW 2, unless --wg-over names AW), no
    BITS macro at 4 (the kernel's default), else BITS and one more weight
    stage in the ring (AST + 1: their stages hold 128-192 bytes of each
    row, not 256); QGROUP where the group is not 64; ODDK where in_f
    (0: unknown, none) needs it (wg_oddk); then one weight stage
    fewer while the block's shared memory would pass WG_MAX_SMEM (never
    fewer than 2). The AST a variant had before its first call here
    is kept (_ast), so that a variant already for other weights converts
    alike."""
    ast = cfg.get("_ast", cfg["AST"])
    cfg = {k: v for k, v in cfg.items()
           if k not in ("BITS", "QGROUP", "ODDK") and not (k == "AW" and "AW" not in WG_OVER)}
    cfg["_ast"] = ast
    cfg["AST"] = ast + (bits not in (4, 8))
    if bits != 4:
        cfg["BITS"] = bits
    if bits == 8:
        cfg.setdefault("AW", 2)
    if group != 64:
        cfg["QGROUP"] = group
    if in_f and wg_oddk(in_f, group):
        cfg["ODDK"] = 1
    while cfg["AST"] > 2 and wg_smem(cfg) > WG_MAX_SMEM:
        cfg["AST"] -= 1
    return cfg


class WGNotServed(ValueError):
    """A wg.cu variant that cannot run a request (a cluster's share without groups)."""


def wg_workspace_bytes(cfg: dict, tokens: int, in_f: int, out_f: int, splits: int, shared: int = 0, sk: int = 0,
                       row_first: int = 0) -> int:
    """The stages of x / sigma, one float sigma per padded token, then
    (split K without a cluster) the fp32 sums of the split rows (row_first
    on) of every token in ceil(splits/2) slices, a pair of shares each
    (wgmma.go, sumSlices), or (stream-K) one int
    counter per shared tile and the blocks' ticket, rounded up to 16
    bytes, and one partial of BN/2 floats per consumer thread per stream-K
    block."""
    tiles = -(-tokens // cfg["BN"])
    sums = -(-splits // 2) * tokens * (out_f - row_first) * 4 if splits > 1 and not cfg.get("CLUSTER") else 0
    if sk:
        sums = -(-(shared + 1) // 4) * 16 + sk * (cfg["BN"] // 2) * 128 * cfg["WGS"] * 4
    return tiles * (in_f // 64) * wg_stage_bytes(cfg) + tiles * cfg["BN"] * 4 + sums


def wg_group_stage(cfg: dict) -> tuple[int, int]:
    """Groups per weight stage (AG) and a stage row's padded bytes (AROW_BYTES) of wg.cu
    (wgStageRow in plugins/qmm/wgmma.go)."""
    bits = cfg.get("BITS", 4)
    if bits == 4:
        return 8, 256 + 32
    if bits == 8:
        return 4, 256 + 64
    ag = 8 if bits in (2, 3) else 4
    return ag, ag * 8 * bits + 16


def wg_smem(cfg: dict) -> int:
    """wg.cu's SMEM_BYTES (sharedBytes in plugins/qmm/wgmma.go): the rings (a
    stage row's scales and biases SG = AG * 64 / QGROUP each, and with ODDK
    a window's SCP more: 4, or 2 where 4 does not divide SG), or the
    epilogue's fp32 tile or a cluster's shares where larger."""
    ag, arow = wg_group_stage(cfg)
    sg = ag * 64 // cfg.get("QGROUP", 64)
    if cfg.get("ODDK"):
        sg += 4 if sg % 4 == 0 else 2
    rows = 64 * cfg["WGS"]
    n = max(cfg["STAGES"] * wg_stage_bytes(cfg) + cfg["AST"] * rows * (arow + 4 * sg), cfg["BN"] * (rows + 4) * 4)
    if cfg.get("CLUSTER"):
        n = max(n, (cfg["CLUSTER"] + 1) * cfg["BN"] * (rows // cfg["CLUSTER"] + 4) * 4)
    return n


def wg_serves(tokens: int, in_f: int, bits: int = 4, group: int = 64) -> bool:
    """What qmm/wgmma admits (plugins/qmm/wgmma.go): any width in groups
    of 32, 64 or 128, in % 64 == 0 (and % group), in <= 57344, 17 or more
    tokens, compute capability 9.0."""
    import torch
    return (group in (32, 64, 128) and in_f % max(64, group) == 0 and in_f <= 57344 and tokens > 16
            and torch.cuda.get_device_capability(0) == (9, 0))


def wg_threads(cfg: dict) -> int:
    return 128 * cfg["WGS"] + 128


WG_REDUCE_BLOCKS = 1024   # affine_wg_reduce's largest grid (wgmma.go, wgReduceBlocks)


def wg_plan(cfg: dict, tokens: int, in_f: int, out_f: int) -> dict:
    """How a variant runs a request, as plugins/qmm/wgmma.go launches it
    (needs no GPU; `scripts/harness_rule.py wg` prints it for the Go test
    TestWGRuleMatchesTheHarness): the token tiles, the tiles in all
    (t_all), the leading whole tiles (full), the shares of a split tile
    (splits), the stream-K blocks (sk), CLUSTER, the first split row
    (row_first), the main kernel's grid, the reduce launch's grid (0: none;
    256-thread blocks, at most WG_REDUCE_BLOCKS of them, grid-stride as
    wgmma.go's wgReduceBlocks), and the workspace's bytes. A variant that
    cannot run the request raises WGNotServed."""
    bn = cfg["BN"]
    tiles = -(-tokens // bn)
    splits = cfg.get("_splits", 1)
    row_blocks = -(-out_f // (64 * cfg["WGS"]))
    t_all = row_blocks * tiles
    full = cfg.get("_full", 0)
    sk = cfg.get("_sk", 0)
    sms = cfg.get("_sms") or SMS
    if full < 0:   # the rule: whole waves unsplit (of a single token tile unless stream-K), the rest split or shared
        full = t_all - t_all % sms if (tiles == 1 or sk) and t_all > sms else 0
    full = min(full, t_all) if tiles == 1 or sk else 0   # split tails need a single token tile
    if full == t_all:
        splits, sk = 1, 0
    if sk:   # stream-K: at least one block per shared tile, at most one per weight stage
        shared = t_all - full
        units = shared * -(-(in_f // 64) // wg_group_stage(cfg)[0])
        sk = max(shared, min(sms if sk < 0 else sk, units))
        if units * sk >= 1 << 31:   # the kernel's run arithmetic is 32-bit (it traps)
            raise WGNotServed(f"stream-K: {units} stages x {sk} blocks reach 2^31")
        splits = 1
    if splits == 1 and not sk:
        full = 0
    cluster = cfg.get("CLUSTER", 0)
    stages = -(-(in_f // 64) // wg_group_stage(cfg)[0])
    if cluster and (splits != cluster or full % cluster or stages < cluster or sk):
        raise WGNotServed(f"CLUSTER {cluster}: splits {splits}, full {full}, {stages} weight stages")
    row_first = full * 64 * cfg["WGS"]
    reduce = 0
    if splits > 1 and not cluster:
        reduce = min(-(-tokens * ((out_f - row_first) // 8) // 256), WG_REDUCE_BLOCKS)
    return dict(tiles=tiles, t_all=t_all, full=full, splits=splits, sk=sk, cluster=cluster, row_first=row_first,
                grid=full + (sk if sk else (t_all - full) * splits), reduce=reduce,
                workspace=wg_workspace_bytes(cfg, tokens, in_f, out_f, splits, t_all - full, sk, row_first))


def wg_launch_fns(cfg, wt, x, y, tokens, w=None, scales=None, biases=None):
    """A callable launching xprep, main (and, split K, reduce, which adds
    the sums' slices in order) on torch's stream, and its workspace."""
    import numpy as np
    import torch
    in_f, out_f = wt.in_f, wt.out_f
    if cfg.get("BITS", 4) != wt.bits:
        raise ValueError(f"variant for {cfg.get('BITS', 4)} bits, weights of {wt.bits}")
    plan = wg_plan(cfg, tokens, in_f, out_f)
    bn, tiles, t_all = cfg["BN"], plan["tiles"], plan["t_all"]
    splits, full, sk, cluster, row_first = plan["splits"], plan["full"], plan["sk"], plan["cluster"], plan["row_first"]
    xp = torch.empty(plan["workspace"], dtype=torch.uint8, device="cuda")
    reduce = get_kernel(WG_CU, cfg, 0, name="affine_wg_reduce") if plan["reduce"] else None
    smem = wg_smem(cfg)
    xprep = get_kernel(WG_CU, cfg, 2 * cfg.get("XPREP_TOKENS", 2) * in_f, name="affine_wg_xprep")
    main = get_kernel(WG_CU, cfg, smem)
    w = wt.w if w is None else w
    scales = wt.scales if scales is None else scales
    biases = wt.biases if biases is None else biases
    p = lambda t: np.uint64(t.data_ptr())
    args_xprep = (p(x), p(xp), np.int32(tokens), np.int32(in_f), np.int32(out_f),
                  np.int32(1 if cluster else splits), np.int32(row_first),   # a cluster needs no cleared sums
                  np.int32(t_all - full + 1 if sk else 0))                    # stream-K's tile counters and ticket
    bias_p = np.uint64(wt.bias.data_ptr()) if wt.bias is not None else np.uint64(0)
    args_reduce = (p(xp), bias_p, p(y), np.int32(tokens), np.int32(in_f), np.int32(out_f), np.int32(splits),
                   np.int32(row_first))
    args_main = (p(xp), p(w), p(scales), p(biases),
                 np.uint64(wt.bias.data_ptr()) if wt.bias is not None else np.uint64(0),
                 p(y), np.int32(tokens), np.int32(in_f), np.int32(out_f), np.int32(cfg["_band"]), np.int32(splits),
                 np.int32(full), np.int32(sk))
    grid_main = plan["grid"]
    threads = wg_threads(cfg)

    # xprep: two tokens per block over the padded tiles, their rows of x in
    # shared memory (XPREP_TOKENS, XPREP_THREADS in wg.cu)
    # The plugin launches main and reduce with early start (wg.cu,
    # kc_grid_wait); so does this, unless --no-pdl.
    launch_early = launch_programmatic if WG_PDL else (lambda k, g, b, a, shared_mem=0: k(g, b, a, shared_mem=shared_mem))
    xt, xthreads = cfg.get("XPREP_TOKENS", 2), cfg.get("XPREP_THREADS", 128)
    parts = [("xprep", lambda: xprep((tiles * bn // xt, 1, 1), (xthreads, 1, 1), args_xprep, shared_mem=2 * xt * in_f)),
             ("main", lambda: launch_early(main, (grid_main, 1, 1), (threads, 1, 1), args_main, shared_mem=smem))]
    if reduce is not None:
        parts.append(("reduce", lambda: launch_early(reduce, (plan["reduce"], 1, 1), (256, 1, 1),
                                                     args_reduce)))

    def on_stream(fn):
        def go():
            import cupy
            with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                fn()
        return go

    def run():
        for _, f in parts:
            on_stream(f)()
    run.parts = [(name, on_stream(f)) for name, f in parts]   # each launch alone (timing breakdowns)
    run.grid = grid_main   # the main kernel's blocks
    return run, xp


WG_TOKENS = (256, 4096)
# run_wg's correctness cases: (in, out, tokens, bias, xe, bits[, group]), described there.
WG_CHECK_CASES = [
    (1024, 1032, 37, True, 0, 4), (4096, 4096, 128, False, 0, 4), (2048, 512, 300, True, 0, 4),
    (4096, 14336, 256, False, 0, 4), (14336, 4096, 33, False, 0, 4), (1152, 1032, 65, True, 0, 4),
    (640, 136, 129, False, 0, 4), (4096, 1032, 70, True, 17, 4), (2048, 1032, 70, False, -20, 4),
    (4096, 4096, 128, False, 0, 8), (2048, 520, 300, True, 0, 8), (1152, 1032, 65, True, 0, 8),
    (640, 136, 129, False, 0, 8), (14336, 2048, 33, False, 0, 8), (4096, 1032, 70, True, 17, 8),
    (8192, 1544, 120, True, 0, 4),
    (4096, 4096, 128, False, 0, 6), (640, 136, 129, False, 0, 6), (1152, 1032, 65, True, 0, 6),
    (4096, 1032, 70, True, 17, 6),
    (2048, 520, 300, True, 0, 5), (640, 136, 129, False, 0, 5), (14336, 2048, 33, False, 0, 5),
    (4096, 4096, 128, False, 0, 3), (1152, 1032, 65, True, 0, 3), (2048, 1032, 70, False, -20, 3),
    (1024, 1032, 37, True, 0, 2), (640, 136, 129, False, 0, 2), (8192, 1544, 120, True, 0, 2),
    (4096, 4096, 128, False, 0, 4, 32), (1152, 1032, 65, True, 0, 4, 32), (640, 136, 129, False, 0, 6, 32),
    (2048, 520, 300, True, 0, 8, 32), (4096, 1032, 70, True, 17, 3, 32), (14336, 2048, 33, False, 0, 2, 32),
    (2048, 1032, 200, False, 0, 5, 32),
    (4096, 4096, 128, False, 0, 4, 128), (1280, 1032, 65, True, 0, 4, 128), (768, 136, 129, False, 0, 6, 128),
    (2048, 520, 300, True, 0, 8, 128), (4096, 1032, 70, True, -20, 5, 128), (8192, 1544, 120, True, 0, 3, 128),
    (1536, 2048, 37, False, 0, 2, 128),
    # ODDK: in not a multiple of 2 * max(64, group) (gpt-oss's 2880: 45 groups of 64)
    (2880, 4096, 256, True, 0, 4), (2880, 2056, 300, False, 0, 3), (2880, 1032, 200, True, 0, 5, 32),
    (3712, 1032, 129, False, 0, 6, 128), (1088, 2056, 300, False, 0, 2, 32), (2880, 520, 70, True, 17, 8),
    (5760, 1032, 65, False, -20, 5, 128), (2880, 2880, 37, False, 0, 6),
]


def wg_case_quant(case) -> tuple[int, int]:
    """(bits, group) of a WG_CHECK_CASES entry (group 64 where it names none)."""
    return case[5], case[6] if len(case) > 6 else 64


WG_CHECK_QUANTS = sorted({wg_case_quant(c) for c in WG_CHECK_CASES})
def default_wg_configs():
    """--wg's variants unless --wg-configs names others (built after --wg-over is read)."""
    return [wg_config(256, 3, 2, 3, 16, 2), wg_config(128, 6, 2, 3, 16, 3), wg_config(64, 6, 2, 3, 16, 3)]


WG_CONFIGS = None   # --wg's variants: default_wg_configs() or --wg-configs
WG_REPEATS = 5      # runs of each correctness case whose tiles' shares meet through the workspace (split tails, stream-K)
WG_TIME_ALL = False   # --wg-time-all: also time variants that failed the check (diagnostics)
WG_STREAMK = True     # --no-streamk: the rule without stream-K (wg_tile_rule), for same-call comparisons
WG_PDL = True         # --no-pdl: launch the wgmma path's kernels, the bulk and the stream kernel without early start
TMA_L2PROMO = 2        # --tma-l2: the tensor maps' L2 promotion (CU_TENSOR_MAP_L2_PROMOTION_*: 0 none, 1 64B, 2 128B as the plugin, 3 256B)
STREAM_PDL_TOKENS = 8  # --stream-pdl-tokens: the most tokens the stream kernel starts early at in one token tile (stream_early_start)


class _LaunchAttributeValue(ctypes.Union):
    """CUlaunchAttributeValue (cuda.h): 64 bytes, aligned for the pointers it may hold."""
    _fields_ = [("pad", ctypes.c_char * 64), ("align", ctypes.c_void_p), ("allowed", ctypes.c_int)]


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute (cuda.h): id, padding to 8 bytes, the value."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _LaunchAttributeValue)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h)."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("count", ctypes.c_uint)]


_LIBCUDA = None


def _libcuda():
    global _LIBCUDA
    if _LIBCUDA is None:
        _LIBCUDA = ctypes.CDLL("libcuda.so.1")
        _LIBCUDA.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        _LIBCUDA.cuTensorMapEncodeTiled.argtypes = [
            ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
            ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return _LIBCUDA


class TensorMap:
    """A CUtensorMap (128 bytes, 64-byte aligned) for a row-major 2D tensor, by cuTensorMapEncodeTiled.
    .map lives in this object's buffer: keep the TensorMap alive while .map is passed to launches."""

    def __init__(self, ptr: int, dtype: int, inner: int, rows: int, row_bytes: int, box_inner: int, box_rows: int,
                 swizzle: int = 0, l2promo: int | None = None):
        self._buf = ctypes.create_string_buffer(128 + 64)
        addr = (ctypes.addressof(self._buf) + 63) // 64 * 64
        self.map = (ctypes.c_uint64 * 16).from_address(addr)
        dims = (ctypes.c_uint64 * 2)(inner, rows)
        strides = (ctypes.c_uint64 * 1)(row_bytes)
        box = (ctypes.c_uint32 * 2)(box_inner, box_rows)
        es = (ctypes.c_uint32 * 2)(1, 1)
        r = _libcuda().cuTensorMapEncodeTiled(addr, dtype, 2, ctypes.c_void_p(ptr), dims, strides, box, es,
                                              0, swizzle, TMA_L2PROMO if l2promo is None else l2promo, 0)
        if r != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed: CUresult {r} (dims {inner}x{rows}, box {box_inner}x{box_rows})")


def bulk_tma_launcher(cfg, wt, x, y, tokens, w=None, scales=None, biases=None):
    """A callable that launches affine_bulk (tensor maps for the weights, scales and biases:
    UINT32 words with 128-byte swizzle, UINT16 boxes of [TR][U]; as the kernel's header says)."""
    import numpy as np
    w = wt.w if w is None else w
    scales = wt.scales if scales is None else scales
    biases = wt.biases if biases is None else biases
    tr, u = 16 * cfg["MT"], cfg["U"]
    words = wt.in_f * wt.bits // 32
    groups = wt.in_f // wt.group
    maps = [TensorMap(w.data_ptr(), 2, words, wt.out_f, words * 4, 32, tr, swizzle=3),
            TensorMap(scales.data_ptr(), 1, groups, wt.out_f, groups * 2, u, tr),
            TensorMap(biases.data_ptr(), 1, groups, wt.out_f, groups * 2, u, tr)]
    grid, block, smem = bulk_launch(cfg, tokens, wt.in_f, wt.out_f)
    kern = get_kernel(BULK_CU, cfg, smem)
    bias = np.uint64(wt.bias.data_ptr()) if wt.bias is not None else np.uint64(0)
    if not cfg.get("SPLITK"):
        args = [m.map for m in maps] + [np.uint64(x.data_ptr()), bias,
                                        np.uint64(y.data_ptr()), np.int32(tokens), np.int32(wt.in_f), np.int32(wt.out_f)]
        return lambda: (maps, launch_ex(kern, grid, block, args, smem, programmatic=WG_PDL))
    # SPLITK: clear the float workspace, add the slices' sums into it, round it into y
    # (bias added there), each kernel with early start as the plugin launches them.
    import torch
    part = torch.full((tokens, wt.out_f), float("nan"), dtype=torch.float32, device="cuda")   # poisoned: the clear must run
    n = tokens * wt.out_f
    clear = get_kernel(BULK_CU, cfg, 0, name="affine_bulk_clear")
    finish = get_kernel(BULK_CU, cfg, 0, name="affine_bulk_finish")
    fgrid = (max(1, min(SMS * 4, -(-n // 4 // 256))), 1, 1)
    cargs = [np.uint64(part.data_ptr()), np.int32(n)]
    args = [m.map for m in maps] + [np.uint64(x.data_ptr()), np.uint64(0),
                                    np.uint64(part.data_ptr()), np.int32(tokens), np.int32(wt.in_f), np.int32(wt.out_f)]
    fargs = [np.uint64(part.data_ptr()), bias, np.uint64(y.data_ptr()), np.int32(tokens), np.int32(wt.out_f)]

    def run():
        launch_ex(clear, fgrid, (256, 1, 1), cargs, 0, programmatic=WG_PDL)
        launch_ex(kern, grid, block, args, smem, programmatic=WG_PDL)
        launch_ex(finish, fgrid, (256, 1, 1), fargs, 0, programmatic=WG_PDL)
        return maps, part
    return run


def launch_programmatic(kern, grid, block, args, shared_mem=0):
    """Launches kern (a cupy kernel) on torch's current stream with
    programmatic stream serialization (cuLaunchKernelEx), as the Go host
    launches a plan step marked Programmatic: it may start before the kernel
    ahead finishes and waits for it with griddepcontrol.wait. args are the
    numpy scalars cupy would take (np.uint64 pointers, np.int32)."""
    launch_ex(kern, grid, block, args, shared_mem, programmatic=True)


def launch_ex(kern, grid, block, args, shared_mem=0, programmatic=True):
    """cuLaunchKernelEx on torch's current stream, with programmatic stream
    serialization when asked. args: np.uint64, np.int32, np.int64, or ctypes
    arrays passed by value (a tensor map's 128 bytes)."""
    import numpy as np
    import torch
    lib = _libcuda()
    values = []
    for a in args:
        if isinstance(a, np.uint64):
            values.append(ctypes.c_uint64(int(a)))
        elif isinstance(a, np.int32):
            values.append(ctypes.c_int32(int(a)))
        elif isinstance(a, np.int64):
            values.append(ctypes.c_int64(int(a)))
        elif isinstance(a, ctypes.Array):
            values.append(a)
        else:
            raise TypeError(f"launch_ex packs np.uint64, np.int32, np.int64 and ctypes arrays, not {type(a).__name__}")
    params = (ctypes.c_void_p * len(values))(*[ctypes.c_void_p(ctypes.addressof(v)) for v in values])
    attr = _LaunchAttribute(id=6)   # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.allowed = 1
    cfg = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared_mem,
                        ctypes.c_void_p(torch.cuda.current_stream().cuda_stream),
                        ctypes.pointer(attr) if programmatic else None, 1 if programmatic else 0)
    fn = getattr(kern, "kernel", kern)
    r = lib.cuLaunchKernelEx(ctypes.byref(cfg), ctypes.c_void_p(fn.ptr), params, None)
    if r != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed: CUresult {r}")


def run_wg(quick: bool, bench: bool = True):
    """Correctness of the wgmma kernel on fresh random inputs with a poisoned
    output, then (bench) time its variants against torch bf16 at the
    benchmark shapes."""
    import torch
    ok_all = True
    cfgs, failed = [], set()
    for c in WG_CONFIGS:     # a variant that does not compile is reported and skipped
        try:
            compile_all([(WG_CU, wg_with_bits(c, b, g)) for b, g in WG_CHECK_QUANTS])   # every width's cases run each variant
            cfgs.append(c)
        except RuntimeError as e:
            ok_all = False
            print(f"FAIL wg compile {c}: {str(e)[:3000]}", flush=True)
    for m in _modules.values():
        if m["path"] == WG_CU:
            log = m["artifact"].get("log", "")
            regs = "; ".join(f"{f} {r} regs" for f, r in
                             re.findall(r"Compiling entry function '(\w+)'[\s\S]*?Used (\d+) registers", log))
            print("# wg", {k: v for k, v in m["cfg"].items() if not k.startswith("_")}, "ptxas:", regs or ptxas_summary(log),
                  "spills" if re.search(r"[1-9]\d* bytes spill", log) else "",
                  "SERIALISED" if "C7514" in log else "", flush=True)
            entry = ""
            for line in log.splitlines():
                if "Compiling entry function" in line:
                    entry = line.split("'")[1] if "'" in line else line
                if "Performance" in line or "serializ" in line or re.search(r"[1-9]\d* bytes spill", line):
                    print("#   ", entry, line.strip()[:300], flush=True)
    # xe: odd tokens' x scaled by 2^xe, beyond fp16's range either way, so
    # the kernel's per-token power-of-two scaling (affine_wg_xprep) is what
    # keeps them exact; they are checked against a tolerance scaled alike.
    # 8-bit cases: groups a multiple of the stage's 4 (4096, 2048), not
    # (1152: 18 groups, scales copied in pairs), a partial last stage (640:
    # 10 groups), large x. The 8192-input case is the top of the plugin's
    # range for 256-thread xprep blocks. The other widths (general
    # unpacking, stages of 8 groups at 2 and 3 bits, 4 at 5 and 6) take the
    # same kinds of case: partial last stages (640 and 1152 inputs), scales
    # copied in pairs (1152), large and small x. Groups of 32 and 128 (two
    # scales a stage's 64 inputs, or one for two) take them too: partial
    # last stages (1152, 640 and 1280 inputs), scales copied in pairs (1152,
    # 1280), every width. The ODDK cases (in not a multiple of 2 * max(64,
    # group)) take rows whose scales start at an odd entry, odd last
    # stages, 8-byte weight pieces at 3 and 5 bits, and windows of 4-byte
    # scale pieces (6 bits in groups of 128: two scales a stage row).
    for ci, case in enumerate(WG_CHECK_CASES):
        in_f, out_f, t, bias, xe = case[:5]
        bits, group = wg_case_quant(case)
        wt = Weights(bits, group, in_f, out_f, bias, seed=500 + ci)
        gen = torch.Generator(device="cuda").manual_seed(ci)
        x = torch.rand((t, in_f), generator=gen, device="cuda") * 2 - 1
        if xe:
            x[1::2] *= 2.0 ** xe
        x = x.to(torch.bfloat16)
        ref = wt.reference(x)
        for cfg in cfgs:
            cfg = wg_with_bits(cfg, bits, group, in_f)
            y = torch.full((t, out_f), -1, dtype=torch.int16, device="cuda")
            try:
                run, ws = wg_launch_fns(cfg, wt, x, y, t)
            except WGNotServed as e:
                print(f"SKIP wg {in_f:5d}->{out_f:<5d} t={t:<4d} {e}", flush=True)
                continue
            ws.fill_(0xFF)   # poison the workspace too: stages, scales and sums must all be written
            try:
                run()
                torch.cuda.synchronize()
            except Exception as e:
                print(f"FAIL wg {in_f}->{out_f} t={t} {cfg}: {type(e).__name__}: {e}", flush=True)
                raise
            ok, detail = check(y.view(torch.bfloat16), ref)
            if xe:
                ok_e, detail = check(y.view(torch.bfloat16)[0::2], ref[0::2])
                ok_o, detail_o = check(y.view(torch.bfloat16)[1::2] / 2.0 ** xe, ref[1::2] / 2.0 ** xe)
                ok, detail = ok_e and ok_o, f"{detail}; x*2^{xe} tokens /2^{xe}: {detail_o}"
            if cfg.get("_sk") or cfg["_splits"] > 1 and not cfg.get("CLUSTER"):
                # Shares that meet through the workspace give the same
                # bits whichever finishes first: every run gives the first
                # one's.
                first = y.clone()
                for r in range(WG_REPEATS - 1):
                    y.fill_(-1)
                    ws.fill_(0xFF)   # every run must write what it reads, as the first did
                    run()
                    torch.cuda.synchronize()
                    if not torch.equal(y, first):
                        ok = False
                        detail += f"; run {r + 2} differs from the first at {int((y != first).sum())} values"
                        break
                else:
                    detail += f"; {WG_REPEATS} runs, the same bits"
            ok_all &= ok
            if not ok:
                failed.add((variant_key(WG_CU, cfg), cfg["_splits"], cfg["_full"], cfg.get("_sk", 0)))
            print(f"{'PASS' if ok else 'FAIL'} wg q{bits} g{group:<3d} {in_f:5d}->{out_f:<5d} t={t:<4d} bias={int(bias)} "
                  f"BN={cfg['BN']} STAGES={cfg['STAGES']} WGS={cfg['WGS']} S={cfg['_splits']} full={cfg['_full']} SK={cfg.get('_sk', 0)} C={cfg.get('CLUSTER', 0)}"
                  f"{f' x*2^{xe}' if xe else ''}  {detail}", flush=True)
        del wt
    bits, group = BENCH_QUANT
    cfgs = [wg_with_bits(c, bits, group) for c in cfgs]
    if not WG_TIME_ALL:
        cfgs = [c for c in cfgs if (variant_key(WG_CU, c), c["_splits"], c["_full"], c.get("_sk", 0)) not in failed]   # time the correct ones only
    if not bench:
        return ok_all
    print(f"\n{'shape':>13s} {'tok':>5s} {'torch us':>9s} | {'kernel':18s} {'us':>9s} {'speedup':>7s}")
    for in_f, out_f in (BENCH_SHAPES if not quick else BENCH_SHAPES[:2]):
        wt = Weights(bits, group, in_f, out_f, False, seed=in_f * 7 + out_f, keep_dense=False)
        qcopies = rotated_copies(wt)
        nd = _copies(in_f * out_f * 2)
        dense = [torch.randn((out_f, in_f), device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(nd)]
        for t in WG_TOKENS:
            x = (torch.rand((t, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
            ya = torch.empty((t, out_f), device="cuda", dtype=torch.bfloat16)
            anchor = time_launches([lambda W=W: torch.matmul(x, W.t(), out=ya) for W in dense])
            y = torch.empty((t, out_f), device="cuda", dtype=torch.int16)
            for cfg in cfgs:
                cfg = wg_with_bits(cfg, bits, group, in_f)   # ODDK where the shape needs it
                keep, fns = [], []
                try:
                    wg_launch_fns(cfg, wt, x, y, t)
                except WGNotServed:
                    continue
                for (w, sc, bi) in qcopies:
                    run, ws = wg_launch_fns(cfg, wt, x, y, t, w, sc, bi)
                    keep.append(ws)
                    fns.append(run)
                ts = time_launches(fns)
                print(f"{in_f:6d}->{out_f:<6d} {t:5d} {anchor * 1e6:9.1f} | wg BN={cfg['BN']} ST={cfg['STAGES']} WGS={cfg['WGS']} AST={cfg['AST']} band={cfg['_band']} F={cfg.get('FSETS', '-')} S={cfg['_splits']} full={cfg['_full']} SK={cfg.get('_sk', 0)} C={cfg.get('CLUSTER', 0)}"
                      f"{ts * 1e6:9.1f} {anchor / ts:7.2f}  {2 * t * in_f * out_f / ts / 1e12:6.0f} TFLOP/s"
                      f" (torch {2 * t * in_f * out_f / anchor / 1e12:4.0f})", flush=True)
        del qcopies, dense, wt
        torch.cuda.empty_cache()
    return ok_all


def print_resources():
    """ptxas resource usage of every compiled variant (from NVRTC's log)."""
    print("\n# ptxas resource usage of compiled variants")
    for k, m in sorted(_modules.items(), key=lambda kv: str(kv[0])):
        cfg = m["cfg"]
        name = KIND_OF[m["path"]]
        desc = " ".join(f"{a}={b}" for a, b in _macros(cfg).items())
        print(f"#   {name:4s} {desc}: {ptxas_summary(m['artifact'].get('log', ''))}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few shapes only")
    ap.add_argument("--power", action="store_true",
                    help="after each timing, replay it for a second with the SM clock and power draw sampled (nvidia-smi)")
    ap.add_argument("--only", choices=("correctness", "bench"), help="run one part")
    ap.add_argument("--sweep", action="store_true", help="also time alternative launch configs")
    ap.add_argument("--resources", action="store_true", help="print ptxas usage of every variant")
    ap.add_argument("--kernel", choices=("gemv", "qmm", "stream", "wg", "bulk", "wave"), action="append",
                    help="test/time these kernels only (repeatable)")
    ap.add_argument("--tokens", help="comma-separated benchmark token counts (default 1,4,16,256,4096)")
    ap.add_argument("--shapes", help="comma-separated benchmark shapes INxOUT (default the five DESIGN.md shapes)")
    ap.add_argument("--stream-sweep", action="store_true", help="with --sweep: alternative affine_stream configs only")
    ap.add_argument("--stream-configs", help="with --sweep: affine_stream variants MT:KW:U:D[:MINB[:XT]],... (XT -1: x through the ring) "
                    "timed instead of the built-in stream sweep")
    ap.add_argument("--bulk-configs", help="with --sweep: affine_bulk variants MT:CW:SEG:NS[:BPS[:FP16[:PARTS[:WK[:KS]]]]],... "
                    "(MT 0 / NS 0 / SEG 0 / PARTS 0 / WK 0 / KS 0 or absent: the rule's choice; BPS default 1; "
                    "FP16 0 off, 1 on, -1 or absent the rule's choice)")
    ap.add_argument("--quant", help="benchmark bits:group (default 4:64, what DESIGN.md's targets name)")
    ap.add_argument("--bulk-match", default="", help="only the affine_bulk correctness cases whose overrides contain this text (e.g. _NONFINITE); the repeat check runs whatever it says")
    ap.add_argument("--bulk-over", help="macros K=V,... every affine_bulk variant takes (e.g. UNR=2)")
    ap.add_argument("--stream-over", help="macros K=V,... every affine_stream variant takes (e.g. COOP=1)")
    ap.add_argument("--wg-over", help="macros K=V,... every wg.cu variant takes (e.g. AW=3)")
    ap.add_argument("--wg", action="store_true", help="only the wgmma kernel (correctness, then timing of WG_CONFIGS; with --quant, that width's cases only)")
    ap.add_argument("--wg-configs", help="with --wg: variants BN:STAGES:WGS:AST:BAND[:FSETS[:SPLITS[:FULL[:SMS[:CLUSTER[:SK]]]]]],... (default: default_wg_configs())")
    ap.add_argument("--wg-skip-check", action="store_true", help="with --wg: time the variants without the correctness cases first")
    ap.add_argument("--no-streamk", action="store_true", help="the wgmma rule without stream-K (its split tails instead)")
    ap.add_argument("--wg-time-all", action="store_true",
                    help="with --wg: time variants that failed correctness too (diagnostics only)")
    ap.add_argument("--carveout", type=int, help="every kernel's preferred shared-memory carveout, percent (-1: the driver's default)")
    ap.add_argument("--no-pdl", action="store_true",
                    help="launch the wgmma path's main kernel and reduction, the bulk and the stream kernel without early start (the plugins use it)")
    ap.add_argument("--tma-l2", type=int, choices=(0, 1, 2, 3), default=2,
                    help="L2 promotion of the bulk kernel's tensor maps (0 none, 1 64B, 2 128B as the plugin, 3 256B)")
    ap.add_argument("--stream-pdl-tokens", type=int, default=8,
                    help="the most tokens at which the stream kernel is launched with early start in one token tile (the plugins: 8; 8-token tiles at 9-16 tokens always start early)")
    args = ap.parse_args()
    global KERNELS, WG_PDL, STREAM_PDL_TOKENS, TMA_L2PROMO, POWER
    POWER = args.power
    STREAM_PDL_TOKENS = args.stream_pdl_tokens
    TMA_L2PROMO = args.tma_l2
    KERNELS = tuple(args.kernel or ())
    WG_PDL = not args.no_pdl
    if args.carveout is not None:
        set_carveout(args.carveout)
    global WG_STREAMK
    WG_STREAMK = not args.no_streamk
    global STREAM_ONLY, BENCH_TOKENS, BENCH_SHAPES
    STREAM_ONLY = args.stream_sweep
    if args.stream_configs:
        global STREAM_CONFIGS
        STREAM_CONFIGS = [tuple(int(v) for v in (c.split(":") + ["1", "0"][len(c.split(":")) - 4:])[:6])
                          for c in args.stream_configs.split(",")]
    if args.bulk_configs:
        global BULK_CONFIGS
        if any(not 4 <= len(c.split(":")) <= 9 for c in args.bulk_configs.split(",")):
            ap.error("--bulk-configs entries are MT:CW:SEG:NS[:BPS[:FP16[:PARTS[:WK[:KS]]]]]")
        BULK_CONFIGS = [tuple(int(v) for v in c.split(":") + ["1", "-1", "0", "0", "0"][len(c.split(":")) - 4:])
                        for c in args.bulk_configs.split(",")]
    if args.quant:
        global BENCH_QUANT
        BENCH_QUANT = tuple(int(v) for v in args.quant.split(":"))
    global BULK_MATCH
    BULK_MATCH = args.bulk_match
    if args.bulk_over:
        BULK_OVER.update({k: int(v) for k, v in (kv.split("=") for kv in args.bulk_over.split(","))})
    if args.wg_over:
        WG_OVER.update({k: int(v) for k, v in (kv.split("=") for kv in args.wg_over.split(","))})
    if args.stream_over:
        STREAM_OVER.update({k: int(v) for k, v in (kv.split("=") for kv in args.stream_over.split(","))})
    if args.tokens:
        BENCH_TOKENS = tuple(int(v) for v in args.tokens.split(","))
    if args.shapes:
        BENCH_SHAPES = [tuple(int(v) for v in sh.replace("->", "x").split("x")) for sh in args.shapes.split(",")]

    import torch
    import cupy
    dev = torch.cuda.get_device_properties(0)
    nv = _nvrtc_or_none()
    print(f"# {dev.name}, {dev.multi_processor_count} SMs, torch {torch.__version__}, cupy {cupy.__version__}, "
          f"NVRTC {nv.version if nv else '(cupy)'} {nv.path if nv else ''}", flush=True)
    global SMS, ON_H200
    SMS = dev.multi_processor_count
    ON_H200 = "H200" in dev.name
    t0 = time.time()
    ok = True
    if args.wg:
        global WG_CONFIGS, WG_TOKENS, WG_TIME_ALL
        WG_TIME_ALL = args.wg_time_all
        if args.wg_configs:
            WG_CONFIGS = [wg_config(*(int(v) for v in c.split(":"))) for c in args.wg_configs.split(",")]
        else:
            WG_CONFIGS = default_wg_configs()   # after --wg-over, which they take
        if args.tokens:
            WG_TOKENS = BENCH_TOKENS
        if args.quant:   # check and time that width and group only
            global WG_CHECK_CASES, WG_CHECK_QUANTS
            WG_CHECK_CASES = [c for c in WG_CHECK_CASES if wg_case_quant(c) == BENCH_QUANT]
            WG_CHECK_QUANTS = [BENCH_QUANT]
        if args.wg_skip_check:
            WG_CHECK_CASES = []
        ok = run_wg(args.quick)
        print(f"# total {time.time() - t0:.1f}s; wg {'OK' if ok else 'FAILED'}")
        sys.exit(0 if ok else 1)
    if args.only in (None, "correctness"):
        ok = run_correctness(args.quick)
        if (not KERNELS or "wg" in KERNELS) and torch.cuda.get_device_capability(0) == (9, 0):
            WG_CONFIGS = [wg_choose(4096, 4096), wg_choose(256, 8192, in_f=4096), wg_choose(128, 14336),
                          wg_choose(64, 14336), wg_choose(256, 4096, in_f=4096), wg_choose(128, 4096, in_f=4096),
                          wg_choose(64, 4096, in_f=4096), wg_choose(128, 8192, in_f=28672),
                          wg_choose(64, 8192, in_f=28672),   # the variants the plugin runs
                          wg_config(256, 3, 2, 3, 16, 2, 4, -1, 6),   # whole waves of 6 tiles, then split in 4
                          wg_config(256, 3, 2, 3, 16, 2, 3, -1, 6),   # ... in 3 (at 640 inputs and 4 bits, 2 weight stages: share 0 empty)
                          # stream-K: whole waves of 6 tiles, then 7 blocks over the rest; one block per weight stage
                          # (every block of a tile but the last a contributor); 128-token tiles, one block per SM
                          wg_config(256, 3, 2, 3, 16, 2, 1, -1, 6, 0, 7), wg_config(256, 3, 2, 3, 16, 2, 1, 0, 0, 0, 1 << 20),
                          wg_config(128, 6, 2, 3, 16, 3, 1, 0, 0, 0, -1)]
            ok = run_wg(args.quick, bench=False) and ok
    if args.only in (None, "bench"):
        run_bench(args.quick, args.sweep)
    if args.resources:
        print_resources()
    print(f"# total {time.time() - t0:.1f}s; correctness {'OK' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
