package runner

// KeepInheritedFromScripts does nothing on windows: a process started by
// Go inherits only the handles it is given.
func KeepInheritedFromScripts() {}
