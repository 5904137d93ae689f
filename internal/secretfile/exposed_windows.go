package secretfile

// ReadableByOthers says who beyond its owner may read the file at path,
// which holds a secret. On windows the access lists decide, which it does
// not read: it says "".
func ReadableByOthers(path string) string { return "" }
