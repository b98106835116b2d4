package host

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/errdefs"
)

// NumericalPolicy says which numeric classes may be selected.
type NumericalPolicy string

// The numerical policies.
const (
	// NumericalExact admits only candidates bit-identical to the fallback.
	NumericalExact NumericalPolicy = "exact"
	// NumericalThroughput admits any candidate within the family's gate.
	NumericalThroughput NumericalPolicy = "throughput"
)

// AdmissionPolicy says which candidate stabilities may be selected.
type AdmissionPolicy string

// The admission policies.
const (
	AdmissionStable       AdmissionPolicy = "stable"
	AdmissionExperimental AdmissionPolicy = "experimental"
)

// TuneRule says that requests of a family and phase with a token count in
// [MinTokens, MaxTokens] are worth measuring. MaxTokens 0 means no limit.
// Buckets says whether each token count is measured on its own or shares
// the measurement of its bucket.
type TuneRule struct {
	Family    sdk.Family   `json:"family"`
	Phase     sdk.Phase    `json:"phase,omitempty"`
	MinTokens int          `json:"min_tokens,omitempty"`
	MaxTokens int          `json:"max_tokens,omitempty"`
	Buckets   BucketScheme `json:"buckets,omitempty"`
}

// Matches reports whether the rule covers req.
func (r TuneRule) Matches(req sdk.Request) bool {
	return r.Family == req.Family &&
		(r.Phase == "" || r.Phase == req.Phase) &&
		req.Tokens >= r.MinTokens &&
		(r.MaxTokens == 0 || req.Tokens <= r.MaxTokens)
}

// String is the rule in the environment-variable syntax.
func (r TuneRule) String() string {
	phase := string(r.Phase)
	if phase == "" {
		phase = "*"
	}
	tokens := "*"
	if r.MinTokens > 0 || r.MaxTokens > 0 {
		tokens = fmt.Sprintf("%d-%d", r.MinTokens, r.MaxTokens)
		if r.MaxTokens == 0 {
			tokens = fmt.Sprintf("%d-", r.MinTokens)
		}
	}
	if r.Buckets != BucketExact {
		return fmt.Sprintf("%s:%s:%s:%s", r.Family, phase, tokens, r.Buckets)
	}
	return fmt.Sprintf("%s:%s:%s", r.Family, phase, tokens)
}

// Policy governs selection. The zero value is not useful: start from
// DefaultPolicy.
type Policy struct {
	Numerical NumericalPolicy `json:"numerical"`
	Admission AdmissionPolicy `json:"admission"`
	// Force maps a family ("affine") or a family and role ("affine/down") to
	// the candidate that must serve it; the role-specific entry wins.
	Force map[string]string `json:"force,omitempty"`
	// Tune lists the requests worth measuring; others use the fallback.
	Tune []TuneRule `json:"tune"`
	// MinimumImprovementBps is how much faster than the fallback a winner
	// must be to replace it, in basis points.
	MinimumImprovementBps float64 `json:"minimum_improvement_bps"`
	// KeyBudget bounds the tuning of one request; RunBudget bounds all
	// tuning of one host, each phase on its own (so prefill, whose token
	// counts are many, cannot spend decode's share). Past either, requests
	// use the fallback.
	KeyBudget Duration `json:"key_budget_ms"`
	RunBudget Duration `json:"run_budget_ms"`
	// WaitForTuning makes a caller that finds its request being tuned by
	// another wait for the result instead of getting the fallback at once.
	WaitForTuning bool `json:"wait_for_tuning"`
}

// Duration is a time.Duration that reads and writes as milliseconds.
type Duration time.Duration

// MarshalJSON writes milliseconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).Milliseconds())
}

// UnmarshalJSON reads milliseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var ms float64
	if err := json.Unmarshal(b, &ms); err != nil {
		return err
	}
	*d = Duration(time.Duration(ms * float64(time.Millisecond)))
	return nil
}

// DefaultPolicy is throughput and stable; it tunes every affine request in
// power-of-two token buckets (so an engine's prompt lengths cost one
// measurement per bucket and an untimed check per length, not a measurement
// per length), every MXFP4 MoE and FP8
// request, and no dense request (dense plans are heuristic); a winner must
// be 300 bps faster; 10 s per request (room for a plugin's first NVRTC
// compile of a kernel variant) and 60 s per host for each phase.
func DefaultPolicy() Policy {
	return Policy{
		Numerical: NumericalThroughput,
		Admission: AdmissionStable,
		Tune: []TuneRule{
			{Family: sdk.FamilyAffine, Buckets: BucketPow2},
			{Family: sdk.FamilyMXFP4MoE},
			{Family: sdk.FamilyFP8},
		},
		MinimumImprovementBps: 300,
		KeyBudget:             Duration(10 * time.Second),
		RunBudget:             Duration(60 * time.Second),
	}
}

