package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// listLimits records the most units a listing asked for.
type listLimits struct {
	store.Store
	mu  sync.Mutex
	max int
}

func (l *listLimits) WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	l.mu.Lock()
	l.max = max(l.max, p.Limit)
	l.mu.Unlock()
	return l.Store.WorkList(ctx, p)
}

// TestWorkListReadsItsUnitsAChunkAtATime: work list reads at most
// workListChunk units (each with its sealed blobs) a query, however many
// it lists, and lists the same units, newest first, each once, as one
// listing of them all would.
func TestWorkListReadsItsUnitsAChunkAtATime(t *testing.T) {
	t.Parallel()
	dir := seedListings(t)
	ctx := t.Context()
	st, _ := openDirStore(t, dir)
	defer st.Close()
	// More units than two chunks, some sharing a queue time.
	for i := range 2*workListChunk + 7 {
		at := listNow.Add(time.Duration(i/2) * time.Millisecond)
		if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: fmt.Sprintf("w_more_%03d", i), Account: "acme", KeyID: 1,
			SealedCommand: []byte("not opened by a listing"), Now: at, Deadline: at.Add(time.Hour), SyncLater: true}); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := opener(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	all, err := st.WorkList(ctx, store.WorkListParams{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{10000, workListChunk + 3, workListChunk, 5} {
		rec := &listLimits{Store: st}
		views, err := workViews(ctx, rec, srv, store.WorkListParams{}, limit)
		if err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, v := range views {
			got = append(got, v.ID)
		}
		for _, w := range all[:min(limit, len(all))] {
			want = append(want, w.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("--limit %d listed %d units %v...; want the %d newest, %v...", limit, len(got), got[:min(3, len(got))], len(want), want[:min(3, len(want))])
		}
		if rec.max > workListChunk {
			t.Errorf("--limit %d: a listing of %d units at once; want at most %d", limit, rec.max, workListChunk)
		}
	}
}

// TestWorkListSaysWhenItLeavesUnitsOut: a listing cut at --limit says so
// under its table, and how to list more, or with --json on stderr (stdout
// is the array alone); one that lists every unit that matches says
// nothing of the kind. Before, 54 units listed as 50 with no word of the
// other 4 (a review), and --json said nothing (another).
func TestWorkListSaysWhenItLeavesUnitsOut(t *testing.T) {
	t.Parallel()
	dir := seedListings(t)
	code, out, stderr := runMain(t, "work", "list", "--data-dir", dir, "--limit", "10000", "--json")
	if code != 0 {
		t.Fatalf("work list --json: exit %d: %s", code, stderr)
	}
	n := strings.Count(out, `"work_id"`)
	if n < 2 {
		t.Fatalf("seeded %d units; want 2 or more", n)
	}
	const note = "older ones match too: --limit N lists up to N"
	for limit, cut := range map[int]bool{n - 1: true, n: false, n + 1: false} {
		code, out, stderr := runMain(t, "work", "list", "--data-dir", dir, "--limit", strconv.Itoa(limit))
		if code != 0 {
			t.Fatalf("work list --limit %d: exit %d: %s", limit, code, stderr)
		}
		if got := strings.Contains(out, fmt.Sprintf("the newest %d listed; ", limit)+note); got != cut {
			t.Errorf("work list --limit %d of %d units says it left some out: %v, want %v:\n%s", limit, n, got, cut, out)
		}
		if !cut && strings.Contains(out, note) {
			t.Errorf("work list --limit %d of %d units:\n%s", limit, n, out)
		}
		code, out, stderr = runMain(t, "work", "list", "--data-dir", dir, "--limit", strconv.Itoa(limit), "--json")
		if code != 0 || strings.Count(out, `"work_id"`) != min(limit, n) || strings.Contains(out, note) {
			t.Errorf("work list --limit %d --json of %d units: exit %d, stdout %q; want 0 and the array alone", limit, n, code, out)
		}
		if got := strings.Contains(stderr, fmt.Sprintf("the newest %d listed; ", limit)+note); got != cut {
			t.Errorf("work list --limit %d --json of %d units says on stderr it left some out: %v, want %v: %q", limit, n, got, cut, stderr)
		}
	}
}
