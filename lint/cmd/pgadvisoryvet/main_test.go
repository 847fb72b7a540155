package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// runMainEnv makes the re-executed test binary run main instead of the
// tests.
const runMainEnv = "PGADVISORYVET_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) != "" {
		os.Args = append([]string{"pgadvisoryvet"}, strings.Fields(os.Getenv(runMainEnv))...)
		main()
		return
	}
	os.Exit(m.Run())
}

// -h names this command, not the analyzer ("pgadvisory" is another
// binary of this project).
func TestHelpNamesTheCommand(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runMainEnv+"=-h")
	out, _ := cmd.CombinedOutput() // -h exits non-zero
	if !strings.Contains(string(out), "Usage: pgadvisoryvet [-flag] [package]") {
		t.Fatalf("-h output does not name pgadvisoryvet:\n%s", out)
	}
	if strings.Contains(string(out), "Usage: pgadvisory ") {
		t.Fatalf("-h output names the pgadvisory command:\n%s", out)
	}
}
