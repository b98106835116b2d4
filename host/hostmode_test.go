package host

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kcand/kcand/sdk"
	"github.com/kcand/kcand/sdk/family"
)

// hostModeEnv makes the test binary run as a host process: it opens a host
// on the plugin directory the variable names, prints its plugins' pids as
// one JSON line, and closes when stdin closes.
const hostModeEnv = "KCAND_TEST_HOST_MODE"

func runHostMode() {
	h, err := Open(context.Background(), Options{PluginDir: os.Getenv(hostModeEnv), Device: "cpu"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var pids []int
	for _, p := range h.Manager().Plugins() {
		pids = append(pids, p.Health().PID)
	}
	json.NewEncoder(os.Stdout).Encode(pids)
	io.Copy(io.Discard, os.Stdin)
	h.Close()
	os.Exit(0)
}

// startHostProcess runs the test binary as a host and returns it with its
// plugins' pids.
func startHostProcess(t *testing.T) (*exec.Cmd, io.WriteCloser, []int) {
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), hostModeEnv+"="+pluginDir(t, "qmm", "gemv"))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	var pids []int
	require.NoError(t, json.Unmarshal([]byte(line), &pids))
	require.Len(t, pids, 2)
	return cmd, stdin, pids
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

func TestNoPluginSurvivesHostClose(t *testing.T) {
	cmd, stdin, pids := startHostProcess(t)
	for _, pid := range pids {
		require.True(t, alive(pid), "plugin %d runs while the host runs", pid)
	}
	stdin.Close()
	require.NoError(t, cmd.Wait())
	for _, pid := range pids {
		waitFor(t, 5*time.Second, fmt.Sprintf("plugin %d to exit", pid), func() bool { return !alive(pid) })
	}
}

func TestNoPluginSurvivesHostSIGKILL(t *testing.T) {
	cmd, _, pids := startHostProcess(t)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	for _, pid := range pids {
		waitFor(t, 5*time.Second, fmt.Sprintf("orphaned plugin %d to exit", pid), func() bool { return !alive(pid) })
	}
}

func familyContract(t *testing.T, req sdk.Request) family.Contract {
	c, err := family.Lookup(req.Family)
	require.NoError(t, err)
	return c
}
