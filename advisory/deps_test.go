package advisory_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A program that uses advisory with database/sql and any driver must not
// link pgx because pgx helpers exist: they live in pgxadvisory, which only
// its importers link. Nor does poolmode.Mode bring pgx's wire packages:
// detection over pgconn lives in poolmode/pgdetect.
func TestAdvisoryDoesNotLinkPgx(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/pgadvisory/pgadvisory/advisory").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(dep, "github.com/jackc/"), // pgx, pgconn, pgproto3, pgtype, pgxpool, stdlib, puddle
			dep == "github.com/pgadvisory/pgadvisory/advisory/pgxadvisory",
			dep == "github.com/pgadvisory/pgadvisory/poolmode/pgdetect":
			t.Errorf("advisory links %s", dep)
		}
	}
}