// Environment variables read by ApplyEnv.
const (
	EnvNumerical      = "KCAND_NUMERICAL"           // exact | throughput
	EnvAdmission      = "KCAND_ADMISSION"           // stable | experimental
	EnvForce          = "KCAND_FORCE"               // affine=gemv,affine/down=qmm
	EnvTune           = "KCAND_TUNE"                // affine:*:*:pow2,fp8:*:*  ("none" for no tuning)
	EnvMinImprovement = "KCAND_MIN_IMPROVEMENT_BPS" // 300
	EnvKeyBudget      = "KCAND_KEY_BUDGET_MS"
	EnvRunBudget      = "KCAND_RUN_BUDGET_MS"
	EnvWait           = "KCAND_WAIT_FOR_TUNING" // true | false
)

// LoadPolicyFile overlays the JSON file at path on p: fields the file
// names replace p's.
func (p Policy) LoadPolicyFile(path string) (Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("policy file: %w", err)
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(data, &present); err != nil {
		return p, errdefs.Invalid("policy_file", path, "%v", err)
	}
	out := p
	// json decodes array elements into the existing ones, field by field;
	// a list the file gives must replace ours, not merge with it.
	if _, ok := present["tune"]; ok {
		out.Tune = nil
	}
	if _, ok := present["force"]; ok {
		out.Force = nil
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return p, errdefs.Invalid("policy_file", path, "%v", err)
	}
	return out, out.Validate()
}

// ApplyEnv overlays the KCAND_* variables of environ (os.Environ form) on p.
func (p Policy) ApplyEnv(environ []string) (Policy, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "KCAND_") {
			env[k] = v
		}
	}
	out := p
	if v, ok := env[EnvNumerical]; ok {
		out.Numerical = NumericalPolicy(v)
	}
	if v, ok := env[EnvAdmission]; ok {
		out.Admission = AdmissionPolicy(v)
	}
	if v, ok := env[EnvForce]; ok {
		force, err := parseForce(v)
		if err != nil {
			return p, err
		}
		out.Force = force
	}
	if v, ok := env[EnvTune]; ok {
		rules, err := ParseTuneRules(v)
		if err != nil {
			return p, err
		}
		out.Tune = rules
	}
	for name, dst := range map[string]*Duration{EnvKeyBudget: &out.KeyBudget, EnvRunBudget: &out.RunBudget} {
		if v, ok := env[name]; ok {
			ms, err := strconv.ParseFloat(v, 64)
			if err != nil || ms < 0 {
				return p, errdefs.Invalid(name, v, "want milliseconds")
			}
			*dst = Duration(time.Duration(ms * float64(time.Millisecond)))
		}
	}
	if v, ok := env[EnvMinImprovement]; ok {
		bps, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return p, errdefs.Invalid(EnvMinImprovement, v, "want basis points")
		}
		out.MinimumImprovementBps = bps
	}
	if v, ok := env[EnvWait]; ok {
		wait, err := strconv.ParseBool(v)
		if err != nil {
			return p, errdefs.Invalid(EnvWait, v, "want true or false")
		}
		out.WaitForTuning = wait
	}
	return out, out.Validate()
}

