package sdk

import (
	"fmt"
	"regexp"

	"github.com/kcand/kcand/sdk/device"
	"github.com/kcand/kcand/sdk/errdefs"
)

// Bounds on what a plugin may describe.
const (
	MaxCandidates = 256
	maxNameLen    = 64
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._/+-]*$`)

// ValidateDescription checks what a plugin says about itself: a usable name
// and version, and candidates with unique names, known families, numeric
// classes, stabilities and devices, and at most one fallback per family.
// The host refuses a plugin whose description fails.
func ValidateDescription(d Description) error {
	if !validName(d.Name) {
		return errdefs.Invalid("description.name", d.Name, "want 1 to %d of [a-z0-9._/+-]", maxNameLen)
	}
	if d.Version == "" || len(d.Version) > 128 {
		return errdefs.Invalid("description.version", d.Version, "want 1 to 128 bytes")
	}
	if len(d.Candidates) > MaxCandidates {
		return errdefs.Invalid("description.candidates", len(d.Candidates), "at most %d", MaxCandidates)
	}
	names := map[string]bool{}
	fallbacks := map[Family]string{}
	for i, c := range d.Candidates {
		field := fmt.Sprintf("description.candidates[%d]", i)
		switch {
		case !validName(c.Name):
			return errdefs.Invalid(field+".name", c.Name, "want 1 to %d of [a-z0-9._/+-]", maxNameLen)
		case names[c.Name]:
			return errdefs.Invalid(field+".name", c.Name, "listed twice")
		case !knownFamily(c.Family):
			return errdefs.Invalid(field+".family", c.Family, "unknown family")
		case c.Numeric != NumericExact && c.Numeric != NumericBounded:
			return errdefs.Invalid(field+".numeric_class", c.Numeric, "want %q or %q", NumericExact, NumericBounded)
		case c.Stability != Stable && c.Stability != Experimental:
			return errdefs.Invalid(field+".stability", c.Stability, "want %q or %q", Stable, Experimental)
		case len(c.Devices) == 0:
			return errdefs.Invalid(field+".devices", "none", "a candidate must run on some device")
		}
		for _, k := range c.Devices {
			if k != device.CPU && k != device.CUDA {
				return errdefs.Invalid(field+".devices", k, "unknown device kind")
			}
		}
		if c.Fallback {
			if other, dup := fallbacks[c.Family]; dup {
				return errdefs.Invalid(field+".fallback", c.Name, "family %s has fallback %s already", c.Family, other)
			}
			fallbacks[c.Family] = c.Name
		}
		names[c.Name] = true
	}
	return nil
}

func validName(s string) bool { return len(s) <= maxNameLen && nameRE.MatchString(s) }

func knownFamily(f Family) bool {
	for _, k := range Families {
		if k == f {
			return true
		}
	}
	return false
}
