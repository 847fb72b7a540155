package bench

import (
	"context"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

func TestLayer(t *testing.T) {
	for _, tc := range []struct {
		want   string
		frames []string // leaf first
	}{
		{LayerSocketWrite, []string{"internal/runtime/syscall/linux.Syscall6", "syscall.RawSyscall6", "syscall.Syscall", "syscall.write",
			"internal/poll.(*FD).Write", "net.(*netFD).Write", "net.(*conn).Write", "github.com/jackc/pgx/v5/pgconn.(*PgConn).flushWithPotentialWriteReadDeadlock"}},
		{LayerSocketWrite, []string{"runtime.exitsyscall", "syscall.Syscall", "internal/poll.(*FD).Write"}}, // scheduler work on the way out of the call
		{LayerSocketRead, []string{"internal/runtime/syscall/linux.Syscall6", "syscall.Syscall", "syscall.read", "internal/poll.(*FD).Read",
			"net.(*conn).Read", "bufio.(*Reader).Read", "github.com/jackc/pgx/v5/pgproto3.(*chunkReader).Next"}},
		{LayerSyscall, []string{"internal/runtime/syscall/linux.Syscall6", "syscall.Syscall6", "syscall.EpollCtl", "internal/poll.(*FD).Init"}},
		{LayerSyscall, []string{"golang.org/x/sys/unix.Syscall", "golang.org/x/sys/unix.Getrusage", "main.main"}},
		{LayerRuntime, []string{"runtime.mallocgc", "github.com/jackc/pgx/v5/pgconn.(*PgConn).Exec"}},
		{LayerRuntime, []string{"internal/runtime/maps.(*Map).getWithKey", "database/sql.(*DB).conn"}},
		{LayerRuntime, []string{"runtime.gcDrain", "runtime.gcBgMarkWorker.func2"}},
		{LayerRuntime, []string{"internal/runtime/syscall/linux.Syscall6", "runtime.netpoll", "runtime.findRunnable"}}, // runtime's own system calls
		{LayerSQL, []string{"database/sql.(*DB).conn", "database/sql.(*DB).BeginTx"}},
		{LayerSQL, []string{"database/sql/driver.IsValue"}},
		{LayerPgx, []string{"github.com/jackc/pgx/v5.(*Conn).Query"}},
		{LayerPgx, []string{"github.com/jackc/puddle/v2.(*Pool[go.shape.*github.com/jackc/pgx/v5/pgxpool.connResource]).Acquire"}},
		{LayerPgadvisory, []string{"github.com/pgadvisory/pgadvisory.(*Conn).QueryContext"}},
		{LayerPgadvisory, []string{"github.com/pgadvisory/pgadvisory/advisory.WithXactLock.func1"}},
		{LayerPgadvisory, []string{"github.com/pgadvisory/pgadvisory/lockscan.Scan"}},
		{LayerPgadvisory, []string{"github.com/pgadvisory/pgadvisory/poolmode/pgdetect.Detect"}},
		{LayerOther, []string{"github.com/pgadvisory/pgadvisory/lab/internal/bench.phase.func1"}}, // the harness is not the library
		{LayerOther, []string{"github.com/pgadvisory/pgadvisoryx.F"}},                             // a prefix is not a package
		{LayerRedis, []string{"github.com/redis/go-redis/v9/internal/proto.(*Reader).ReadReply"}},
		{LayerRedis, []string{"github.com/go-redsync/redsync/v4.(*Mutex).LockContext"}},
		{LayerOther, []string{"sync.(*Mutex).Lock", "github.com/jackc/pgx/v5.(*Conn).Query"}},
		{LayerOther, []string{"slices.SortFunc[go.shape.string]"}},
		{LayerOther, nil},
	} {
		if got := Layer(tc.frames); got != tc.want {
			t.Errorf("Layer(%q) = %q, want %q", tc.frames, got, tc.want)
		}
	}
}

// synthProfile builds a CPU profile the way Go writes one: sample types
// samples/count and cpu/nanoseconds, one location per frame, leaf first.
func synthProfile(samples ...synthSample) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     int64(10 * time.Millisecond),
	}
	funcs := map[string]*profile.Function{}
	for _, s := range samples {
		ps := &profile.Sample{Value: []int64{int64(s.cpu / (10 * time.Millisecond)), int64(s.cpu)}}
		if s.cell != "" {
			ps.Label = map[string][]string{LabelCell: {s.cell}}
		}
		for _, names := range s.stack {
			loc := &profile.Location{ID: uint64(len(p.Location) + 1)}
			for _, n := range names { // inlined functions, innermost first
				f := funcs[n]
				if f == nil {
					f = &profile.Function{ID: uint64(len(p.Function) + 1), Name: n}
					funcs[n] = f
					p.Function = append(p.Function, f)
				}
				loc.Line = append(loc.Line, profile.Line{Function: f})
			}
			p.Location = append(p.Location, loc)
			ps.Location = append(ps.Location, loc)
		}
		p.Sample = append(p.Sample, ps)
	}
	return p
}

