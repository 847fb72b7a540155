package pgadvisory

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

// TestSessionLockErrorText: one line, what was refused and why, then the
// fixes that apply to the case; the statement and position stay in fields.
func TestSessionLockErrorText(t *testing.T) {
	const q = "SELECT pg_advisory_lock(42)"
	cases := []struct {
		name    string
		err     SessionLockError
		want    []string
		notWant []string
	}{
		{"reject-lock", SessionLockError{Func: "pg_advisory_lock", Query: q, Position: 8, Mode: poolmode.Transaction, Twin: "pg_advisory_xact_lock"},
			[]string{"pgadvisory: pg_advisory_lock refused under transaction pooling: ", "call pg_advisory_xact_lock inside a transaction (advisory.WithXactLock)", "set pgadvisory_policy=hold"},
			[]string{"position", q, "assumed"}},
		{"reject-unlock", SessionLockError{Func: "pg_advisory_unlock", Mode: poolmode.Transaction},
			[]string{"pg_advisory_unlock refused under transaction pooling: the unlock would run on whichever server connection", "pg_advisory_xact_lock", "pgadvisory_policy=hold"}, nil},
		{"assumed", SessionLockError{Func: "pg_advisory_lock", Mode: poolmode.Transaction, Twin: "pg_advisory_xact_lock", Assumed: true},
			[]string{"transaction pooling (assumed: pool mode unknown)", "pgadvisory_policy=hold", "declare pgadvisory_pool_mode=session"}, nil},
		{"hold-not-lone", SessionLockError{Func: "pg_advisory_lock", Mode: poolmode.Transaction, Policy: PolicyHold, Twin: "pg_advisory_xact_lock"},
			[]string{"as a statement of its own", "SELECT pg_advisory_lock($1)", "policy hold keeps"}, []string{"set pgadvisory_policy=hold"}},
		{"rewrite-autocommit", SessionLockError{Func: "pg_try_advisory_lock", Mode: poolmode.Transaction, Policy: PolicyRewrite, Twin: "pg_try_advisory_xact_lock"},
			[]string{"pg_try_advisory_xact_lock", "policy rewrite keeps"}, nil},
		{"statement", SessionLockError{Func: "pg_advisory_lock", Mode: poolmode.Statement, Twin: "pg_advisory_xact_lock"},
			[]string{"under statement pooling", "pool in transaction or session mode"}, []string{"hold", "xact"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q lacks %q", msg, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(msg, w) {
					t.Errorf("%q has %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") || strings.Count(msg, "(") > 3 {
				t.Errorf("%q: not one plain line", msg)
			}
			if !errors.Is(&tc.err, ErrSessionLock) {
				t.Error("does not match ErrSessionLock")
			}
		})
	}
}

// TestAssumedWarningByPolicy: the once-per-process line says what the
// policy in force does; under hold, rewrite, warn and allow nothing is
// refused.
func TestAssumedWarningByPolicy(t *testing.T) {
	want := map[Policy]string{
		PolicyReject:  "refused (policy reject)",
		PolicyHold:    "held for their connection when a statement is one lock call (policy hold)",
		PolicyRewrite: "rewritten to transaction-level locks inside transactions and held in autocommit when a statement is one lock call (policy rewrite)",
		PolicyWarn:    "logged and sent (policy warn)",
		PolicyAllow:   "sent (policy allow)",
	}
	for p, w := range want {
		msg := assumedWarning(poolerUnknown, p, declareHint)
		if !strings.Contains(msg, "session-level advisory lock calls are "+w+";") {
			t.Errorf("%s: %q lacks %q", p, msg, w)
		}
		if p != PolicyReject && strings.Contains(msg, "refused") {
			t.Errorf("%s: %q says refused", p, msg)
		}
		for _, k := range []string{ParamPoolMode, ParamAdminUser, ParamAdminPassword} {
			if !strings.Contains(msg, k) {
				t.Errorf("%s: %q does not name %s", p, msg, k)
			}
		}
	}
}

