package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	a := fixed("contended", "a", PathDirect, 1000)
	c := fixed("contended", "c", PathDirect, 1200)
	ab := fixed("contended", "a", PathPgBouncer, 400)
	cb := fixed("contended", "c", PathPgBouncer, 1000)
	d := fixed("contended", "d", PathRedis, 600)
	d.Variant.Name = "Redlock <5 masters>"
	d.Errors, d.FirstErr = 3, "redsync: failed to acquire lock"
	// p50 is 3 ms rounded up to its bucket (width 1/64 of 2 ms..4 ms): 3.01 ms.
	for _, ms := range []int{1, 2, 3, 4, 100} {
		a.Latency.Record(time.Duration(ms) * time.Millisecond)
	}
	a.Rates = []float64{900, 1100}
	a.CPU = map[string]time.Duration{"client": 500 * time.Millisecond}
	a.cpuWall = map[string]time.Duration{"client": time.Second}
	pgx := fixed("1 connection", "pgx", PathDirect, 10000)
	pga := fixed("1 connection", "pgadvisory", PathDirect, 8000)
	return &Report{
		Title:            "test run",
		Command:          "pgadvisory-lab bench -duration 1s",
		Environment:      [][2]string{{"machine", "2 CPUs | test"}},
		Locks:            []*Result{a, c, ab, cb, d},
		Baseline:         "a",
		Overhead:         []*Result{pgx, pga},
		OverheadBaseline: "pgx",
		Goals: []Goal{
			{Text: "c ≥ 1.5× a direct", Workload: "contended", Num: "c", NumPath: PathDirect, Den: "a", DenPath: PathDirect, Want: 1.5},
			{Text: "c ≥ 2× a bouncer", Workload: "contended", Num: "c", NumPath: PathPgBouncer, Den: "a", DenPath: PathPgBouncer, Want: 2},
			{Text: "c ≥ d", Workload: "contended", Num: "c", NumPath: PathDirect, Den: "d", DenPath: PathRedis, Want: 1},
			{Text: "hot goal", Workload: "hot", Num: "c", NumPath: PathDirect, Den: "a", DenPath: PathDirect, Want: 1},
		},
		Meters: []string{"client", "pgbouncer"},
		Notes:  []string{"a note"},
	}
}

func TestWriteMarkdown(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	markdownHas(t, md,
		"## test run\n",
		"```\npgadvisory-lab bench -duration 1s\n```",
		`- machine: 2 CPUs \| test`, // pipes escaped
		"| contended (32 workers, 100 keys) | direct | (a) va | 1000 (900–1100) | 1.00× | 3.01 ms | 100.0 ms | 100.0 ms | 100.0 ms | 0 |",
		"| direct | (c) vc | 1200 | 1.20× |",
		"| pgbouncer | (c) vc | 1000 | 2.50× |",
		"| redis | (d) Redlock <5 masters> | 600 | 0.60× |", // Redis against (a) direct
		"| c ≥ 1.5× a direct | 1.20× | missed by 20% (needs 1.25× more) | — | — |",
		"| c ≥ 2× a bouncer | 2.50× | met | — | — |",
		"| c ≥ d | 2.00× | met | — | — |",
		"| hot goal | — | not measured | — | — |",
		"| client µs/lock | client cores | pgbouncer cores |",
		"| contended | direct | (a) va | 500 | 0.50 | — |",
		"| direct | (pgx) vpgx | 10000 | 1.00× | — |",
		"| direct | (pgadvisory) vpgadvisory | 8000 | 0.80× | +25.0 µs |",
		"- contended, redis, (d) Redlock <5 masters>: 3 errors, first: `redsync: failed to acquire lock`",
		"### Notes\n\n- a note\n",
	)
}

// markdownHas fails t for every want that md lacks.
func markdownHas(t *testing.T, md string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q\n--- got:\n%s", want, md)
		}
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n--; f.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestWriteMarkdownWriteError(t *testing.T) {
	if err := WriteMarkdown(&failWriter{n: 3}, sampleReport()); err == nil || err.Error() != "disk full" {
		t.Errorf("err = %v, want the writer's error", err)
	}
}

func TestWriteSVG(t *testing.T) {
	rep := sampleReport()
	var buf bytes.Buffer
	if err := WriteSVG(&buf, `Locks & "cycles" <2 CPUs>`, rep.Locks); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	// Well-formed XML, and count the bars (rects with a title child).
	dec := xml.NewDecoder(strings.NewReader(svg))
	bars, hatched, inRect := 0, 0, false
	var titles []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if el.Name.Local == "rect" {
				inRect = true
				for _, a := range el.Attr {
					if a.Name.Local == "fill" && a.Value == "url(#hatch)" {
						hatched++
					}
				}
			}
			if el.Name.Local == "title" && inRect {
				bars++
			}
		case xml.EndElement:
			if el.Name.Local == "rect" {
				inRect = false
			}
		case xml.CharData:
			titles = append(titles, string(el))
		}
	}
	if bars != len(rep.Locks) {
		t.Errorf("%d bars, want %d", bars, len(rep.Locks))
	}
	if hatched != 2 {
		t.Errorf("%d hatched bars, want 2 (the PgBouncer ones)", hatched)
	}
	text := strings.Join(titles, "\n")
	for _, want := range []string{`Locks & "cycles" <2 CPUs>`, "(d) Redlock <5 masters>", "contended", "32 workers, 100 keys", "1.2k"} {
		if !strings.Contains(text, want) {
			t.Errorf("SVG text lacks %q", want)
		}
	}
	if err := WriteSVG(&buf, "x", nil); err == nil {
		t.Error("WriteSVG with no results succeeded")
	}
}

func TestFormatting(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0", 412 * time.Microsecond: "0.41 ms", 12340 * time.Microsecond: "12.3 ms", 2500 * time.Millisecond: "2.50 s",
	} {
		if got := FormatLatency(d); got != want {
			t.Errorf("FormatLatency(%v) = %q, want %q", d, got, want)
		}
	}
	for v, want := range map[float64]string{0: "0", 950: "950", 1234: "1.2k", 12345: "12k", 2.5e6: "2.5M"} {
		if got := shortNumber(v); got != want {
			t.Errorf("shortNumber(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]float64{0: 1, 7: 10, 1234: 2000, 2100: 2500, 4999: 5000, 5001: 10000} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
	if got := workloadSize(Workload{Workers: 1, Keys: 1}); got != "1 worker, 1 key" {
		t.Errorf("workloadSize = %q", got)
	}
}
