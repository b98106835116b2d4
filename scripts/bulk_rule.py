#!/usr/bin/env python3
"""gemv/bulk's and qmm/bulk's variant rule as the GPU harness runs it
(bulk_config and bulk_smem_bytes in affine_kernels.py), for the Go test
TestBulkRuleMatchesTheHarnessSweep, which compares it with ChooseBulk in
internal/affinegpu. It needs nothing but Python:

    python3 scripts/bulk_rule.py < cases   # lines "sms tokens in out bits group": the macros and "smem" as JSON, or null
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
        sms, tokens, in_f, out_f, bits, group = (int(v) for v in line.split())
        ak.SMS = sms
        cfg = ak.bulk_config(bits, group, tokens, in_f, out_f, sms)
        if cfg is None:
            print("null")
            continue
        out = {k: v for k, v in cfg.items() if k != "_BPS"}
        out["smem"] = ak.bulk_smem_bytes(cfg, in_f)
        print(json.dumps(out, sort_keys=True, separators=(",", ":")))


if __name__ == "__main__":
    main()
