package main

import (
	"os"
	"testing"

	"github.com/pgadvisory/pgadvisory/lab/internal/settle"
)

// The demo's worker processes re-execute the running binary; under go test
// that is this test binary, which must then act as a worker.
func TestMain(m *testing.M) {
	if settle.IsWorker() {
		os.Exit(settle.WorkerMain())
	}
	os.Exit(m.Run())
}
