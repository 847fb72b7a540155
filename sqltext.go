package pgadvisory

import "strings"

// Small readers of the first words of a statement (BEGIN, COMMIT and
// their variants), on the hot path of every statement. What a statement
// calls, sets or is shaped like, lockscan reads from the parse tree.

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// txEffect is what a statement does to the transaction status, read from
// its first words: BEGIN/START TRANSACTION open one, COMMIT/END/ROLLBACK/
// ABORT (without TO SAVEPOINT or AND CHAIN) close it.
type txEffect int

const (
	txNoEffect txEffect = iota
	txOpens
	txCloses
)

func transactionEffect(sql string) txEffect {
	w, rest := firstWord(sql)
	switch {
	case len(w) < 3 || len(w) > 8:
		return txNoEffect
	case strings.EqualFold(w, "begin"):
		return txOpens
	case strings.EqualFold(w, "start"):
		if w2, _ := firstWord(rest); strings.EqualFold(w2, "transaction") {
			return txOpens
		}
	case strings.EqualFold(w, "commit"), strings.EqualFold(w, "end"), strings.EqualFold(w, "rollback"), strings.EqualFold(w, "abort"):
		if containsFold(rest, "chain") && !containsFold(rest, "no chain") || containsFold(rest, "prepared") {
			return txNoEffect
		}
		if w2, _ := firstWord(rest); strings.EqualFold(w2, "to") {
			return txNoEffect // ROLLBACK TO SAVEPOINT
		}
		return txCloses
	}
	return txNoEffect
}

// firstWord returns the first run of letters after blanks and the rest.
func firstWord(s string) (string, string) {
	i := skipBlanks(s, 0)
	j := i
	for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z') {
		j++
	}
	return s[i:j], s[j:]
}

func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f') {
		i++
	}
	return i
}

// validBegin reports whether text is a BEGIN or START TRANSACTION that
// PostgreSQL accepts, by its grammar: optional WORK/TRANSACTION, then
// transaction modes (ISOLATION LEVEL SERIALIZABLE | REPEATABLE READ | READ
// COMMITTED | READ UNCOMMITTED, READ WRITE | READ ONLY, [NOT] DEFERRABLE)
// separated by blanks or commas, and an optional semicolon. Only such a
// BEGIN is answered by the guard: any other, the server must judge.
func validBegin(text string) bool {
	var words []string
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			i++
		case c == ';':
			if strings.TrimRight(text[i+1:], " \t\r\n") != "" {
				return false
			}
			i = len(text)
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(text) && (text[j]|0x20 >= 'a' && text[j]|0x20 <= 'z') {
				j++
			}
			if len(words) == 12 {
				return false
			}
			words = append(words, strings.ToLower(text[i:j]))
			i = j
		default:
			return false
		}
	}
	if len(words) == 0 {
		return false
	}
	rest := words[1:]
	switch words[0] {
	case "begin":
		if len(rest) > 0 && (rest[0] == "work" || rest[0] == "transaction") {
			rest = rest[1:]
		}
	case "start":
		if len(rest) == 0 || rest[0] != "transaction" {
			return false
		}
		rest = rest[1:]
	default:
		return false
	}
	for len(rest) > 0 {
		switch {
		case len(rest) >= 3 && rest[0] == "isolation" && rest[1] == "level" && rest[2] == "serializable":
			rest = rest[3:]
		case len(rest) >= 4 && rest[0] == "isolation" && rest[1] == "level" &&
			(rest[2] == "repeatable" && rest[3] == "read" || rest[2] == "read" && (rest[3] == "committed" || rest[3] == "uncommitted")):
			rest = rest[4:]
		case len(rest) >= 2 && rest[0] == "read" && (rest[1] == "write" || rest[1] == "only"):
			rest = rest[2:]
		case rest[0] == "deferrable":
			rest = rest[1:]
		case len(rest) >= 2 && rest[0] == "not" && rest[1] == "deferrable":
			rest = rest[2:]
		default:
			return false
		}
	}
	return true
}

// containsFold is strings.Contains ignoring ASCII case, without allocating.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}
