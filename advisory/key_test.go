package advisory

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The hash is part of the API (other programs and SQL compute the same
// keys): these values were computed independently with Python's hashlib
// and are checked against PostgreSQL's own sha256 in the integration tests.
func TestKeyFromStringPinned(t *testing.T) {
	cases := []struct {
		name string
		want int64
	}{
		{"", -2039914840885289964},
		{"a", -3848465438864589366},
		{"leader", 5574161153772379146},
		{"billing/invoice-42", 5019654496204357561},
		{"ключ", 2153681812738117024},
	}
	for _, c := range cases {
		got, ok := KeyFromString(c.name).Int64()
		if !ok || got != c.want {
			t.Errorf("KeyFromString(%q) = %d, %v; want %d", c.name, got, ok, c.want)
		}
	}
}

func TestNamespacedKeyPinned(t *testing.T) {
	cases := []struct {
		ns, name string
		want     int64
	}{
		{"billing", "invoice-42", -2679328347133616878},
		{"ab", "c", 8379282939544652930},
		{"a", "bc", -376939719409017291},
	}
	for _, c := range cases {
		got, _ := NamespacedKey(c.ns, c.name).Int64()
		if got != c.want {
			t.Errorf("NamespacedKey(%q, %q) = %d; want %d", c.ns, c.name, got, c.want)
		}
	}
	if NamespacedKey("ab", "c") == NamespacedKey("a", "bc") {
		t.Error("namespace boundary is ambiguous")
	}
}

func TestKeyForms(t *testing.T) {
	if IntKey(1) == PairKey(0, 1) {
		t.Error("IntKey(1) and PairKey(0, 1) are different locks but compare equal")
	}
	a, b, ok := PairKey(-3, 4).Pair()
	if !ok || a != -3 || b != 4 {
		t.Errorf("PairKey(-3, 4).Pair() = %d, %d, %v", a, b, ok)
	}
	if _, ok := PairKey(1, 2).Int64(); ok {
		t.Error("a pair key reports a bigint value")
	}
	if _, _, ok := IntKey(5).Pair(); ok {
		t.Error("a bigint key reports a pair")
	}
	for k, want := range map[Key]string{IntKey(-42): "-42", PairKey(-1, 2147483647): "(-1,2147483647)"} {
		if k.String() != want {
			t.Errorf("String() = %q, want %q", k.String(), want)
		}
	}
}

// pg_locks shows a bigint key as classid = high 32 bits, objid = low 32 bits
// (both unsigned oids), objsubid 1; a pair as classid, objid (the int4 bits
// as unsigned oids), objsubid 2.
func TestLockIDsRoundTrip(t *testing.T) {
	cases := []struct {
		k          Key
		class, obj int64
		sub        int32
	}{
		{IntKey(0), 0, 0, 1},
		{IntKey(1), 0, 1, 1},
		{IntKey(-1), 0xffffffff, 0xffffffff, 1},
		{IntKey(math.MinInt64), 0x80000000, 0, 1},
		{IntKey(0x123456789), 1, 0x23456789, 1},
		{PairKey(0, 1), 0, 1, 2},
		{PairKey(-3, 4), 0xfffffffd, 4, 2},
		{PairKey(math.MaxInt32, math.MinInt32), 0x7fffffff, 0x80000000, 2},
	}
	for _, c := range cases {
		class, obj, sub := c.k.lockIDs()
		if class != c.class || obj != c.obj || sub != c.sub {
			t.Errorf("%v.lockIDs() = %d, %d, %d; want %d, %d, %d", c.k, class, obj, sub, c.class, c.obj, c.sub)
		}
		back, ok := keyFromLockIDs(class, obj, sub)
		if !ok || back != c.k {
			t.Errorf("keyFromLockIDs(%d, %d, %d) = %v, %v; want %v", class, obj, sub, back, ok, c.k)
		}
	}
	if _, ok := keyFromLockIDs(1, 2, 3); ok {
		t.Error("objsubid 3 decoded as a key")
	}
}

func TestMillisArg(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
	}{
		{time.Nanosecond, "1ms"}, // never '0', which means "wait forever"
		{0, "1ms"},
		{-time.Second, "1ms"},
		{999 * time.Microsecond, "1ms"},
		{time.Millisecond, "1ms"},
		{time.Millisecond + time.Nanosecond, "2ms"},
		{1500 * time.Millisecond, "1500ms"},
		{100 * 24 * time.Hour, "2147483647ms"},         // capped at the setting's maximum
		{time.Duration(math.MaxInt64), "2147483647ms"}, // no overflow into a tiny timeout
	}
	for _, c := range cases {
		if got := millisArg(c.d); got != c.want {
			t.Errorf("millisArg(%v) = %#v, want %q", c.d, got, c.want)
		}
	}
	// It runs on every lock with a wait limit: the value made last costs no
	// allocation; another costs its text and its box, and is kept instead.
	for _, c := range []struct {
		d    time.Duration
		want float64
	}{{4999 * time.Millisecond, 0}, {4998500 * time.Microsecond, 0}} {
		millisArg(c.d)
		if n := testing.AllocsPerRun(100, func() { _ = millisArg(c.d) }); n != c.want {
			t.Errorf("millisArg(%v) again allocates %v times, want %v", c.d, n, c.want)
		}
	}
	var d time.Duration
	if n := testing.AllocsPerRun(100, func() { d += time.Second; _ = millisArg(d) }); n != 2 {
		t.Errorf("millisArg of a new value allocates %v times, want 2", n)
	}
}

