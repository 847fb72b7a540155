package settle_test

import (
	"os"
	"testing"

	"github.com/pgadvisory/pgadvisory/lab/internal/settle"
	"github.com/pgadvisory/pgadvisory/pgbouncer"
	_ "github.com/pgadvisory/pgadvisory/pgbouncer/docker" // the Docker back end, where no local servers are installed
)

var cluster *pgbouncer.Cluster

func TestMain(m *testing.M) {
	// Worker processes are this test binary, re-executed.
	if settle.IsWorker() {
		os.Exit(settle.WorkerMain())
	}
	os.Exit(pgbouncer.Main(m, &cluster))
}
