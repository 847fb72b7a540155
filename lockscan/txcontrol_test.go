package lockscan

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestTransaction(t *testing.T) {
	type want struct {
		kind                     TxKind
		chain, grammatical, lone bool
	}
	for text, w := range map[string]want{
		"begin":  {TxBegin, false, true, true},
		"BEGIN;": {TxBegin, false, true, true},
		"begin isolation level serializable read only deferrable": {TxBegin, false, true, true},
		"begin isolation level read committed, read write":        {TxBegin, false, true, true},
		"start transaction isolation level repeatable read":       {TxBegin, false, true, true},
		"begin work not deferrable":                               {TxBegin, false, true, true},
		"begin transaction deferrable":                            {TxBegin, false, true, true},
		"begin -- comment":                                        {TxBegin, false, true, true},
		"/* c */ BEGIN /* d */ READ /* e */ ONLY ;; ":             {TxBegin, false, true, true},
		"-- a comment line\nbegin":                                {TxBegin, false, true, true},
		"begin isolation level foo":                               {TxBegin, false, false, false},
		"begin isolation level read":                              {TxBegin, false, false, false},
		"begin , read only":                                       {TxBegin, false, false, false},
		"begin read only,":                                        {TxBegin, false, false, false},
		"begin read only read write":                              {TxBegin, false, false, false},
		"begin; select 1":                                         {TxBegin, false, true, false},
		"begin isolation level 'x'":                               {TxBegin, false, false, false},
		"start":                                                   {TxNone, false, false, false},
		"beginx":                                                  {TxNone, false, false, false},
		"begin_1":                                                 {TxNone, false, false, false},
		`"begin"`:                                                 {TxNone, false, false, false},
		"commit":                                                  {TxCommit, false, true, true},
		"END":                                                     {TxCommit, false, true, true},
		"end transaction":                                         {TxCommit, false, true, true},
		"rollback":                                                {TxRollback, false, true, true},
		"ABORT WORK":                                              {TxRollback, false, true, true},
		"commit and chain":                                        {TxCommit, true, true, true},
		"commit work and no chain":                                {TxCommit, false, true, true},
		"rollback and chain; select 'chain'":                      {TxRollback, true, true, false},
		"commit; select 'and chain'":                              {TxCommit, false, true, false},
		"commit and":                                              {TxCommit, false, false, false},
		"commit garbage":                                          {TxCommit, false, false, false},
		"rollback to savepoint a":                                 {TxNone, false, false, false},
		"ROLLBACK TO a":                                           {TxNone, false, false, false},
		"rollback work to a":                                      {TxNone, false, false, false},
		"commit prepared 'x'":                                     {TxNone, false, false, false},
		"rollback prepared 'x'":                                   {TxNone, false, false, false},
		"prepare transaction 'x'":                                 {TxPrepare, false, true, true},
		"prepare transaction 'it''s'; ":                           {TxPrepare, false, true, true},
		"prepare transaction E'x'":                                {TxPrepare, false, false, false},
		"prepare p as select 1":                                   {TxNone, false, false, false},
		"select 1":                                                {TxNone, false, false, false},
		"savepoint a":                                             {TxNone, false, false, false},
		"":                                                        {TxNone, false, false, false},
		"begin read only read only read only read only read only read ": {TxBegin, false, false, false},
	} {
		got := Transaction(text)
		got.start = false // Tag's test
		if got != (TxControl{Kind: w.kind, Chain: w.chain, Grammatical: w.grammatical, Lone: w.lone}) {
			t.Errorf("Transaction(%q) = %+v, want %+v", text, got, w)
		}
	}
}

func TestTransactionTag(t *testing.T) {
	for text, want := range map[string]string{
		"begin": "BEGIN", "start transaction read only": "START TRANSACTION", "end": "COMMIT", "commit and chain": "COMMIT",
		"abort": "ROLLBACK", "prepare transaction 'g'": "PREPARE TRANSACTION", "rollback to a": "", "select 1": "",
	} {
		if got := Transaction(text).Tag(); got != want {
			t.Errorf("Transaction(%q).Tag() = %q, want %q", text, got, want)
		}
	}
}

