package lockscan

import "strings"

// TxKind is what a transaction-control statement does to the session's
// transaction.
type TxKind uint8

const (
	// TxNone: no transaction control, or one that leaves the transaction
	// status as it is: SAVEPOINT, RELEASE, ROLLBACK TO, COMMIT PREPARED and
	// ROLLBACK PREPARED.
	TxNone TxKind = iota
	// TxBegin: BEGIN or START TRANSACTION.
	TxBegin
	// TxCommit: COMMIT or END. In an aborted transaction the server rolls
	// back and answers ROLLBACK.
	TxCommit
	// TxRollback: ROLLBACK or ABORT.
	TxRollback
	// TxPrepare: PREPARE TRANSACTION; the transaction is dissociated from
	// the session, which is idle after it.
	TxPrepare
)

// String returns the kind's name: "BEGIN", "COMMIT", "ROLLBACK",
// "PREPARE TRANSACTION", or "" for TxNone. TxControl.Tag gives the
// command tag.
func (k TxKind) String() string {
	switch k {
	case TxBegin:
		return "BEGIN"
	case TxCommit:
		return "COMMIT"
	case TxRollback:
		return "ROLLBACK"
	case TxPrepare:
		return "PREPARE TRANSACTION"
	}
	return ""
}

// TxControl is what the first statement of a query does to the session's
// transaction, as Transaction reads it.
type TxControl struct {
	// Kind is the first statement's transaction control.
	Kind TxKind
	// Chain is COMMIT/ROLLBACK … AND CHAIN: a new transaction starts as
	// the old one ends, so the session stays in a transaction.
	Chain bool
	// Grammatical reports that PostgreSQL's grammar accepts the first
	// statement as written (a BEGIN's transaction modes included). It errs
	// towards false: a statement the reader does not follow to its end is
	// not grammatical here, whatever the server says.
	Grammatical bool
	// Lone reports that the first statement is the whole query: nothing
	// but white space, comments and semicolons follows it. It is set only
	// for grammatical statements.
	Lone bool
	// DropsPrepared reports that the first statement starts with the
	// keyword DEALLOCATE or DISCARD, which may drop the session's prepared
	// statements (DEALLOCATE name | ALL, DISCARD ALL; the other DISCARD
	// forms, which keep them, are reported too). Kind is TxNone then. A
	// later statement of the query, or one that server-side code runs, is
	// not seen.
	DropsPrepared bool

	start bool // START TRANSACTION, not BEGIN
}

// Tag returns the command tag PostgreSQL answers for the statement when it
// succeeds outside an aborted transaction: "BEGIN", "START TRANSACTION",
// "COMMIT" (also for END), "ROLLBACK" (also for ABORT) or "PREPARE
// TRANSACTION"; "" for TxNone.
func (t TxControl) Tag() string {
	if t.start {
		return "START TRANSACTION"
	}
	return t.Kind.String()
}

// Opens reports whether the statement opens a transaction block.
func (t TxControl) Opens() bool { return t.Kind == TxBegin }

// Ends reports whether the statement ends the transaction, leaving the
// session idle: COMMIT, END, ROLLBACK and ABORT without AND CHAIN, and
// PREPARE TRANSACTION.
func (t TxControl) Ends() bool {
	return (t.Kind == TxCommit || t.Kind == TxRollback) && !t.Chain || t.Kind == TxPrepare
}

