package faults

import (
	"fmt"
	"strings"
)

// Markdown renders results (several runs per scenario) as the table of
// docs/reliability.md: per scenario, how often it ran, how often every
// promise held, the outputs checked, leftover processes, and the outcome
// of its last run.
func Markdown(scenarios []Scenario, results []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| fault | runs | passed | host survived | outputs correct | plugins left | outcome (last run) |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, sc := range scenarios {
		var runs, passed, survived, outputs, correct, left int
		outcome := ""
		for _, r := range results {
			if r.Scenario != sc.Name {
				continue
			}
			runs++
			if r.Passed() {
				passed++
			}
			if r.Err == nil {
				survived++
			}
			outputs += r.Results
			correct += r.Correct
			left += r.Leftover
			outcome = r.Outcome
			if r.Err != nil {
				outcome = "ERROR: " + firstLine(r.Err.Error())
			}
		}
		fmt.Fprintf(&b, "| %s: %s | %d | %d | %d/%d | %d/%d | %d | %s |\n",
			sc.Name, sc.Fault, runs, passed, survived, runs, correct, outputs, left, strings.ReplaceAll(outcome, "|", "\\|"))
	}
	return b.String()
}
