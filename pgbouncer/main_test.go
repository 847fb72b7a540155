package pgbouncer_test

import (
	"os"
	"testing"

	"github.com/pgadvisory/pgadvisory/pgbouncer"
)

// cluster is shared by every integration test of this package.
var cluster *pgbouncer.Cluster

func TestMain(m *testing.M) { os.Exit(pgbouncer.Main(m, &cluster)) }
