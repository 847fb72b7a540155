package poolmode

import "testing"

func TestEvidenceString(t *testing.T) {
	ev := Evidence{Source: SourceAdminConsole, BackendKeyPID: 7, ServerPID: 9, PgBouncerVersion: "1.18.0/bouncer", AdminPoolMode: "transaction"}
	want := "source=admin_console backend_key_pid=7 server_pid=9 pgbouncer=1.18.0/bouncer admin_pool_mode=transaction"
	if got := ev.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