func TestTransactionEnds(t *testing.T) {
	for text, want := range map[string]bool{
		"commit": true, "end": true, "rollback": true, "abort": true, "prepare transaction 'g'": true,
		"commit and chain": false, "rollback and chain": false, "begin": false, "rollback to a": false,
		"commit prepared 'g'": false, "select 1": false,
	} {
		if got := Transaction(text).Ends(); got != want {
			t.Errorf("Transaction(%q).Ends() = %v, want %v", text, got, want)
		}
	}
}

// txWords are the pieces randomTxStatement strings together: the words of
// the transaction grammar, near misses, and the punctuation around them.
var txWords = []string{
	"begin", "BEGIN", "start", "transaction", "work", "commit", "end", "rollback", "abort",
	"prepare", "prepared", "to", "savepoint", "and", "no", "chain", "isolation", "level",
	"serializable", "repeatable", "read", "committed", "uncommitted", "only", "write", "not",
	"deferrable", "release", "'g'", "'it''s'", "E'g'", ",", ";", "select 1", "beginx", `"begin"`,
	"a", "as", "1",
}

var txSeparators = []string{" ", " ", "\n", "/* c */", "-- c\n", "\t", ""}

// randomTxStatement returns a statement built from txWords: mostly the
// grammar's own sequences, often a little off.
func randomTxStatement(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString(txSeparators[r.IntN(len(txSeparators))])
	starts := []string{"begin", "start transaction", "commit", "end", "rollback", "abort", "prepare transaction"}
	b.WriteString(starts[r.IntN(len(starts))])
	for range r.IntN(7) {
		b.WriteString(txSeparators[r.IntN(len(txSeparators)-1)])
		b.WriteString(txWords[r.IntN(len(txWords))])
	}
	return b.String()
}

// treeTransaction returns what PostgreSQL's parse tree says query's first
// statement does to the transaction, whether the parser accepted it, and
// how many statements it holds.
func treeTransaction(t testing.TB, query string) (tx TxControl, ok bool, stmts int) {
	js, err := parseToJSON(query, 0)
	if err != nil {
		return TxControl{}, false, 0
	}
	root, err := parseJSON(js)
	if err != nil {
		t.Fatalf("parse tree of %q: %v", query, err)
	}
	list, _ := root.get("stmts")
	if list == nil || len(list.arr) == 0 {
		return TxControl{}, true, 0
	}
	stmt, _ := list.arr[0].get("stmt")
	ts, isTx := stmt.get("TransactionStmt")
	if !isTx {
		return TxControl{}, true, len(list.arr)
	}
	kind, _ := ts.get("kind")
	switch kind.strVal() {
	case "TRANS_STMT_BEGIN", "TRANS_STMT_START":
		tx.Kind = TxBegin
	case "TRANS_STMT_COMMIT":
		tx.Kind = TxCommit
	case "TRANS_STMT_ROLLBACK":
		tx.Kind = TxRollback
	case "TRANS_STMT_PREPARE":
		tx.Kind = TxPrepare
	}
	if chain, _ := ts.get("chain"); chain != nil && chain.kind == jBool && chain.str == "true" {
		tx.Chain = true
	}
	return tx, true, len(list.arr)
}

