package host

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kcand/kcand/sdk/errdefs"
)

// SumsFile is the optional file in a plugin directory that pins each
// binary's sha256, in the format of sha256sum(1): "<hex>  <name>".
const SumsFile = "SHA256SUMS"

// PluginDirEnv names the environment variable that overrides the plugin directory.
const PluginDirEnv = "KCAND_PLUGIN_DIR"

// binary is one discovered plugin executable.
type binary struct {
	name   string
	path   string
	digest string
}

// discover lists the plugin executables in dir, refusing a directory or a
// binary that other users could replace, and computes each one's digest.
func discover(dir string) ([]binary, error) {
	if dir == "" {
		return nil, errdefs.Invalid("plugin_dir", dir, "empty (set --plugin-dir or %s)", PluginDirEnv)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, errdefs.Invalid("plugin_dir", dir, "%v", err)
	}
	if !st.IsDir() {
		return nil, errdefs.Invalid("plugin_dir", dir, "not a directory")
	}
	if err := checkNotWorldWritable(dir, st); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read plugin dir %s: %w", dir, err)
	}
	var out []binary
	for _, e := range entries {
		if e.IsDir() || e.Name() == SumsFile || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		st, err := os.Stat(path)
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			continue
		}
		if err := checkNotWorldWritable(path, st); err != nil {
			return nil, err
		}
		digest, err := fileDigest(path)
		if err != nil {
			return nil, err
		}
		out = append(out, binary{name: e.Name(), path: path, digest: digest})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func checkNotWorldWritable(path string, st os.FileInfo) error {
	if st.Mode().Perm()&0o002 != 0 {
		return &PermissionError{Path: path, Mode: st.Mode().Perm().String()}
	}
	return nil
}

// fileDigest returns the hex sha256 of a file.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readSums parses a SHA256SUMS file into name → digest. A missing file is
// no pins; a malformed line is an error naming it.
func readSums(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pins := map[string]string{}
	scanner := bufio.NewScanner(f)
	for line := 1; scanner.Scan(); line++ {
		text := strings.TrimSpace(scanner.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 || len(fields[0]) != 64 {
			return nil, errdefs.Invalid(fmt.Sprintf("%s:%d", path, line), text, "want \"<sha256 hex>  <name>\"")
		}
		if _, err := hex.DecodeString(fields[0]); err != nil {
			return nil, errdefs.Invalid(fmt.Sprintf("%s:%d", path, line), fields[0], "not hex")
		}
		pins[strings.TrimPrefix(fields[1], "*")] = strings.ToLower(fields[0])
	}
	return pins, scanner.Err()
}
