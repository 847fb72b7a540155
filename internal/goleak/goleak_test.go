package goleak

import (
	"strings"
	"testing"
)

type recorder struct{ errs []string }

func (r *recorder) Error(args ...any) {
	for _, a := range args {
		r.errs = append(r.errs, a.(error).Error())
	}
}

func blockedHere(stop chan struct{}) { <-stop }

func TestFindsALeak(t *testing.T) {
	opt := IgnoreCurrent()
	VerifyNone(t, opt) // nothing new yet
	stop := make(chan struct{})
	go blockedHere(stop)
	var r recorder
	VerifyNone(&r, opt)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "goleak.blockedHere") || !strings.Contains(r.errs[0], "chan receive") {
		t.Fatalf("VerifyNone with a blocked goroutine reported %q", r.errs)
	}
	if err := Find(opt, IgnoreTopFunction("github.com/pgadvisory/pgadvisory/internal/goleak.blockedHere")); err != nil {
		t.Fatalf("IgnoreTopFunction: %v", err)
	}
	close(stop)
	VerifyNone(t, opt) // it ends; the retries wait for it
}

func TestParse(t *testing.T) {
	dump := "goroutine 7 [chan receive, 2 minutes]:\n" +
		"testing.(*T).Run(0xc000102340, {0x5d7e2a, 0x9}, 0x5e9f10)\n\t/go/src/testing/testing.go:1750 +0x3ab\n" +
		"main.main()\n\t/x/main.go:3 +0x1\n" +
		"created by testing.runTests in goroutine 1\n\t/go/src/testing/testing.go:2100 +0x1\n\n" +
		"goroutine 9 [running]:\nexample.com/p.F[...](0x1)\n\t/x/p.go:1 +0x1\n"
	got := parse(dump)
	if len(got) != 2 || got[0].id != 7 || got[0].state != "chan receive" || got[0].first != "testing.(*T).Run" ||
		!got[0].funcs["main.main"] || got[0].funcs["testing.runTests"] || !isTestStack(got[0]) {
		t.Fatalf("parse: %+v", got)
	}
	if got[1].id != 9 || got[1].state != "running" || got[1].first != "example.com/p.F[...]" {
		t.Fatalf("parse: %+v", got[1])
	}
}