// checkAgainstTree fails when Transaction disagrees with the parse tree:
// wherever the parser accepts the query, the kind and chain are the
// tree's; a grammatical answer is one the parser accepts, and it is lone
// exactly when the tree has one statement. It returns whether the reader
// called a statement the parser accepts ungrammatical (its measured
// caution).
func checkAgainstTree(t testing.TB, query string) (cautious bool) {
	got := Transaction(query)
	if got.Grammatical && !got.Lone {
		// The claim is about the first statement: the parser must accept
		// it alone.
		first := query[:firstSemicolon(query)]
		if tree, ok, _ := treeTransaction(t, first); !ok || tree.Kind != got.Kind || tree.Chain != got.Chain {
			t.Errorf("Transaction(%q) = %+v; its first statement %q parses: %v, as %+v", query, got, first, ok, tree)
		}
	}
	tree, ok, stmts := treeTransaction(t, query)
	if !ok {
		if got.Lone {
			t.Errorf("Transaction(%q) = %+v: grammatical, but the parser rejects it", query, got)
		}
		return false
	}
	if got.Kind != tree.Kind || got.Kind != TxNone && got.Chain != tree.Chain {
		t.Errorf("Transaction(%q) = %+v; the parse tree says kind %v, chain %v", query, got, tree.Kind, tree.Chain)
	}
	if got.Grammatical && got.Lone != (stmts == 1) {
		t.Errorf("Transaction(%q).Lone = %v; the parse tree has %d statements", query, got.Lone, stmts)
	}
	return !got.Grammatical && got.Kind != TxNone && stmts == 1
}

// firstSemicolon returns the offset of the semicolon that ends the first
// statement of s (empty ones before it aside) outside comments, string
// constants and quoted identifiers, or len(s).
func firstSemicolon(s string) int {
	empty := true
	for i := skipSpace(s, 0); i < len(s); i = skipSpace(s, i) {
		if s[i] == ';' {
			if !empty {
				return i
			}
			i++
			continue
		}
		empty = false
		e, ok := tokenEnd(s, i, false)
		if !ok {
			return len(s)
		}
		i = e
	}
	return len(s)
}

// TestTransactionAgainstParseTree checks Transaction against PostgreSQL's
// parser on the table's statements and on seeded random ones.
func TestTransactionAgainstParseTree(t *testing.T) {
	r := rand.New(rand.NewPCG(20261201, 7))
	n, accepted, cautious := 0, 0, 0
	for range 6000 {
		q := randomTxStatement(r)
		if _, ok, _ := treeTransaction(t, q); ok {
			accepted++
		}
		if checkAgainstTree(t, q) {
			cautious++
		}
		n++
	}
	t.Logf("%d random statements, %d accepted by the parser, %d of those lone ones read as ungrammatical (left to the server)", n, accepted, cautious)
	if accepted < n/20 {
		t.Fatalf("only %d of %d random statements parse: the generator no longer exercises the grammar", accepted, n)
	}
}

// TestTransactionCommonTexts: the texts Transaction answers without lexing
// read as the lexer and PostgreSQL's parser read them, and a text that only
// resembles one of them is still lexed.
func TestTransactionCommonTexts(t *testing.T) {
	for _, q := range []string{"begin", "commit", "rollback", "BEGIN", "COMMIT", "ROLLBACK"} {
		// With white space around it the text is lexed: the same reading.
		for _, lexed := range []string{" " + q, q + "\n", "/**/" + q} {
			if got, want := Transaction(q), Transaction(lexed); got != want {
				t.Errorf("Transaction(%q) = %+v, Transaction(%q) = %+v", q, got, lexed, want)
			}
		}
		if got := Transaction(q); !got.Lone || got.Kind == TxNone {
			t.Errorf("Transaction(%q) = %+v, want a lone transaction control", q, got)
		}
		checkAgainstTree(t, q)
	}
	for q, want := range map[string]TxControl{
		"begin;":           {Kind: TxBegin, Grammatical: true, Lone: true},
		"commit and chain": {Kind: TxCommit, Chain: true, Grammatical: true, Lone: true},
		"rollback to a":    {},
		"Begin Work":       {Kind: TxBegin, Grammatical: true, Lone: true},
	} {
		if got := Transaction(q); got != want {
			t.Errorf("Transaction(%q) = %+v, want %+v", q, got, want)
		}
	}
}

