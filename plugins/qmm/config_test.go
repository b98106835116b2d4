package main

import (
	"maps"
	"testing"

	"github.com/kcand/kcand/internal/harnessrule"
)

// TestQMMRuleMatchesTheHarness: scripts/harness_rule.py qmm (the harness's
// qmm_config and qmm_smem_bytes) picks the tiled kernel's macros and
// shared memory chooseQMM picks, over SM counts, token counts, widths,
// group sizes and sizes. Skipped where python3 is not installed.
func TestQMMRuleMatchesTheHarness(t *testing.T) {
	cases := harnessrule.Sweep([]int{132, 114, 78, 16}, []int{1, 7, 16, 17, 33, 64, 65, 192, 193, 256, 4096},
		[]int{2, 3, 4, 5, 6, 8}, []int{32, 64, 128}, []int{128, 640, 1152, 2880, 4096, 5120, 14336, 28672},
		[]int{8, 136, 1032, 2880, 4096, 13824, 28672}, func(harnessrule.Case) bool { return true })
	harnessrule.Compare(t, "qmm", cases, func(c harnessrule.Case) any {
		cfg := chooseQMM(c.Req, c.SMs)
		want := map[string]int{"smem": cfg.sharedBytes()}
		maps.Copy(want, cfg.defines())
		return want
	})
}
