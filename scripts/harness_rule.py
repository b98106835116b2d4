#!/usr/bin/env python3
"""The GPU harness's idea of each affine kernel's variant (affine_kernels.py),
printed for the Go tests that compare it with the plugins' rules, so that
the variants the harness checks and times on the GPU are the ones the
plugins run. It needs nothing but Python:

    python3 scripts/harness_rule.py KIND < cases     # one JSON object (or null) a line

KIND and its case lines:
  wg      "sms tokens in out bits group"  qmm/wgmma: wg_choose's macros, wg_smem and wg_plan's launch
                                          plan (groups of 64)
                                          (TestWGRuleMatchesTheHarness)
  bulk    "sms tokens in out bits group"  gemv/bulk, qmm/bulk: bulk_config and bulk_smem_bytes
                                          (TestBulkRuleMatchesTheHarnessSweep)
  stream  "sms tokens in out bits group"  qmm/stream, gemv/tensor-core: stream_config and
                                          stream_smem_bytes (TestStreamRuleMatchesTheHarness)
  qmm     "sms tokens in out bits group"  qmm: qmm_config and qmm_smem_bytes
                                          (TestQMMRuleMatchesTheHarness)
  gemv    "sms tokens in out bits group"  gemv: gemv_config and gemv_launch's shared memory
                                          (TestGEMVRuleMatchesTheHarness)
qmm/wave's rule is scripts/wave_rule.py.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402  (imports no GPU library until one is used)


def wg(sms, tokens, in_f, out_f, bits, group):
    cfg = ak.wg_choose(tokens, out_f, sms, in_f=in_f, bits=bits, group=group)
    plan = ak.wg_plan(cfg, tokens, in_f, out_f)
    return {"BN": cfg["BN"], "STAGES": cfg["STAGES"], "WGS": cfg["WGS"], "AST": cfg["AST"], "FSETS": cfg.get("FSETS", 3),
            "AW": cfg.get("AW", 3), "BITS": cfg.get("BITS", 4), "QGROUP": cfg.get("QGROUP", 64), "ODDK": cfg.get("ODDK", 0),
            "XPREP_THREADS": cfg.get("XPREP_THREADS", 128),
            "band": cfg["_band"], "cluster": plan["cluster"], "splits": plan["splits"], "full": plan["full"], "sk": plan["sk"],
            "grid": plan["grid"], "reduce": plan["reduce"], "workspace": plan["workspace"], "smem": ak.wg_smem(cfg)}


def bulk(sms, tokens, in_f, out_f, bits, group):
    cfg = ak.bulk_config(bits, group, tokens, in_f, out_f, sms)
    if cfg is None:
        return None
    return dict({k: v for k, v in cfg.items() if k != "_BPS"}, smem=ak.bulk_smem_bytes(cfg, in_f))


def stream(sms, tokens, in_f, out_f, bits, group):
    cfg = ak.stream_config(bits, group, tokens, in_f, out_f, sms)
    if cfg is None:
        return None
    _, _, smem = ak.stream_launch(cfg, tokens, in_f, out_f)   # with _SOLO's padding
    macros = {k: v for k, v in cfg.items() if not k.startswith("_")}
    return dict({"MINB": 1, "XT": 0}, **macros, smem=smem)   # the kernel's defaults, which the Go rule names


def qmm(sms, tokens, in_f, out_f, bits, group):
    cfg = ak.qmm_config(bits, group, tokens, in_f, out_f, sms)
    return dict(cfg, smem=ak.qmm_smem_bytes(cfg))


def gemv(sms, tokens, in_f, out_f, bits, group):
    cfg = ak.gemv_config(bits, group, tokens, in_f, out_f, sms)
    _, _, smem = ak.gemv_launch(cfg, tokens, in_f, out_f, sms=sms)
    return dict(cfg, smem=smem)


KINDS = {"wg": wg, "bulk": bulk, "stream": stream, "qmm": qmm, "gemv": gemv}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in KINDS:
        sys.exit(f"usage: harness_rule.py {{{'|'.join(KINDS)}}} < cases")
    rule = KINDS[sys.argv[1]]
    for line in sys.stdin:
        if not line.strip():
            continue
        args = [int(v) for v in line.split()]
        ak.SMS = args[0]
        print(json.dumps(rule(*args), sort_keys=True, separators=(",", ":")))


if __name__ == "__main__":
    main()
