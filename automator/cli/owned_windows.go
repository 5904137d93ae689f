package cli

import "os"

// ownedHere: Windows files have no owner uid to compare; the file's
// content (backupPart) decides alone.
func ownedHere(os.FileInfo) bool { return true }
