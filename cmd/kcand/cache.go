package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"

	"github.com/kcand/kcand/host"
)

func runCache(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "show" && args[0] != "clear") {
		return errors.New("usage: kcand cache show|clear [--cache FILE]")
	}
	fs := flag.NewFlagSet("cache "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("cache", host.DefaultCachePath(), "plan cache file (env "+host.CacheFileEnv+")")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if args[0] == "clear" {
		if err := os.Remove(*path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		fmt.Fprintf(stdout, "cleared %s\n", *path)
		return nil
	}
	return showCache(*path, stdout)
}

// showCache prints the file as it is, without validating it against any
// host: what a person would check before editing it by hand.
func showCache(path string, w io.Writer) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(w, "%s: no cache yet\n", path)
		return nil
	}
	if err != nil {
		return err
	}
	var file struct {
		Validators host.Validators            `json:"validators"`
		Entries    map[string]host.CacheEntry `json:"entries"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return fmt.Errorf("%s is not a plan cache: %w", path, err)
	}
	v := file.Validators
	fmt.Fprintf(w, "%s: %d entries, host %s, device %s (%s, cc %s, driver %s)\n\n", path, len(file.Entries), v.HostVersion, v.Device, v.GPU, v.ComputeCapability, v.Driver)
	keys := make([]string, 0, len(file.Entries))
	for k := range file.Entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REQUEST\tCANDIDATE\tAVERAGE µs\tSPREAD µs\tFALLBACK µs\tTUNING ms\tWHEN")
	for _, k := range keys {
		e := file.Entries[k]
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.0f\t%s\n", k, e.Candidate, e.AverageMicros, e.SpreadMicros, e.FallbackMicros, e.TuningMillis, e.When.Format("2006-01-02 15:04"))
	}
	return tw.Flush()
}