// Transaction reads the transaction control of query's first statement by
// PostgreSQL's grammar for it (gram.y's TransactionStmt and
// TransactionStmtLegacy): BEGIN [WORK | TRANSACTION] [modes], START
// TRANSACTION [modes], COMMIT | END | ROLLBACK | ABORT [WORK | TRANSACTION]
// [AND [NO] CHAIN], PREPARE TRANSACTION 'gid', and the forms that keep the
// transaction (ROLLBACK TO [SAVEPOINT] name, COMMIT/ROLLBACK PREPARED). The
// modes are ISOLATION LEVEL {SERIALIZABLE | REPEATABLE READ | READ COMMITTED
// | READ UNCOMMITTED}, READ WRITE, READ ONLY, [NOT] DEFERRABLE, separated by
// commas or white space. It also tells a first statement that starts with
// DEALLOCATE or DISCARD (DropsPrepared).
//
// It is a lexical reader for the hot path — every statement a connection
// sends — and never allocates: white space and comments between words are
// skipped as the server skips them, keywords match in any letter case, and
// a statement that does not start with a transaction keyword costs a few
// comparisons. It answers for the first statement only; Lone says whether
// there is no other. Scan reads what a statement calls from the parse tree;
// the tests check Transaction against that tree.
func Transaction(query string) TxControl {
	// The texts drivers send for their own transactions (pgx: "begin",
	// "commit", "rollback") were read once, at start-up, by the lexer
	// below; a longer text costs one comparison more.
	if len(query) <= len("rollback") && commonTx.read {
		switch query {
		case "begin", "BEGIN":
			return commonTx.begin
		case "commit", "COMMIT":
			return commonTx.commit
		case "rollback", "ROLLBACK":
			return commonTx.rollback
		}
	}
	l := txLexer{s: query}
	start := l.skip(0)
	for start < len(query) && query[start] == ';' {
		start = l.skip(start + 1) // empty statements before the first
	}
	w, i := l.word(start)
	var t TxControl
	// Each length of word has one keyword (three of five letters and two
	// of seven, told apart by the first): most statements end here, after
	// one comparison. DEALLOCATE and DISCARD are read too (DropsPrepared).
	var kw string
	switch len(w) {
	case 3:
		kw = "end"
	case 5:
		switch w[0] | 0x20 {
		case 'a':
			kw = "abort"
		case 'b':
			kw = "begin"
		case 's':
			kw = "start"
		}
	case 6:
		kw = "commit"
	case 7:
		switch w[0] | 0x20 {
		case 'p':
			kw = "prepare"
		case 'd':
			kw = "discard"
		}
	case 8:
		kw = "rollback"
	case 10:
		kw = "deallocate"
	}
	if kw == "" || !strings.EqualFold(w, kw) {
		return t
	}
	switch kw {
	case "deallocate", "discard":
		return TxControl{DropsPrepared: true}
	case "begin":
		t.Kind = TxBegin
		i = l.optTransaction(i)
		i = l.transactionModes(i)
	case "start":
		w, i = l.word(i)
		if !strings.EqualFold(w, "transaction") {
			return TxControl{}
		}
		t.Kind, t.start = TxBegin, true
		i = l.transactionModes(i)
	case "commit", "end":
		t.Kind = TxCommit
		i = l.ending(&t, i, kw == "commit")
	case "rollback", "abort":
		t.Kind = TxRollback
		i = l.ending(&t, i, kw == "rollback")
	case "prepare":
		w, i = l.word(i)
		if !strings.EqualFold(w, "transaction") {
			return TxControl{}
		}
		t.Kind = TxPrepare
		i = plainString(query, l.skip(i))
	}
	if t.Kind == TxNone {
		return TxControl{}
	}
	if i < 0 {
		return t
	}
	i = l.skip(i)
	if l.unterminated || i < len(query) && query[i] != ';' {
		return t
	}
	t.Grammatical = true
	for i < len(query) && query[i] == ';' {
		i = l.skip(i + 1)
	}
	t.Lone = i == len(query) && !l.unterminated
	return t
}

// commonTx holds the lexer's readings of the common texts Transaction
// answers without lexing; read is set once they are in.
var commonTx struct {
	begin, commit, rollback TxControl
	read                    bool
}

func init() {
	commonTx.begin = Transaction("begin")
	commonTx.commit = Transaction("commit")
	commonTx.rollback = Transaction("rollback")
	commonTx.read = true
}

// ending reads what follows COMMIT, END, ROLLBACK or ABORT from s[i] and
// returns where the statement ends, or -1 when the reader does not follow
// it. TO [SAVEPOINT] name and (COMMIT and ROLLBACK only, as spelled by
// spelled) PREPARED 'gid' make it a statement that keeps the transaction.
func (l *txLexer) ending(t *TxControl, i int, spelled bool) int {
	w, j := l.word(i)
	switch {
	case spelled && strings.EqualFold(w, "prepared"):
		t.Kind = TxNone
		return -1
	case strings.EqualFold(w, "work"), strings.EqualFold(w, "transaction"):
		i = j
		w, j = l.word(i)
	}
	switch {
	case t.Kind == TxRollback && strings.EqualFold(w, "to"):
		t.Kind = TxNone
		return -1
	case strings.EqualFold(w, "and"):
		w, j = l.word(j)
		if strings.EqualFold(w, "no") {
			w, j = l.word(j)
		} else {
			t.Chain = true
		}
		if !strings.EqualFold(w, "chain") {
			t.Chain = false
			return -1
		}
		return j
	}
	return i
}

