package lockscan

// funcInfo classifies one advisory-lock function of pg_catalog.
type funcInfo struct {
	scope  Scope
	op     Op
	shared bool
}

// advisoryFuncs lists every advisory-lock function PostgreSQL has (the same
// set from 9.1 to 17). Each lock, try-lock and unlock function exists with
// one bigint argument and with two integer arguments; pg_advisory_unlock_all
// takes none. There are no transaction-level unlock functions.
var advisoryFuncs = map[string]funcInfo{
	"pg_advisory_lock":                 {ScopeSession, OpLock, false},
	"pg_advisory_lock_shared":          {ScopeSession, OpLock, true},
	"pg_try_advisory_lock":             {ScopeSession, OpTryLock, false},
	"pg_try_advisory_lock_shared":      {ScopeSession, OpTryLock, true},
	"pg_advisory_unlock":               {ScopeSession, OpUnlock, false},
	"pg_advisory_unlock_shared":        {ScopeSession, OpUnlock, true},
	"pg_advisory_unlock_all":           {ScopeSession, OpUnlockAll, false},
	"pg_advisory_xact_lock":            {ScopeXact, OpLock, false},
	"pg_advisory_xact_lock_shared":     {ScopeXact, OpLock, true},
	"pg_try_advisory_xact_lock":        {ScopeXact, OpTryLock, false},
	"pg_try_advisory_xact_lock_shared": {ScopeXact, OpTryLock, true},
}

// xactTwins maps a session-level lock or try-lock function to the
// transaction-level function with the same arguments and lock mode.
var xactTwins = map[string]string{
	"pg_advisory_lock":            "pg_advisory_xact_lock",
	"pg_advisory_lock_shared":     "pg_advisory_xact_lock_shared",
	"pg_try_advisory_lock":        "pg_try_advisory_xact_lock",
	"pg_try_advisory_lock_shared": "pg_try_advisory_xact_lock_shared",
}

// Functions that run SQL given as text. The list is the result of an audit
// of PostgreSQL 15, 16 and 17's documentation (chapter 9, "Functions and
// Operators", and appendix F, "Additional Supplied Modules and
// Extensions"); each entry names its section. Functions that run only
// catalog-defined SQL (table_to_xml, schema_to_xml and database_to_xml read
// tables and views by OID, as a SELECT would) are not on it: the scanner
// cannot see what views do anyway (see the package documentation).

// extensionQueryFuncs are functions of contrib extensions, which run SQL
// text in the calling backend or on a connection it holds. They count in
// any schema: extensions are installed wherever the DBA chose.
var extensionQueryFuncs = map[string]string{
	// F "dblink — connect to other PostgreSQL databases": dblink(sql),
	// dblink_exec, dblink_open (DECLARE a cursor for sql), dblink_fetch
	// (runs the cursor's query further) and dblink_send_query send SQL text
	// over a connection this backend keeps open after the client leaves.
	"dblink":            DynamicDblink,
	"dblink_exec":       DynamicDblink,
	"dblink_open":       DynamicDblink,
	"dblink_fetch":      DynamicDblink,
	"dblink_send_query": DynamicDblink,
	// F "tablefunc — functions that return tables (crosstab and others)":
	// crosstab(source_sql [, category_sql]) and crosstabN(source_sql) run
	// their text arguments; connectby pastes its relation and column names
	// into the queries it runs.
	"crosstab":  DynamicQueryFunc,
	"crosstab2": DynamicQueryFunc,
	"crosstab3": DynamicQueryFunc,
	"crosstab4": DynamicQueryFunc,
	"connectby": DynamicQueryFunc,
	// F "xml2 — XPath querying and XSLT functionality": xpath_table pastes
	// its relation and criteria arguments into the query it runs.
	"xpath_table": DynamicQueryFunc,
}

// queryFuncs are pg_catalog functions that run a query given as text in the
// calling session.
var queryFuncs = map[string]bool{
	// 9.15.4 "Mapping Tables to XML": query_to_xml(query text, ...),
	// query_to_xmlschema, query_to_xml_and_xmlschema run the query;
	// cursor_to_xml and cursor_to_xmlschema fetch from a cursor by name,
	// which runs (more of) its query, possibly declared by PL/pgSQL in a
	// string the scanner never saw.
	"query_to_xml":               true,
	"query_to_xmlschema":         true,
	"query_to_xml_and_xmlschema": true,
	"cursor_to_xml":              true,
	"cursor_to_xmlschema":        true,
	// 9.13 "Text Search Functions and Operators" (and 12.4.4, 12.4.2.1):
	// ts_stat(sqlquery text [, weights]) runs its query; ts_rewrite(query
	// tsquery, select text) runs select (the three-argument form does not;
	// see tsRewriteRuns).
	"ts_stat":    true,
	"ts_rewrite": true,
}

// tsRewriteRuns reports whether a call of ts_rewrite with nargs arguments
// (-1: unknown) may run SQL text: every form but the three-argument one.
func tsRewriteRuns(nargs int) bool { return nargs != 3 }
