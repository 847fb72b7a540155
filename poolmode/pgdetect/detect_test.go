package pgdetect

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

func TestDetectDeclaredNoRoundTrip(t *testing.T) {
	// A nil connection proves that nothing is sent.
	m, ev, err := Detect(context.Background(), nil, Options{Declared: poolmode.Session})
	if err != nil || m != poolmode.Session || ev.Source != poolmode.SourceDeclared {
		t.Fatalf("Detect declared = %v %v %v", m, ev, err)
	}
	if _, _, err := Detect(context.Background(), nil, Options{Declared: poolmode.Mode(42)}); err == nil {
		t.Error("invalid declared mode accepted")
	}
	if _, _, err := Detect(context.Background(), nil, Options{}); err == nil {
		t.Error("nil connection accepted")
	}
}

func showPools(rows ...[3]string) *pgconn.Result {
	r := &pgconn.Result{FieldDescriptions: []pgconn.FieldDescription{{Name: "database"}, {Name: "user"}, {Name: "cl_active"}, {Name: "pool_mode"}}}
	for _, row := range rows {
		r.Rows = append(r.Rows, [][]byte{[]byte(row[0]), []byte(row[1]), []byte("0"), []byte(row[2])})
	}
	return r
}

func TestFindPool(t *testing.T) {
	r := showPools([3]string{"pgbouncer", "pgbouncer", "statement"}, [3]string{"app", "app", "transaction"}, [3]string{"app", "other", "session"})
	if got, err := findPool(r, "app", "app"); err != nil || got != "transaction" {
		t.Errorf("findPool(app, app) = %q, %v", got, err)
	}
	if _, err := findPool(r, "nope", "app"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("missing pool: err = %v", err)
	}
	if _, err := findPool(r, "app", ""); err == nil {
		t.Error("ambiguous pool accepted")
	}
	if _, err := findPool(&pgconn.Result{FieldDescriptions: []pgconn.FieldDescription{{Name: "database"}}}, "a", "b"); err == nil {
		t.Error("missing columns accepted")
	}
}

func TestParsePoolerMode(t *testing.T) {
	for in, want := range map[string]poolmode.Mode{"session": poolmode.Session, "Transaction": poolmode.Transaction, " statement ": poolmode.Statement} {
		if got, err := parsePoolerMode(in); err != nil || got != want {
			t.Errorf("parsePoolerMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := parsePoolerMode("direct"); err == nil {
		t.Error("a pooler cannot report direct")
	}
}
