package secretfile

import "github.com/opsgate/opsgate/internal/winacl"

// Restrict is what to do to a file ReadableByOthers names, RestrictDir
// to a folder WritableByOthers names.
const (
	Restrict    = "give it an access list of SYSTEM, Administrators and the account that uses it only: icacls.exe FILE /inheritance:r /grant:r *S-1-5-18:F *S-1-5-32-544:F ACCOUNT:R"
	RestrictDir = "give it an access list of SYSTEM, Administrators and the account that uses it only: icacls.exe FOLDER /inheritance:r /grant:r *S-1-5-18:(OI)(CI)F *S-1-5-32-544:(OI)(CI)F ACCOUNT:(OI)(CI)F"
	// RestrictInDir is Restrict: a folder does not keep out a reader the
	// file's own list lets in, as every account may pass through folders
	// (the bypass traverse checking right).
	RestrictInDir = Restrict
)

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

// WritableByOthers says who beyond SYSTEM, Administrators,
// TrustedInstaller and the account this process runs as may add, remove
// or replace what the folder at path holds, or change its access list or
// owner, by its access list: "BUILTIN\Users (add files)", or "" when no
// one else may, or the list cannot be read.
func WritableByOthers(path string) string {
	d, err := winacl.Read(path)
	if err != nil {
		return ""
	}
	return winacl.Describe(winacl.Others(d, winacl.Folder, winacl.Trusted(winacl.Self())), winacl.Name)
}
