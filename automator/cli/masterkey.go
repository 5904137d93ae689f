package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
)

// checkMasterKey returns the accounts whose current key the master key does
// not open, and an error when it opens none of them although there are
// some: the data directory's master.key is then not the one the database's
// accounts were made with (a data directory copied without it, or one
// replica given another's), and serving, or adding accounts sealed with it,
// would only make every call fail.
func checkMasterKey(ctx context.Context, st store.Store, master crypto.MasterKey, dir string, cfg config.Config) (unopened []string, err error) {
	accounts, err := st.AccountList(ctx)
	if err != nil {
		return nil, fmt.Errorf("checking the master key against the accounts: %w", err)
	}
	for _, a := range accounts {
		if _, err := master.OpenKey(a.Name, a.SealedKey); err != nil {
			unopened = append(unopened, a.Name)
		}
	}
	if len(accounts) > 0 && len(unopened) == len(accounts) {
		return unopened, fmt.Errorf("the master key in %s opens none of the %d account keys in %s (%s): it is not the master key of this database; use the %s that `automator init` made with it",
			filepath.Join(dir, config.FileMasterKey), len(accounts), describeDB(dir, cfg), strings.Join(firstNames(unopened, 5), ", "), config.FileMasterKey)
	}
	return unopened, nil
}

// firstNames returns up to n names, and "…" when there were more.
func firstNames(names []string, n int) []string {
	if len(names) <= n {
		return names
	}
	return append(names[:n:n], "…")
}
