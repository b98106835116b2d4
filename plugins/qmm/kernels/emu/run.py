#!/usr/bin/env python3
"""CPU emulation tests of affine_gemv / affine_qmm (no GPU needed).

Compiles plugins/{gemv,qmm}/kernels/*.cu as host C++ against emu.h (fibers for
threads, emulated mma/ldmatrix/cp.async/DSMEM) with the macros that
scripts/affine_kernels.py's gemv_config/qmm_config choose, runs small shapes
against a float64 reference and applies the family gate.

    python3 plugins/qmm/kernels/emu/run.py            # all cases (~10 min on 2 cores)
    python3 plugins/qmm/kernels/emu/run.py qmm        # one kernel
    EMU_EAGER=1 python3 .../run.py                    # cp.async performed at issue time
"""
import hashlib
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3] / "scripts"))
import affine_kernels as A  # noqa: E402

BUILD = Path(os.environ.get("EMU_BUILD", Path(tempfile.gettempdir()) / "kcand-affine-emu"))


def cases(seed=1):
    rnd = random.Random(seed)
    out = []
    shapes = [(96, 8), (160, 64), (288, 200), (640, 136), (1056, 72), (1152, 40), (2880, 24), (1024, 64), (2048, 16)]
    for bits in A.BITS_ALL:
        for group in A.GROUPS_ALL:
            ok = [s for s in shapes if s[0] % group == 0]
            in_f, out_f = rnd.choice(ok)
            bias = rnd.random() < 0.5
            for t in (1, 3, 7):
                out.append(("gemv", bits, group, t, in_f, out_f, bias))
            for t in rnd.sample([1, 3, 7, 17, 33, 70, 200], 3):
                out.append(("qmm", bits, group, t, in_f, out_f, bias))
    # larger outputs: GEMV ROWS 2/4 paths with a persistent grid; odd-bit QMM paths
    out += [
        ("gemv", 4, 64, 1, 256, 4224, True), ("gemv", 4, 64, 2, 512, 4352, False),
        ("gemv", 3, 64, 1, 2048, 4224, False), ("gemv", 2, 32, 2, 2048, 4224, True),
        ("qmm", 5, 64, 40, 2880, 72, True), ("qmm", 3, 32, 7, 1056, 72, True),
        ("qmm", 6, 32, 100, 2880, 136, True), ("qmm", 4, 64, 130, 256, 136, True),
    ]
    return out


def main():
    kinds = sys.argv[1:] or ["gemv", "qmm"]
    BUILD.mkdir(parents=True, exist_ok=True)
    fails = 0
    for kind, bits, group, t, in_f, out_f, bias in cases():
        if kind not in kinds:
            continue
        cfg = (A.gemv_config if kind == "gemv" else A.qmm_config)(bits, group, t, in_f, out_f)
        mac = A._macros(cfg)
        key = hashlib.sha256((kind + str(sorted(mac.items())) +
                              (HERE / "emu.h").read_text() + (HERE.parent / "qmm.cu").read_text() +
                              (HERE.parents[2] / "gemv" / "kernels" / "gemv.cu").read_text()).encode()).hexdigest()[:12]
        exe = BUILD / f"{kind}_{key}"
        if not exe.exists():
            src = HERE / ("test_gemv.cpp" if kind == "gemv" else "test_qmm.cpp")
            subprocess.run(["g++", "-O1", "-std=c++20", "-w", *[f"-D{k}={v}" for k, v in mac.items()],
                            str(HERE / "emu.cpp"), str(src), "-o", str(exe)], check=True)
        env = dict(os.environ)
        if kind == "gemv":
            env["GRIDX"] = str(A.SMS * 2)   # what gemv_launch gives with occupancy 2
        r = subprocess.run([str(exe), str(in_f), str(out_f), str(t), str(int(bias))],
                           capture_output=True, text=True, env=env)
        line = [l for l in r.stdout.splitlines() if l.startswith(("PASS", "FAIL"))]
        desc = " ".join(f"{k}={v}" for k, v in mac.items() if k not in ("BITS", "GROUP"))
        print((line[0] if line else "CRASH " + r.stderr.strip()[-300:]) + "  " + desc, flush=True)
        fails += r.returncode != 0
    print("failures:", fails)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
