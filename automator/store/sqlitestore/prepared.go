package sqlitestore

import (
	"context"
	"database/sql"
	"sync"
)

// querier is what *sql.DB, *sql.Conn, *sql.Tx and *prepared have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// preparer is a querier that can also prepare statements: *sql.DB (each
// statement is then prepared once per pooled connection, as it is first used
// there) or *sql.Conn.
type preparer interface {
	querier
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// maxPrepared bounds the statements one cache keeps. Every statement of this
// package is a constant but a few listings' filters, so the bound is never
// reached in practice; past it, statements run unprepared.
const maxPrepared = 256

// prepared runs every query as a statement prepared on first use and kept:
// SQLite then parses each statement once instead of on every call (parsing
// was a quarter of the automator's CPU).
type prepared struct {
	raw preparer

	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

func newPrepared(raw preparer) *prepared {
	return &prepared{raw: raw, stmts: make(map[string]*sql.Stmt)}
}

// stmt returns the prepared statement for query, or nil when the cache is
// full or the statement does not prepare (the caller then runs it
// unprepared, and gets the same error from that).
func (p *prepared) stmt(ctx context.Context, query string) *sql.Stmt {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.stmts[query]; ok {
		return st
	}
	if len(p.stmts) >= maxPrepared {
		return nil
	}
	st, err := p.raw.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	p.stmts[query] = st
	return st
}

func (p *prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.raw.ExecContext(ctx, query, args...)
}

func (p *prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return p.raw.QueryContext(ctx, query, args...)
}

func (p *prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.raw.QueryRowContext(ctx, query, args...)
}

// close closes every kept statement.
func (p *prepared) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for q, st := range p.stmts {
		_ = st.Close()
		delete(p.stmts, q)
	}
}
