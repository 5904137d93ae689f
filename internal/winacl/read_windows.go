package winacl

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/windows"
)

// accessAllowedCallbackACEType is ACCESS_ALLOWED_CALLBACK_ACE_TYPE: an
// allowing entry with a condition, which is taken as allowing (the
// condition is not evaluated here).
const accessAllowedCallbackACEType = 9

// Read returns the owner and access list of the file or directory at
// path. Entries other than allowing and denying ones (audit, object and
// conditional denying entries) are left out.
func Read(path string) (Descriptor, error) {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return Descriptor{}, err
	}
	owner, _, err := sd.Owner()
	if err != nil {
		return Descriptor{}, err
	}
	d := Descriptor{Owner: owner.String()}
	dacl, _, err := sd.DACL()
	switch {
	case errors.Is(err, windows.ERROR_OBJECT_NOT_FOUND) || (err == nil && dacl == nil):
		// No access list, or a null one: everyone may do everything.
		d.NoDACL = true
		return d, nil
	case err != nil:
		return Descriptor{}, err
	}
	for i := range uint32(dacl.AceCount) {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			return Descriptor{}, err
		}
		var allow bool
		switch ace.Header.AceType {
		case windows.ACCESS_ALLOWED_ACE_TYPE, accessAllowedCallbackACEType:
			allow = true
		case windows.ACCESS_DENIED_ACE_TYPE:
		default:
			continue
		}
		sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart))
		d.DACL = append(d.DACL, ACE{
			Allow:       allow,
			SID:         sid.String(),
			Mask:        uint32(ace.Mask),
			InheritOnly: ace.Header.AceFlags&windows.INHERIT_ONLY_ACE != 0,
		})
	}
	return d, nil
}

// Name is DOMAIN\account of the string SID sid, or sid itself when it
// names no account.
func Name(sid string) string {
	s, err := windows.StringToSid(sid)
	if err != nil {
		return sid
	}
	account, domain, _, err := s.LookupAccount("")
	if err != nil {
		return sid
	}
	if domain == "" {
		return account
	}
	return domain + `\` + account
}

// Self is the SID of the account this process runs as ("" when it
// cannot be read).
func Self() string {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return ""
	}
	return u.User.Sid.String()
}

// Set gives the file or directory at path the access list of sddl (an
// SDDL string, "D:P(A;OICI;FA;;;SY)…"), inheriting nothing from its
// folder.
func Set(path, sddl string) error {
	sd, err := windows.SecurityDescriptorFromString(sddl)
	if err != nil {
		return err
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return err
	}
	return windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil)
}
