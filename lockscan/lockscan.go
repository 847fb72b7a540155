package lockscan

import (
	"container/list"
	"fmt"
	"slices"
	"strings"
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

// Kind says how a statement names an advisory-lock function.
type Kind int

const (
	// KindCall is a function call written in call syntax: name(args), as
	// an expression, in FROM, in CALL. Only calls can be rewritten by
	// editing the name (RewriteCalls).
	KindCall Kind = iota
	// KindAttribute is attribute notation, (expr).pg_advisory_lock or,
	// inside a function body, param.pg_advisory_lock: PostgreSQL calls the
	// function with expr as its argument.
	KindAttribute
	// KindReference names the function without calling it here: as the
	// implementation of an operator, aggregate, cast, type, trigger,
	// language, access method or support function (CREATE OPERATOR ...
	// (FUNCTION = pg_advisory_lock), CREATE AGGREGATE ... (SFUNC = ...),
	// CREATE CAST ... WITH FUNCTION, CREATE TRIGGER ... EXECUTE FUNCTION),
	// as the object of ALTER FUNCTION (which can rename it) or of CREATE
	// FUNCTION, or in a regproc/regprocedure constant
	// ('pg_advisory_lock'::regproc). Whatever is defined that way runs the
	// function later, where the scanner cannot see a name. GRANT, REVOKE,
	// COMMENT, SECURITY LABEL and DROP, which cannot make it run, are not
	// reported.
	KindReference
)

// String returns "call", "attribute" or "reference".
func (k Kind) String() string {
	switch k {
	case KindCall:
		return "call"
	case KindAttribute:
		return "attribute"
	case KindReference:
		return "reference"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Call is one advisory-lock function found in SQL text: a call (Kind
// KindCall, the zero value) or another reference to the function.
type Call struct {
	// Func is the canonical lower-case name without schema, for example
	// "pg_try_advisory_lock_shared".
	Func string
	// Scope is the lifetime of the lock the function takes or releases.
	Scope Scope
	// Op is what the function does.
	Op Op
	// Shared is set for the _shared variants.
	Shared bool
	// Start and End are the byte span, in the query passed to Scan, of the
	// function name as written (after any schema qualifier; quotes, U&
	// prefix and UESCAPE clause included); for a name inside a string
	// constant (regproc, a definition option written as a string) the span
	// of the constant. For a call inside a function body or DO block the
	// span is still in the original query text.
	Start, End int
	// Kind says whether this is a call (KindCall) or another reference.
	Kind Kind
	// Via names the construct of a reference: the option of a definition
	// ("function", "sfunc", "finalfunc", "input", "support", "handler", ...),
	// "object" (ALTER FUNCTION and other statements on the function),
	// "funcname" (CREATE TRIGGER, CREATE EVENT TRIGGER, CREATE FUNCTION),
	// "regproc" or "regprocedure". Empty for calls and attribute notation.
	Via string
	// Args are the arguments of a call (KindCall), as the parser read
	// them; nil for other kinds and for a call without arguments.
	Args []Arg
	// Body is set when the finding is part of code that does not run as
	// an expression of the statement itself: inside a DO block or a
	// function body, or in a statement that defines or alters something
	// (CREATE VIEW, CREATE RULE, CREATE FUNCTION ... BEGIN ATOMIC, ALTER
	// ...). Editing the statement's text does not edit what runs later.
	Body bool
}

// sameCall reports whether a and b are the same finding.
func sameCall(a, b Call) bool {
	return a.Func == b.Func && a.Start == b.Start && a.End == b.End && a.Kind == b.Kind && a.Via == b.Via && a.Body == b.Body
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
	// (dblink, dblink_exec, dblink_open, dblink_fetch, dblink_send_query),
	// in any schema.
	DynamicDblink = "dblink"
	// DynamicQueryFunc is a function that runs a query given as text:
	// pg_catalog's query_to_xml, query_to_xmlschema,
	// query_to_xml_and_xmlschema, cursor_to_xml, cursor_to_xmlschema,
	// ts_stat and ts_rewrite(query, select); tablefunc's crosstab,
	// crosstab2–4 and connectby and xml2's xpath_table in any schema.
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
	// Settings are the changes the query makes to the settings the
	// scanner reports (see SettingChange), in the order the server makes
	// them.
	Settings []SettingChange
	// Deferred is set when the query has code the server reads only when
	// it runs, after earlier statements of the same text have run: a DO
	// block, a function or procedure body given as a string, or a
	// PL/pgSQL EXECUTE. A setting changed earlier in the text
	// (Settings) changes how that code is read.
	Deferred bool

	lone *LoneCall // see Lone
}

// HasSessionLock reports whether any call takes a session-level lock (Op
// OpLock or OpTryLock with Scope ScopeSession), or names such a function in
// any other way (any Kind).
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

// Error returns the message with its byte position when known.
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
// a bounded LRU cache keyed by query text and reading settings. It is safe
// for concurrent use.
type Scanner struct {
	size int

	mu    sync.Mutex
	ll    *list.List // of *entry, most recently used at front
	items map[cacheKey]*list.Element

	prefiltered, hits, misses, errors atomic.Uint64
}

// cacheKey is a query text and the reading it was scanned under.
type cacheKey struct {
	query string
	rd    reading
}

type entry struct {
	key cacheKey
	res Result
	err error
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
		s.items = make(map[cacheKey]*list.Element, min(cacheSize, DefaultCacheSize))
	}
	return s
}

// Scan finds the advisory-lock calls, references and dynamic-SQL
// constructs in query, and the setting changes it makes (Result.Settings),
// read with the server's default settings (standard_conforming_strings on,
// UTF-8). It is ScanWith(query, Settings{}). Queries that cannot contain
// any of them (see MayContainCall and MayChangeSettings) are answered
// without parsing and without allocating.
func (s *Scanner) Scan(query string) (Result, error) {
	return s.ScanWith(query, Settings{})
}

// ScanWith is Scan for a session whose reading settings are set: the
// statement is read as the server reads it under them. Under settings the
// scanner cannot model (a client-only client_encoding such as SJIS, an
// unknown value), a statement that passes the pre-filter (it may name an
// advisory-lock function or a dynamic construct, in any spelling) returns
// an *UnsupportedSettingsError wrapping ErrUnsupportedSettings, and one
// that does not is answered "nothing found" as usual: the server sees only
// ASCII bytes the text has, and none of them spells a name (its setting
// changes are not reported then: the server reports them in
// ParameterStatus). Results are cached per query and reading.
func (s *Scanner) ScanWith(query string, set Settings) (Result, error) {
	_, r, err := s.scan(query, set, false)
	return r, err
}

// ScanView is ScanWith for a query that is a view of a buffer the caller
// reuses (a protocol message read with unsafe.String, say): the scanner
// keeps nothing of it. It returns, with the result, the query as a string
// of its own, to keep instead of the view: the cache's copy when the query
// was scanned before, so that a statement seen again costs no allocation,
// else a new copy.
func (s *Scanner) ScanView(query string, set Settings) (owned string, r Result, err error) {
	return s.scan(query, set, true)
}

// ownCopy returns query, or with view a copy of it.
func ownCopy(query string, view bool) string {
	if view {
		return strings.Clone(query)
	}
	return query
}

// scan is ScanWith; with view, query is copied before anything keeps it,
// and the string returned is that copy or the cache's.
func (s *Scanner) scan(query string, set Settings, view bool) (string, Result, error) {
	mayCall := MayContainCall(query)
	if !mayCall && !MayChangeSettings(query) {
		s.prefiltered.Add(1)
		return ownCopy(query, view), Result{}, nil
	}
	rd, err := set.reading()
	if err != nil {
		if !mayCall {
			// Nothing the text can spell names a lock function; its
			// setting changes are not read under such settings.
			s.prefiltered.Add(1)
			return ownCopy(query, view), Result{}, nil
		}
		s.errors.Add(1)
		return ownCopy(query, view), Result{}, err
	}
	key := cacheKey{query: query, rd: rd}
	cache := s.size > 0 && len(query) <= MaxCachedQueryLen
	if cache {
		s.mu.Lock()
		if el, ok := s.items[key]; ok {
			s.ll.MoveToFront(el)
			e := el.Value.(*entry)
			s.mu.Unlock()
			s.hits.Add(1)
			if e.err != nil {
				s.errors.Add(1)
			}
			return e.key.query, e.res, e.err
		}
		s.mu.Unlock()
	}
	s.misses.Add(1)
	query = ownCopy(query, view)
	key.query = query
	res, err := scanQuery(query, rd)
	if err != nil {
		s.errors.Add(1)
		res = Result{}
	}
	if cache {
		s.mu.Lock()
		if el, ok := s.items[key]; ok {
			s.ll.MoveToFront(el)
		} else {
			s.items[key] = s.ll.PushFront(&entry{key: key, res: res, err: err})
			for s.ll.Len() > s.size {
				old := s.ll.Back()
				s.ll.Remove(old)
				delete(s.items, old.Value.(*entry).key)
			}
		}
		s.mu.Unlock()
	}
	return query, res, err
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

// Scan is (*Scanner).Scan on a shared default Scanner: it returns the
// advisory-lock calls and references and the dynamic-SQL findings of query,
// read with the server's default settings (see ScanWith for others). The
// Result is a copy the caller may keep and modify.
func Scan(query string) (Result, error) {
	return ScanWith(query, Settings{})
}

// ScanWith is (*Scanner).ScanWith on the shared default Scanner. The Result
// is a copy the caller may keep and modify.
func ScanWith(query string, s Settings) (Result, error) {
	r, err := defaultScanner.ScanWith(query, s)
	if err != nil {
		return Result{}, err
	}
	return r.clone(), nil
}

// clone returns a Result whose slices the caller owns.
func (r Result) clone() Result {
	var out Result
	if len(r.Calls) > 0 {
		out.Calls = append([]Call(nil), r.Calls...)
	}
	if len(r.Dynamic) > 0 {
		out.Dynamic = append([]Dynamic(nil), r.Dynamic...)
	}
	for i := range out.Calls {
		out.Calls[i].Args = slices.Clone(out.Calls[i].Args)
	}
	if len(r.Settings) > 0 {
		out.Settings = append([]SettingChange(nil), r.Settings...)
	}
	out.Deferred = r.Deferred
	if r.lone != nil {
		l := *r.lone
		l.Call.Args = slices.Clone(l.Call.Args)
		out.lone = &l
	}
	return out
}
