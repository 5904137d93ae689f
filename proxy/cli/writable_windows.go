package cli

// writableByOthers lists what lets users other than the scripts' owners
// choose the programs that the scripts directory dir runs. On windows the
// access lists decide, which it does not read yet: it lists nothing
// (docs/install-proxy.md says to keep scripts_dir writable by
// Administrators only).
func writableByOthers(dir string) []string { return nil }
