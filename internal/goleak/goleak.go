// Package goleak finds goroutines a test left running: the part of
// go.uber.org/goleak's API that this module's tests use (VerifyNone,
// IgnoreCurrent), with the same default filters, on the standard library
// alone.
//
// It exists so that the library module requires no module for its tests
// alone: every requirement of the module's go.mod appears in the module
// graph of each program that imports it.
package goleak

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// TestingT is the part of testing.TB that VerifyNone uses.
type TestingT interface {
	Error(args ...any)
}

// Option changes what VerifyNone ignores.
type Option func(*opts)

type opts struct {
	filters []func(stack) bool
}

// IgnoreCurrent ignores the goroutines running when it is called.
func IgnoreCurrent() Option {
	ids := map[int]bool{}
	for _, s := range all() {
		ids[s.id] = true
	}
	return func(o *opts) {
		o.filters = append(o.filters, func(s stack) bool { return ids[s.id] })
	}
}

// IgnoreTopFunction ignores goroutines whose innermost function is f
// (a qualified name such as "net/http.(*persistConn).readLoop").
func IgnoreTopFunction(f string) Option {
	return func(o *opts) {
		o.filters = append(o.filters, func(s stack) bool { return s.first == f })
	}
}

// VerifyNone fails t when goroutines other than the caller's and the
// ignored ones are still running after retries for about a second.
func VerifyNone(t TestingT, options ...Option) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	if err := Find(options...); err != nil {
		t.Error(err)
	}
}

// Find returns an error that lists the goroutines VerifyNone would report.
func Find(options ...Option) error {
	o := &opts{filters: []func(stack) bool{isTestStack, isSyscallStack, isStdLibStack, isTraceStack}}
	for _, opt := range options {
		opt(o)
	}
	self := current().id
	const retries = 20
	var leaked []stack
	for i := 0; ; i++ {
		leaked = leaked[:0]
		for _, s := range all() {
			if s.id != self && !o.ignored(s) {
				leaked = append(leaked, s)
			}
		}
		if len(leaked) == 0 {
			return nil
		}
		if i >= retries {
			break
		}
		time.Sleep(min(time.Microsecond<<i, 100*time.Millisecond))
	}
	var b strings.Builder
	b.WriteString("found unexpected goroutines:\n")
	for _, s := range leaked {
		fmt.Fprintf(&b, "Goroutine %d in state %s, with %s on top of the stack:\n%s\n", s.id, s.state, s.first, s.full)
	}
	return fmt.Errorf("%s", b.String())
}

func (o *opts) ignored(s stack) bool {
	for _, f := range o.filters {
		if f(s) {
			return true
		}
	}
	return false
}

// The default filters, as goleak's: the testing package's own goroutines,
// cgo's system-call goroutines, os/signal's, and the tracer's.
func isTestStack(s stack) bool {
	switch s.first {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runFuzzing", "testing.runFuzzTests":
		return strings.HasPrefix(s.state, "chan receive")
	}
	return false
}

func isSyscallStack(s stack) bool {
	return s.funcs["runtime.goexit"] && strings.HasPrefix(s.state, "syscall")
}

func isStdLibStack(s stack) bool {
	return s.first == "os/signal.signal_recv" || s.first == "os/signal.loop" || s.funcs["runtime.ensureSigM"]
}

func isTraceStack(s stack) bool { return s.funcs["runtime.ReadTrace"] }

// stack is one goroutine of a runtime.Stack dump.
type stack struct {
	id    int
	state string          // "running", "chan receive", ...
	first string          // innermost function
	funcs map[string]bool // every function on the stack
	full  string
}

func all() []stack { return parse(dump(true)) }

func current() stack { return parse(dump(false))[0] }

func dump(allGoroutines bool) string {
	for n := 64 << 10; ; n *= 2 {
		buf := make([]byte, n)
		if m := runtime.Stack(buf, allGoroutines); m < n {
			return string(buf[:m])
		}
	}
}

// parse reads goroutines in runtime.Stack's format:
//
//	goroutine 7 [chan receive, 2 minutes]:
//	pkg.fn(0x1, ...)
//		/path/file.go:12 +0x34
//	created by pkg.start in goroutine 1
//		/path/file.go:30 +0x56
func parse(dump string) []stack {
	var stacks []stack
	for _, g := range strings.Split(strings.TrimSpace(dump), "\n\n") {
		lines := strings.Split(g, "\n")
		header, ok := strings.CutPrefix(lines[0], "goroutine ")
		if !ok {
			continue
		}
		idText, rest, _ := strings.Cut(header, " [")
		id, err := strconv.Atoi(idText)
		if err != nil {
			continue
		}
		state, _, _ := strings.Cut(strings.TrimSuffix(rest, "]:"), ",")
		s := stack{id: id, state: state, funcs: map[string]bool{}, full: g}
		for _, l := range lines[1:] {
			if l == "" || l[0] == '\t' || strings.HasPrefix(l, "created by ") || strings.HasPrefix(l, "...") {
				continue
			}
			fn := l
			if i := strings.LastIndexByte(fn, '('); i > 0 {
				fn = fn[:i]
			}
			s.funcs[fn] = true
			if s.first == "" {
				s.first = fn
			}
		}
		stacks = append(stacks, s)
	}
	return stacks
}
