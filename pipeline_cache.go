package pgadvisory

// Statement caches of the pipelined first statement.
//
// The first statement of a pipelined transaction (pipeline.go) does not go
// through pgx, so it cannot use pgx's statement caches; it keeps its own,
// per connection, and uses them as pgx uses its own in the same exec mode:
//
//   - cache_statement (pgx's default; used directly and behind session
//     pooling): the statement is prepared on the server once under a name
//     of ours, and each later transaction sends BEGIN and Bind/Execute of
//     that name in one write. The server neither parses nor plans it again,
//     as with pgx's own named statements. Without this, the statement would
//     travel unnamed (Parse, Bind, Describe, Execute) and the server would
//     parse, analyse and plan it in every transaction: pgx stdlib's
//     unpipelined cycle would then cost the server less than ours.
//   - cache_describe (the safe mode behind transaction pooling): only the
//     description (parameter and column types) is kept, so that no Describe
//     round trip precedes the pipeline; the statement travels unnamed, as
//     pgx's cache_describe sends it.
//
// First use of a statement in cache_statement: one round trip prepares it
// (Parse and Describe of the name, before BEGIN), then BEGIN and the
// execution go out together: two round trips, as pgx stdlib's prepare and
// execute after its BEGIN. It cannot be one: pgx encodes the arguments for
// the parameter types the server infers, which only the Describe reply
// says. Prepared statements are not transactional, so preparing before
// BEGIN rather than after changes nothing the transaction can see; a
// statement that fails to prepare takes the stock path (BEGIN, then
// stdlib), which reports the error inside the transaction as pgx stdlib
// does.
//
// Names are "pgadvisory_first_" and a per-connection counter: never pgx's
// ("stmtcache_…" for its cache, "stmt_…" for database/sql's Prepare), never
// reused for another text on the same connection. Each cache keeps at most
// maxFirstStatements entries (fewer when pgx's own cache of the mode is
// smaller, none when it is disabled) and evicts the least recently used.
// Names that leave the cache (evicted, or dropped after an error) are
// closed on the server with the next prepare, in the same write; closing a
// name that no longer exists is not an error in PostgreSQL. The new name is
// closed just before it is prepared, so a statement left by an earlier
// client of the same server session (a session pooler without
// server_reset_query) cannot make the prepare fail.
//
// Invalidation: an error of the statement drops its entry, as pgx drops its
// own, unless the error is one that the statement's text and types cannot
// have caused (lock timeout, deadlock, serialization failure, query
// canceled, a data or constraint error, a RAISE): dropping on those would
// make a contended lock pay a re-prepare after every lock timeout. SQLSTATE
// 26000 (the name is gone: DEALLOCATE ALL or DISCARD ALL ran on the
// connection) drops every name. As with pgx, the failing execution returns
// its error; the next one prepares again. The caches live as long as the
// connection: database/sql's ResetSession does not touch server-side
// statements, so neither does ours.

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// maxFirstStatements bounds each per-connection cache of first statements.
const maxFirstStatements = 256

// firstStatementPrefix starts the name of every statement this package
// prepares. pgx names its own "stmtcache_<hash>" and "stmt_<hash>".
const firstStatementPrefix = "pgadvisory_first_"

// lruEntry is one cached statement; entries form a ring around the cache's
// sentinel, most recently used first.
type lruEntry struct {
	sd         *pgconn.StatementDescription
	prev, next *lruEntry
}

// stmtLRU maps statement texts to their descriptions, bounded, least
// recently used out first. The zero value is an empty cache of capacity
// maxFirstStatements.
type stmtLRU struct {
	capacity int // 0: maxFirstStatements
	items    map[string]*lruEntry
	ring     lruEntry // sentinel: ring.next is the most recent entry
}

func (l *stmtLRU) init() {
	if l.items == nil {
		l.items = make(map[string]*lruEntry)
		l.ring.next, l.ring.prev = &l.ring, &l.ring
	}
	if l.capacity <= 0 {
		l.capacity = maxFirstStatements
	}
}

