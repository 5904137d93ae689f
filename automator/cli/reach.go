package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/proxy/service"
)

// checkServiceUserReach refuses a service user who could not run exe or
// serve the data directory dir: every directory on their way searchable,
// exe executable, the files serve reads readable and the directory, a
// SQLite database and the directory holding it writable.
func checkServiceUserReach(u *service.User, exe, dir string, cfg config.Config) error {
	if err := u.Reach(exe, service.PermExecute); err != nil {
		return fmt.Errorf("%w: the service runs %s; install from a copy of the binary that %s can run (such as /usr/local/bin/automator)", err, exe, u.Name)
	}
	if err := u.Reach(dir, service.PermRead|service.PermWrite|service.PermExecute); err != nil {
		if !strings.Contains(err.Error(), "cannot search") {
			return fmt.Errorf("%w; run `chown -R %s: %s` first", err, u.Name, dir)
		}
		return fmt.Errorf("%w, so the service could not open %s; move the data directory where %s can reach it (such as under /var/lib)", err, dir, u.Name)
	}
	files := []string{config.FileConfig, config.FileMasterKey, config.FileCert, config.FileKey, config.FileCACert}
	for _, f := range files {
		if err := u.Reach(filepath.Join(dir, f), service.PermRead); err != nil {
			return fmt.Errorf("%w; run `chown -R %s: %s` first", err, u.Name, dir)
		}
	}
	if !pgstore.IsDSN(cfg.DB) {
		db := cfg.DBPath(dir)
		// SQLite creates its -wal, -shm and journal files beside the
		// database, and serve its lock.
		if err := u.Reach(filepath.Dir(db), service.PermWrite|service.PermExecute); err != nil {
			if !strings.Contains(err.Error(), "cannot search") {
				return fmt.Errorf("%w, the directory of the SQLite database %s, where SQLite and serve create files beside it; run `chown %s: %s` first", err, db, u.Name, filepath.Dir(db))
			}
			return fmt.Errorf("%w, so the service could not open the SQLite database %s; move it where %s can reach it (such as into the data directory)", err, db, u.Name)
		}
		for _, p := range []string{db, db + "-wal", db + "-shm"} {
			if err := u.Reach(p, service.PermRead|service.PermWrite); err != nil {
				return fmt.Errorf("%w; run `chown -R %s: %s` first", err, u.Name, filepath.Dir(db))
			}
		}
	}
	return nil
}
