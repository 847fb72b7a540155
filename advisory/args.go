package advisory

import (
	"context"
	"fmt"
	"reflect"
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
