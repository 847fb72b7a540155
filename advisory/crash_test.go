package advisory_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory/advisory"
	"github.com/pgadvisory/pgadvisory/poolmode"
)

// Environment of the helper process: a re-executed test binary that takes a
// lock, says "locked" on stdout and waits to be killed (or for its stdin to
// close).
const (
	helperEnv     = "PGADVISORY_ADVISORY_HELPER" // "xact" or "session"
	helperDSNEnv  = "PGADVISORY_ADVISORY_HELPER_DSN"
	helperKeyEnv  = "PGADVISORY_ADVISORY_HELPER_KEY"
	helperReadyLn = "locked"
)

// helperMain runs in the child instead of the tests (see TestMain).
func helperMain() int {
	ctx := context.Background()
	k, err := strconv.ParseInt(os.Getenv(helperKeyEnv), 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: bad key:", err)
		return 2
	}
	db, err := sql.Open("pgx", os.Getenv(helperDSNEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	key := advisory.IntKey(k)
	switch os.Getenv(helperEnv) {
	case "xact":
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		if err := advisory.XactLock(ctx, tx, key, advisory.WithTimeout(10*time.Second)); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
	case "session":
		if _, err := advisory.HoldSession(ctx, db, key, advisory.WithPoolMode(poolmode.Direct),
			advisory.WithTimeout(10*time.Second)); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
	default:
		fmt.Fprintln(os.Stderr, "helper: unknown mode", os.Getenv(helperEnv))
		return 2
	}
	fmt.Println(helperReadyLn)
	// Hold until killed. Not select{}: without cgo the runtime sees every
	// goroutine asleep, reports a deadlock and exits, which releases the
	// lock early. Reading stdin blocks in a system call instead, and ends
	// when the parent goes away, so a crashed test leaves no holder behind.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 3
}

// startHolder runs the helper and returns once it holds key.
func startHolder(t *testing.T, mode, dsn string, key advisory.Key) *exec.Cmd {
	t.Helper()
	k, _ := key.Int64()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperDSNEnv+"="+dsn, helperKeyEnv+"="+strconv.FormatInt(k, 10))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil { // kept open: the helper holds until it closes
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != helperReadyLn {
		t.Fatalf("helper did not report the lock: %q, %v", line, err)
	}
	return cmd
}
