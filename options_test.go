package pgadvisory

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/pgadvisory/poolmode"
)

func TestDSNParamsStripped(t *testing.T) {
	cases := []struct {
		name, dsn string
	}{
		{"url", "postgres://app:secret@localhost:6432/app?sslmode=disable&application_name=x&pgadvisory_pool_mode=transaction&pgadvisory_policy=rewrite&pgadvisory_dynamic=reject&pgadvisory_leak_action=discard&pgadvisory_admin_user=adm&pgadvisory_admin_password=adminsecret"},
		{"keyword/value", "host=localhost port=6432 dbname=app user=app password=secret sslmode=disable application_name=x pgadvisory_pool_mode=transaction pgadvisory_policy=rewrite pgadvisory_dynamic=reject pgadvisory_leak_action=discard pgadvisory_admin_user=adm pgadvisory_admin_password=adminsecret"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewConnector(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			for k := range c.pgxConfig.RuntimeParams {
				if strings.HasPrefix(k, "pgadvisory_") {
					t.Errorf("%s left in the pgx runtime params", k)
				}
			}
			if c.pgxConfig.RuntimeParams["application_name"] != "x" {
				t.Errorf("other runtime params lost: %v", c.pgxConfig.RuntimeParams)
			}
			if c.cfg.declared != poolmode.Transaction || c.cfg.policy != PolicyRewrite || c.cfg.dynamic != DynamicReject || c.cfg.leakAction != LeakDiscard {
				t.Errorf("settings not applied: %+v", c.cfg)
			}
			if c.cfg.admin == nil || c.cfg.admin.User != "adm" || c.cfg.admin.Password != "adminsecret" || c.cfg.admin.Database != "pgbouncer" || c.cfg.admin.Port != 6432 || c.cfg.admin.Host != "localhost" {
				t.Errorf("admin console config: %+v", c.cfg.admin)
			}
			if mode, _, known := c.PoolMode(); !known || mode != poolmode.Transaction {
				t.Errorf("declared mode not seeded: %v %v", mode, known)
			}
		})
	}
}

func TestDSNInvalidValues(t *testing.T) {
	cases := []struct {
		dsn      string
		mentions []string
	}{
		{"postgres://u@h/db?pgadvisory_pool_mode=txn", []string{"pgadvisory_pool_mode", `"txn"`, "auto, direct, session, transaction, statement"}},
		{"host=h user=u pgadvisory_policy=deny", []string{"pgadvisory_policy", "reject, rewrite, warn, allow"}},
		{"host=h user=u pgadvisory_dynamic=maybe", []string{"pgadvisory_dynamic", "warn, reject, allow"}},
		{"host=h user=u pgadvisory_leak_action=hold", []string{"pgadvisory_leak_action", "release, discard, keep"}},
		{"host=h user=u pgadvisory_prepared_statements=yes-please", []string{"pgadvisory_prepared_statements", "true, false"}},
		{"host=h user=u pgadvisory_admin_port=0", []string{"pgadvisory_admin_port"}},
		{"host=h user=u pgadvisory_admin_password=x", []string{"pgadvisory_admin_user is required"}},
		{"host=h user=u pgadvisory_polcy=reject", []string{"unknown DSN parameter pgadvisory_polcy", "pgadvisory_policy"}},
		{"host=h user=u default_query_exec_mode=cache_statement pgadvisory_pool_mode=transaction", []string{"default_query_exec_mode", "pgadvisory_prepared_statements=true"}},
	}
	for _, tc := range cases {
		_, err := NewConnector(tc.dsn)
		if err == nil {
			t.Errorf("%s: no error", tc.dsn)
			continue
		}
		for _, m := range tc.mentions {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error %q lacks %q", tc.dsn, err, m)
			}
		}
	}
}

func TestDSNPasswordsNeverInErrors(t *testing.T) {
	const pw = "hunter2-Sup3rS3cret"
	dsns := []string{
		"postgres://app:" + pw + "@localhost/app?pgadvisory_policy=bogus",
		"host=localhost user=app password=" + pw + " pgadvisory_pool_mode=bogus",
		"host=localhost user=app pgadvisory_admin_user=a pgadvisory_admin_password=" + pw + " pgadvisory_admin_port=x",
		"host=localhost user=app pgadvisory_admin_dsn='postgres://a:" + pw + "@h:notaport/pgbouncer'",
		"host=localhost user=app pgadvisory_bogus=1 pgadvisory_admin_password=" + pw,
		"postgres://app:" + pw + "@localhost:notaport/app",
	}
	for _, dsn := range dsns {
		_, err := NewConnector(dsn)
		if err == nil {
			t.Errorf("%s: no error", dsn)
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("password leaked in error: %v", err)
		}
	}
}