// Validate checks every field.
func (p Policy) Validate() error {
	switch p.Numerical {
	case NumericalExact, NumericalThroughput:
	default:
		return errdefs.Invalid("policy.numerical", p.Numerical, "want %q or %q", NumericalExact, NumericalThroughput)
	}
	switch p.Admission {
	case AdmissionStable, AdmissionExperimental:
	default:
		return errdefs.Invalid("policy.admission", p.Admission, "want %q or %q", AdmissionStable, AdmissionExperimental)
	}
	for scope, cand := range p.Force {
		fam, role, _ := strings.Cut(scope, "/")
		if err := (sdk.Request{Family: sdk.Family(fam), Phase: sdk.PhaseDecode, Role: sdk.Role(role), Tokens: 1, InFeatures: 1, OutFeatures: 1, Activation: sdk.BF16}).Validate(); err != nil {
			return errdefs.Invalid("policy.force", scope, "not a family or family/role: %v", err)
		}
		if cand == "" {
			return errdefs.Invalid("policy.force."+scope, cand, "empty candidate name")
		}
	}
	for _, r := range p.Tune {
		if r.MaxTokens != 0 && r.MaxTokens < r.MinTokens {
			return errdefs.Invalid("policy.tune", r.String(), "max_tokens below min_tokens")
		}
		if !r.Buckets.valid() {
			return errdefs.Invalid("policy.tune.buckets", r.Buckets, "want %q, or nothing for each count on its own", BucketPow2)
		}
	}
	if p.MinimumImprovementBps < 0 {
		return errdefs.Invalid("policy.minimum_improvement_bps", p.MinimumImprovementBps, "must not be negative")
	}
	if p.KeyBudget < 0 || p.RunBudget < 0 {
		return errdefs.Invalid("policy.key_budget_ms", time.Duration(p.KeyBudget), "budgets must not be negative")
	}
	return nil
}

// Forced returns the candidate forced for req, if any.
func (p Policy) Forced(req sdk.Request) (string, bool) {
	if req.Role != sdk.RoleAny {
		if c, ok := p.Force[string(req.Family)+"/"+string(req.Role)]; ok {
			return c, true
		}
	}
	c, ok := p.Force[string(req.Family)]
	return c, ok
}

// WorthTuning reports whether a tune rule covers req.
func (p Policy) WorthTuning(req sdk.Request) bool {
	for _, r := range p.Tune {
		if r.Matches(req) {
			return true
		}
	}
	return false
}

// admits applies the numerical and admission policies to a candidate.
func (p Policy) admits(info sdk.CandidateInfo) (bool, string) {
	if p.Admission == AdmissionStable && info.Stability != sdk.Stable {
		return false, fmt.Sprintf("%s candidate not admitted under the stable admission policy", info.Stability)
	}
	if p.Numerical == NumericalExact && !info.Fallback && info.Numeric != sdk.NumericExact {
		return false, fmt.Sprintf("%s numerics not admitted under the exact numerical policy", info.Numeric)
	}
	return true, ""
}

func parseForce(v string) (map[string]string, error) {
	force := map[string]string{}
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		scope, cand, ok := strings.Cut(item, "=")
		if !ok {
			return nil, errdefs.Invalid(EnvForce, item, "want scope=candidate")
		}
		force[strings.TrimSpace(scope)] = strings.TrimSpace(cand)
	}
	return force, nil
}

// ParseTuneRules reads rules written family:phase:tokens[:buckets], comma
// separated, where phase is decode, prefill or *, tokens is N, N-M, N- or
// *, and buckets is pow2 (omitted: each token count on its own). "none"
// means no rule.
func ParseTuneRules(v string) ([]TuneRule, error) {
	rules := []TuneRule{}
	if strings.TrimSpace(v) == "none" {
		return rules, nil
	}
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		parts := strings.Split(item, ":")
		for len(parts) < 3 {
			parts = append(parts, "*")
		}
		if len(parts) > 4 {
			return nil, errdefs.Invalid(EnvTune, item, "want family:phase:tokens[:buckets]")
		}
		r := TuneRule{Family: sdk.Family(parts[0])}
		if len(parts) == 4 {
			if r.Buckets = BucketScheme(parts[3]); r.Buckets != BucketPow2 {
				return nil, errdefs.Invalid(EnvTune, item, "want buckets %q, or nothing for each count on its own", BucketPow2)
			}
		}
		if parts[1] != "*" {
			r.Phase = sdk.Phase(parts[1])
		}
		if parts[2] != "*" {
			lo, hi, isRange := strings.Cut(parts[2], "-")
			var err1, err2 error
			r.MinTokens, err1 = strconv.Atoi(lo)
			r.MaxTokens = r.MinTokens
			if isRange {
				r.MaxTokens = 0
				if hi != "" {
					r.MaxTokens, err2 = strconv.Atoi(hi)
				}
			}
			if err1 != nil || err2 != nil {
				return nil, errdefs.Invalid(EnvTune, item, "tokens must be N, N-M, N- or *")
			}
		}
		rules = append(rules, r)
	}
	sort.SliceStable(rules, func(i, j int) bool { return rules[i].Family < rules[j].Family })
	return rules, nil
}
