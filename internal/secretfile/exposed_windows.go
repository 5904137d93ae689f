package secretfile

import (
	"io/fs"

	"github.com/opsgate/opsgate/internal/winacl"
)

// Restrict is what to do to a file ReadableByOthers names.
const Restrict = "give it an access list of SYSTEM, Administrators and the account that uses it only: icacls.exe FILE /inheritance:r /grant:r *S-1-5-18:F *S-1-5-32-544:F ACCOUNT:R"

// ReadableByOthers says who beyond SYSTEM, Administrators,
// TrustedInstaller and the account this process runs as may read the file
// at path, which holds a secret, by its access list, or change that list
// and then read it: "BUILTIN\Users (read)", or "" when no one else may,
// or the list cannot be read.
func ReadableByOthers(path string) string {
	d, err := winacl.Read(path)
	if err != nil {
		return ""
	}
	return winacl.Describe(winacl.Others(d, winacl.Secret, winacl.Trusted(winacl.Self())), winacl.Name)
}

// Others says who beyond fi's owner may read or write it: on windows the
// access lists decide, which a FileInfo does not hold, so "".
func Others(fi fs.FileInfo, write bool) string { return "" }
