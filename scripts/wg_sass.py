#!/usr/bin/env python3
"""The SASS of affine_wg for the plugin's variants (development tool):
instructions, wgmma groups and the distance between them, ptxas's spills,
and with --against another copy of wg.cu the same for it and the opcodes
whose counts differ. A change meant to leave a variant's code alone
should leave all of these equal.

    python3 scripts/wg_sass.py [--against OLD_WG_CU]

Needs NVRTC and cuobjdump (/usr/local/cuda/bin), not a GPU.
"""
import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402

VARIANTS = {
    "wide": ak.wg_config(256, 3, 2, 3, 16, 2),
    "wide pairs": ak.wg_config(256, 4, 1, 3, 16, 2, 2, 0, 0, 2),
    "mid": ak.wg_config(128, 6, 2, 3, 16, 3),
    "wide stream-K": ak.wg_config(256, 3, 2, 3, 16, 2, 1, 132, 0, 0, 132),
}


def sass(path: Path, cfg: dict):
    """affine_wg's instructions (addresses and encodings stripped) and ptxas's spill line."""
    art = ak.compile_variant(path, cfg)
    out = subprocess.run(["/usr/local/cuda/bin/cuobjdump", "-sass", "-fun", "affine_wg", str(art["cubin"])],
                         capture_output=True, text=True, check=True).stdout
    addr = re.compile(r"/\*[0-9a-f]{4,6}\*/")
    ins = [re.sub(r"/\*\s*0x[0-9a-f]+\s*\*/", "", addr.sub("", line)).strip()
           for line in out.splitlines() if addr.search(line)]
    m = re.search(r"Compiling entry function 'affine_wg'.*?(\d+ bytes stack frame, \d+ bytes spill stores, "
                  r"\d+ bytes spill loads)", art.get("log", ""), re.S)
    return ins, m.group(1) if m else "?"


def describe(ins):
    hg = [i for i, line in enumerate(ins) if "HGMMA" in line]
    starts = hg[::4]   # four wgmmas per group of 64 k
    return f"{len(ins)} instructions, {len(hg)} HGMMA, group spacing {[b - a for a, b in zip(starts, starts[1:])]}"


def opcodes(ins):
    return Counter(line.split()[0] for line in ins if line.split())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", help="another copy of wg.cu to compare with (file name other than wg.cu)")
    args = ap.parse_args()
    for name, cfg in VARIANTS.items():
        new, spill = sass(ak.WG_CU, cfg)
        print(f"{name:14s} {describe(new)}; {spill}")
        if args.against and "STREAMK" not in cfg:
            old, ospill = sass(Path(args.against).resolve(), cfg)
            a, b = opcodes(old), opcodes(new)
            diff = {k: b[k] - a[k] for k in sorted(set(a) | set(b)) if a[k] != b[k]}
            print(f"{'':14s} against: {describe(old)}; {ospill}; opcode counts that differ {diff}")


if __name__ == "__main__":
    main()