func FuzzTransaction(f *testing.F) {
	for _, s := range []string{"begin", "commit and chain", "rollback to a", "begin isolation level read committed, read only",
		"prepare transaction 'x'", "end; select 1", "/* */ abort -- x", "start transaction not deferrable"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if strings.IndexByte(q, 0) >= 0 {
			return // libpg_query reads a C string
		}
		checkAgainstTree(t, q)
	})
}

func BenchmarkTransaction(b *testing.B) {
	for _, q := range []string{"SELECT id, name FROM users WHERE id = $1", "begin isolation level serializable", "commit"} {
		b.Run(q[:5], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Transaction(q)
			}
		})
	}
}

// treeFirstStmt returns the node type of query's first statement in
// PostgreSQL's parse tree ("DeallocateStmt", "SelectStmt", ...), or "" when
// the parser rejects query or it holds no statement.
func treeFirstStmt(t testing.TB, query string) string {
	js, err := parseToJSON(query, 0)
	if err != nil {
		return ""
	}
	root, err := parseJSON(js)
	if err != nil {
		t.Fatalf("parse tree of %q: %v", query, err)
	}
	list, _ := root.get("stmts")
	if list == nil || len(list.arr) == 0 {
		return ""
	}
	stmt, _ := list.arr[0].get("stmt")
	if stmt == nil || len(stmt.obj) != 1 {
		return ""
	}
	return stmt.obj[0].key
}

// TestTransactionDropsPrepared checks Transaction's DropsPrepared against
// PostgreSQL's parser: every
// query whose first statement the parser reads as DEALLOCATE or DISCARD is
// reported, and nothing the parser reads as another statement is.
func TestTransactionDropsPrepared(t *testing.T) {
	queries := []string{
		"DEALLOCATE ALL", "deallocate all", "DEALLOCATE PREPARE ALL", "deallocate stmtcache_1",
		"Deallocate \"Pgadvisory_begin\"", "DISCARD ALL", "discard plans", "DISCARD TEMP", "discard sequences",
		" /* c */ -- d\n DEALLOCATE ALL", ";;DISCARD ALL", "DEALLOCATE ALL; SELECT 1", "/* a /* nested */ b */discard all",
		"select 1", "SELECT 'deallocate all'", "SELECT 1; DEALLOCATE ALL", "begin", "deallocatex", "discard_all()",
		"do $$ begin execute 'deallocate all'; end $$", "prepare p as select 1", "execute p", "",
	}
	words := []string{"deallocate", "DISCARD", "all", "prepare", "plans", "temp", "x", "select", "1", ";", "'s'", "(", ")"}
	r := rand.New(rand.NewPCG(20261207, 1))
	for range 3000 {
		var b strings.Builder
		for range 1 + r.IntN(4) {
			b.WriteString(txSeparators[r.IntN(len(txSeparators))])
			b.WriteString(words[r.IntN(len(words))])
		}
		queries = append(queries, b.String())
	}
	reported, parsed := 0, 0
	for _, q := range queries {
		tx := Transaction(q)
		got := tx.DropsPrepared
		if got && tx.Kind != TxNone {
			t.Errorf("Transaction(%q) = %+v: DropsPrepared with a transaction kind", q, tx)
		}
		if got {
			reported++
		}
		switch kind := treeFirstStmt(t, q); kind {
		case "DeallocateStmt", "DiscardStmt":
			parsed++
			if !got {
				t.Errorf("Transaction(%q).DropsPrepared = false; its first statement is a %s", q, kind)
			}
		case "":
		default:
			if got {
				t.Errorf("Transaction(%q).DropsPrepared = true; its first statement is a %s", q, kind)
			}
		}
	}
	if parsed < 50 {
		t.Fatalf("only %d queries start with DEALLOCATE or DISCARD as the parser reads them: the test no longer exercises it", parsed)
	}
	t.Logf("%d queries, %d reported, %d that the parser reads as DEALLOCATE or DISCARD", len(queries), reported, parsed)
}
