package main

import (
	"maps"
	"testing"

	"github.com/kcand/kcand/internal/harnessrule"
)

// TestGEMVRuleMatchesTheHarness: scripts/harness_rule.py gemv (the
// harness's gemv_config and gemv_launch's shared memory) picks the decode
// kernel's macros and shared memory chooseGEMV picks, over SM counts,
// token counts, widths, group sizes and sizes. Skipped where python3 is
// not installed.
func TestGEMVRuleMatchesTheHarness(t *testing.T) {
	cases := harnessrule.Sweep([]int{132, 114, 78, 16}, []int{1, 2, 3, 4, 5, 8}, []int{2, 3, 4, 5, 6, 8}, []int{32, 64, 128},
		[]int{128, 640, 1152, 2880, 4096, 5120, 14336, 28672}, []int{8, 136, 1032, 2880, 4096, 13824, 28672},
		func(harnessrule.Case) bool { return true })
	harnessrule.Compare(t, "gemv", cases, func(c harnessrule.Case) any {
		cfg := chooseGEMV(c.Req, c.SMs)
		want := map[string]int{"smem": cfg.sharedBytes(c.Req)}
		maps.Copy(want, cfg.defines())
		return want
	})
}
