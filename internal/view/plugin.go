package view

import "github.com/lethehq/lethe/internal/pluginhost"

// PluginKind is the kind of a plugin's object.
const PluginKind = "Plugin"

// Plugin is a loaded plugin as lethe plugin list -o json shows it.
type Plugin struct {
	Kind            string `json:"kind"` // always "Plugin"
	Name            string `json:"name"`
	Binary          string `json:"binary"`
	ProtocolVersion int    `json:"protocolVersion"`
	Protocol        string `json:"protocol"` // lethe, or velero for an unmodified Velero plugin
	Version         string `json:"version"`
	Selector        string `json:"selector"`
	MaxConcurrency  int    `json:"maxConcurrency"`
	Checksum        string `json:"checksum"`
	ChecksumStatus  string `json:"checksumStatus"`
	// Unresolved are the selector's resource names that are no built-in
	// Kubernetes resource (see pluginhost.ResolveSelector).
	Unresolved []string `json:"unresolvedResources,omitempty"`
}

// NewPlugin is in's view.
func NewPlugin(in pluginhost.Info) Plugin {
	return Plugin{
		Kind: PluginKind,
		Name: in.Name, Binary: in.Binary, ProtocolVersion: in.ProtocolVersion, Protocol: in.Protocol, Version: in.Version,
		Selector: in.Selector.String(), MaxConcurrency: in.MaxConcurrency,
		Checksum: in.Checksum, ChecksumStatus: in.ChecksumStatus, Unresolved: in.Unresolved,
	}
}
