package pgadvisory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// The differential test of policy hold: the same randomized sequences of
// lock calls run on plain pgx directly on PostgreSQL (a real session, the
// reference) and under policy hold behind PgBouncer's transaction pooling.
// Every answer, every SQLSTATE class and the advisory rows of pg_locks after
// each step must agree. The one allowed difference: the guarded side refuses
// a whole unit with a pgadvisory error (SQLSTATE class PA) and takes
// nothing; the reference then runs the same unit with a failing statement in
// the refused one's place, so that both stay in step.
//
// PGADVISORY_DIFF_SEED replays one sequence (the failure message prints
// it); PGADVISORY_DIFF_SEQUENCES sets how many run (default diffSequences).

const (
	diffSequences = 150
	diffSteps     = 14
	diffKeys      = 3 // keys per sequence: collisions are the point
	diffStepWait  = 5 * time.Second
	// Key ranges of the two sides, which share one PostgreSQL.
	diffRefBase  = 7_100_000
	diffHoldBase = 7_200_000
)

// diffStmt is one statement of a step: SQL text with {k} for the first key
// argument's place, and its arguments.
type diffStmt struct {
	sql  string
	args []any
}

// diffStep is one unit: a lone statement, or a pgx.Batch.
type diffStep struct {
	stmts []diffStmt
	batch bool
}

func (s diffStep) String() string {
	var b strings.Builder
	if s.batch {
		b.WriteString("batch{")
	}
	for i, st := range s.stmts {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(st.sql)
		if len(st.args) > 0 {
			fmt.Fprintf(&b, " %v", st.args)
		}
	}
	if s.batch {
		b.WriteString("}")
	}
	return b.String()
}

// diffGen makes the steps of one sequence. Key arguments are written
// relative to a base the side adds (literal keys are rendered per side).
type diffGen struct {
	r    *rand.Rand
	inTx bool
}

// keyStmt is a lock function call on a relative key: written as a literal
// or bound as a parameter, one bigint or two int4.
type keyStmt struct {
	fn    string
	key   int
	pair  bool
	param bool
}

func (g *diffGen) keyCall(fn string) keyStmt {
	return keyStmt{fn: fn, key: g.r.IntN(diffKeys), pair: g.r.IntN(5) == 0, param: g.r.IntN(2) == 0}
}

// render writes a key call for the side whose keys start at base.
func (k keyStmt) render(base int64) diffStmt {
	if k.pair {
		if k.param {
			return diffStmt{sql: "SELECT " + k.fn + "($1, $2)", args: []any{int32(base / 1000), int32(k.key)}}
		}
		return diffStmt{sql: fmt.Sprintf("SELECT %s(%d, %d)", k.fn, base/1000, k.key)}
	}
	if k.param {
		return diffStmt{sql: "SELECT " + k.fn + "($1)", args: []any{base + int64(k.key)}}
	}
	return diffStmt{sql: fmt.Sprintf("SELECT %s(%d)", k.fn, base+int64(k.key))}
}

// genStep is one step as a function of the side's key base, so that both
// sides run the same step on their own keys.
type genStep func(base int64) diffStep

func lone(k keyStmt) genStep {
	return func(base int64) diffStep { return diffStep{stmts: []diffStmt{k.render(base)}} }
}

func plain(sql string, args ...any) genStep {
	return func(int64) diffStep { return diffStep{stmts: []diffStmt{{sql: sql, args: args}}} }
}

