package bench

import (
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// LabelCell is the pprof label the engine puts on every measured worker
// (and, by inheritance, on every goroutine it starts): its value is the
// cell's CellKey. Attribute reads it back from a CPU profile.
const LabelCell = "bench_cell"

// CellKey identifies the cell of r in a CPU profile: workload, path and
// variant ID. Variant IDs of the lock and driver-overhead runs differ, so
// the keys of one process's runs do not collide.
func CellKey(r *Result) string {
	return r.Workload.Name + "/" + string(r.Variant.Path) + "/" + r.Variant.ID
}

// The layers Attribute sorts client CPU samples into, in report order.
const (
	LayerSocketWrite = "socket write"
	LayerSocketRead  = "socket read"
	LayerSyscall     = "other syscalls"
	LayerRuntime     = "Go runtime"
	LayerSQL         = "database/sql"
	LayerPgx         = "pgx"
	LayerPgadvisory  = "pgadvisory"
	LayerRedis       = "redis client"
	LayerOther       = "other"
)

// Layers lists every layer in report order.
var Layers = []string{LayerSocketWrite, LayerSocketRead, LayerSyscall, LayerRuntime,
	LayerSQL, LayerPgx, LayerPgadvisory, LayerRedis, LayerOther}

// syscallCallers classify a sample that is inside a system call by the
// functions above the call: the first matching row wins.
var syscallCallers = []struct {
	layer string
	funcs []string // exact function names
}{
	{LayerSocketWrite, []string{"syscall.write", "syscall.Write", "syscall.writev", "syscall.sendto", "syscall.sendmsg", "syscall.SendmsgN",
		"internal/poll.(*FD).Write", "internal/poll.(*FD).Writev", "internal/poll.writev", "net.(*conn).Write", "net.(*netFD).Write"}},
	{LayerSocketRead, []string{"syscall.read", "syscall.Read", "syscall.recvfrom", "syscall.recvmsg",
		"internal/poll.(*FD).Read", "net.(*conn).Read", "net.(*netFD).Read"}},
}

// packageLayers classify the other samples by the package of the leaf
// function, with go-command patterns ("x/..." is x and every package under
// it); the first matching row wins, else LayerOther. The module's root
// package is the library, its other packages (the bench harness among
// them) are not.
var packageLayers = []struct {
	layer    string
	patterns []string
}{
	{LayerRuntime, []string{"runtime", "runtime/internal/...", "internal/runtime/..."}},
	{LayerSQL, []string{"database/sql/..."}},
	{LayerPgx, []string{"github.com/jackc/..."}},
	{LayerPgadvisory, []string{"github.com/pgadvisory/pgadvisory", "github.com/pgadvisory/pgadvisory/advisory/...",
		"github.com/pgadvisory/pgadvisory/lockscan/...", "github.com/pgadvisory/pgadvisory/poolmode/..."}},
	{LayerRedis, []string{"github.com/redis/go-redis/...", "github.com/go-redsync/redsync/..."}},
}

// Layer returns the layer of a sample whose stack holds the function
// names frames, leaf first. A sample is in a system call when a frame of
// package syscall or golang.org/x/sys/unix is on its stack; such a sample
// is a socket write or read when a write or read function calls it, else
// "other syscalls". Any other sample goes by its leaf function's package.
func Layer(frames []string) string {
	if len(frames) == 0 {
		return LayerOther
	}
	for i, f := range frames {
		if pkg := funcPackage(f); pkg != "syscall" && pkg != "golang.org/x/sys/unix" {
			continue
		}
		for _, row := range syscallCallers {
			for _, caller := range frames[i:] {
				if slices.Contains(row.funcs, caller) {
					return row.layer
				}
			}
		}
		return LayerSyscall
	}
	pkg := funcPackage(frames[0])
	for _, row := range packageLayers {
		for _, pat := range row.patterns {
			if tree, ok := strings.CutSuffix(pat, "/..."); ok && (pkg == tree || strings.HasPrefix(pkg, tree+"/")) || pkg == pat {
				return row.layer
			}
		}
	}
	return LayerOther
}

// funcPackage returns the import path of a function's symbol name:
// "github.com/jackc/pgx/v5/pgconn.(*PgConn).Exec" → ".../pgconn",
// "runtime.mallocgc" → "runtime".
func funcPackage(name string) string {
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i] // type arguments may hold paths of their own
	}
	slash := strings.LastIndexByte(name, '/')
	if dot := strings.IndexByte(name[slash+1:], '.'); dot >= 0 {
		return name[:slash+1+dot]
	}
	return name
}

// Attribute sorts the CPU samples of p (a Go CPU profile of this process)
// into cells by their LabelCell label and into layers by Layer, and stores
// each cell's CPU per layer in the Layers of the result whose CellKey it
// names (every result of results gets a Layers map, empty when it has no
// samples). It returns the CPU per layer of the samples that name no
// result: those without the label (warm-ups, setup, GC background
// workers, the idle scheduler) or with an unknown one.
func Attribute(p *profile.Profile, results ...[]*Result) (unattributed map[string]time.Duration) {
	byKey := map[string]*Result{}
	for _, rs := range results {
		for _, r := range rs {
			r.Layers = map[string]time.Duration{}
			byKey[CellKey(r)] = r
		}
	}
	unattributed = map[string]time.Duration{}
	if p == nil {
		return unattributed
	}
	valueOf := cpuValue(p)
	var frames []string
	for _, s := range p.Sample {
		d := valueOf(s)
		if d <= 0 {
			continue
		}
		frames = frames[:0]
		for _, loc := range s.Location {
			// Line[0] is the innermost of the functions inlined at loc.
			for _, ln := range loc.Line {
				if ln.Function != nil {
					frames = append(frames, ln.Function.Name)
				}
			}
		}
		dst := unattributed
		if keys := s.Label[LabelCell]; len(keys) > 0 {
			if r := byKey[keys[0]]; r != nil {
				dst = r.Layers
			}
		}
		dst[Layer(frames)] += d
	}
	return unattributed
}

// cpuValue returns how to read a sample's CPU time: its "cpu" value (Go
// records nanoseconds), else its "samples" count times the period.
func cpuValue(p *profile.Profile) func(*profile.Sample) time.Duration {
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			unit := time.Duration(1)
			switch st.Unit {
			case "microseconds":
				unit = time.Microsecond
			case "milliseconds":
				unit = time.Millisecond
			case "seconds":
				unit = time.Second
			}
			return func(s *profile.Sample) time.Duration {
				if i >= len(s.Value) {
					return 0
				}
				return time.Duration(s.Value[i]) * unit
			}
		}
	}
	return func(s *profile.Sample) time.Duration {
		if len(s.Value) == 0 {
			return 0
		}
		return time.Duration(s.Value[0] * p.Period)
	}
}
