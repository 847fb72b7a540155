package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgadvisory/pgadvisory/internal/cli"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

func TestInstructionsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"extra"},
		{"-cells", "e,z"},
		{"-cells", "e,e"},
		{"-cells", ""},
		{"-cycles", "5000"},
		{"-cycles", "5000,1000"},
		{"-cycles", "0,10"},
		{"-cycles", "a,b"},
		{"-top", "-1"},
	} {
		var out, errOut bytes.Buffer
		err := runInstructions(context.Background(), args, &out, &errOut)
		var ue cli.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("args %q: err = %v, want usageError", args, err)
		}
	}
}

func TestInstructionsRoot(t *testing.T) {
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{t.TempDir(), other} {
		var out, errOut bytes.Buffer
		err := runInstructions(context.Background(), []string{"-root", root}, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), "go.mod") {
			t.Errorf("-root %s: err = %v, want one about its go.mod", root, err)
		}
	}
}

func TestWriteInstructions(t *testing.T) {
	cells := []lockCell{lockCells[0], lockCells[1]}
	perCell := []map[string]float64{
		{"runtime.mallocgc": 1000, "github.com/jackc/pgx/v5.(*Conn).Exec": 2000, "syscall.Syscall6": 100},
		{"runtime.mallocgc": 1500, "github.com/jackc/pgx/v5.(*Conn).Exec": 2000, "syscall.Syscall6": 100,
			"github.com/pgadvisory/pgadvisory.(*guardConn).Write": 300},
	}
	var out bytes.Buffer
	writeInstructions(&out, cells, perCell, 1000, 5000, 2)
	for _, want := range []string{
		"| (e) " + lockCells[0].name + " | 3100 | 1000 | 2100 | 0 | 2000 | 0 | 100 | 1.000 |",
		"| (l) " + lockCells[1].name + " | 3900 | 1500 | 2400 | 300 | 2000 | 0 | 100 | 1.143 |",
		"| `runtime.mallocgc` | 1000 | 1500 | +500 |",
		"| `github.com/pgadvisory/pgadvisory.(*guardConn).Write` | 0 | 300 | +300 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestInstructionsSmoke counts two cells for a few cycles under valgrind:
// the guard's code shows in the guarded cell only.
func TestInstructionsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs valgrind and the harness")
	}
	if _, err := exec.LookPath("valgrind"); err != nil {
		if os.Getenv(pgbouncer.RequireEnv) != "" {
			t.Fatalf("%s is set and valgrind is missing: %v", pgbouncer.RequireEnv, err)
		}
		t.Skip("valgrind not installed")
	}
	var out, errOut bytes.Buffer
	err := runInstructions(t.Context(), []string{"-cells", "e,l", "-cycles", "20,60", "-top", "3", "-root", "../../.."}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	rows := map[string][]string{}
	for line := range strings.Lines(out.String()) {
		if f := strings.Split(line, "|"); len(f) > 8 && strings.HasPrefix(strings.TrimSpace(f[1]), "(") {
			rows[strings.TrimSpace(f[1])[:3]] = f
		}
	}
	e, l := rows["(e)"], rows["(l)"]
	if e == nil || l == nil {
		t.Fatalf("no rows for (e) and (l):\n%s", out.String())
	}
	// Columns: cell, total, Go runtime, outside, pgadvisory, pgx, database/sql, other, ratio.
	if got := strings.TrimSpace(e[5]); got != "0" {
		t.Errorf("(e), a plain pgxpool, runs %s instructions of pgadvisory per cycle, want 0", got)
	}
	if got := strings.TrimSpace(l[5]); got == "0" || strings.HasPrefix(got, "-") {
		t.Errorf("(l), a guarded pgxpool, runs %s instructions of pgadvisory per cycle, want some", got)
	}
}