func (g *diffGen) next() (genStep, string) {
	session := []string{"pg_advisory_lock", "pg_try_advisory_lock", "pg_advisory_lock_shared", "pg_try_advisory_lock_shared",
		"pg_advisory_unlock", "pg_advisory_unlock", "pg_advisory_unlock_shared"}
	xact := []string{"pg_advisory_xact_lock", "pg_try_advisory_xact_lock", "pg_advisory_xact_lock_shared", "pg_try_advisory_xact_lock_shared"}
	switch n := g.r.IntN(100); {
	case n < 45:
		fn := session[g.r.IntN(len(session))]
		return lone(g.keyCall(fn)), fn
	case n < 49:
		return plain("SELECT pg_advisory_unlock_all()"), "unlock_all"
	case n < 56:
		if !g.inTx {
			g.inTx = true
			return plain("BEGIN"), "begin"
		}
		fn := xact[g.r.IntN(len(xact))]
		return lone(g.keyCall(fn)), fn
	case n < 62:
		if g.inTx {
			g.inTx = false
			if g.r.IntN(2) == 0 {
				return plain("COMMIT"), "commit"
			}
			return plain("ROLLBACK"), "rollback"
		}
		g.inTx = true
		return plain("BEGIN"), "begin"
	case n < 66:
		if g.r.IntN(2) == 0 {
			return plain("SAVEPOINT s"), "savepoint"
		}
		return plain("ROLLBACK TO SAVEPOINT s"), "rollback_to"
	case n < 80:
		// A batch: a failing statement or another call around a lock call.
		k := g.keyCall(session[g.r.IntN(len(session))])
		fail := g.r.IntN(3) != 0
		first := g.r.IntN(2) == 0
		return func(base int64) diffStep {
			other := diffStmt{sql: "SELECT 1/0"}
			if !fail {
				other = diffStmt{sql: "SELECT 1"}
			}
			call := k.render(base)
			if first {
				return diffStep{batch: true, stmts: []diffStmt{call, other}}
			}
			return diffStep{batch: true, stmts: []diffStmt{other, call}}
		}, "batch"
	case n < 84:
		a, b := g.keyCall("pg_advisory_lock"), g.keyCall("pg_try_advisory_lock")
		return func(base int64) diffStep {
			return diffStep{batch: true, stmts: []diffStmt{a.render(base), b.render(base)}}
		}, "batch_two_locks"
	case n < 86:
		return plain("SELECT 1/0"), "fail"
	default:
		bad := []genStep{
			plain("SELECT pg_advisory_lock(2147483648::int4, 1)"),
			plain("SELECT pg_advisory_lock($1::int4, 1)", int64(1<<32+5)),
			plain("SELECT pg_advisory_lock($1::int8, $2::int8)", int64(1), int64(2)),
			plain("SELECT pg_advisory_lock(NULL::int8)"),
			plain("SELECT pg_try_advisory_lock($1)", nil),
			plain("SELECT pg_advisory_unlock($1::int8)", nil),
		}
		i := g.r.IntN(len(bad))
		return bad[i], "bad_key_" + strconv.Itoa(i)
	}
}

// diffAnswer is one statement's outcome: a value, or an error class.
type diffAnswer struct {
	val     string
	class   string // SQLSTATE class, "client" for an error pgx raised itself
	code    string
	refused bool // a pgadvisory refusal
	fatal   error
}

func (a diffAnswer) String() string {
	if a.class != "" {
		return "error " + a.code
	}
	return "value " + a.val
}

func classify(err error) diffAnswer {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return diffAnswer{class: pe.Code[:2], code: pe.Code, refused: strings.HasPrefix(pe.Code, "PA")}
	}
	var pae interface{ SQLState() string }
	if errors.As(err, &pae) && strings.HasPrefix(pae.SQLState(), "PA") {
		return diffAnswer{class: "PA", code: pae.SQLState(), refused: true}
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return diffAnswer{class: "fatal", code: err.Error(), fatal: err}
	}
	return diffAnswer{class: "client", code: "client: " + err.Error()}
}

func rowsAnswer(rows pgx.Rows, err error) diffAnswer {
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	var vals []string
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return classify(err)
		}
		vals = append(vals, fmt.Sprint(v))
	}
	if err := rows.Err(); err != nil {
		return classify(err)
	}
	return diffAnswer{val: strings.Join(vals, ",")}
}

