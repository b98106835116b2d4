#!/usr/bin/env python3
"""qmm/wave's variant rule, chooseWave in plugins/qmm/wave.go, for the
harness (wave_kernel.py). It needs nothing but Python, so that the Go test
TestWaveRuleMatchesThePythonHarness can compare the two:

    python3 scripts/wave_rule.py < cases     # lines "sms in out [tokens]", one config a line
"""
import json
import sys

MAX_SMEM = 217 * 1024   # waveMaxShared: leaves room for an xprep block (8.5 KB) beside a main block
XTILE = 17 * 512 + 64   # waveXTileBytes: one token tile (16 tokens) of a line of prepared x
PAIR_MIN_LINES = 56     # wavePairMinLines
MAX_LINE_SLOTS = 16     # waveMaxLineSlots
MAX_TILES, MAX_TILES_TWO = 8, 5   # waveMaxTiles, waveMaxTilesTwo: n-tiles a warp at one and two token tiles


def xline(cfg: dict) -> int:
    """One line of prepared x (XLINE_BYTES in wave.cu): TT token tiles."""
    return cfg.get("TT", 1) * XTILE


def line_bytes(r: int, tt: int = 1) -> int:
    """One ring slot of r rows: a line of weights and its x, 1 KiB aligned."""
    return -(-(r * 128 + tt * XTILE) // 1024) * 1024


def smem_bytes(cfg: dict) -> int:
    """The dynamic shared memory of a variant (SMEM_BYTES in wave.cu)."""
    r = 8 * cfg["NT"] * cfg["WR"]
    return cfg["NS"] * line_bytes(r, cfg.get("TT", 1)) + cfg["NSB"] * 2 * r * 16 + 1024


def wave_config(out_f: int, sms: int, in_f: int = 0, tokens: int = 16) -> dict:
    """chooseWave. Rows per block: out/SMs rounded up to 8, at most 256;
    below 64 rows, KS (2, 4 or 8) blocks, a thread-block cluster that splits
    the lines, take out/(SMs/KS) rows, while in_f divides into their pairs
    of lines; at exactly 64 rows, a cluster of two takes twice the rows
    where each block keeps PAIR_MIN_LINES lines and two line slots per K
    warp fit; WR row groups (a power of two, at least 2) of NT <= 8
    n-tiles (5 with two token tiles); 8 consumer warps; as many line slots
    as fit; above 16 tokens two token tiles (TT 2)."""
    tt = 2 if tokens > 16 else 1
    tiles = lambda ks: min(-(-out_f // (8 * max(sms // ks, 1))), 32)   # a tensor-map box holds at most 256 rows
    ks = 1
    while 8 * tiles(ks) < 64 and ks < 8 and in_f and in_f % (512 * 2 * ks) == 0:
        ks *= 2
    if 8 * tiles(1) == 64 and tiles(2) == 2 * tiles(1) and in_f and in_f % 1024 == 0 and in_f // 512 >= PAIR_MIN_LINES:
        try:
            cfg = _ring(tiles(2), 2, tt)
            if cfg["NS"] >= 2 * cfg["WK"]:
                return cfg
        except ValueError:
            pass
    return _ring(tiles(ks), ks, tt)


def _ring(n8: int, ks: int, tt: int = 1) -> dict:
    """waveRing: blocks of n8 n-tiles in clusters of ks, tt token tiles."""
    wr = 2   # at least two row groups: at most 4 K warps, so the ring takes multiples of 4 line slots
    max_tiles = MAX_TILES_TWO if tt > 1 else MAX_TILES   # two token tiles: at most 5 n-tiles, no spills
    while -(-n8 // wr) > max_tiles and wr < 8:
        wr *= 2

    def ring(wr: int) -> dict:
        cfg = dict(NT=-(-n8 // wr), WR=wr, WK=max(1, 8 // wr))
        if ks > 1:
            cfg["KS"] = ks
        if tt > 1:
            cfg["TT"] = tt
        return finish(cfg)
    cfg = ring(wr)
    if tt > 1 and cfg["NS"] < 2 * cfg["WK"] and wr < 8:
        # two token tiles: twice the row groups where that gives two line slots per K warp
        try:
            c2 = ring(2 * wr)
            if c2["NS"] >= 2 * c2["WK"]:
                return c2
        except ValueError:
            pass
    return cfg


def finish(cfg: dict) -> dict:
    """The line and scale slots: NS a multiple of WK and 2 NSB too (a warp's
    parity waits are sound only on slots whose every phase it saw); the
    most line slots that fit, with NS/2 + 1 scale slots rounded up to a
    multiple of WK/2, or NS/2. A cfg that gives NS keeps it (and NSB, or
    gets NS/2 + 1 rounded so). ValueError when not even max(2, WK) fit."""
    cfg = dict(cfg)
    wk, step = cfg["WK"], max(1, cfg["WK"] // 2)
    if "NS" in cfg:
        cfg.setdefault("NSB", -(-(cfg["NS"] // 2 + 1) // step) * step)
        return cfg
    for ns in range(MAX_LINE_SLOTS // wk * wk, max(2, wk) - 1, -wk):
        for nsb in (-(-(ns // 2 + 1) // step) * step, -(-max(ns // 2, 1) // step) * step):
            if smem_bytes(dict(cfg, NS=ns, NSB=nsb)) <= MAX_SMEM:
                cfg["NS"], cfg["NSB"] = ns, nsb
                return cfg
    raise ValueError(f"no ring fits: {cfg}")


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        sms, in_f, out_f, *rest = (int(v) for v in line.split())
        try:
            print(json.dumps(wave_config(out_f, sms, in_f, *rest), sort_keys=True))
        except ValueError:
            print("null")


if __name__ == "__main__":
    main()
