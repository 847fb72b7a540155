package lockscan

import (
	"container/list"
	"fmt"
	"sync"
	"sync/atomic"
)

// Scope is the lifetime of an advisory lock.
type Scope int

const (
	// ScopeSession locks belong to the server backend until unlocked or
	// until the backend ends; behind a transaction pooler they leak.
	ScopeSession Scope = iota
	// ScopeXact locks are released at COMMIT or ROLLBACK.
	ScopeXact
)

// String returns "session" or "xact".
func (s Scope) String() string {
	switch s {
	case ScopeSession:
		return "session"
	case ScopeXact:
		return "xact"
	}
	return fmt.Sprintf("Scope(%d)", int(s))
}

// Op is what an advisory-lock function does.
type Op int

const (
	// OpLock waits for the lock (pg_advisory_lock, pg_advisory_xact_lock and
	// their _shared variants).
	OpLock Op = iota
	// OpTryLock takes the lock if it is free and returns a boolean.
	OpTryLock
	// OpUnlock releases one session lock (pg_advisory_unlock[_shared]).
	OpUnlock
	// OpUnlockAll releases every session lock (pg_advisory_unlock_all).
	OpUnlockAll
)

// String returns "lock", "try_lock", "unlock" or "unlock_all".
func (o Op) String() string {
	switch o {
	case OpLock:
		return "lock"
	case OpTryLock:
		return "try_lock"
	case OpUnlock:
		return "unlock"
	case OpUnlockAll:
		return "unlock_all"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Call is one advisory-lock function call found in SQL text.
type Call struct {
	// Func is the canonical lower-case name without schema, for example
	// "pg_try_advisory_lock_shared".
	Func   string
	Scope  Scope
	Op     Op
	Shared bool
	// Start and End are the byte span, in the query passed to Scan, of the
	// function name as written (after any schema qualifier; quotes, U&
	// prefix and UESCAPE clause included). For a call inside a function
	// body or DO block the span is still in the original query text.
	Start, End int
}

// XactTwin returns the transaction-level function that takes the same lock
// as a session-level lock or try-lock call, for example
// "pg_advisory_xact_lock_shared" for "pg_advisory_lock_shared". It returns ""
// for unlocks and for calls that already are transaction-level.
func (c Call) XactTwin() string {
	if c.Scope != ScopeSession || (c.Op != OpLock && c.Op != OpTryLock) {
		return ""
	}
	return xactTwins[c.Func]
}

// Dynamic is a construct that may run SQL the scanner cannot see — PL/pgSQL
// EXECUTE, dblink, query_to_xml, a function body in a language other than SQL
// and PL/pgSQL — found where it could take an advisory lock. See the package
// documentation for the exact list.
type Dynamic struct {
	// Kind names the construct: one of the Dynamic* constants.
	Kind string
	// Start and End are the byte span of the construct in the original
	// query (the EXECUTE expression, the function name, or the body
	// literal).
	Start, End int
}

// Kinds of Dynamic findings.
const (
	// DynamicExecute is a PL/pgSQL EXECUTE (also FOR ... IN EXECUTE, OPEN
	// ... FOR EXECUTE, RETURN QUERY EXECUTE) whose query text is not a
	// single constant string.
	DynamicExecute = "plpgsql-execute"
	// DynamicDblink is a call of a dblink function that runs SQL text
	// (dblink, dblink_exec, dblink_open, dblink_send_query), in any schema.
	DynamicDblink = "dblink"
	// DynamicQueryFunc is a pg_catalog function that runs a query given as
	// text (query_to_xml and friends, ts_stat).
	DynamicQueryFunc = "query-function"
	// DynamicLanguage is a DO block or function body in a language other
	// than SQL and PL/pgSQL (plpython3u, plperl, pltcl, plv8, c, ...).
	DynamicLanguage = "language"
)

// Result is the outcome of scanning one query. Results returned by a
// Scanner may be shared between callers through the cache: treat them as
// read-only.
type Result struct {
	Calls   []Call    // in textual order
	Dynamic []Dynamic // in textual order
}

// HasSessionLock reports whether any call takes a session-level lock (Op
// OpLock or OpTryLock with Scope ScopeSession).
func (r Result) HasSessionLock() bool {
	for _, c := range r.Calls {
		if c.Scope == ScopeSession && (c.Op == OpLock || c.Op == OpTryLock) {
			return true
		}
	}
	return false
}

// ParseError is returned when PostgreSQL's parser rejects the query (or a
// function body inside it), or when a call cannot be located exactly.
type ParseError struct {
	// Msg is the parser's message.
	Msg string
	// Pos is the 0-based byte offset in the original query the error refers
	// to, or -1 when unknown.
	Pos int
	// Err is the underlying error, if any.
	Err error
}

func (e *ParseError) Error() string {
	if e.Pos >= 0 {
		return fmt.Sprintf("lockscan: %s at byte %d", e.Msg, e.Pos)
	}
	return "lockscan: " + e.Msg
}

// Unwrap returns the underlying parser error.
func (e *ParseError) Unwrap() error { return e.Err }

// DefaultCacheSize is the number of query texts a Scanner created with
// NewScanner(0) remembers, and the size used by the package-level Scan.
const DefaultCacheSize = 1024

// MaxCachedQueryLen bounds the memory of the cache: longer queries are
// scanned every time and never cached.
const MaxCachedQueryLen = 64 << 10

// Stats are a Scanner's counters since it was created.
type Stats struct {
	// Prefiltered counts queries answered without parsing (no call and no
	// dynamic construct possible).
	Prefiltered uint64
	// Hits counts queries answered from the cache.
	Hits uint64
	// Misses counts queries that were parsed.
	Misses uint64
	// Errors counts Scan calls that returned an error (cached or not).
	Errors uint64
	// Cached is the number of entries currently in the cache.
	Cached int
}

// Scanner scans queries and caches the results of those it had to parse in
// a bounded LRU cache keyed by query text. It is safe for concurrent use.
type Scanner struct {
	size int

	mu    sync.Mutex
	ll    *list.List // of *entry, most recently used at front
	items map[string]*list.Element

	prefiltered, hits, misses, errors atomic.Uint64
}

type entry struct {
	query string
	res   Result
	err   error
}

// NewScanner returns a Scanner whose cache holds up to cacheSize queries.
// cacheSize == 0 means DefaultCacheSize; cacheSize < 0 disables the cache.
func NewScanner(cacheSize int) *Scanner {
	if cacheSize == 0 {
		cacheSize = DefaultCacheSize
	}
	s := &Scanner{size: cacheSize}
	if cacheSize > 0 {
		s.ll = list.New()
		// A capacity hint, capped: NewScanner(1<<40) must not try to
		// allocate the whole map up front (it panicked before).
		s.items = make(map[string]*list.Element, min(cacheSize, DefaultCacheSize))
	}
	return s
}

// Scan finds the advisory-lock calls and dynamic-SQL constructs in query.
// Queries that cannot contain either (see MayContainCall) are answered
// without parsing and without allocating.
func (s *Scanner) Scan(query string) (Result, error) {
	if !MayContainCall(query) {
		s.prefiltered.Add(1)
		return Result{}, nil
	}
	cache := s.size > 0 && len(query) <= MaxCachedQueryLen
	if cache {
		s.mu.Lock()
		if el, ok := s.items[query]; ok {
			s.ll.MoveToFront(el)
			e := el.Value.(*entry)
			s.mu.Unlock()
			s.hits.Add(1)
			if e.err != nil {
				s.errors.Add(1)
			}
			return e.res, e.err
		}
		s.mu.Unlock()
	}
	s.misses.Add(1)
	res, err := scanQuery(query)
	if err != nil {
		s.errors.Add(1)
		res = Result{}
	}
	if cache {
		s.mu.Lock()
		if el, ok := s.items[query]; ok {
			s.ll.MoveToFront(el)
		} else {
			s.items[query] = s.ll.PushFront(&entry{query: query, res: res, err: err})
			for s.ll.Len() > s.size {
				old := s.ll.Back()
				s.ll.Remove(old)
				delete(s.items, old.Value.(*entry).query)
			}
		}
		s.mu.Unlock()
	}
	return res, err
}

// Stats returns the Scanner's counters.
func (s *Scanner) Stats() Stats {
	st := Stats{
		Prefiltered: s.prefiltered.Load(),
		Hits:        s.hits.Load(),
		Misses:      s.misses.Load(),
		Errors:      s.errors.Load(),
	}
	if s.size > 0 {
		s.mu.Lock()
		st.Cached = s.ll.Len()
		s.mu.Unlock()
	}
	return st
}

var defaultScanner = NewScanner(DefaultCacheSize)

// Scan returns the advisory-lock calls in query, in textual order, using a
// shared default Scanner. The returned slice is a copy the caller may keep.
func Scan(query string) ([]Call, error) {
	r, err := defaultScanner.Scan(query)
	if err != nil {
		return nil, err
	}
	if len(r.Calls) == 0 {
		return nil, nil
	}
	out := make([]Call, len(r.Calls))
	copy(out, r.Calls)
	return out, nil
}

// ScanResult is like Scan but also returns the dynamic-SQL findings. The
// Result is shared with the default Scanner's cache: do not modify it.
func ScanResult(query string) (Result, error) {
	return defaultScanner.Scan(query)
}
