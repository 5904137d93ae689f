package secretfile

import "io/fs"

// ReadableByOthers says who beyond its owner may read the file at path,
// which holds a secret. On windows the access lists decide, which it does
// not read: it says "".
func ReadableByOthers(path string) string { return "" }

// Others says who beyond fi's owner may read or write it: on windows the
// access lists decide, which it does not read, so "".
func Others(fi fs.FileInfo, write bool) string { return "" }
