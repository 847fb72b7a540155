package pgadvisory

import (
	"bytes"
	"testing"
)

// BenchmarkGuardMessage measures the guard's cost per unit with no server:
// the client writes a unit through the guard and reads the reply back, over
// a transport that discards writes and replays the reply. "plain" is the
// same cycle on the bare transport, for the difference.
//
//	go test -run '^$' -bench GuardMessage -benchmem -count 8 . | benchstat -col /driver -
func BenchmarkGuardMessage(b *testing.B) {
	cases := []struct {
		name         string
		unit, replay []byte
	}{
		{"unit=bind-execute-sync", bindExecSync, bindReply},
		{"unit=parse66-bind-execute-sync", parseBindExecSync, parseReply},
		{"unit=query", simpleQuery, simpleReply},
	}
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"direct", []Option{direct}},
		{"transaction", []Option{transaction}},
		{"transaction-hold", []Option{transaction, WithPolicy(PolicyHold)}},
	} {
		for _, tc := range cases {
			for _, drv := range []string{"plain", "guard"} {
				b.Run("mode="+mode.name+"/"+tc.name+"/driver="+drv, func(b *testing.B) {
					var gc interface {
						Write([]byte) (int, error)
						Read([]byte) (int, error)
					}
					sc := &sinkConn{}
					if drv == "guard" {
						g, s := newSink(b, append(mode.opts, WithPreparedStatements(true))...)
						gc, sc = g, s
					} else {
						gc = sc
					}
					sc.reply = tc.replay
					unit := bytes.Clone(tc.unit)
					buf := make([]byte, 8192)
					msgs := len(splitFrames(b, tc.unit)) + len(splitFrames(b, tc.replay))
					b.SetBytes(int64(len(tc.unit) + len(tc.replay)))
					b.ReportAllocs()
					for b.Loop() {
						if _, err := gc.Write(unit); err != nil {
							b.Fatal(err)
						}
						for got := 0; got < len(sc.reply); {
							n, err := gc.Read(buf)
							if err != nil {
								b.Fatal(err)
							}
							got += n
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(msgs), "ns/msg")
				})
			}
		}
	}
}

// BenchmarkGuardLockCycle measures the guard's cost per transaction-level
// lock cycle as pgx writes it (Begin, the lock statement of
// advisory.WithTimeout, Commit) with no server: over a transport that
// discards writes and replays the server's replies. Guarded, the BEGIN is
// answered here and sent in front of the lock statement, whose replies the
// guard drops; "plain" is the same cycle on the bare transport, each
// statement answered by the "server".
//
//	go test -run '^$' -bench GuardLockCycle -benchmem -count 8 . | benchstat -col /driver -
func BenchmarkGuardLockCycle(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"direct", []Option{direct}},
		{"transaction", []Option{transaction}},
		{"transaction-hold", []Option{transaction, WithPolicy(PolicyHold)}},
	} {
		for _, drv := range []string{"plain", "guard"} {
			b.Run("mode="+mode.name+"/driver="+drv, func(b *testing.B) {
				tr := &sinkTransaction{steps: lockCycleSteps(nil)}
				named := mode.name == "direct" // the deferred BEGIN is a prepared statement
				if drv == "guard" {
					tr.gc, tr.sc = newSink(b, append(mode.opts, WithPipelineBegin(true))...)
					_, first := deferredBeginWire(named, true)
					tr.steps = lockCycleSteps(first)
				} else {
					tr.sc = &sinkConn{}
					tr.gc = tr.sc
				}
				if err := tr.run(); err != nil {
					b.Fatal(err)
				}
				if drv == "guard" {
					_, replies := deferredBeginWire(named, false)
					tr.steps = lockCycleSteps(replies)
				}
				b.ReportAllocs()
				for b.Loop() {
					if err := tr.run(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