// optTransaction skips an optional WORK or TRANSACTION after BEGIN.
func (l *txLexer) optTransaction(i int) int {
	if w, j := l.word(i); strings.EqualFold(w, "work") || strings.EqualFold(w, "transaction") {
		return j
	}
	return i
}

// transactionModes reads a BEGIN's transaction modes from s[i] and returns
// where they end, or -1 when something other than a mode, a comma between
// two modes, white space or a comment comes before the end of the
// statement. Each mode is accepted at most once (the server takes the last
// of a repeated mode; the reader does not need to).
func (l *txLexer) transactionModes(i int) int {
	s := l.s
	var seen uint8 // 1 isolation level, 2 read only/write, 4 deferrable
	for n := 0; ; n++ {
		j := l.skip(i)
		if j == len(s) || s[j] == ';' {
			return j
		}
		if n > 0 && s[j] == ',' {
			j++
		}
		w, k := l.word(j)
		var bit uint8
		switch {
		case strings.EqualFold(w, "isolation"):
			if w, k = l.word(k); !strings.EqualFold(w, "level") {
				return -1
			}
			w, k = l.word(k)
			switch {
			case strings.EqualFold(w, "serializable"):
			case strings.EqualFold(w, "repeatable"):
				if w, k = l.word(k); !strings.EqualFold(w, "read") {
					return -1
				}
			case strings.EqualFold(w, "read"):
				if w, k = l.word(k); !strings.EqualFold(w, "committed") && !strings.EqualFold(w, "uncommitted") {
					return -1
				}
			default:
				return -1
			}
			bit = 1
		case strings.EqualFold(w, "read"):
			if w, k = l.word(k); !strings.EqualFold(w, "only") && !strings.EqualFold(w, "write") {
				return -1
			}
			bit = 2
		case strings.EqualFold(w, "not"):
			if w, k = l.word(k); !strings.EqualFold(w, "deferrable") {
				return -1
			}
			bit = 4
		case strings.EqualFold(w, "deferrable"):
			bit = 4
		default:
			return -1
		}
		if seen&bit != 0 {
			return -1
		}
		seen |= bit
		i = k
	}
}

// txLexer reads the words of a transaction-control statement.
type txLexer struct {
	s            string
	unterminated bool // a /* comment runs to the end of s: the server rejects it
}

// skip skips white space and comments from s[i], as skipSpace, and notes
// a /* comment that does not end.
func (l *txLexer) skip(i int) int {
	j := skipSpace(l.s, i)
	if j == len(l.s) && strings.Contains(l.s[i:], "/*") && !commentsClose(l.s[i:]) {
		l.unterminated = true
	}
	return j
}

// commentsClose reports whether every /* comment in s, which is white
// space and comments only, is closed (they nest).
func commentsClose(s string) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch {
		case depth == 0 && strings.HasPrefix(s[i:], "--"):
			for i < len(s) && s[i] != '\n' && s[i] != '\r' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			depth++
			i++
		case depth > 0 && strings.HasPrefix(s[i:], "*/"):
			depth--
			i++
		}
	}
	return depth == 0
}

// word skips white space and comments from s[i] and returns the keyword
// there (a run of ASCII letters that is a whole token) and where it ends;
// "" when the next token is anything else.
func (l *txLexer) word(i int) (string, int) {
	s := l.s
	i = l.skip(i)
	j := i
	for j < len(s) && (s[j]|0x20 >= 'a' && s[j]|0x20 <= 'z') {
		j++
	}
	if j < len(s) && isIdentCont(s[j]) {
		return "", i // a longer identifier: beginx, begin_1, end$
	}
	return s[i:j], j
}

// plainString reads a '...' string constant without backslashes at s[i]
// (a doubled quote is one quote) and returns its end, or -1 for anything
// else: other forms of string constant are read as the server's settings
// say, which this reader does not know.
func plainString(s string, i int) int {
	if i >= len(s) || s[i] != '\'' {
		return -1
	}
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			return -1
		case '\'':
			if j+1 < len(s) && s[j+1] == '\'' {
				j++
				continue
			}
			return j + 1
		}
	}
	return -1
}
