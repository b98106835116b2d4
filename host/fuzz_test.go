package host

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzCacheParsing writes arbitrary bytes as a plan cache file and opens
// it: the host must never panic, must trust only entries whose validators
// match, and must be able to write the cache again afterwards.
func FuzzCacheParsing(f *testing.F) {
	v := Validators{HostVersion: Version, Device: "cpu", GPU: "cpu/amd64"}
	stamps := map[string]PluginStamp{"qmm": {Version: "1", SHA256: "aa"}}
	good, _ := json.Marshal(cacheFile{Format: cacheFormat, Validators: v, Entries: map[string]CacheEntry{
		"affine/decode/t1/256x64/affine-q4g64/bf16": {Candidate: "qmm", AverageMicros: 3, When: time.Unix(0, 0).UTC(), Plugins: stamps},
	}})
	f.Add(good)
	f.Add([]byte(`{"format":1,"validators":{},"entries":{"k":{"plugins":{}}}}`))
	f.Add([]byte(`{"format":2}`))
	f.Add([]byte(`{not json`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "plans.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c := OpenCache(path, v, stamps, nil)
		for key, e := range c.Entries() {
			if c.staleBecause(e) != "" {
				t.Fatalf("kept a stale entry %q: %s", key, c.staleBecause(e))
			}
		}
		if err := c.Record("k", CacheEntry{Candidate: "qmm", Plugins: stamps}); err != nil {
			t.Fatalf("cannot write the cache after reading %q: %v", data, err)
		}
		if _, err := readCacheFile(path); err != nil {
			t.Fatalf("the rewritten cache does not parse: %v", err)
		}
	})
}
