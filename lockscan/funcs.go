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

// dblinkFuncs are the dblink extension functions that send SQL text to a
// connection held by this backend. They count in any schema: extensions
// are installed wherever the DBA chose.
var dblinkFuncs = map[string]bool{
	"dblink":            true,
	"dblink_exec":       true,
	"dblink_open":       true,
	"dblink_send_query": true,
}

// queryFuncs are pg_catalog functions that run a query given as text in the
// calling session.
var queryFuncs = map[string]bool{
	"query_to_xml":               true,
	"query_to_xmlschema":         true,
	"query_to_xml_and_xmlschema": true,
	"ts_stat":                    true,
}
