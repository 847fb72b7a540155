package main

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

func TestDetectUsage(t *testing.T) {
	var out, errb bytes.Buffer
	err := runDetect(context.Background(), nil, &out, &errb)
	var ue usageError
	if !errors.As(err, &ue) {
		t.Fatalf("no DSN: err = %v, want usageError", err)
	}
	err = runDetect(context.Background(), []string{"-admin-user", "a", "-admin-dsn", "x", "dsn"}, &out, &errb)
	if !errors.As(err, &ue) {
		t.Fatalf("both admin flags: err = %v, want usageError", err)
	}
	if err := runDetect(context.Background(), []string{"host=h pgadvisory_policy=nope"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "pgadvisory_policy") {
		t.Fatalf("bad DSN parameter: err = %v", err)
	}
}

func TestDetectAgainstHarness(t *testing.T) {
	c := pgbouncer.StartT(t, pgbouncer.WithModes(pgbouncer.Transaction, pgbouncer.Session, pgbouncer.Statement))
	t.Setenv(adminPasswordEnv, c.AdminPassword())
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"direct", []string{c.DirectDSN()}, []string{"conclusion: direct connection to PostgreSQL", "pool mode:  direct", "source: backend_pid", "(equal"}},
		{"transaction-no-admin", []string{c.DSN(pgbouncer.Transaction)}, []string{"unidentified connection pooler", "pool mode:  transaction", "a pooler made", "probe transaction (BEGIN; SELECT 1; COMMIT): allowed", "pgadvisory_policy=hold", "pgadvisory_pool_mode=session"}},
		// Without the admin console, statement pooling is told by its refusal
		// of the probe transaction, never reported as transaction pooling.
		{"statement-no-admin", []string{c.DSN(pgbouncer.Statement)}, []string{"statement pooling mode (it refused a transaction)", "pool mode:  statement", "source: pooler_refusal", "probe transaction (BEGIN; SELECT 1; COMMIT): refused", "cannot work behind statement pooling"}},
		{"statement-admin", []string{"-admin-user", c.AdminUser(), c.DSN(pgbouncer.Statement)}, []string{"PgBouncer in statement pooling mode", "pool_mode=statement"}},
		{"transaction-admin", []string{"-admin-user", c.AdminUser(), c.DSN(pgbouncer.Transaction)}, []string{"PgBouncer in transaction pooling mode", "pool_mode=transaction", "bouncer", "cache_describe"}},
		// The DSN's policy shapes the advice: no "set pgadvisory_policy=hold"
		// to a DSN that has it.
		{"transaction-admin-hold", []string{"-admin-user", c.AdminUser(), dsnWith(t, c.DSN(pgbouncer.Transaction), "pgadvisory_policy=hold")}, []string{"pool_mode=transaction", "held for their connection (pgadvisory_policy=hold, from the DSN)", "need no holder"}},
		{"transaction-admin-warn", []string{"-admin-user", c.AdminUser(), dsnWith(t, c.DSN(pgbouncer.Transaction), "pgadvisory_policy=warn")}, []string{"sent as written (pgadvisory_policy=warn, from the DSN): they leak"}},
		{"session-admin-dsn", []string{"-admin-dsn", c.AdminDSN(pgbouncer.Session), c.DSN(pgbouncer.Session)}, []string{"PgBouncer in session pooling mode", "pool_mode=session"}},
	}
	t.Run("wrong-admin-password", func(t *testing.T) {
		t.Setenv(adminPasswordEnv, "not-"+c.AdminPassword())
		args := []string{"-admin-user", c.AdminUser(), c.DSN(pgbouncer.Transaction)}
		var out, errb bytes.Buffer
		err := runDetect(t.Context(), args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), "admin console") || !strings.Contains(err.Error(), "-admin-fallback") {
			t.Fatalf("err = %v; want an admin-console error naming -admin-fallback", err)
		}
		if strings.Contains(err.Error()+out.String()+errb.String(), "not-"+c.AdminPassword()) {
			t.Fatal("admin password printed")
		}
		if code := run(t.Context(), append([]string{"detect"}, args...), &out, &errb); code != 1 {
			t.Fatalf("exit code %d; want 1", code)
		}
		out.Reset()
		if err := runDetect(t.Context(), append([]string{"-admin-fallback"}, args...), &out, &errb); err != nil {
			t.Fatalf("-admin-fallback: %v", err)
		}
		if !strings.Contains(out.String(), "admin console failed") || !strings.Contains(out.String(), "pool mode:  transaction") {
			t.Fatalf("-admin-fallback output:\n%s", out.String())
		}
	})
	t.Run("wrong-admin-password-in-dsn", func(t *testing.T) {
		u, err := url.Parse(c.DSN(pgbouncer.Transaction))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("pgadvisory_admin_user", c.AdminUser())
		q.Set("pgadvisory_admin_password", "not-"+c.AdminPassword())
		u.RawQuery = q.Encode()
		var out, errb bytes.Buffer
		if code := run(t.Context(), []string{"detect", u.String()}, &out, &errb); code != 1 {
			t.Fatalf("exit code %d; want 1 (the admin console was asked for and failed)\n%s%s", code, out.String(), errb.String())
		}
		if !strings.Contains(errb.String(), "admin console") || strings.Contains(out.String()+errb.String(), "not-"+c.AdminPassword()) {
			t.Fatalf("stderr:\n%s", errb.String())
		}
	})
	t.Run("admin-password-unset", func(t *testing.T) {
		t.Setenv(adminPasswordEnv, "") // restored after the test
		os.Unsetenv(adminPasswordEnv)
		var out, errb bytes.Buffer
		err := runDetect(t.Context(), []string{"-admin-user", c.AdminUser(), c.DSN(pgbouncer.Transaction)}, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), "$"+adminPasswordEnv+" is unset") {
			t.Fatalf("err = %v; want it to say $%s is unset", err, adminPasswordEnv)
		}
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if err := runDetect(t.Context(), tc.args, &out, &errb); err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if strings.HasSuffix(tc.name, "-hold") && strings.Contains(out.String(), "set pgadvisory_policy=hold") {
				t.Errorf("advises the DSN's own policy:\n%s", out.String())
			}
			if strings.Contains(out.String()+errb.String(), c.AdminPassword()) {
				t.Error("admin password printed")
			}
		})
	}
}

// dsnWith adds a key=value parameter to dsn, a URL or key=value pairs.
func dsnWith(t *testing.T, dsn, param string) string {
	t.Helper()
	switch {
	case strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://"):
		if strings.Contains(dsn, "?") {
			return dsn + "&" + param
		}
		return dsn + "?" + param
	default:
		return dsn + " " + param
	}
}