// millisArg's kept value is shared by every goroutine: values made at once
// are each right (run with -race).
func TestMillisArgConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				ms := 1 + (g+i)%3
				if got, want := millisArg(time.Duration(ms)*time.Millisecond), strconv.Itoa(ms)+"ms"; got != want {
					t.Errorf("millisArg(%dms) = %#v", ms, got)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestBuildLock(t *testing.T) {
	cases := []struct {
		name  string
		st    lockStmt
		query string
		nargs int
	}{
		{"plain", buildLock(&lockArgs{}, IntKey(1), false, false, false, nil, nil, false),
			"SELECT pg_advisory_xact_lock($1)", 1},
		{"all", buildLock(&lockArgs{}, PairKey(1, 2), false, true, false, "5ms", "7ms", true),
			"SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true), " +
				"set_config('idle_in_transaction_session_timeout', $2, true), pg_advisory_xact_lock_shared($3::int4, $4::int4)", 4},
		{"try-session", buildLock(&lockArgs{}, IntKey(1), true, false, true, nil, nil, false),
			"SELECT pg_try_advisory_lock($1)", 1},
		{"restore-without-timeout", buildLock(&lockArgs{}, IntKey(1), false, false, false, nil, nil, true),
			"SELECT pg_advisory_xact_lock($1)", 1},
	}
	for _, c := range cases {
		if c.st.query != c.query || len(c.st.args) != c.nargs {
			t.Errorf("%s: got %q with %d args, want %q with %d", c.name, c.st.query, len(c.st.args), c.query, c.nargs)
		}
	}
	if got, want := cases[1].st.args, []any{"5ms", "7ms", int32(1), int32(2)}; !reflect.DeepEqual(got, want) {
		t.Errorf("all: arguments %#v, want %#v", got, want)
	}
}

// TestBuildLockAllocs: the argument list lives in the call's config and
// the settings come boxed (millisArg); what building the statement
// allocates is boxing a key that needs it (an int64 of 256 or more), no list.
func TestBuildLockAllocs(t *testing.T) {
	var a lockArgs
	timeout := millisArg(5 * time.Second)
	for _, c := range []struct {
		key     Key
		timeout any
		want    float64
	}{{IntKey(7), nil, 0}, {IntKey(1 << 40), nil, 1}, {IntKey(1 << 40), timeout, 1}} {
		if n := testing.AllocsPerRun(100, func() { buildLock(&a, c.key, false, false, false, c.timeout, nil, false) }); n != c.want {
			t.Errorf("buildLock(%v, timeout %v) allocates %v times, want %v", c.key, c.timeout, n, c.want)
		}
	}
}

// Every shape's text numbers its parameters $1..$n in order, and buildLock
// supplies exactly n arguments for it.
func TestLockQueriesMatchArguments(t *testing.T) {
	for s := range lockShape(shapeCount) {
		on := func(bit lockShape) bool { return s&bit != 0 }
		var timeout, lease any
		if on(shapeTimeout) {
			timeout = "1ms"
		}
		if on(shapeLease) {
			lease = "2ms"
		}
		key := IntKey(1)
		if on(shapePair) {
			key = PairKey(1, 2)
		}
		st := buildLock(&lockArgs{}, key, on(shapeSession), on(shapeShared), on(shapeTry), timeout, lease, on(shapeReadOld))
		for i := 1; i <= len(st.args); i++ {
			if !strings.Contains(st.query, "$"+strconv.Itoa(i)) {
				t.Errorf("shape %07b: %q lacks $%d of %d arguments", s, st.query, i, len(st.args))
			}
		}
		if strings.Contains(st.query, "$"+strconv.Itoa(len(st.args)+1)) {
			t.Errorf("shape %07b: %q has more parameters than its %d arguments", s, st.query, len(st.args))
		}
		if st.readOld != (on(shapeReadOld) && on(shapeTimeout)) {
			t.Errorf("shape %07b: readOld = %v", s, st.readOld)
		}
	}
}