// runStep runs one unit and returns each statement's answer.
func runStep(ctx context.Context, conn *pgx.Conn, s diffStep) []diffAnswer {
	ctx, cancel := context.WithTimeout(ctx, diffStepWait)
	defer cancel()
	if !s.batch {
		st := s.stmts[0]
		rows, err := conn.Query(ctx, st.sql, st.args...)
		return []diffAnswer{rowsAnswer(rows, err)}
	}
	b := &pgx.Batch{}
	for _, st := range s.stmts {
		b.Queue(st.sql, st.args...)
	}
	br := conn.SendBatch(ctx, b)
	var out []diffAnswer
	for range s.stmts {
		rows, err := br.Query()
		out = append(out, rowsAnswer(rows, err))
	}
	if err := br.Close(); err != nil && len(out) > 0 && out[len(out)-1].class == "" {
		out[len(out)-1] = classify(err)
	}
	return out
}

// firstError returns the index of the first failed statement, or len(a).
func firstError(a []diffAnswer) int {
	for i, x := range a {
		if x.class != "" {
			return i
		}
	}
	return len(a)
}

// diffLocks lists the granted advisory locks of one side's keys, as
// "key/mode" relative to the side's base.
func diffLocks(ctx context.Context, su *pgx.Conn, base int64) (string, error) {
	rows, err := su.Query(ctx, `SELECT classid::int8, objid::int8, objsubid, mode FROM pg_locks
		WHERE locktype = 'advisory' AND granted ORDER BY 1, 2, 3, 4`)
	if err != nil {
		return "", err
	}
	var got []string
	for rows.Next() {
		var cls, obj int64
		var sub int16
		var mode string
		if err := rows.Scan(&cls, &obj, &sub, &mode); err != nil {
			rows.Close()
			return "", err
		}
		var s string
		switch {
		case sub == 1 && (cls<<32|obj) >= base && (cls<<32|obj) < base+diffKeys:
			s = fmt.Sprintf("%d/%s", (cls<<32|obj)-base, mode)
		case sub == 2 && cls == base/1000 && obj < diffKeys:
			s = fmt.Sprintf("(%d)/%s", obj, mode)
		default:
			continue
		}
		if !slices.Contains(got, s) {
			got = append(got, s)
		}
	}
	rows.Close()
	return strings.Join(got, " "), rows.Err()
}

