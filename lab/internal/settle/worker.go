package settle

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory"
	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory"
)

// Step is what a worker reports it is doing.
type Step string

// The steps a worker reports, one line each: "<step> <event> <detail>".
const (
	StepHolding Step = "holding" // lock granted; detail: backend PID and token
	StepWorking Step = "working" // check passed, the work runs
	StepSettled Step = "settled" // written; detail: token
	StepSkipped Step = "skipped" // already settled (found by either check)
	StepFenced  Step = "fenced"  // write refused: a newer holder wrote first
	StepRetry   Step = "retry"   // the attempt failed; detail: the error
	StepDone    Step = "done"    // every delivery handled (event -1)
)

// Line is one parsed progress line.
type Line struct {
	Worker string
	Step   Step
	Event  int64
	Detail string
	At     time.Time
}

// Worker settles the events it is given.
type Worker struct {
	Name string
	Run  string
	// LockDB takes the advisory locks; StoreDB receives the writes. They may
	// be the same handle.
	LockDB, StoreDB *sql.DB
	// LockPool and StorePool, set instead of LockDB and StoreDB, make a
	// pgx-native worker: the same steps through pgxadvisory on pgxpool.
	// Only the safe pattern exists for it.
	LockPool, StorePool *pgxpool.Pool
	// Unsafe selects the session-lock pattern instead of WithXactLock.
	Unsafe bool
	// Lease bounds how long a silent holder keeps a lock (safe worker).
	Lease time.Duration
	// LockTimeout bounds each wait for a lock.
	LockTimeout time.Duration
	// Work is how long the simulated provider call takes.
	Work time.Duration
	// Out receives the progress lines; nil discards them.
	Out io.Writer

	mu sync.Mutex
}

func (w *Worker) emit(step Step, event int64, detail string) {
	if w.Out == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.Out, "%s %d %s\n", step, event, strings.ReplaceAll(detail, "\n", " "))
}

// ParseLine parses a progress line of worker name.
func ParseLine(worker, text string) (Line, error) {
	f := strings.SplitN(strings.TrimSpace(text), " ", 3)
	if len(f) < 2 {
		return Line{}, fmt.Errorf("settle: malformed progress line %q", text)
	}
	var ev int64
	if _, err := fmt.Sscan(f[1], &ev); err != nil {
		return Line{}, fmt.Errorf("settle: malformed progress line %q: %w", text, err)
	}
	l := Line{Worker: worker, Step: Step(f[0]), Event: ev, At: time.Now()}
	if len(f) == 3 {
		l.Detail = f[2]
	}
	return l, nil
}

// Process handles every delivery in order, retrying an event until it is
// settled, skipped or fenced, or ctx ends.
func (w *Worker) Process(ctx context.Context, deliveries []int64) error {
	sqlSet, pgxSet := w.LockDB != nil && w.StoreDB != nil, w.LockPool != nil && w.StorePool != nil
	switch {
	case sqlSet == pgxSet:
		return errors.New("settle: worker needs LockDB and StoreDB, or LockPool and StorePool")
	case pgxSet && w.Unsafe:
		return errors.New("settle: the unsafe pattern runs on database/sql only")
	}
	for _, ev := range deliveries {
		for attempt := 1; ; attempt++ {
			step, detail, err := w.settle(ctx, ev)
			if step == StepFenced {
				// Reported by write the moment the store refused it: the
				// lock's own commit may fail afterwards (its lease ended),
				// and the refusal must not be lost with it. The event is
				// settled by the newer holder.
				break
			}
			if err == nil {
				w.emit(step, ev, detail)
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if permanent(err) {
				return err
			}
			w.emit(StepRetry, ev, err.Error())
			backoff := time.Duration(min(attempt, 20)) * 25 * time.Millisecond
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
		}
	}
	w.emit(StepDone, -1, "")
	return nil
}

func (w *Worker) settle(ctx context.Context, ev int64) (Step, string, error) {
	switch {
	case w.Unsafe:
		return w.settleUnsafe(ctx, ev)
	case w.LockPool != nil:
		return w.settleSafe(ctx, ev, pgxStore{lock: w.LockPool, store: w.StorePool})
	}
	return w.settleSafe(ctx, ev, sqlStore{lock: w.LockDB, store: w.StoreDB})
}

// stmts runs statements in one transaction of either driver.
type stmts interface {
	exec(ctx context.Context, query string, args ...any) error
	queryRow(ctx context.Context, query string, args []any, dest ...any) error
}

// storeTx is a write transaction on the store.
type storeTx interface {
	stmts
	checkToken(ctx context.Context, resource string, token advisory.Token) error
	commit(ctx context.Context) error
	rollback(ctx context.Context)
}

// store is what the safe pattern needs from a driver: WithXactLock on the
// lock handle, transactions on the store handle. sqlStore and pgxStore are
// its two forms, so the steps themselves are written once.
type store interface {
	withXactLock(ctx context.Context, key advisory.Key, fn func(context.Context, stmts) error, opts ...advisory.LockOption) error
	begin(ctx context.Context) (storeTx, error)
}

// sqlStore is database/sql with advisory.WithXactLock.
type sqlStore struct{ lock, store *sql.DB }

func (s sqlStore) withXactLock(ctx context.Context, key advisory.Key, fn func(context.Context, stmts) error, opts ...advisory.LockOption) error {
	return advisory.WithXactLock(ctx, s.lock, key, func(ctx context.Context, tx *sql.Tx) error {
		return fn(ctx, sqlTx{tx})
	}, opts...)
}

func (s sqlStore) begin(ctx context.Context) (storeTx, error) {
	tx, err := s.store.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTx{tx}, nil
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, query, args...)
	return err
}

