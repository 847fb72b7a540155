package poolmode

import (
	"strings"
	"testing"
)

func TestParseRoundTrip(t *testing.T) {
	for m := Unknown; m <= Statement; m++ {
		got, err := Parse(strings.ToUpper(m.String()))
		if err != nil || got != m {
			t.Errorf("Parse(%q) = %v, %v; want %v", strings.ToUpper(m.String()), got, err, m)
		}
	}
	if _, err := Parse("pgcat"); err == nil || !strings.Contains(err.Error(), "accepted: unknown, direct, session, transaction, statement") {
		t.Fatalf("Parse(pgcat) error = %v", err)
	}
	if s := Mode(42).String(); s != "poolmode.Mode(42)" {
		t.Fatalf("String of an invalid mode = %q", s)
	}
}

func TestSafety(t *testing.T) {
	for _, tc := range []struct {
		m                     Mode
		sessionSafe, xactSafe bool
	}{
		{Unknown, false, false},
		{Direct, true, true},
		{Session, true, true},
		{Transaction, false, true},
		{Statement, false, false},
	} {
		t.Run(tc.m.String(), func(t *testing.T) {
			if got := tc.m.SessionLocksSafe(); got != tc.sessionSafe {
				t.Errorf("SessionLocksSafe = %v", got)
			}
			if got := tc.m.TransactionsSafe(); got != tc.xactSafe {
				t.Errorf("TransactionsSafe = %v", got)
			}
		})
	}
}
