#!/usr/bin/env python3
"""The stream kernel's variant rule (qmm/stream, gemv/tensor-core) as the
GPU harness runs it (stream_config and stream_smem_bytes in
affine_kernels.py), for the Go test TestStreamRuleMatchesTheHarness, which
compares it with ChooseStream in internal/affinegpu. It needs nothing but
Python:

    python3 scripts/stream_rule.py < cases   # lines "sms tokens in out bits group": the macros and "smem" as JSON, or null
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
        cfg = ak.stream_config(bits, group, tokens, in_f, out_f, sms)
        if cfg is None:
            print("null")
            continue
        out = dict({"MINB": 1, "XT": 0}, **cfg)   # the kernel's defaults, which the Go rule names
        out["smem"] = ak.stream_smem_bytes(cfg)
        print(json.dumps(out, sort_keys=True, separators=(",", ":")))


if __name__ == "__main__":
    main()
