package pgadvisory

import "strings"

// Small readers of SQL text around a call the scanner found. They accept
// only what they can read for certain and report false otherwise, so that
// the caller fails closed.

// callArgs returns the byte offsets of the parentheses of the argument list
// that follows a function name ending at nameEnd. Quoted identifiers,
// string literals (standard, E” and dollar-quoted) and comments are
// skipped; anything it cannot follow yields ok=false.
func callArgs(query string, nameEnd int) (open, closing int, ok bool) {
	i := skipBlanks(query, nameEnd)
	if i >= len(query) || query[i] != '(' {
		return 0, 0, false
	}
	open = i
	depth := 0
	for i < len(query) {
		switch c := query[i]; {
		case c == '(':
			depth++
			i++
		case c == ')':
			depth--
			if depth == 0 {
				return open, i, true
			}
			i++
		case c == '\'':
			escapes := i > 0 && (query[i-1] == 'E' || query[i-1] == 'e')
			j, ok := skipString(query, i, escapes)
			if !ok {
				return 0, 0, false
			}
			i = j
		case c == '"':
			j := strings.IndexByte(query[i+1:], '"')
			if j < 0 {
				return 0, 0, false
			}
			i += j + 2
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				return 0, 0, false
			}
			i += j + 1
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			return 0, 0, false // nested comments: leave to the caller's refusal
		case c == '$':
			j, ok := skipDollar(query, i)
			if !ok {
				return 0, 0, false
			}
			i = j
		default:
			i++
		}
	}
	return 0, 0, false
}

// skipString returns the offset after the string literal opening at i.
func skipString(s string, i int, escapes bool) (int, bool) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			if escapes {
				j++
			}
		case '\'':
			if j+1 < len(s) && s[j+1] == '\'' {
				j++
				continue
			}
			return j + 1, true
		}
	}
	return 0, false
}

// skipDollar skips a dollar-quoted string, or a $n parameter, at i.
func skipDollar(s string, i int) (int, bool) {
	j := i + 1
	if j < len(s) && s[j] >= '0' && s[j] <= '9' {
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		return j, true
	}
	for j < len(s) && (isIdentByte(s[j])) {
		j++
	}
	if j >= len(s) || s[j] != '$' {
		return 0, false
	}
	tag := s[i : j+1]
	k := strings.Index(s[j+1:], tag)
	if k < 0 {
		return 0, false
	}
	return j + 1 + k + len(tag), true
}

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

// definesCode reports whether the call at pos may be part of code that
// runs later or elsewhere: the text defines a function or procedure, or is
// a DO block, or pos lies inside a string or dollar-quoted literal (a body).
// It errs on the side of true.
func definesCode(query string, pos int) bool {
	w, _ := firstWord(query)
	switch strings.ToLower(w) {
	case "do", "create", "alter":
		return true
	}
	lower := strings.ToLower(query)
	for _, w := range []string{"create", "do", "atomic", "alter"} {
		if containsWord(lower, w) {
			return true
		}
	}
	return insideLiteral(query, pos)
}

// containsWord reports whether w occurs in s as a whole word.
func containsWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(w)
		if (j == 0 || !isIdentByte(s[j-1])) && (end == len(s) || !isIdentByte(s[end])) {
			return true
		}
		i = j + 1
	}
}

// insideLiteral reports whether pos lies inside a quoted string or a
// dollar-quoted string of query (or query cannot be followed that far).
func insideLiteral(query string, pos int) bool {
	i := 0
	for i < pos && i < len(query) {
		switch c := query[i]; {
		case c == '\'':
			escapes := i > 0 && (query[i-1] == 'E' || query[i-1] == 'e')
			j, ok := skipString(query, i, escapes)
			if !ok || j > pos {
				return true
			}
			i = j
		case c == '$':
			j, ok := skipDollar(query, i)
			if !ok {
				i++
				continue
			}
			if j > pos {
				return true
			}
			i = j
		case c == '"':
			j := strings.IndexByte(query[i+1:], '"')
			if j < 0 {
				return true
			}
			i += j + 2
		default:
			i++
		}
	}
	return false
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
