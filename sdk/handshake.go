// Package sdk is the contract between the kcand host and kernel plugins: the
// request and candidate types, the Plugin protocol, the handshake and plugin
// map, and Serve, which a plugin's main calls. Family contracts live in
// sdk/family, the device abstraction in sdk/device.
package sdk

import (
	"github.com/hashicorp/go-plugin"
)

// ProtocolVersion is the plugin protocol this SDK speaks. The host refuses a
// plugin that speaks another. Version 2 added tensor-map parameters to
// launch plans (Param.tensor_map), which a version-1 host would have taken
// for pointers.
const ProtocolVersion = 2

// PluginName is the name under which a plugin binary serves its kernels.
const PluginName = "kernels"

// Handshake is shared by host and plugins. The magic cookie stops a user
// from running a plugin binary by hand by mistake; it is not a secret.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "KCAND_PLUGIN",
	MagicCookieValue: "7d1f0c4e-kcand-kernels",
}

// PluginSets maps each protocol version to the plugins served at that
// version. Plugins and host both build their go-plugin configuration from it.
func PluginSets(impl Plugin) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {PluginName: &GRPCPlugin{Impl: impl}},
	}
}