func (t sqlTx) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return t.tx.QueryRowContext(ctx, query, args...).Scan(dest...)
}

func (t sqlTx) checkToken(ctx context.Context, resource string, token advisory.Token) error {
	return advisory.CheckToken(ctx, t.tx, resource, token)
}

func (t sqlTx) commit(context.Context) error { return t.tx.Commit() }
func (t sqlTx) rollback(context.Context)     { _ = t.tx.Rollback() }

// pgxStore is pgxpool with pgxadvisory.WithXactLock.
type pgxStore struct{ lock, store *pgxpool.Pool }

func (s pgxStore) withXactLock(ctx context.Context, key advisory.Key, fn func(context.Context, stmts) error, opts ...advisory.LockOption) error {
	return pgxadvisory.WithXactLock(ctx, s.lock, key, func(ctx context.Context, tx pgx.Tx) error {
		return fn(ctx, pgxTx{tx})
	}, opts...)
}

func (s pgxStore) begin(ctx context.Context) (storeTx, error) {
	tx, err := s.store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgxTx{tx}, nil
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.Exec(ctx, query, args...)
	return err
}

func (t pgxTx) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return t.tx.QueryRow(ctx, query, args...).Scan(dest...)
}

func (t pgxTx) checkToken(ctx context.Context, resource string, token advisory.Token) error {
	return pgxadvisory.CheckToken(ctx, t.tx, resource, token)
}

func (t pgxTx) commit(ctx context.Context) error { return t.tx.Commit(ctx) }
func (t pgxTx) rollback(ctx context.Context)     { _ = t.tx.Rollback(context.WithoutCancel(ctx)) }

func (w *Worker) lockOptions(token *advisory.Token) []advisory.LockOption {
	opts := []advisory.LockOption{advisory.WithFencing(token)}
	if w.Lease > 0 {
		opts = append(opts, advisory.WithLease(w.Lease))
	}
	if w.LockTimeout > 0 {
		opts = append(opts, advisory.WithTimeout(w.LockTimeout))
	}
	return opts
}

func (w *Worker) settleSafe(ctx context.Context, ev int64, st store) (Step, string, error) {
	var token advisory.Token
	var step Step
	var detail string
	err := st.withXactLock(ctx, EventKey(w.Run, ev), func(ctx context.Context, tx stmts) error {
		var pid int
		var settled bool
		if err := tx.queryRow(ctx,
			"SELECT pg_backend_pid(), EXISTS (SELECT 1 FROM settle_event WHERE run = $1 AND id = $2 AND settled_by IS NOT NULL)",
			[]any{w.Run, ev}, &pid, &settled); err != nil {
			return err
		}
		w.emit(StepHolding, ev, fmt.Sprintf("pid=%d token=%d", pid, token))
		if settled {
			step = StepSkipped
			return nil
		}
		w.emit(StepWorking, ev, fmt.Sprintf("token=%d", token))
		if err := sleep(ctx, w.Work); err != nil {
			return err
		}
		var err error
		step, detail, err = w.write(ctx, st, ev, token)
		return err
	}, w.lockOptions(&token)...)
	return step, detail, err
}

// write is the store side: fencing check, idempotency check, ledger,
// balance, mark — one transaction on StoreDB.
func (w *Worker) write(ctx context.Context, st store, ev int64, token advisory.Token) (Step, string, error) {
	tx, err := st.begin(ctx)
	if err != nil {
		return "", "", err
	}
	defer tx.rollback(ctx)
	if w.Lease > 0 {
		// A writer cut off mid-write must not hold the event's fence row
		// (and so every later writer) for longer than a lock holder could.
		if err := tx.exec(ctx, "SELECT set_config('idle_in_transaction_session_timeout', $1, true)",
			fmt.Sprint(w.Lease.Milliseconds())); err != nil {
			return "", "", err
		}
	}
	if err := tx.checkToken(ctx, resource(w.Run, ev), token); err != nil {
		if errors.Is(err, advisory.ErrStaleToken) {
			w.emit(StepFenced, ev, err.Error())
			return StepFenced, err.Error(), nil
		}
		return "", "", err
	}
	return w.apply(ctx, tx, ev, token)
}

