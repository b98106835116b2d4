package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Version is the host's version, recorded in the cache validators. Builds
// set it with -ldflags "-X github.com/kcand/kcand/host.Version=...".
var Version = "0.1.0"

// cacheFormat is the layout version of the cache file.
const cacheFormat = 1

// CacheFileEnv overrides the default cache path.
const CacheFileEnv = "KCAND_CACHE"

// DefaultCachePath is $KCAND_CACHE, else plans.json under the user's cache
// directory (~/.cache/kcand on Linux).
func DefaultCachePath() string {
	if p := os.Getenv(CacheFileEnv); p != "" {
		return p
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "kcand", "plans.json")
}

// Validators say what a cached plan was measured with; a plan measured
// elsewhere is not trusted here.
type Validators struct {
	HostVersion       string `json:"host_version"`
	Device            string `json:"device"`
	GPU               string `json:"gpu"`
	ComputeCapability string `json:"compute_capability"`
	Driver            string `json:"driver"`
}

// PluginStamp identifies one plugin build.
type PluginStamp struct {
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
}

// CacheEntry is one persisted decision.
type CacheEntry struct {
	Candidate      string    `json:"candidate"`
	Plugin         string    `json:"plugin"`
	AverageMicros  float64   `json:"average_us"`
	SpreadMicros   float64   `json:"spread_us"`
	Iterations     int       `json:"iterations"`
	FallbackMicros float64   `json:"fallback_us,omitempty"`
	TuningMillis   float64   `json:"tuning_ms"`
	Reason         string    `json:"reason,omitempty"`
	When           time.Time `json:"when"`
	// Plugins are the builds of every plugin whose candidates took part; an
	// entry is dropped when any of them changes.
	Plugins map[string]PluginStamp `json:"plugins"`
}

type cacheFile struct {
	Format     int                   `json:"format"`
	Validators Validators            `json:"validators"`
	Entries    map[string]CacheEntry `json:"entries"`
}

// Cache holds measured plans, persisted as a JSON file that a person can
// read and edit. A file that cannot be parsed is set aside; entries whose
// validators do not match this host are dropped with one warning; a failed
// write leaves the previous file intact.
type Cache struct {
	path       string
	logger     hclog.Logger
	validators Validators
	plugins    map[string]PluginStamp

	mu      sync.Mutex
	entries map[string]CacheEntry
}

// OpenCache loads the cache at path (an empty path keeps it in memory only)
// for a host with the given validators and plugin builds.
func OpenCache(path string, v Validators, plugins map[string]PluginStamp, logger hclog.Logger) *Cache {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	c := &Cache{path: path, logger: logger, validators: v, plugins: plugins, entries: map[string]CacheEntry{}}
	if path == "" {
		return c
	}
	file, err := readCacheFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return c
	case err != nil:
		c.setAside(err)
		return c
	}
	c.entries = c.usable(file)
	return c
}

// readCacheFile parses a cache file; a malformed one is an error.
func readCacheFile(path string) (*cacheFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f cacheFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if f.Format != cacheFormat {
		return nil, fmt.Errorf("%s has format %d, want %d", path, f.Format, cacheFormat)
	}
	return &f, nil
}

// setAside renames an unreadable cache file so it is kept for inspection
// and not read again.
func (c *Cache) setAside(cause error) {
	aside := fmt.Sprintf("%s.corrupt-%d", c.path, time.Now().Unix())
	if err := os.Rename(c.path, aside); err != nil {
		c.logger.Warn("plan cache unreadable and could not be set aside; starting empty", "path", c.path, "error", cause, "rename_error", err)
		return
	}
	c.logger.Warn("plan cache unreadable; set aside, starting empty", "path", c.path, "moved_to", aside, "error", cause)
}

// usable returns the entries of f that this host may trust, warning once
// about those it drops.
func (c *Cache) usable(f *cacheFile) map[string]CacheEntry {
	out := map[string]CacheEntry{}
	if f.Validators != c.validators {
		if len(f.Entries) > 0 {
			c.logger.Warn("plan cache was written for other hardware or host; dropping every entry",
				"path", c.path, "entries", len(f.Entries), "cached", fmt.Sprintf("%+v", f.Validators), "here", fmt.Sprintf("%+v", c.validators))
		}
		return out
	}
	reasons := map[string]int{}
	for key, e := range f.Entries {
		if why := c.staleBecause(e); why != "" {
			reasons[why]++
			continue
		}
		out[key] = e
	}
	if dropped := len(f.Entries) - len(out); dropped > 0 {
		var list []string
		for why, n := range reasons {
			list = append(list, fmt.Sprintf("%s (%d)", why, n))
		}
		sort.Strings(list)
		c.logger.Warn("dropping plan cache entries measured with other plugin builds", "path", c.path, "dropped", dropped, "kept", len(out), "why", strings.Join(list, "; "))
	}
	return out
}

// staleBecause says why an entry no longer holds, or "" when it does.
func (c *Cache) staleBecause(e CacheEntry) string {
	if len(e.Plugins) == 0 {
		return "entry names no plugin builds"
	}
	for name, stamp := range e.Plugins {
		now, ok := c.plugins[name]
		switch {
		case !ok:
			return fmt.Sprintf("plugin %s is gone", name)
		case now.SHA256 != stamp.SHA256:
			return fmt.Sprintf("plugin %s sha256 changed", name)
		case now.Version != stamp.Version:
			return fmt.Sprintf("plugin %s version changed", name)
		}
	}
	return ""
}

// Lookup returns the entry for a request key.
func (c *Cache) Lookup(key string) (CacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	return e, ok
}

// Entries returns a copy of every entry.
func (c *Cache) Entries() map[string]CacheEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]CacheEntry, len(c.entries))
	for k, v := range c.entries {
		out[k] = v
	}
	return out
}

// Path is the cache file, or "" for a memory-only cache.
func (c *Cache) Path() string { return c.path }

// Record stores an entry and writes the file. A failed write is returned
// (and the entry kept in memory); the previous file stays intact.
func (c *Cache) Record(key string, e CacheEntry) error {
	c.mu.Lock()
	c.entries[key] = e
	c.mu.Unlock()
	return c.Save()
}

// Forget removes an entry (a cached candidate that no longer works) and
// writes the file.
func (c *Cache) Forget(key string) error {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
	return c.Save()
}

// Clear removes every entry and writes the file.
func (c *Cache) Clear() error {
	c.mu.Lock()
	c.entries = map[string]CacheEntry{}
	c.mu.Unlock()
	return c.Save()
}

// Save writes the cache atomically: a temporary file in the same directory,
// synced, then renamed over the old one.
func (c *Cache) Save() error {
	if c.path == "" {
		return nil
	}
	c.mu.Lock()
	data, err := json.MarshalIndent(cacheFile{Format: cacheFormat, Validators: c.validators, Entries: c.entries}, "", "  ")
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := writeAtomic(c.path, append(data, '\n')); err != nil {
		return fmt.Errorf("write plan cache: %w", err)
	}
	return nil
}

// createTemp makes the temporary file a cache write goes through; tests
// replace it to make writes fail as a full disk would.
var createTemp = os.CreateTemp

func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := createTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
