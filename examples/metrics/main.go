// Command metrics counts what pgadvisory's guard does with Prometheus: a
// Tracer (pgadvisory.WithTracer) feeds counters of the guard's events and
// refusals, a histogram of the time held session locks took to take, and a
// gauge of the keys held now. It runs a few lock cycles through a pgxpool
// under pgadvisory_policy=rewrite behind PgBouncer transaction pooling, then
// prints the metrics as a Prometheus scrape of them reads.
//
//	DATABASE_URL='postgres://...' go run .
//
// With -listen ADDR it then serves /metrics on ADDR until interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgadvisory/pgadvisory"
)

// guardMetrics is a pgadvisory.Tracer that keeps Prometheus metrics. The
// guard calls it on the goroutine that uses the connection: it only counts
// (Prometheus metrics are safe for concurrent use and do not block).
type guardMetrics struct {
	events   *prometheus.CounterVec
	refusals *prometheus.CounterVec
	wait     prometheus.Histogram
	held     prometheus.Gauge
}

func newGuardMetrics(reg prometheus.Registerer) *guardMetrics {
	m := &guardMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgadvisory_events_total",
			Help: "What the pgadvisory guard did, by kind (refused, rewritten, held, released, lost, leaked).",
		}, []string{"kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgadvisory_refusals_total",
			Help: "Statements the guard refused, by the SQLSTATE the client got (PA001...PA009, 55P03, 57014).",
		}, []string{"code"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pgadvisory_hold_wait_seconds",
			Help:    "How long a held session lock took to take (holder connection and the wait for the key).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pgadvisory_held_keys",
			Help: "Session-lock keys the guard holds now (each pins a server connection of the pooler).",
		}),
	}
	reg.MustRegister(m.events, m.refusals, m.wait, m.held)
	return m
}

// TraceGuardEvent implements pgadvisory.Tracer.
func (m *guardMetrics) TraceGuardEvent(ev pgadvisory.Event) {
	m.events.WithLabelValues(ev.Kind.String()).Inc()
	switch ev.Kind {
	case pgadvisory.EventRefused:
		m.refusals.WithLabelValues(ev.Code).Inc()
	case pgadvisory.EventHeld:
		m.wait.Observe(ev.Wait.Seconds())
		m.held.Inc()
	case pgadvisory.EventReleased, pgadvisory.EventLost:
		m.held.Dec()
	}
}

func main() {
	listen := flag.String("listen", "", "serve /metrics on this address after the run")
	workers := flag.Int("workers", 2, "goroutines contending for one session lock")
	cycles := flag.Int("cycles", 3, "lock cycles per goroutine")
	flag.Parse()

	reg := prometheus.NewRegistry()
	metrics := newGuardMetrics(reg)
	ctx := context.Background()
	cfg, err := pgadvisory.ParsePoolConfig(os.Getenv("DATABASE_URL"),
		pgadvisory.WithPolicy(pgadvisory.PolicyRewrite), pgadvisory.WithTracer(metrics))
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := run(ctx, pool, *workers, *cycles); err != nil {
		log.Fatal(err)
	}

	// What a Prometheus server scraping /metrics reads.
	handler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	fmt.Print(rec.Body.String())

	if *listen != "" {
		http.Handle("/metrics", handler)
		log.Fatal(http.ListenAndServe(*listen, nil))
	}
}

// run does the lock cycles: workers goroutines take the same session lock
// in turn (held, with a wait for all but the first), one transaction per
// worker takes a session lock that the guard rewrites to a transaction
// lock, and one statement that cannot be held is refused.
func run(ctx context.Context, pool *pgxpool.Pool, workers, cycles int) error {
	const key, txKey = 4242, 4243
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- cycle(ctx, pool, key, txKey, cycles)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	// A lock call sharing its statement with other work cannot be held, in
	// autocommit: refused (PA001), nothing sent.
	//pgadvisory:ignore shown on purpose: the guard refuses it, and the refusal is counted
	if _, err := pool.Exec(ctx, "SELECT pg_advisory_lock($1), now()", int64(key)); err == nil {
		return fmt.Errorf("a lock call with more in its statement was not refused")
	}
	return nil
}

// cycle takes and releases the session lock key n times on one
// connection, then takes txKey inside a transaction.
func cycle(ctx context.Context, pool *pgxpool.Pool, key, txKey int64, n int) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for range n {
		//pgadvisory:ignore held for this connection by the guard (policy rewrite, autocommit, a lone lock call)
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond) // the work the lock protects
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("unlock of key %d returned false", key)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	// Rewritten to pg_advisory_xact_lock: released at COMMIT.
	//pgadvisory:ignore shown on purpose: the guard rewrites it to pg_advisory_xact_lock, and the rewrite is counted
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_lock($1)", txKey); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