func TestExecModeChoice(t *testing.T) {
	// Declared transaction pooling, no mode chosen: the guard picks the
	// safe mode.
	c, err := NewConnector("host=h user=u pgadvisory_pool_mode=transaction")
	if err != nil {
		t.Fatal(err)
	}
	cc := c.pgxConfig
	if cc.DefaultQueryExecMode != DefaultSafeExecMode {
		t.Errorf("exec mode %v, want %v", cc.DefaultQueryExecMode, DefaultSafeExecMode)
	}
	// Explicit safe mode: kept.
	c, err = NewConnector("host=h user=u pgadvisory_pool_mode=transaction default_query_exec_mode=exec")
	if err != nil {
		t.Fatal(err)
	}
	cc = c.pgxConfig
	if cc.DefaultQueryExecMode != pgx.QueryExecModeExec {
		t.Errorf("explicit exec mode replaced by %v", cc.DefaultQueryExecMode)
	}
	// Unsafe but the pooler handles prepared statements: kept.
	c, err = NewConnector("host=h user=u pgadvisory_pool_mode=transaction default_query_exec_mode=cache_statement pgadvisory_prepared_statements=true")
	if err != nil {
		t.Fatal(err)
	}
	cc = c.pgxConfig
	if cc.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		t.Errorf("declared prepared-statement support: mode replaced by %v", cc.DefaultQueryExecMode)
	}
	// Direct: pgx's default stays.
	c, err = NewConnector("host=h user=u pgadvisory_pool_mode=direct")
	if err != nil {
		t.Fatal(err)
	}
	cc = c.pgxConfig
	if cc.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		t.Errorf("direct: mode replaced by %v", cc.DefaultQueryExecMode)
	}
	// Not declared: the safe mode too, until a connection proves otherwise.
	c, err = NewConnector("host=h user=u")
	if err != nil {
		t.Fatal(err)
	}
	if m := c.pgxConfig.DefaultQueryExecMode; m != DefaultSafeExecMode {
		t.Errorf("undeclared pool mode: exec mode %v, want %v", m, DefaultSafeExecMode)
	}
	// An unsafe mode chosen for a declared pooler is refused at once.
	if _, err := NewConnector("host=h user=u pgadvisory_pool_mode=transaction default_query_exec_mode=cache_statement"); !errors.Is(err, ErrUnsafeExecMode) {
		t.Errorf("declared transaction pooling with cache_statement: %v, want ErrUnsafeExecMode", err)
	}
	if _, err := NewConnector("host=h user=u", WithSafeExecMode(pgx.QueryExecModeDescribeExec)); err == nil {
		t.Error("WithSafeExecMode accepted describe_exec")
	}
}

func TestOptionsOverrideDSN(t *testing.T) {
	c, err := NewConnector("host=h user=u pgadvisory_policy=allow", WithPolicy(PolicyWarn))
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.policy != PolicyWarn {
		t.Errorf("policy %v, want warn", c.cfg.policy)
	}
}

func TestEnumStrings(t *testing.T) {
	for _, p := range []Policy{PolicyReject, PolicyRewrite, PolicyWarn, PolicyAllow} {
		got, err := ParsePolicy(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p, got, err)
		}
	}
	if s := Policy(9).String(); s != "pgadvisory.Policy(9)" {
		t.Errorf("out-of-range policy prints %q", s)
	}
	if s := DynamicPolicy(9).String() + LeakAction(9).String(); s != "pgadvisory.DynamicPolicy(9)pgadvisory.LeakAction(9)" {
		t.Errorf("out-of-range enums print %q", s)
	}
}

// TestHandBuiltConfigRefused: a pgx config not made by pgx.ParseConfig
// (pgx panics on it at the first Ping) is a clear error everywhere the
// guard takes one.
func TestHandBuiltConfigRefused(t *testing.T) {
	if _, err := NewConnectorConfig(&pgx.ConnConfig{}); err == nil || !strings.Contains(err.Error(), "pgx.ParseConfig") {
		t.Errorf("NewConnectorConfig(&pgx.ConnConfig{}) = %v, want an error naming pgx.ParseConfig", err)
	}
	if err := ConfigureConn(&pgx.ConnConfig{}); err == nil || !strings.Contains(err.Error(), "pgx.ParseConfig") {
		t.Errorf("ConfigureConn(&pgx.ConnConfig{}) = %v, want an error naming pgx.ParseConfig", err)
	}
	if err := ConfigureConn(nil); err == nil {
		t.Error("ConfigureConn(nil) accepted")
	}
	if err := ConfigurePool(nil); err == nil {
		t.Error("ConfigurePool(nil) accepted")
	}
	if err := ConfigurePool(&pgxpool.Config{}); err == nil {
		t.Error("ConfigurePool(&pgxpool.Config{}) accepted")
	}
	if _, err := NewConnectorConfig(nil); err == nil {
		t.Error("NewConnectorConfig(nil) accepted")
	}
	if _, err := Wrap(nil); err == nil {
		t.Error("Wrap(nil) accepted")
	}
	cfg, err := pgx.ParseConfig("host=h user=u")
	if err != nil {
		t.Fatal(err)
	}
	if err := ConfigureConn(cfg, nil); err == nil {
		t.Error("a nil Option accepted")
	}
}
