//go:build cgo

package lockscan

import (
	"strings"
	"testing"
)

// TestSmallStack: with cgo a parse runs on the caller's thread, whose
// stack musl (Alpine) makes 128 KiB. Every statement the scanner parses on
// the caller's thread — estimated nesting up to directDepth, PL/pgSQL
// statements up to directPlLen bytes — is parsed here on a thread with a
// 128 KiB stack, for every construct of the nesting tests, as deep as the
// direct path allows; a stack overflow would kill the test binary. Deeper
// statements run on the scanner's own 8 MB thread.
func TestSmallStack(t *testing.T) {
	testStack = 128 << 10
	defer func() { testStack = 0 }()
	for _, c := range append(append([]nestCase{}, nestCases...), extraNestCases...) {
		n := 1
		for {
			if est, _ := estimateNesting(c.build(n+1), 1<<30); est > directDepth {
				break
			}
			n++
		}
		q := c.build(n)
		est, _ := estimateNesting(q, 1<<30)
		if _, err := parseToJSON(q, est); err != nil && !strings.Contains(err.Error(), "memory exhausted") {
			t.Errorf("%s: n=%d estimate %d on 128 KiB: %v", c.name, n, est, err)
		}
	}
	for _, c := range plNestCases {
		n := 1
		for len(c.build(n+1)) <= directPlLen {
			n++
		}
		q := c.build(n)
		plMu.Lock()
		_, err := parsePlPgSQLToJSON(q)
		plMu.Unlock()
		if err != nil {
			t.Errorf("%s: %d levels (%d bytes) on 128 KiB: %v", c.name, n, len(q), err)
		}
		t.Logf("%s: %d PL/pgSQL levels in %d bytes parsed on 128 KiB", c.name, n, len(q))
	}
	testStack = 0

	// Beyond the direct path: the scanner's own thread.
	before := ownThreadParses.Load()
	q := nestCases[0].build(MaxNesting - 10)
	r, err := NewScanner(-1).Scan(q)
	if err != nil || len(r.Calls) != 1 {
		t.Fatalf("plus at %d: %v, %v", MaxNesting-10, r, err)
	}
	if ownThreadParses.Load() == before {
		t.Errorf("a statement nested %d deep was parsed on the caller's thread", MaxNesting-10)
	}
}
