// Package testbuild builds the repository's plugin binaries for tests that
// need real plugin processes.
package testbuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Plugins lists the repository's plugins.
var Plugins = []string{"qmm", "gemv", "mxfp4", "fp8tc"}

// PrebuiltEnv names a directory of plugin binaries built earlier, for test
// binaries run where there is no Go toolchain (the GPU machine).
const PrebuiltEnv = "KCAND_TEST_PLUGIN_DIR"

// BuildPlugins builds the named plugins (all when none are named) into a
// new temporary directory and returns it; the caller removes it. With
// $KCAND_TEST_PLUGIN_DIR set, it copies them from there instead.
func BuildPlugins(names ...string) (string, error) {
	if len(names) == 0 {
		names = Plugins
	}
	dir, err := os.MkdirTemp("", "kcand-plugins-")
	if err != nil {
		return "", err
	}
	if pre := os.Getenv(PrebuiltEnv); pre != "" {
		for _, n := range names {
			data, err := os.ReadFile(filepath.Join(pre, n))
			if err != nil {
				os.RemoveAll(dir)
				return "", fmt.Errorf("prebuilt plugins: %w", err)
			}
			if err := os.WriteFile(filepath.Join(dir, n), data, 0o755); err != nil {
				os.RemoveAll(dir)
				return "", err
			}
		}
		return dir, nil
	}
	args := []string{"build", "-o", dir + "/"}
	for _, n := range names {
		args = append(args, "github.com/kcand/kcand/plugins/"+n)
	}
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("building plugins %v: %w", names, err)
	}
	return dir, nil
}

// Build builds one package into the file out and returns out.
func Build(pkg, out string) (string, error) {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", pkg, err)
	}
	return out, nil
}