func (l *stmtLRU) unlink(e *lruEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (l *stmtLRU) pushFront(e *lruEntry) {
	e.prev, e.next = &l.ring, l.ring.next
	l.ring.next.prev = e
	l.ring.next = e
}

// get returns the description cached for query (nil if none) and marks it
// most recently used.
func (l *stmtLRU) get(query string) *pgconn.StatementDescription {
	e := l.items[query]
	if e == nil {
		return nil
	}
	if l.ring.next != e {
		l.unlink(e)
		l.pushFront(e)
	}
	return e.sd
}

// put caches sd under sd.SQL, replacing an entry for the same text, and
// returns what left the cache to make room (the replaced entry included).
func (l *stmtLRU) put(sd *pgconn.StatementDescription) (out []*pgconn.StatementDescription) {
	l.init()
	if old := l.remove(sd.SQL); old != nil {
		out = append(out, old)
	}
	for len(l.items) >= l.capacity {
		out = append(out, l.remove(l.ring.prev.sd.SQL))
	}
	e := &lruEntry{sd: sd}
	l.items[sd.SQL] = e
	l.pushFront(e)
	return out
}

// remove drops the entry for query and returns its description (nil if
// none).
func (l *stmtLRU) remove(query string) *pgconn.StatementDescription {
	e := l.items[query]
	if e == nil {
		return nil
	}
	delete(l.items, query)
	l.unlink(e)
	return e.sd
}

// clear drops every entry and returns their descriptions.
func (l *stmtLRU) clear() []*pgconn.StatementDescription {
	out := make([]*pgconn.StatementDescription, 0, len(l.items))
	for e := l.ring.next; e != nil && e != &l.ring; e = e.next {
		out = append(out, e.sd)
	}
	clear(l.items)
	l.ring.next, l.ring.prev = &l.ring, &l.ring
	return out
}

func (l *stmtLRU) len() int { return len(l.items) }

// firstStatements holds a connection's first-statement caches.
type firstStatements struct {
	named    stmtLRU  // cache_statement: prepared on the server under sd.Name
	descs    stmtLRU  // cache_describe: descriptions of unnamed statements
	namedOff bool     // pgx's statement cache is disabled
	descsOff bool     // pgx's description cache is disabled
	stale    []string // names to close on the server with the next prepare
	serial   uint64   // last name's number
}

// configure sizes the caches after the pgx connection's own: at most
// maxFirstStatements, fewer when pgx keeps fewer. A cache pgx has disabled
// (capacity 0) is disabled here too: the first statement then takes the
// stock path and fails with pgx's own error, as without pipelining.
func (f *firstStatements) configure(statementCapacity, descriptionCapacity int) {
	f.namedOff, f.descsOff = statementCapacity <= 0, descriptionCapacity <= 0
	f.named.capacity = min(max(statementCapacity, 1), maxFirstStatements)
	f.descs.capacity = min(max(descriptionCapacity, 1), maxFirstStatements)
}

// nextName returns a statement name not used before on this connection.
func (f *firstStatements) nextName() string {
	f.serial++
	return firstStatementPrefix + strconv.FormatUint(f.serial, 10)
}

// retire queues the names of prepared statements that left the cache for
// closing.
func (f *firstStatements) retire(sds []*pgconn.StatementDescription) {
	for _, sd := range sds {
		if sd != nil && sd.Name != "" {
			f.stale = append(f.stale, sd.Name)
		}
	}
}

// namedFirst returns the named prepared statement for query, preparing it
// when the cache does not have it (one round trip, closing stale names in
// the same write). A failed prepare returns the server's error; the
// transaction has not begun.
func (c *Conn) namedFirst(ctx context.Context, query string) (*pgconn.StatementDescription, error) {
	f := &c.stmts
	if sd := f.named.get(query); sd != nil {
		return sd, nil
	}
	f.named.init()
	if f.named.len() >= f.named.capacity {
		// Evict before preparing, so that at most capacity statements
		// exist on the server at once.
		f.retire([]*pgconn.StatementDescription{f.named.remove(f.named.ring.prev.sd.SQL)})
	}
	name := f.nextName()
	pt, _ := c.tracer.(pgx.PrepareTracer)
	if pt != nil {
		ctx = pt.TracePrepareStart(ctx, c.pgx, pgx.TracePrepareStartData{Name: name, SQL: query})
	}
	sd, err := c.prepareNamed(ctx, name, query)
	if pt != nil {
		pt.TracePrepareEnd(ctx, c.pgx, pgx.TracePrepareEndData{Err: err})
	}
	if err != nil {
		// The Parse may have succeeded before the Describe failed: close
		// the name with the next prepare.
		f.stale = append(f.stale, name)
		return nil, err
	}
	f.retire(f.named.put(sd))
	return sd, nil
}

// prepareNamed sends the stale names' Close, Close and Parse/Describe of
// name, and one Sync, and reads the replies. Closed names leave the stale
// list even when the prepare fails, so the list stays bounded.
func (c *Conn) prepareNamed(ctx context.Context, name, query string) (*pgconn.StatementDescription, error) {
	f := &c.stmts
	p := c.pgx.PgConn().StartPipeline(ctx)
	for _, n := range f.stale {
		p.SendDeallocate(n)
	}
	p.SendDeallocate(name)
	p.SendPrepare(name, query, nil)
	if err := p.Sync(); err != nil {
		p.Close()
		return nil, err
	}
	closed := 0
	var sd *pgconn.StatementDescription
	var err error
	for sd == nil && err == nil {
		var res any
		if res, err = p.GetResults(); err != nil {
			break
		}
		switch r := res.(type) {
		case *pgconn.CloseComplete:
			if closed++; closed > len(f.stale)+1 {
				err = errors.New("pgadvisory: prepare: unexpected CloseComplete")
			}
		case *pgconn.StatementDescription:
			if closed != len(f.stale)+1 {
				err = errors.New("pgadvisory: prepare: statement description before the closes")
			}
			sd = r
		default:
			err = fmt.Errorf("pgadvisory: prepare: unexpected pipeline result %T", res)
		}
	}
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	f.stale = f.stale[min(closed, len(f.stale)):]
	if len(f.stale) == 0 {
		f.stale = nil
	}
	if err != nil {
		return nil, err
	}
	sd.Name, sd.SQL = name, query
	return sd, nil
}

// describedFirst returns the description of query for an unnamed execution
// (cache_describe), describing it when the cache does not have it.
func (c *Conn) describedFirst(ctx context.Context, query string) (*pgconn.StatementDescription, error) {
	f := &c.stmts
	if sd := f.descs.get(query); sd != nil {
		return sd, nil
	}
	sd, err := c.pgx.Prepare(ctx, "", query) // unnamed: pgx keeps no copy
	if err != nil {
		return nil, err
	}
	f.descs.put(sd) // keyed by sd.SQL, which is query
	return sd, nil
}

// forget drops the cached statement of query after err, unless err cannot
// come from a stale statement or description (see the file comment).
func (c *Conn) forget(query string, err error) {
	if !staleAfter(err) {
		return
	}
	f := &c.stmts
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "26000" {
		// A prepared statement is gone: DEALLOCATE ALL or DISCARD ALL
		// most likely took them all.
		f.retire(f.named.clear())
	} else {
		f.retire([]*pgconn.StatementDescription{f.named.remove(query)})
	}
	f.descs.remove(query)
}

// staleAfter reports whether err may mean that a cached statement or
// description no longer fits the schema: every error except those of the
// execution itself.
func staleAfter(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true // a decoding error may come from a stale description
	}
	switch pgErr.Code {
	case "55P03", // lock_not_available (lock_timeout)
		"57014": // query_canceled (statement_timeout, context)
		return false
	}
	if len(pgErr.Code) != 5 {
		return true
	}
	switch pgErr.Code[:2] {
	case "22", // data exception (division by zero, bad input value)
		"23", // integrity constraint violation
		"40", // transaction rollback (deadlock, serialization failure)
		"P0": // PL/pgSQL RAISE
		return false
	}
	return true
}
