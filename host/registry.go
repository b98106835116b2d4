package host

import (
	"context"
	"fmt"
	"sort"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/errdefs"
)

// Entry is one candidate offered by one plugin.
type Entry struct {
	Info   sdk.CandidateInfo
	Plugin *Plugin
	Client sdk.Plugin
}

// Registry indexes the candidates of every running plugin by family.
type Registry struct {
	byFamily map[sdk.Family][]Entry
	byName   map[string]Entry
}

// NewRegistry indexes the candidates of plugins. A candidate name offered
// by two plugins, or a second fallback for a family, is dropped with an
// error describing the conflict; the rest are indexed.
func NewRegistry(plugins []*Plugin) (*Registry, []error) {
	r := &Registry{byFamily: map[sdk.Family][]Entry{}, byName: map[string]Entry{}}
	var problems []error
	for _, p := range plugins {
		client := p.Client()
		for _, info := range p.Description().Candidates {
			if other, dup := r.byName[info.Name]; dup {
				problems = append(problems, fmt.Errorf("candidate %q of plugin %s dropped: plugin %s offers it already", info.Name, p.Name(), other.Plugin.Name()))
				continue
			}
			if info.Fallback {
				if fb, ok := r.fallback(info.Family); ok {
					problems = append(problems, fmt.Errorf("candidate %q of plugin %s dropped: family %s has fallback %q already", info.Name, p.Name(), info.Family, fb.Info.Name))
					continue
				}
			}
			e := Entry{Info: info, Plugin: p, Client: client}
			r.byName[info.Name] = e
			r.byFamily[info.Family] = append(r.byFamily[info.Family], e)
		}
	}
	for f := range r.byFamily {
		list := r.byFamily[f]
		// The fallback first, then by name: measurement order and listings are stable.
		sort.SliceStable(list, func(i, j int) bool {
			if list[i].Info.Fallback != list[j].Info.Fallback {
				return list[i].Info.Fallback
			}
			return list[i].Info.Name < list[j].Info.Name
		})
	}
	return r, problems
}

// Family lists the candidates of a family, fallback first.
func (r *Registry) Family(f sdk.Family) []Entry { return r.byFamily[f] }

// Lookup finds a candidate by name.
func (r *Registry) Lookup(name string) (Entry, bool) {
	e, ok := r.byName[name]
	return e, ok
}

// Fallback returns the fallback of family f.
func (r *Registry) Fallback(f sdk.Family) (Entry, error) {
	if e, ok := r.fallback(f); ok {
		return e, nil
	}
	return Entry{}, errdefs.Unsupported("no plugin offers a fallback for family %s", f)
}

func (r *Registry) fallback(f sdk.Family) (Entry, bool) {
	for _, e := range r.byFamily[f] {
		if e.Info.Fallback {
			return e, true
		}
	}
	return Entry{}, false
}

// Admissions asks each plugin serving req's family once and returns every
// candidate's answer by name. A plugin that fails to answer refuses all its
// candidates with the error as reason.
func (r *Registry) Admissions(ctx context.Context, req sdk.Request, hw sdk.Hardware) map[string]sdk.Admission {
	out := map[string]sdk.Admission{}
	asked := map[*Plugin]bool{}
	for _, e := range r.byFamily[req.Family] {
		if asked[e.Plugin] {
			continue
		}
		asked[e.Plugin] = true
		answers, err := e.Client.Admit(ctx, req, hw)
		if err != nil {
			for _, other := range r.byFamily[req.Family] {
				if other.Plugin == e.Plugin {
					out[other.Info.Name] = sdk.Admission{Candidate: other.Info.Name, Reason: "admission failed: " + err.Error()}
				}
			}
			continue
		}
		for _, a := range answers {
			if known, ok := r.byName[a.Candidate]; ok && known.Plugin == e.Plugin {
				out[a.Candidate] = a
			}
		}
	}
	for _, e := range r.byFamily[req.Family] {
		if _, ok := out[e.Info.Name]; !ok {
			out[e.Info.Name] = sdk.Admission{Candidate: e.Info.Name, Reason: "plugin gave no answer for it"}
		}
	}
	return out
}
