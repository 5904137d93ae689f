package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/store"
)

// damagedWorkList fails every listing of work as a damaged database does.
type damagedWorkList struct{ store.Store }

func (damagedWorkList) WorkList(context.Context, store.WorkListParams) ([]store.Work, error) {
	return nil, fmt.Errorf("listing work: %w", store.ErrDamaged)
}

// TestAPageOnADamagedDatabaseSaysSo: a page whose reads meet a damaged
// database says that, and what its operator does, not that the store
// could not be read.
func TestAPageOnADamagedDatabaseSaysSo(t *testing.T) {
	e := newEnv(t)
	_, base := e.start(replica{st: damagedWorkList{e.st}})
	c := client(t)
	e.signIn(c, base, "admin")
	resp, err := c.Get(base + "/dashboard/work")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	const want = "The automator&#39;s database is damaged where this page reads: its operator must repair it (automator repair;"
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), want) {
		t.Errorf("the work page on a damaged database: HTTP %d\n%s\nwant 500 saying %q", resp.StatusCode, body, want)
	}
}