// diffEnv reads an integer setting of the test from the environment.
func diffEnv(t *testing.T, name string, def uint64) (uint64, bool) {
	v := os.Getenv(name)
	if v == "" {
		return def, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n, true
}

// TestIntegrationHoldDifferential runs randomized sequences on a real
// session and under policy hold and compares them step by step.
func TestIntegrationHoldDifferential(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	ctx := t.Context()
	n, _ := diffEnv(t, "PGADVISORY_DIFF_SEQUENCES", diffSequences)
	seed, replay := diffEnv(t, "PGADVISORY_DIFF_SEED", uint64(time.Now().UnixNano()))
	if replay && os.Getenv("PGADVISORY_DIFF_SEQUENCES") == "" {
		n = 1
	}
	su, err := pgx.Connect(ctx, c.SuperuserDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(context.Background())
	// Each held key pins a server connection of the wide pool: leave one
	// for the client's own statements (more keys are refused, PA008).
	cfg, err := pgadvisory.ParseConfig(holdDSN(t, c, "pgadvisory_hold_max_per_conn", strconv.Itoa(c.WidePoolSize()-1)))
	if err != nil {
		t.Fatal(err)
	}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheDescribe}
	var steps, refusals, diffs int
	for i := range n {
		s := seed + i
		d, st, ref := runSequence(t, ctx, c, su, cfg, s, modes[s%uint64(len(modes))])
		steps += st
		refusals += ref
		if d != "" {
			diffs++
			t.Errorf("sequence %d differs (replay: PGADVISORY_DIFF_SEED=%d):\n%s", i, s, d)
			if diffs >= 5 {
				break
			}
		}
	}
	dropIdleHolders(t, cfg)
	t.Logf("differential: %d sequences from seed %d, %d steps, %d refused units, %d sequences with differences", n, seed, steps, refusals, diffs)
}

// dropIdleHolders closes the idle holder connections of cfg's guard: they
// outlive the test's connections by design (they serve the next lock).
func dropIdleHolders(t *testing.T, cfg *pgx.ConnConfig) {
	t.Helper()
	conn, err := pgx.ConnectConfig(context.Background(), cfg) // also from a Cleanup
	if err != nil {
		t.Fatal(err)
	}
	pgadvisory.CloseIdleHolders(conn)
	conn.Close(context.Background())
}

// runSequence runs one seeded sequence on both sides. It returns the
// difference found (empty: none), the steps run and the units refused.
func runSequence(t *testing.T, ctx context.Context, c *pgbouncer.Cluster, su *pgx.Conn, holdCfg *pgx.ConnConfig, seed uint64, mode pgx.QueryExecMode) (string, int, int) {
	t.Helper()
	refCfg, err := pgx.ParseConfig(c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	refCfg.DefaultQueryExecMode = mode
	ref, err := pgx.ConnectConfig(ctx, refCfg)
	if err != nil {
		t.Fatal(err)
	}
	hc := holdCfg.Copy()
	hc.DefaultQueryExecMode = mode
	hold, err := pgx.ConnectConfig(ctx, hc)
	if err != nil {
		ref.Close(ctx)
		t.Fatal(err)
	}
	g := &diffGen{r: rand.New(rand.NewPCG(seed, 0x5eed))}
	var log strings.Builder
	fmt.Fprintf(&log, "  exec mode %v\n", mode)
	refused := 0
	diff := func(format string, a ...any) (string, int, int) {
		fmt.Fprintf(&log, "  DIFFERENCE: "+format+"\n", a...)
		return log.String(), 0, refused
	}
	closeBoth := func() (string, bool) {
		ref.Close(ctx)
		hold.Close(ctx)
		// The reference's backend ends after its client's Terminate: wait
		// for it, up to a bound.
		var r, h string
		for wait := time.Now().Add(diffStepWait); ; {
			var err error
			if r, err = diffLocks(ctx, su, diffRefBase); err != nil {
				t.Fatal(err)
			}
			if h, err = diffLocks(ctx, su, diffHoldBase); err != nil {
				t.Fatal(err)
			}
			if r == "" && h == "" || time.Now().After(wait) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		return fmt.Sprintf("after close: reference locks [%s], hold locks [%s]", r, h), r == "" && h == ""
	}
	for step := range diffSteps {
		gs, what := g.next()
		hs, rs := gs(diffHoldBase), gs(diffRefBase)
		ha := runStep(ctx, hold, hs)
		hi := firstError(ha)
		if hi < len(ha) && ha[hi].refused {
			refused++
			// The reference runs the unit with a failing statement in the
			// refused one's place.
			rs.stmts = slices.Clone(rs.stmts)
			rs.stmts[hi] = diffStmt{sql: "SELECT 1/0"}
		}
		ra := runStep(ctx, ref, rs)
		if hold.IsClosed() && !ref.IsClosed() {
			closeBoth()
			return diff("step %d %s: the hold connection closed (answers %v)", step, hs, ha)
		}
		fmt.Fprintf(&log, "  %2d %-22s %s\n     reference %v\n     hold      %v\n", step, what, hs, ra, ha)
		for j := range ha {
			if j > hi {
				break // skipped after the first error on both sides
			}
			if ha[j].fatal != nil {
				closeBoth()
				return diff("hold connection failed: %v", ha[j].fatal)
			}
			if j == hi && ha[j].refused {
				if firstError(ra) != hi {
					closeBoth()
					return diff("refused statement %d, the reference's stand-in did not fail there", j)
				}
				continue
			}
			if ha[j].class != ra[j].class || ha[j].class == "" && ha[j].val != ra[j].val {
				closeBoth()
				return diff("statement %d: reference %v, hold %v", j, ra[j], ha[j])
			}
		}
		rl, err := diffLocks(ctx, su, diffRefBase)
		if err != nil {
			t.Fatal(err)
		}
		hl, err := diffLocks(ctx, su, diffHoldBase)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&log, "     pg_locks reference [%s] hold [%s]\n", rl, hl)
		if rl != hl {
			closeBoth()
			return diff("pg_locks after step %d: reference [%s], hold [%s]", step, rl, hl)
		}
	}
	if msg, ok := closeBoth(); !ok {
		return diff("%s", msg)
	}
	return "", diffSteps, refused
}

// TestIntegrationHoldConcurrentWitness runs several connections under
// policy hold, and one plain pgx session directly on PostgreSQL, over two
// keys: each critical section marks the key's row as its own and must find
// it free. 0 overlaps.
func TestIntegrationHoldConcurrentWitness(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	ctx := t.Context()
	const (
		workers = 4
		rounds  = 25
		table   = "hold_witness"
		base    = 7_300_000
	)
	setup, err := pgx.Connect(ctx, c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close(context.Background())
	if _, err := setup.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, "CREATE TABLE "+table+" (k int8 PRIMARY KEY, owner int NOT NULL DEFAULT 0, n int NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, "INSERT INTO "+table+" (k) VALUES ($1), ($2)", int64(base), int64(base+1)); err != nil {
		t.Fatal(err)
	}
	var overlaps, sections atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	holdCfg, err := pgadvisory.ParseConfig(holdDSN(t, c))
	if err != nil {
		t.Fatal(err)
	}
	directCfg, err := pgx.ParseConfig(c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	work := func(id int, cfg *pgx.ConnConfig) {
		defer wg.Done()
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			errs <- err
			return
		}
		defer conn.Close(context.Background())
		r := rand.New(rand.NewPCG(uint64(id), 1))
		for range rounds {
			k := int64(base + r.IntN(2))
			if r.IntN(3) == 0 {
				var ok bool
				if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&ok); err != nil {
					errs <- fmt.Errorf("worker %d: try: %w", id, err)
					return
				}
				if !ok {
					continue
				}
			} else if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
				errs <- fmt.Errorf("worker %d: lock: %w", id, err)
				return
			}
			tag, err := conn.Exec(ctx, "UPDATE "+table+" SET owner = $1, n = n + 1 WHERE k = $2 AND owner = 0", id, k)
			if err != nil {
				errs <- fmt.Errorf("worker %d: claim: %w", id, err)
				return
			}
			sections.Add(1)
			if tag.RowsAffected() != 1 {
				overlaps.Add(1)
			}
			if _, err := conn.Exec(ctx, "UPDATE "+table+" SET owner = 0 WHERE k = $1 AND owner = $2", k, id); err != nil {
				errs <- fmt.Errorf("worker %d: free: %w", id, err)
				return
			}
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", k).Scan(&ok); err != nil || !ok {
				errs <- fmt.Errorf("worker %d: unlock: %v, %w", id, ok, err)
				return
			}
		}
	}
	for i := range workers {
		wg.Add(1)
		go work(i+1, holdCfg)
	}
	wg.Add(1)
	go work(workers+1, directCfg)
	wg.Wait()
	dropIdleHolders(t, holdCfg)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var total int64
	if err := setup.QueryRow(ctx, "SELECT sum(n) FROM "+table).Scan(&total); err != nil {
		t.Fatal(err)
	}
	t.Logf("witness: %d critical sections (%d counted by the table), %d overlaps", sections.Load(), total, overlaps.Load())
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections", overlaps.Load())
	}
	if total != sections.Load() {
		t.Fatalf("the table counted %d sections, the workers %d", total, sections.Load())
	}
	wantLocks(t, c)
}
