//go:build cgo

package lockscan

/*
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

// The declarations of pg_query.h (libpg_query 17, vendored by pg_query_go
// v6) that this file uses. The functions are linked from pg_query_go's
// parser package.
typedef struct {
	char* message;
	char* funcname;
	char* filename;
	int lineno;
	int cursorpos;
	char* context;
} PgQueryError;

typedef struct {
	char* parse_tree;
	char* stderr_buffer;
	PgQueryError* error;
} PgQueryParseResult;

typedef struct {
	char* plpgsql_funcs;
	PgQueryError* error;
} PgQueryPlpgsqlParseResult;

PgQueryParseResult pg_query_parse(const char* input);
PgQueryParseResult pg_query_parse_opts(const char* input, int parser_options);
PgQueryPlpgsqlParseResult pg_query_parse_plpgsql(const char* input);
void pg_query_free_parse_result(PgQueryParseResult result);
void pg_query_free_plpgsql_parse_result(PgQueryPlpgsqlParseResult result);

typedef struct {
	const char* input;
	int plpgsql;
	PgQueryParseResult sql;
	PgQueryPlpgsqlParseResult pl;
} lockscan_job;

static void* lockscan_thread(void* p) {
	lockscan_job* j = (lockscan_job*)p;
	if (j->plpgsql) {
		j->pl = pg_query_parse_plpgsql(j->input);
	} else {
		j->sql = pg_query_parse(j->input);
	}
	return NULL;
}

// lockscan_parse_on_stack runs the parse on a new thread with a stack of
// the given size and waits for it. libpg_query keeps its memory contexts in
// thread-local storage and frees them when the thread exits. Signals are
// blocked in the new thread (it inherits the mask), as Go's runtime does for
// the threads it creates.
static int lockscan_parse_on_stack(lockscan_job* j, size_t stack) {
	pthread_attr_t a;
	pthread_t t;
	sigset_t all, old;
	int err;

	pthread_attr_init(&a);
	err = pthread_attr_setstacksize(&a, stack);
	if (err != 0) {
		pthread_attr_destroy(&a);
		return err;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&t, &a, lockscan_thread, j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	if (err != 0) {
		return err;
	}
	return pthread_join(t, NULL);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	pgparser "github.com/pganalyze/pg_query_go/v6/parser"
)

// backendName names the parser this build uses.
const backendName = "pg_query_go (cgo)"

// C stack. A cgo call runs on the stack of the calling thread, which Go
// creates with the C library's default size: 8 MB with glibc (the
// RLIMIT_STACK), 128 KiB with musl (Alpine). libpg_query's parser is a
// table-driven LR parser whose stack is on the heap, but it serialises the
// tree with recursive functions that do not check the stack. So a statement
// whose estimated nesting (estimateNesting, an upper bound of the tree
// depth) exceeds directDepth, and every PL/pgSQL function longer than
// directPlLen bytes (its block nesting is not estimated), is parsed on a
// thread of our own with a stack of parseStack bytes, whatever the C
// library; everything else is parsed on the caller's thread, which costs
// no thread start. Measured with TestNestingProbe on a 128 KiB stack
// (LOCKSCAN_PROBE_STACK=131072): the first crash came at an estimate of
// 851 (nested f(a + (SELECT ...)), 931 (sub-selects) and 950 (operator
// chains, function calls, NOT) and at 1,270 PL/pgSQL blocks, which need at
// least 14 bytes each: directDepth and directPlLen stay at under a third
// of that. TestSmallStack parses the deepest statements the direct path
// takes on a 128 KiB thread.
const (
	directDepth = 256
	directPlLen = 4 << 10
	parseStack  = 8 << 20
)

// MaxNesting is the deepest estimated nesting the scanner parses; see
// nestingError. With cgo it sits just under what PostgreSQL itself runs
// with its default max_stack_depth of 2MB (measured on PostgreSQL 15: about
// 4,080 chained additions, 7,700 nested NOTs) and uses about 0.5 MB of C
// stack in libpg_query, on the 8 MB thread of parseOwnThread beyond
// directDepth.
const MaxNesting = 4000

// MaxPlNesting is the deepest nesting of PL/pgSQL blocks (BEGIN, IF, LOOP,
// CASE) the scanner parses. On a 128 KiB stack libpg_query's PL/pgSQL
// serialiser crashed at about 1,270 levels; bodies longer than directPlLen
// run on the 8 MB thread anyway.
const MaxPlNesting = 1000

// ownThreadParses counts parses run on a thread of our own (for tests).
var ownThreadParses atomic.Uint64

// testStack, when set by a test, makes every parse run on a thread of our
// own with a stack of that many bytes: TestSmallStack and TestNestingProbe
// use it to run the parser on a musl-sized (128 KiB) stack.
var testStack int

// warm is a no-op with cgo: libpg_query needs no start-up.
func warm() {}

// startupCost is zero with cgo.
func startupCost() time.Duration { return 0 }

// parseToJSON parses SQL text; depth is its estimated nesting.
func parseToJSON(text string, depth int) (string, error) {
	if testStack > 0 {
		return parseOnStack(text, false, testStack)
	}
	if depth <= directDepth {
		return pg_query.ParseToJSON(text)
	}
	return parseOwnThread(text, false)
}

// parsePlPgSQLToJSON parses a DO block or CREATE FUNCTION statement with
// PL/pgSQL's parser. Callers serialise calls (see plMu).
func parsePlPgSQLToJSON(stmt string) (string, error) {
	if testStack > 0 {
		return parseOnStack(stmt, true, testStack)
	}
	if len(stmt) <= directPlLen {
		return pg_query.ParsePlPgSqlToJSON(stmt)
	}
	return parseOwnThread(stmt, true)
}

func parseOwnThread(text string, plpgsql bool) (string, error) {
	return parseOnStack(text, plpgsql, parseStack)
}

func parseOnStack(text string, plpgsql bool, stack int) (string, error) {
	ownThreadParses.Add(1)
	in := C.CString(text)
	defer C.free(unsafe.Pointer(in))
	j := (*C.lockscan_job)(C.calloc(1, C.size_t(unsafe.Sizeof(C.lockscan_job{}))))
	defer C.free(unsafe.Pointer(j))
	j.input = in
	if plpgsql {
		j.plpgsql = 1
	}
	if rc := C.lockscan_parse_on_stack(j, C.size_t(stack)); rc != 0 {
		return "", fmt.Errorf("lockscan: cannot start the parser thread (error %d)", int(rc))
	}
	if plpgsql {
		defer C.pg_query_free_plpgsql_parse_result(j.pl)
		if j.pl.error != nil {
			return "", goError(j.pl.error)
		}
		return C.GoString(j.pl.plpgsql_funcs), nil
	}
	defer C.pg_query_free_parse_result(j.sql)
	if j.sql.error != nil {
		return "", goError(j.sql.error)
	}
	return C.GoString(j.sql.parse_tree), nil
}

// goError converts a libpg_query error like pg_query_go does.
func goError(e *C.PgQueryError) error {
	out := &pgparser.Error{
		Message:   C.GoString(e.message),
		Lineno:    int(e.lineno),
		Cursorpos: int(e.cursorpos),
	}
	if e.funcname != nil {
		out.Funcname = C.GoString(e.funcname)
	}
	if e.filename != nil {
		out.Filename = C.GoString(e.filename)
	}
	if e.context != nil {
		out.Context = C.GoString(e.context)
	}
	return out
}

// cursorPos returns the 1-based character position of a parser error.
func cursorPos(err error) int {
	var pe *pgparser.Error
	if errors.As(err, &pe) {
		return pe.Cursorpos
	}
	return 0
}

// pgQueryDisableSCS is PG_QUERY_DISABLE_STANDARD_CONFORMING_STRINGS.
const pgQueryDisableSCS = 32

// parseSCSOffReference parses text as libpg_query does with
// standard_conforming_strings off. The scanner does not use it (the
// PL/pgSQL parser has no such option, and the WebAssembly build exports no
// pg_query_parse_opts): TestSCSOffDifferential checks rewriteSCS against
// it.
func parseSCSOffReference(text string) (string, error) {
	in := C.CString(text)
	defer C.free(unsafe.Pointer(in))
	r := C.pg_query_parse_opts(in, pgQueryDisableSCS)
	defer C.pg_query_free_parse_result(r)
	if r.error != nil {
		return "", goError(r.error)
	}
	return C.GoString(r.parse_tree), nil
}
