//go:build !cgo

package lockscan

import (
	"errors"
	"fmt"
	"sync"
	"time"

	pgquery "github.com/wasilibs/go-pgquery"
	pgqparser "github.com/wasilibs/go-pgquery/parser"
)

// backendName names the parser this build uses.
const backendName = "go-pgquery (WebAssembly, no cgo)"

// Without cgo, PostgreSQL's parser is libpg_query compiled to WebAssembly
// (github.com/wasilibs/go-pgquery) and run by wazero. Each module instance
// costs a compilation of the whole module (seconds of CPU), and go-pgquery
// creates a new one whenever all existing ones are busy. So this package
// uses exactly one instance and serialises calls on it (wasmMu): a parse
// takes about 0.1 ms, and the cache and the pre-filter keep parses rare. The
// instance is created by Warm, or by the first parse.
var (
	wasmMu   sync.Mutex
	warmOnce sync.Once
	// trapped is set (under wasmMu) once the instance trapped: a trap
	// leaves the module's stack pointer where it failed, and go-pgquery
	// keeps the instance, so every later call would fail or worse. From
	// then on every parse fails (closed) with errTrapped.
	trapped error
)

// MaxNesting is the deepest estimated nesting the scanner parses; see
// nestingError. The WebAssembly module's own stack is much smaller than a
// thread's, and a stack overflow there traps (and disables the instance,
// see trapped): measured with TestNestingProbe, the first trap came at an
// estimate of 391 (nested function calls), 571 (sub-selects) and 620
// (operator chains). The limit stays at under two thirds of the smallest.
const MaxNesting = 250

// MaxPlNesting is the deepest nesting of PL/pgSQL blocks (BEGIN, IF, LOOP,
// CASE) the scanner parses. The WebAssembly build's PL/pgSQL parser stops
// at about 70 levels with "memory exhausted", an error, not a trap.
const MaxPlNesting = 60

// directDepth and directPlLen exist for the cgo build; the WebAssembly
// stack is not the thread's.
const (
	directDepth = 1 << 30
	directPlLen = 1 << 30
)

// warmTook is how long warm-up took (read after warmOnce).
var warmTook time.Duration

func warm() {
	warmOnce.Do(func() {
		wasmMu.Lock()
		defer wasmMu.Unlock()
		start := time.Now()
		_, _ = pgquery.ParseToJSON("SELECT 1")
		warmTook = time.Since(start)
	})
}

// startupCost returns how long Warm took in this process.
func startupCost() time.Duration {
	warm()
	return warmTook
}

// wasmCall runs fn on the instance. A trap in the WebAssembly code (it
// should not happen: nesting is bounded before parsing) panics in wazero;
// it is returned as an error so the statement counts as unscannable.
func wasmCall(fn func() (string, error)) (out string, err error) {
	warm()
	wasmMu.Lock()
	defer wasmMu.Unlock()
	if trapped != nil {
		return "", trapped
	}
	defer func() {
		if r := recover(); r != nil {
			trapped = fmt.Errorf("lockscan: the WebAssembly parser trapped and is disabled for this process: %v", r)
			out, err = "", trapped
		}
	}()
	return fn()
}

func parseToJSON(text string, depth int) (string, error) {
	return wasmCall(func() (string, error) { return pgquery.ParseToJSON(text) })
}

func parsePlPgSQLToJSON(stmt string) (string, error) {
	return wasmCall(func() (string, error) { return pgquery.ParsePlPgSqlToJSON(stmt) })
}

func cursorPos(err error) int {
	var pe *pgqparser.Error
	if errors.As(err, &pe) {
		return pe.Cursorpos
	}
	return 0
}
