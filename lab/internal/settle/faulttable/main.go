// Command faulttable turns the JSON lines that the settle package's fault
// tests append to $PGADVISORY_FAULT_REPORT into the README's Markdown table.
//
//	PGADVISORY_FAULT_REPORT=faults.jsonl go test -run TestFault ./lab/internal/settle/
//	go run ./lab/internal/settle/faulttable faults.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

type result struct {
	Fault         string `json:"fault"`
	Path          string `json:"path"`
	Events        int    `json:"events"`
	SettledTwice  int    `json:"settled_twice"`
	Lost          int    `json:"lost"`
	WrongBalances int    `json:"wrong_balances"`
	RecoveryMS    int64  `json:"recovery_ms"`
	Note          string `json:"note"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: faulttable FILE.jsonl")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "faulttable:", err)
		os.Exit(1)
	}
	defer f.Close()
	fmt.Println("| fault | path | events | settled twice | lost | wrong balances | lock free again after | note |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- |")
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			fmt.Fprintf(os.Stderr, "faulttable: line %d: %v\n", n+1, err)
			os.Exit(1)
		}
		n++
		fmt.Printf("| %s | %s | %d | %d | %d | %d | %d ms | %s |\n", r.Fault, r.Path, r.Events, r.SettledTwice, r.Lost, r.WrongBalances, r.RecoveryMS, r.Note)
	}
	if err := sc.Err(); err != nil || n == 0 {
		fmt.Fprintf(os.Stderr, "faulttable: %d results read (%v)\n", n, err)
		os.Exit(1)
	}
}
