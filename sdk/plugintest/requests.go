package plugintest

import "github.com/kcand/kcand/sdk"

// Requests returns the conformance shapes of a family: small enough for the
// CPU device, covering every bit width and group size, odd row counts,
// token counts on both sides of the decode limit, and output bias.
func Requests(f sdk.Family) []sdk.Request {
	switch f {
	case sdk.FamilyAffine:
		a := func(tokens, in, out, bits, group int, bias bool) sdk.Request {
			phase := sdk.PhaseDecode
			if tokens > 8 {
				phase = sdk.PhasePrefill
			}
			return sdk.Request{
				Family: sdk.FamilyAffine, Phase: phase, Tokens: tokens, InFeatures: in, OutFeatures: out,
				Weight: sdk.Format{Kind: "affine", Bits: bits, GroupSize: group}, Activation: sdk.BF16, Bias: bias,
			}
		}
		return []sdk.Request{
			a(1, 256, 64, 4, 64, false),
			a(3, 384, 40, 3, 128, true),
			a(7, 192, 24, 5, 32, false),
			a(1, 128, 16, 6, 64, true),
			a(2, 256, 32, 2, 32, false),
			a(33, 256, 48, 8, 128, false),
			a(1, 512, 8, 4, 32, true),
		}
	}
	return nil
}
