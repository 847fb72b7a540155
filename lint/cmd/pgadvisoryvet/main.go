// Command pgadvisoryvet reports session-level PostgreSQL advisory locks in
// SQL handed to database/sql, sqlx and pgx (see package
// github.com/pgadvisory/pgadvisory/lint).
//
// Run it standalone or as a vet tool:
//
//	pgadvisoryvet ./...
//	pgadvisoryvet -skip=conn ./...
//	pgadvisoryvet -fix ./...
//	go vet -vettool=$(which pgadvisoryvet) ./...
//
// Standalone, it exits 0 when clean, 3 when it reports findings and 1 on
// errors; under go vet, 0 when clean and 1 otherwise.
package main

import (
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/pgadvisory/pgadvisory/lint"
)

func main() { singlechecker.Main(vetAnalyzer()) }

// vetAnalyzer is lint.Analyzer under this command's name: singlechecker
// prints the analyzer's name as the program in -h ("Usage: NAME") and in
// its log prefix, and the analyzer itself is called "pgadvisory".
func vetAnalyzer() *analysis.Analyzer {
	a := *lint.Analyzer
	a.Name = "pgadvisoryvet"
	return &a
}
