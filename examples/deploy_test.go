package examples_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// TestDeployPgBouncerIni runs PgBouncer with deploy/pgbouncer.ini and
// deploy/userlist.txt — only the addresses and paths changed, for the
// harness's PostgreSQL — and the quickstart through it with the stats
// user's admin-console credentials, as compose.yaml's application does:
// the file parses, SCRAM logins work, and stats_users may ask SHOW POOLS
// (the driver reads transaction pooling there: no WARN, no "assumed").
func TestDeployPgBouncerIni(t *testing.T) {
	c := pgbouncer.Need(t, cluster)
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/pgbouncer"); err != nil {
			t.Fatalf("pgbouncer not found: %v", err)
		}
	}
	pg, err := url.Parse(c.DirectDSN())
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its parent is private to this user, and under root
	// PgBouncer runs as postgres.
	dir, err := os.MkdirTemp("", "pgbouncer-ini-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		pgUser, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PgBouncer needs the OS user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(pgUser.Uid)
		gid, _ := strconv.Atoi(pgUser.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	ini, err := os.ReadFile("deploy/pgbouncer.ini")
	if err != nil {
		t.Fatal(err)
	}
	users, err := os.ReadFile("deploy/userlist.txt")
	if err != nil {
		t.Fatal(err)
	}
	port := freeTCPPort(t)
	conf := string(ini)
	for _, r := range []struct{ line, repl string }{
		{`(?m)^app = host=postgres port=5432 dbname=app$`, fmt.Sprintf("app = host=%s port=%s dbname=app", pg.Hostname(), pg.Port())},
		{`(?m)^listen_addr = 0\.0\.0\.0$`, "listen_addr = 127.0.0.1"},
		{`(?m)^listen_port = 6432$`, "listen_port = " + strconv.Itoa(port)},
		{`(?m)^auth_file = /etc/pgbouncer/userlist\.txt$`, "auth_file = " + filepath.Join(dir, "userlist.txt")},
	} {
		re := regexp.MustCompile(r.line)
		if !re.MatchString(conf) {
			t.Fatalf("deploy/pgbouncer.ini lost the line %s", r.line)
		}
		conf = re.ReplaceAllLiteralString(conf, r.repl)
	}
	conf += fmt.Sprintf("unix_socket_dir = %s\nlogfile = %s\n", dir, filepath.Join(dir, "pgbouncer.log"))
	for name, body := range map[string]string{"pgbouncer.ini": conf, "userlist.txt": string(users)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "postgres"}, args...)
	}
	cmd := exec.Command(bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Logf("pgbouncer output:\n%s\npgbouncer.log:\n%s", out.String(), log)
		}
	})
	waitListening(t, port, exited)

	dsn := fmt.Sprintf("postgres://app:app-secret@127.0.0.1:%d/app?pgadvisory_admin_user=pgadvisory_probe&pgadvisory_admin_password=probe-secret", port)
	r := run(t.Context(), build(t, "databasesql"), dsn)
	r.check(t, "settled invoice 1001", "pgadvisory: pg_advisory_lock refused under transaction pooling: ")
	if strings.Contains(r.stderr, "WARN") || strings.Contains(r.stdout, "assumed") {
		t.Errorf("the stats user's credentials did not make the mode known:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListening polls until something accepts on the port, up to the
// test's deadline or 30 s, or until the server has exited.
func waitListening(t *testing.T, port int, exited <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("PgBouncer does not listen on port %d: %v", port, err)
		case <-exited:
			t.Fatalf("PgBouncer exited before listening on port %d", port)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
