package host

import (
	"fmt"

	"github.com/kcand/kcand/sdk/errdefs"
)

// ChecksumError says a plugin binary's sha256 differs from its pin.
type ChecksumError struct {
	Plugin string
	Path   string
	Want   string
	Got    string
}

// Error implements error.
func (e *ChecksumError) Error() string {
	return fmt.Sprintf("plugin %s refused: sha256 of %s is %s, pinned %s", e.Plugin, e.Path, e.Got, e.Want)
}

// ProtocolVersionError says a plugin speaks a protocol version the host does not.
type ProtocolVersionError struct {
	Plugin        string
	PluginVersion string
	HostVersions  []int
	Detail        string
}

// Error implements error.
func (e *ProtocolVersionError) Error() string {
	return fmt.Sprintf("plugin %s refused: it speaks protocol version %s, this host speaks %v (%s)", e.Plugin, e.PluginVersion, e.HostVersions, e.Detail)
}

// PermissionError says a plugin directory or binary could be replaced by
// another user, so the host will not run it.
type PermissionError struct {
	Path string
	Mode string
}

// Error implements error.
func (e *PermissionError) Error() string {
	return fmt.Sprintf("refusing %s: mode %s is writable by other users", e.Path, e.Mode)
}

// Is makes a PermissionError an invalid request: the caller's set-up is wrong.
func (e *PermissionError) Is(target error) bool { return target == errdefs.ErrInvalidRequest }
