package cuda

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"os"
	"path/filepath"
)

// kernelCacheVersion changes whenever the key or the file layout does, so
// old entries simply stop matching.
const kernelCacheVersion = "kcand-kernel-cache/1"

// kernelCache keeps compiled kernels in a directory, one file per key.
// Entries are written to a temporary file and renamed into place, so a
// reader sees a whole entry or none, and concurrent writers of the same key
// (two plugins starting at once) both succeed.
type kernelCache struct {
	dir string
}

// cachedKernel is the on-disk form of a Kernel; encoding/json writes the
// image as base64.
type cachedKernel struct {
	Version      string            `json:"version"`
	Key          string            `json:"key"`
	Format       ImageFormat       `json:"format"`
	Arch         string            `json:"arch"`
	NVRTCVersion string            `json:"nvrtc_version"`
	LoweredNames map[string]string `json:"lowered_names,omitempty"`
	Log          string            `json:"log,omitempty"`
	Image        []byte            `json:"image"`
}

// defaultKernelCacheDir is $XDG_CACHE_HOME/kcand/kernels, else
// ~/.cache/kcand/kernels.
func defaultKernelCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kernel cache directory: %w", err)
	}
	return filepath.Join(base, "kcand", "kernels"), nil
}

// kernelCacheKey hashes everything that can change the compiled image.
// Each field is length-prefixed so that no two inputs hash alike by
// shifting bytes between fields.
func kernelCacheKey(src *Source, options []string, arch, nvrtcVersion string) string {
	h := sha256.New()
	field := func(s string) {
		writeLength(h, len(s))
		h.Write([]byte(s))
	}
	list := func(values []string) {
		writeLength(h, len(values))
		for _, v := range values {
			field(v)
		}
	}
	field(kernelCacheVersion)
	field(nvrtcVersion)
	field(arch)
	field(src.programName())
	field(src.Code)
	names, bodies := src.sortedHeaders()
	list(names)
	list(bodies)
	list(options)
	list(src.NameExpressions)
	return hex.EncodeToString(h.Sum(nil))
}

func writeLength(h hash.Hash, n int) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}

func (c *kernelCache) path(key string) string { return filepath.Join(c.dir, key+".json") }

// load returns the cached kernel for key. A missing, unreadable or corrupt
// entry is a miss: the caller compiles and overwrites it.
func (c *kernelCache) load(key string) (*Kernel, bool) {
	data, err := os.ReadFile(c.path(key))
	if err != nil {
		return nil, false
	}
	var entry cachedKernel
	if err := json.Unmarshal(data, &entry); err != nil {
		return nil, false
	}
	if entry.Version != kernelCacheVersion || entry.Key != key || len(entry.Image) == 0 ||
		(entry.Format != FormatCUBIN && entry.Format != FormatPTX) {
		return nil, false
	}
	return &Kernel{
		Image:        entry.Image,
		Format:       entry.Format,
		Arch:         entry.Arch,
		LoweredNames: entry.LoweredNames,
		Log:          entry.Log,
		NVRTCVersion: entry.NVRTCVersion,
		Key:          key,
	}, true
}

// store writes k atomically under its key.
func (c *kernelCache) store(k *Kernel) error {
	data, err := json.Marshal(cachedKernel{
		Version:      kernelCacheVersion,
		Key:          k.Key,
		Format:       k.Format,
		Arch:         k.Arch,
		NVRTCVersion: k.NVRTCVersion,
		LoweredNames: k.LoweredNames,
		Log:          k.Log,
		Image:        k.Image,
	})
	if err != nil {
		return fmt.Errorf("kernel cache: encode %s: %w", k.Key, err)
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	tmp, err := os.CreateTemp(c.dir, k.Key+".*.tmp")
	if err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), c.path(k.Key))
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("kernel cache: write %s: %w", k.Key, werr)
	}
	return nil
}
