// Package lockscan finds PostgreSQL advisory-lock calls in SQL text,
// classifies them (session or transaction level; lock, try-lock, unlock)
// and rewrites session-level locks to their transaction-level twins.
//
// # Why
//
// A session-level advisory lock (pg_advisory_lock) belongs to the server
// backend. Behind PgBouncer in transaction pooling, or on a *sql.DB whose
// next statement may use another pooled connection, the lock leaks to
// whoever gets that backend next. The pgadvisory driver and the
// pgadvisoryvet analyzer both ask this package which statements take which
// locks, so they agree exactly.
//
// # Scanning
//
//	r, err := lockscan.Scan("SELECT pg_try_advisory_lock($1)")
//	// r.Calls[0].Func == "pg_try_advisory_lock", Scope == ScopeSession,
//	// Op == OpTryLock, Kind == KindCall, and
//	// query[r.Calls[0].Start:r.Calls[0].End] is the name as written.
//
// Scan uses PostgreSQL's own parser (libpg_query, PostgreSQL 17 grammar:
// pg_query_go with cgo, its WebAssembly build go-pgquery without; see
// Parser and Warm),
// so a name inside a string constant, a comment, a dollar-quoted string, or
// used as a column, table or alias is not a call. A call counts wherever an
// expression can stand: target lists, WHERE, FROM (SELECT * FROM
// pg_advisory_lock(1)), CTEs, subqueries, LATERAL, VALUES, CASE, function
// arguments, RETURNING, INSERT/UPDATE/DELETE/MERGE, EXPLAIN ANALYZE,
// PREPARE, CALL, COPY (query) TO, CREATE VIEW/RULE, and every statement of
// a multi-statement string. Names are matched the way PostgreSQL resolves
// them: any letter case for plain identifiers, exact lower case inside
// quotes, U&"..." Unicode escapes with or without UESCAPE; unqualified or
// qualified with pg_catalog (a function of the same name in another schema
// is not an advisory lock).
//
// Function bodies are scanned too: DO blocks and CREATE FUNCTION/PROCEDURE
// bodies in LANGUAGE sql (string bodies and the SQL-standard BEGIN ATOMIC
// ... END form) and LANGUAGE plpgsql, the latter with PL/pgSQL's own parser,
// whose embedded SQL statements and expressions are parsed again. Spans of
// calls found in bodies are positions in the original query, whether the
// body is written as $$...$$, '...' with doubled quotes, or E'...' with
// escapes. A PL/pgSQL EXECUTE of a single string constant is scanned like
// the body itself.
//
// # Any reference counts
//
// A function can run without call syntax, so every way a statement names an
// advisory-lock function is a finding, with a Kind: KindCall for calls,
// KindAttribute for attribute notation ((expr).pg_advisory_lock, and
// param.pg_advisory_lock in a function body), KindReference for the options
// of CREATE OPERATOR / AGGREGATE / TYPE / FUNCTION ... SUPPORT and the like,
// the function of CREATE CAST, CREATE TRIGGER, CREATE LANGUAGE and other
// statements naming a function (ALTER FUNCTION can rename it), and
// regproc/regprocedure constants. GRANT, REVOKE, COMMENT, SECURITY LABEL and
// DROP, which cannot make it run, are not findings.
//
// # Reading as the server will
//
// How the server splits a statement into tokens depends on two session
// settings: standard_conforming_strings (off: a backslash escapes inside
// '...') and client_encoding (in SJIS, BIG5, GBK, UHC, GB18030, JOHAB and
// SHIFT_JIS_2004 the second byte of a character can be a backslash or a
// quote). ScanWith takes them (Settings, whose zero value is the server's
// default); Scan assumes the defaults. With standard_conforming_strings
// off the statement is read exactly as the server reads it; under a
// client-only encoding or a value the scanner does not know, a statement
// that passes the pre-filter returns an error wrapping
// ErrUnsupportedSettings, which a policy must treat as unscannable. A
// function body is read again whenever the function runs, under that
// session's setting, so a body with a backslash is scanned under both
// readings unless the function fixes the setting with SET.
// Result.Settings lists the changes a statement makes, in its own text, to
// those settings, to backslash_quote and to lock_timeout and
// statement_timeout (SET, SET LOCAL, RESET, RESET ALL, DISCARD ALL,
// set_config, UPDATE pg_settings, also inside DO blocks and function
// bodies), read from the parse tree: a word in a string or a comment is
// not a change. Result.ChangesReading tells a guard that a statement
// changes how later text is read; Result.Deferred that it has code read
// only when it runs (a body, an EXECUTE), which such a change affects.
//
// # Shapes and arguments
//
// Every call carries its arguments as the parser read them (Call.Args:
// integer and string literals, $n parameters, NULL, each with its cast),
// and Result.Lone recognises a statement that is exactly one call,
// SELECT fn(args) [AS alias], with the name of its result column. Call.Body
// marks calls that run later than the statement (bodies, views, rules,
// defaults).
//
// # Transaction control
//
// Transaction reads what a statement does to the session's transaction —
// BEGIN or START TRANSACTION with its modes, COMMIT/END, ROLLBACK/ABORT
// with or without AND CHAIN, PREPARE TRANSACTION, and the forms that keep
// the transaction (savepoints, COMMIT PREPARED) — by PostgreSQL's grammar
// for those statements, with comments skipped as the server skips them.
// It is a lexical reader, not the parser, because a guard asks it of every
// statement; it never allocates, and the tests hold it to the parse tree.
//
// # Dynamic SQL
//
// Some constructs run SQL text that only exists at run time. Scanner.Scan
// reports them in Result.Dynamic so the caller can decide (the driver
// treats them per its policy; the analyzer warns):
//
//   - DynamicExecute: PL/pgSQL EXECUTE, FOR ... IN EXECUTE, OPEN ... FOR
//     EXECUTE, RETURN QUERY EXECUTE whose query is not one string constant
//     (for example EXECUTE format('SELECT %I(1)', fn) or
//     EXECUTE 'SELECT pg_advisory' || '_lock(1)').
//   - DynamicDblink: dblink, dblink_exec, dblink_open, dblink_fetch,
//     dblink_send_query, in any schema: they run SQL on a connection held
//     by this backend.
//   - DynamicQueryFunc: pg_catalog's query_to_xml, query_to_xmlschema,
//     query_to_xml_and_xmlschema, cursor_to_xml, cursor_to_xmlschema,
//     ts_stat and ts_rewrite(query, select), and the extension functions
//     crosstab, crosstab2–4, connectby and xpath_table, which run a query
//     given (or built) as text.
//   - DynamicLanguage: a DO block or function body in any other language
//     (plpython3u, plperl, pltcl, plv8, internal, c): opaque to us.
//
// A SQL-level format() or string concatenation is not reported: building
// a string does not run it. A plain SQL EXECUTE of a prepared statement is
// not reported either: its PREPARE was scanned when it was sent.
//
// # Limits
//
// The scanner sees text, not the catalog. It cannot see advisory locks
// taken inside views, rules, triggers or user functions already defined in
// the database (SELECT my_lock_helper(1) is invisible), nor by functions
// reached through search_path tricks: an unqualified name is assumed to
// resolve to pg_catalog, which is what PostgreSQL does unless pg_catalog is
// placed explicitly after another schema in search_path. t.pg_advisory_lock
// is reported as attribute notation (KindAttribute) at every level:
// PostgreSQL calls pg_advisory_lock(t) when t's row type has a cast to
// bigint, and the scanner cannot see casts; a column really named like a
// lock function is therefore a false positive, by design. Calls inside a function body are reported when the
// function is created, not when it runs: that is what a linter wants, and
// the driver treats a CREATE FUNCTION with a session lock like the lock
// itself.
//
// # Speed
//
// Scanner.Scan first runs MayContainCall and MayChangeSettings, single
// allocation-free passes over the bytes. Only a query that contains
// "advisory" (any case), "u&", a backslash escape, one of the dynamic-SQL
// keywords, a string constant continued on the next line, or a setting's
// name (and the few words of RESET ALL, DISCARD ALL, SET NAMES,
// set_config, pg_settings) reaches the parser, and parse results are
// kept in a bounded LRU cache keyed by query text and reading settings.
// An ordinary query costs about as much as a substring search. A caller
// that reads queries out of a buffer it reuses (a protocol message) scans
// them with Scanner.ScanView, which copies a query only the first time it
// sees it and otherwise hands back the cache's copy. Syntax
// errors are therefore only reported for queries that pass the pre-filter;
// a query that cannot contain a call is never parsed.
//
// # Nesting
//
// A statement nested more deeply than MaxNesting (4000 with cgo, 250 in the
// WebAssembly build, whose stack is smaller) is not parsed: the error wraps
// ErrTooComplex. With cgo, statements nested beyond a few hundred levels
// are parsed on a thread with an 8 MB stack of the scanner's own, so the
// limit holds on musl (Alpine), whose threads have 128 KiB, as on glibc.
//
// # Rewriting
//
// RewriteCalls (and RewriteEdits, for callers that place the edits
// themselves) is the one rewriter: the driver's guard, RewriteXact and the
// analyzer's suggested fix all use it and differ only in RewriteOptions.
// The rules (RewriteEdits has them in full):
//
//   - session-level locks and try-locks become the transaction-level
//     functions of the same lock mode, shared or not, in the bigint or the
//     two-integer form the call uses, by editing the name token only: the
//     schema qualifier, the arguments with their casts, comments and white
//     space stay as written;
//   - the name is spelled as written where that is unambiguous (plain
//     lower or upper case, a quoted name); a U&"..." name, mixed case or
//     letters escaped in a body become the plain lower-case twin, which
//     PostgreSQL reads as the same function;
//   - unlocks as RewriteOptions.Unlocks says: kept (RewriteXact), refused
//     (the analyzer, whose fix must not leave an unlock without its lock),
//     or rewritten per key (the driver, UnlocksRewrite): the unlock of a key
//     the transaction holds through a rewrite (a rewritten lock earlier in
//     the text, or RewriteOptions.Taken) becomes the xact try-lock of that
//     key, true, the lock kept until COMMIT or ROLLBACK; any other unlock
//     becomes a call that returns what PostgreSQL's unlock returns for a key
//     not held (false, NULL for a NULL key) and takes nothing, its arguments
//     left uncast so that the server resolves them as it would the
//     unlock's; pg_advisory_unlock_all() becomes pg_sleep(0);
//   - a function named other than by a call (attribute notation, a
//     reference) is not rewritten: that is an error.
//
// RewriteCalls checks its output by scanning it again. RewriteXact is
// RewriteCalls on what Scan finds, keeping unlocks.
package lockscan
