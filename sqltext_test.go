package pgadvisory

import "testing"

func TestValidBegin(t *testing.T) {
	for text, want := range map[string]bool{
		"begin":  true,
		"BEGIN;": true,
		"begin isolation level serializable read only deferrable":           true,
		"begin isolation level read committed, read write":                  true,
		"start transaction isolation level repeatable read":                 true,
		"begin work not deferrable":                                         true,
		"begin isolation level foo":                                         false,
		"begin isolation level read":                                        false,
		"begin; select 1":                                                   false,
		"begin read only read only read only read only read only read only": false,
		"start":                        false,
		"begin -- comment":             false,
		"begin isolation level 'x'":    false,
		"beginx":                       false,
		"begin transaction deferrable": true,
	} {
		if got := validBegin(text); got != want {
			t.Errorf("validBegin(%q) = %v, want %v", text, got, want)
		}
	}
}

func TestTransactionEffect(t *testing.T) {
	for text, want := range map[string]txEffect{
		"BEGIN":                   txOpens,
		"start transaction":       txOpens,
		"commit":                  txCloses,
		"END":                     txCloses,
		"rollback":                txCloses,
		"rollback to savepoint a": txNoEffect,
		"ROLLBACK TO a":           txNoEffect,
		"commit and chain":        txNoEffect,
		"commit and no chain":     txCloses,
		"commit prepared 'x'":     txNoEffect,
		"select 1":                txNoEffect,
		"savepoint a":             txNoEffect,
	} {
		if got := transactionEffect(text); got != want {
			t.Errorf("transactionEffect(%q) = %v, want %v", text, got, want)
		}
	}
}