// apply re-checks and writes one settlement inside tx, and commits.
func (w *Worker) apply(ctx context.Context, tx storeTx, ev int64, token advisory.Token) (Step, string, error) {
	var settled bool
	if err := tx.queryRow(ctx,
		"SELECT settled_by IS NOT NULL FROM settle_event WHERE run = $1 AND id = $2", []any{w.Run, ev}, &settled); err != nil {
		return "", "", err
	}
	if settled {
		return StepSkipped, "at store", nil
	}
	if err := w.record(ctx, tx, ev, token); err != nil {
		return "", "", err
	}
	if err := tx.commit(ctx); err != nil {
		return "", "", err
	}
	return StepSettled, fmt.Sprintf("token=%d", token), nil
}

// record writes the ledger row, the balance and the mark.
func (w *Worker) record(ctx context.Context, q stmts, ev int64, token advisory.Token) error {
	if err := q.exec(ctx, `INSERT INTO settle_ledger (run, event, account, amount, worker, token)
		SELECT run, id, account, amount, $3, $4 FROM settle_event WHERE run = $1 AND id = $2`,
		w.Run, ev, w.Name, int64(token)); err != nil {
		return err
	}
	if err := q.exec(ctx, `UPDATE settle_account a SET balance = balance + e.amount
		FROM settle_event e WHERE e.run = $1 AND e.id = $2 AND a.run = e.run AND a.id = e.account`, w.Run, ev); err != nil {
		return err
	}
	return q.exec(ctx, "UPDATE settle_event SET settled_by = $3, token = $4 WHERE run = $1 AND id = $2",
		w.Run, ev, w.Name, int64(token))
}

// settleUnsafe is the pattern pgadvisory exists to stop: a session-level
// lock in autocommit, trusted to make the check-then-write safe.
func (w *Worker) settleUnsafe(ctx context.Context, ev int64) (Step, string, error) {
	key, _ := EventKey(w.Run, ev).Int64()
	//pgadvisory:ignore the unsafe baseline: this leak is what the tests measure
	if _, err := w.LockDB.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return "", "", err
	}
	unlock := func() error {
		var released bool
		//pgadvisory:ignore the unsafe baseline's unlock, kept as naive code writes it
		if err := w.LockDB.QueryRowContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key).Scan(&released); err != nil {
			return err
		}
		if !released {
			// The unlock landed on a backend that does not hold the
			// lock: the trap. Naive code ignores this; we report it.
			w.emit(StepRetry, ev, "pg_advisory_unlock returned false")
		}
		return nil
	}
	w.emit(StepHolding, ev, "session lock")
	var settled bool
	if err := w.LockDB.QueryRowContext(ctx,
		"SELECT settled_by IS NOT NULL FROM settle_event WHERE run = $1 AND id = $2", w.Run, ev).Scan(&settled); err != nil {
		return "", "", errors.Join(err, unlock())
	}
	if settled {
		return StepSkipped, "", unlock()
	}
	w.emit(StepWorking, ev, "")
	if err := sleep(ctx, w.Work); err != nil {
		return "", "", errors.Join(err, unlock())
	}
	tx, err := w.StoreDB.BeginTx(ctx, nil)
	if err != nil {
		return "", "", errors.Join(err, unlock())
	}
	defer tx.Rollback()
	if err := w.record(ctx, sqlTx{tx}, ev, 0); err != nil {
		return "", "", errors.Join(err, unlock())
	}
	if err := tx.Commit(); err != nil {
		return "", "", errors.Join(err, unlock())
	}
	return StepSettled, "", unlock()
}

// permanent reports errors that no retry can heal: a refusal by the driver
// (the SQL itself is unsafe here), and SQLSTATE class 42 (syntax errors,
// missing privileges, undefined objects).
func permanent(err error) bool {
	if errors.Is(err, pgadvisory.ErrSessionLock) {
		return true
	}
	var st interface{ SQLState() string }
	return errors.As(err, &st) && strings.HasPrefix(st.SQLState(), "42")
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ScanLines parses the progress lines of worker from r and passes each to
// fn, until r ends. Malformed lines are passed with Step "" and the raw text
// as Detail, so nothing a worker prints is lost.
func ScanLines(worker string, r io.Reader, fn func(Line)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l, err := ParseLine(worker, sc.Text())
		if err != nil {
			l = Line{Worker: worker, Detail: sc.Text(), At: time.Now()}
		}
		fn(l)
	}
}
