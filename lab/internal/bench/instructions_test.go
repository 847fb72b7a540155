package bench

import (
	"strings"
	"testing"
)

// cachegrindOut is a cachegrind output file as valgrind 3.19 writes it
// with --cache-sim=no: a function may come back under another file.
const cachegrindOut = `desc: I1 cache:         32768 B, 64 B, 8-way associative
cmd: ./x.test -test.bench X -test.benchtime 1000x
events: Ir
fl=/usr/local/go/src/runtime/malloc.go
fn=runtime.mallocgc
1065 120
1070 30
fl=/work/wire.go
fn=github.com/pgadvisory/pgadvisory.(*guardConn).Write
237 40
fn=github.com/jackc/pgx/v5/pgconn.(*PgConn).Exec
fi=/root/go/pkg/mod/github.com/jackc/pgx/v5@v5.12.0/pgconn/pgconn.go
1200 10
fl=/usr/local/go/src/runtime/proc.go
fn=runtime.mallocgc
12 5
summary: 205
`

func TestParseCachegrind(t *testing.T) {
	counts, total, err := ParseCachegrind(strings.NewReader(cachegrindOut))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		"runtime.mallocgc": 155,
		"github.com/pgadvisory/pgadvisory.(*guardConn).Write": 40,
		"github.com/jackc/pgx/v5/pgconn.(*PgConn).Exec":       10,
	}
	if total != 205 || len(counts) != len(want) {
		t.Fatalf("total %d, counts %v; want 205 and %v", total, counts, want)
	}
	for fn, n := range want {
		if counts[fn] != n {
			t.Errorf("%s: %d instructions, want %d", fn, counts[fn], n)
		}
	}
}

func TestParseCachegrindRefuses(t *testing.T) {
	for name, text := range map[string]string{
		"cache simulation": strings.Replace(cachegrindOut, "events: Ir", "events: Ir I1mr ILmr", 1),
		"no summary":       strings.Replace(cachegrindOut, "summary: 205\n", "", 1),
		"wrong summary":    strings.Replace(cachegrindOut, "summary: 205", "summary: 206", 1),
		"no events":        strings.Replace(cachegrindOut, "events: Ir\n", "", 1),
		"count outside fn": "events: Ir\n1 2\nsummary: 2\n",
		"bad count":        strings.Replace(cachegrindOut, "1070 30", "1070 3x", 1),
	} {
		if _, _, err := ParseCachegrind(strings.NewReader(text)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestPerCycle(t *testing.T) {
	short := map[string]int64{"runtime.mallocgc": 1000, "main.setup": 500, "github.com/jackc/pgx/v5.(*Conn).Exec": 300}
	long := map[string]int64{"runtime.mallocgc": 5000, "main.setup": 500, "github.com/jackc/pgx/v5.(*Conn).Exec": 1100,
		"github.com/pgadvisory/pgadvisory.(*guardConn).Read": 400, "github.com/pgadvisory/pgadvisory/advisory/pgxadvisory_test.init.func1": 800}
	per, err := PerCycle(short, long, 100, 500)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"runtime.mallocgc": 10, "github.com/jackc/pgx/v5.(*Conn).Exec": 2, "github.com/pgadvisory/pgadvisory.(*guardConn).Read": 1,
		"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory_test.init.func1": 2}
	if len(per) != len(want) {
		t.Fatalf("per cycle %v, want %v (setup cancels out)", per, want)
	}
	for fn, v := range want {
		if per[fn] != v {
			t.Errorf("%s: %v per cycle, want %v", fn, per[fn], v)
		}
	}
	by := InstructionsByLayer(per)
	if by[LayerRuntime] != 10 || by[LayerPgx] != 2 || by[LayerPgadvisory] != 1 || by[LayerOther] != 2 {
		t.Errorf("by layer %v", by)
	}
	if _, err := PerCycle(short, long, 500, 500); err == nil {
		t.Error("equal iteration counts: no error")
	}
}

func TestLargestDeltas(t *testing.T) {
	base := map[string]float64{"a": 10, "b": 5, "c": 1}
	cell := map[string]float64{"a": 12, "b": 15, "d": 4}
	got := LargestDeltas(base, cell, 3)
	want := []FunctionDelta{{"b", 5, 15}, {"d", 0, 4}, {"a", 10, 12}}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: %v, want %v", i, got[i], want[i])
		}
	}
}
