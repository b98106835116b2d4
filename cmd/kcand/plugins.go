package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

func runPlugins(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plugins", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c commonFlags
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	h, err := c.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer h.Close()
	fmt.Fprintf(stdout, "plugin directory %s, device %s (%s)\n\n", c.pluginDir, h.Device().Kind(), h.Hardware().Name)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLUGIN\tVERSION\tSHA256\tHEALTH\tCANDIDATES")
	for _, p := range h.Manager().Plugins() {
		d := p.Description()
		var cands []string
		for _, ci := range d.Candidates {
			s := fmt.Sprintf("%s (%s, %s", ci.Name, ci.Family, ci.Numeric)
			if ci.Fallback {
				s += ", fallback"
			}
			cands = append(cands, s+")")
		}
		if len(cands) == 0 {
			cands = []string{"none yet"}
		}
		health := p.Health()
		state := fmt.Sprintf("running pid %d, started in %.0f ms", health.PID, float64(health.StartTook.Microseconds())/1e3)
		if !health.Running {
			state = "down: " + health.LastError
		}
		if health.Restarts > 0 {
			state += fmt.Sprintf(", %d restarts", health.Restarts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Name, d.Version, p.Digest()[:16]+"…", state, strings.Join(cands, "; "))
	}
	tw.Flush()
	for _, r := range h.Manager().Refused() {
		fmt.Fprintf(stdout, "refused %s: %v\n", r.Name, r.Err)
	}
	return nil
}
