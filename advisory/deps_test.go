package advisory_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A program that uses advisory with database/sql must not link pgx because
// pgx helpers exist: they live in pgxadvisory, which only its importers
// link. (advisory reaches pgconn through poolmode, for poolmode.Mode; pgx
// itself, pgxpool and stdlib stay out.)
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
		switch dep {
		case "github.com/jackc/pgx/v5", "github.com/jackc/pgx/v5/pgxpool", "github.com/jackc/pgx/v5/stdlib",
			"github.com/pgadvisory/pgadvisory/advisory/pgxadvisory":
			t.Errorf("advisory links %s", dep)
		}
	}
}