// TestUnknownParamListsAll: the error names every parameter the driver
// takes.
func TestUnknownParamListsAll(t *testing.T) {
	_, err := NewConnector("host=h user=u pgadvisory_polcy=reject")
	if err == nil {
		t.Fatal("no error")
	}
	for _, k := range []string{ParamPoolMode, ParamPolicy, ParamDynamic, ParamLeakAction, ParamPreparedStatements,
		ParamAdminDSN, ParamAdminUser, ParamAdminPassword, ParamAdminHost, ParamAdminPort, ParamAdminDatabase,
		ParamPipelineBegin, ParamHoldMaxPerConn, ParamHoldMax} {
		if !strings.Contains(err.Error(), k) {
			t.Errorf("%q does not list %s", err, k)
		}
		// Each listed parameter is one applyParam takes.
		if err := new(config).applyParam(k, "x"); err != nil && strings.Contains(err.Error(), "unknown DSN parameter") {
			t.Errorf("%s is listed but unknown to applyParam", k)
		}
	}
}

// TestParamValuesAnyCase: values are read in any letter case, for every
// parameter with named values.
func TestParamValuesAnyCase(t *testing.T) {
	c, err := NewConnector("host=h user=u pgadvisory_policy=HOLD pgadvisory_dynamic=Reject pgadvisory_leak_action=KEEP pgadvisory_pool_mode=Transaction pgadvisory_pipeline_begin=FALSE pgadvisory_prepared_statements=True")
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.policy != PolicyHold || c.cfg.dynamic != DynamicReject || c.cfg.leakAction != LeakKeep ||
		c.cfg.declared != poolmode.Transaction || c.cfg.pipelineBegin || !c.cfg.preparedOK {
		t.Errorf("settings: %+v", c.cfg)
	}
	if c, err := NewConnector("host=h user=u pgadvisory_pool_mode=AUTO"); err != nil || c.cfg.declared != poolmode.Unknown {
		t.Errorf("pool_mode AUTO: %v", err)
	}
	if p, err := ParsePolicy("Rewrite"); err != nil || p != PolicyRewrite {
		t.Errorf("ParsePolicy(Rewrite) = %v, %v", p, err)
	}
}

// TestPlaceholderHint: a syntax error at or after a '?' gets the sqlxbind
// hint and still unwraps to the server's error; other errors pass as they
// are.
func TestPlaceholderHint(t *testing.T) {
	pg := func(pos int32) error { return &pgconn.PgError{Code: "42601", Message: "syntax error", Position: pos} }
	cases := []struct {
		query string
		err   error
		hint  bool
	}{
		{"INSERT INTO t (a, b) VALUES (?, ?)", pg(31), true},           // at ","
		{"SELECT * FROM t WHERE id = ?", pg(29), true},                 // at end of input
		{"SELECT * FROM t WHERE id = ? AND b = ?", pg(30), true},       // at "AND"
		{"SELECT 'é' FROM t WHERE id = ?", pg(31), true},               // positions count characters
		{"SELECT * FROM t WHERE id = $1 AND b = '?' x", pg(43), false}, // at x: no '?' next to it
		{"SELECT * FROM t WHERE id = ?", &pgconn.PgError{Code: "42P01", Position: 15}, false},
		{"SELECT * FROM t WHERE id = ?", errors.New("conn closed"), false},
		{"SELECT 1 x y", pg(12), false},
	}
	for _, tc := range cases {
		got := placeholderHint(tc.query, tc.err)
		hinted := strings.Contains(got.Error(), "sqlxbind")
		if hinted != tc.hint {
			t.Errorf("%q: hint %v, want %v (%v)", tc.query, hinted, tc.hint, got)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%q: %v does not unwrap to the original error", tc.query, got)
		}
	}
	if placeholderHint("SELECT ?", nil) != nil {
		t.Error("nil error turned into an error")
	}
}