type synthSample struct {
	cell  string
	cpu   time.Duration
	stack [][]string // locations, leaf first; each holds its inlined functions, innermost first
}

func TestAttribute(t *testing.T) {
	c := fixed("contended", "c", PathDirect, 1000)
	a := fixed("contended", "a", PathDirect, 1000)
	o := fixed("1 connection", "pgx", PathDirect, 100)
	write := [][]string{{"internal/runtime/syscall/linux.Syscall6"}, {"syscall.Syscall"}, {"syscall.write", "internal/poll.ignoringEINTRIO"}, {"internal/poll.(*FD).Write"}}
	p := synthProfile(
		synthSample{CellKey(c), 30 * time.Millisecond, write},
		synthSample{CellKey(c), 20 * time.Millisecond, [][]string{{"github.com/jackc/pgx/v5/pgconn.(*PgConn).Exec"}}},
		// Inlined: the leaf is the innermost function of the first location.
		synthSample{CellKey(c), 10 * time.Millisecond, [][]string{{"runtime.memmove", "github.com/jackc/pgx/v5/pgproto3.(*Query).Encode"}}},
		synthSample{CellKey(a), 40 * time.Millisecond, [][]string{{"database/sql.(*DB).conn"}}},
		synthSample{CellKey(o), 10 * time.Millisecond, [][]string{{"github.com/pgadvisory/pgadvisory.(*Conn).QueryContext"}}},
		synthSample{"", 50 * time.Millisecond, [][]string{{"runtime.gcDrain"}, {"runtime.gcBgMarkWorker"}}},
		synthSample{"no/such/cell", 10 * time.Millisecond, [][]string{{"main.main"}}},
	)
	un := Attribute(p, []*Result{c, a}, []*Result{o})
	check := func(name string, got, want map[string]time.Duration) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
		for l, d := range want {
			if got[l] != d {
				t.Errorf("%s: %s = %v, want %v (all: %v)", name, l, got[l], d, got)
			}
		}
	}
	check("c", c.Layers, map[string]time.Duration{LayerSocketWrite: 30 * time.Millisecond, LayerPgx: 20 * time.Millisecond, LayerRuntime: 10 * time.Millisecond})
	check("a", a.Layers, map[string]time.Duration{LayerSQL: 40 * time.Millisecond})
	check("overhead pgx", o.Layers, map[string]time.Duration{LayerPgadvisory: 10 * time.Millisecond})
	check("unattributed", un, map[string]time.Duration{LayerRuntime: 50 * time.Millisecond, LayerOther: 10 * time.Millisecond})

	// A profile without a cpu value counts samples times the period.
	p.SampleType = p.SampleType[:1]
	for _, s := range p.Sample {
		s.Value = s.Value[:1]
	}
	Attribute(p, []*Result{c})
	check("c, samples only", c.Layers, map[string]time.Duration{LayerSocketWrite: 30 * time.Millisecond, LayerPgx: 20 * time.Millisecond, LayerRuntime: 10 * time.Millisecond})

	// No profile: every result gets an empty map, nothing is unattributed.
	if un := Attribute(nil, []*Result{a}); len(un) != 0 || a.Layers == nil || len(a.Layers) != 0 {
		t.Errorf("nil profile: unattributed %v, layers %v; want both empty, layers non-nil", un, a.Layers)
	}
}

// labelTarget records the bench_cell label of every cycle's context.
type labelTarget struct {
	mu     sync.Mutex
	labels map[string]int
}

func (l *labelTarget) Cycle(ctx context.Context, key int64) (time.Duration, error) {
	v, _ := pprof.Label(ctx, LabelCell)
	l.mu.Lock()
	l.labels[v]++
	l.mu.Unlock()
	return 0, nil
}
func (l *labelTarget) Close() error { return nil }

func TestRunLabelsMeasuredWorkers(t *testing.T) {
	lt := &labelTarget{labels: map[string]int{}}
	res, err := Run(context.Background(), Config{
		Workloads: []Workload{{Name: "w", Workers: 2, Keys: 3}},
		Variants:  []Variant{variantOf("x", PathPgBouncer, lt)},
		Duration:  5 * time.Millisecond,
		Warmup:    5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	key := CellKey(res[0])
	if key != "w/pgbouncer/x" {
		t.Errorf("CellKey = %q, want w/pgbouncer/x", key)
	}
	if int64(lt.labels[key]) != res[0].Locks {
		t.Errorf("%d cycles labelled %q, want the %d measured ones (labels seen: %v)", lt.labels[key], key, res[0].Locks, lt.labels)
	}
	if lt.labels[""] == 0 {
		t.Errorf("no unlabelled (warm-up) cycle: %v", lt.labels)
	}
}
