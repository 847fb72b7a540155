package bench

import (
	"strings"
	"testing"
)

func TestParsePerfScript(t *testing.T) {
	const script = `
 advisory_pgxadv raw_syscalls:sys_enter:
 advisory_pgxadv syscalls:sys_enter_write:
        postgres raw_syscalls:sys_enter:
 advisory_pgxadv raw_syscalls:sys_enter:
 advisory_pgxadv sched:sched_switch:
       pgbouncer sched:sched_switch:
`
	counts, err := ParsePerfScript(strings.NewReader(script), "advisory_pgxadvisory.test")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{EventSyscalls: 2, SyscallEvent("write"): 1, EventContextSwitch: 1}
	if len(counts) != len(want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
	for ev, n := range want {
		if counts[ev] != n {
			t.Errorf("%s: %d, want %d (counts %v)", ev, counts[ev], n, counts)
		}
	}
}

func TestParsePerfScriptRefuses(t *testing.T) {
	for name, script := range map[string]string{
		"no event of the command":  " postgres raw_syscalls:sys_enter:\n",
		"no events at all":         "",
		"a line without an event":  " root.test\n",
		"an event without a colon": " root.test raw_syscalls:sys_enter\n",
	} {
		if counts, err := ParsePerfScript(strings.NewReader(script), "root.test"); err == nil {
			t.Errorf("%s: counts %v, want an error", name, counts)
		}
	}
}
