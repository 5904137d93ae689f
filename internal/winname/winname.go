// Package winname tells the file names Windows gives a meaning of its own:
// its device names, which name no file in any folder. The runner refuses
// such script names, and service names (their folders) are refused too.
package winname

import "strings"

// IsDevice reports whether name is a reserved device name of
// Windows, alone or followed by an extension ("nul.ps1") and spaces before
// it ("CON .bat"): some windows versions open the device for those too.
func IsDevice(name string) bool {
	base, _, _ := strings.Cut(name, ".")
	base = strings.ToUpper(strings.TrimRight(base, " "))
	switch base {
	case "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$":
		return true
	}
	if len(base) < 4 || (base[:3] != "COM" && base[:3] != "LPT") {
		return false
	}
	switch base[3:] {
	case "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "\u00b9", "\u00b2", "\u00b3":
		return true
	}
	return false
}
