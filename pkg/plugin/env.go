package plugin

// PassedEnv returns the names of the variables the host passes from its own
// environment to every plugin process, when they are set: PATH, HOME, LANG,
// TZ, TMPDIR and LogLevelEnv. Nothing else of the host's environment
// reaches a plugin, so Lethe's credentials (its catalog URL, cloud keys)
// never do. What a plugin needs beyond that, the operator configures for
// it: `lethe --plugin-env BINARY:KEY=VALUE`.
func PassedEnv() []string {
	return []string{"PATH", "HOME", "LANG", "TZ", "TMPDIR", LogLevelEnv}
}
