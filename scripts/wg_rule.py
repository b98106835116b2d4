#!/usr/bin/env python3
"""qmm/wgmma's variant and launch plan as the GPU harness runs them
(wg_choose and wg_plan in affine_kernels.py), for the Go test
TestWGRuleMatchesTheHarness, which compares them with chooseWG and the
launches in plugins/qmm/wgmma.go. It needs nothing but Python:

    python3 scripts/wg_rule.py < cases     # lines "sms tokens in out bits", one JSON object a line
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine_kernels as ak  # noqa: E402  (imports no GPU library until one is used)


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        sms, tokens, in_f, out_f, bits = (int(v) for v in line.split())
        ak.SMS = sms
        cfg = ak.wg_choose(tokens, out_f, sms, in_f=in_f, bits=bits)
        plan = ak.wg_plan(cfg, tokens, in_f, out_f)
        print(json.dumps({
            "BN": cfg["BN"], "STAGES": cfg["STAGES"], "WGS": cfg["WGS"], "AST": cfg["AST"], "FSETS": cfg.get("FSETS", 3),
            "AW": cfg.get("AW", 3), "BITS": cfg.get("BITS", 4), "XPREP_THREADS": cfg.get("XPREP_THREADS", 128),
            "band": cfg["_band"], "cluster": plan["cluster"], "splits": plan["splits"], "full": plan["full"], "sk": plan["sk"],
            "grid": plan["grid"], "reduce": plan["reduce"], "workspace": plan["workspace"]}, sort_keys=True))


if __name__ == "__main__":
    main()
