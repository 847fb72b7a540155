package lint_test

import (
	"fmt"
	"strings"

	"github.com/pgadvisory/pgadvisory/lint"
)

// The analyzer's first Doc line is its title; go vet prints it in help.
func ExampleAnalyzer() {
	title, _, _ := strings.Cut(lint.Analyzer.Doc, "\n")
	fmt.Println(lint.Analyzer.Name)
	fmt.Println(title)
	// Output:
	// pgadvisory
	// pgadvisory: report session-level advisory locks in SQL
}

// A service that holds session locks on purpose, on dedicated direct
// connections, skips the conn category.
func ExampleNewAnalyzer() {
	a, err := lint.NewAnalyzer(lint.Config{Skip: []string{"conn"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("skip:", a.Flags.Lookup("skip").Value)

	_, err = lint.NewAnalyzer(lint.Config{Skip: []string{"pinned"}})
	fmt.Println(err)
	// Output:
	// skip: conn
	// pgadvisory: unknown category "pinned" in skip list (want some of pooled,tx,conn,handle,directive)
}
