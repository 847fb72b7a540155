package advisory

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"unicode/utf8"
)

// badArgs reports a nil context or a nil handle — including a typed nil such
// as (*sql.DB)(nil) or (*sql.Tx)(nil) held in an interface, which would pass
// a plain == nil check and panic on first use. what names the handle in the
// error ("database handle", "transaction").
func badArgs(fn string, ctx context.Context, handle any, what string) error {
	if ctx == nil {
		return fmt.Errorf("advisory: %s: nil context", fn)
	}
	if isNil(handle) {
		return fmt.Errorf("advisory: %s: nil %s", fn, what)
	}
	return nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// foreign turns a runtime panic inside a database handle into an error:
// *sql.DB and *sql.Tx have no usable zero value (&sql.DB{} instead of
// sql.Open), and a foreign Querier may break database/sql's contract (a nil
// *sql.Row). Deferred only around code that runs none of the caller's
// callbacks, whose panics stay theirs.
func foreign(fn string, err *error) {
	p := recover()
	if p == nil {
		return
	}
	if re, ok := p.(runtime.Error); ok {
		*err = fmt.Errorf("advisory: %s: the database handle is not usable (%v): "+
			"make it with sql.Open or sql.OpenDB and begin transactions with its BeginTx", fn, re)
		return
	}
	panic(p)
}

// maxEcho is how many bytes of a caller's string an error message repeats.
const maxEcho = 64

// capInput shortens s for an error message: at most maxEcho bytes (cut at
// a rune boundary), then the total length, so that a huge or hostile value
// does not end up whole in logs.
func capInput(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
