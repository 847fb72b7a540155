package pgadvisory

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// placeholderError is a syntax error the server reported next to a '?' of
// the statement: '?' placeholders (sqlx's default bind style, database/sql
// code written for MySQL or SQLite) reached PostgreSQL, which numbers them
// $1, $2. It keeps the server's error for errors.As.
type placeholderError struct{ err error }

func (e *placeholderError) Error() string {
	return `pgadvisory: the server read "?" as SQL, not as a placeholder (PostgreSQL numbers them $1, $2); with sqlx, import _ "github.com/pgadvisory/pgadvisory/sqlxbind" so that sqlx binds $1 for the pgadvisory driver: ` + e.err.Error()
}

func (e *placeholderError) Unwrap() error { return e.err }

// placeholderHint returns err, or err with the sqlxbind hint when it is a
// syntax error (42601) at or right after a '?' of query.
func placeholderHint(query string, err error) error {
	if err == nil {
		return nil // before pe: declared, it is allocated on every statement
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42601" || pe.Position < 1 || !strings.Contains(query, "?") {
		return err
	}
	// Position counts characters from 1. The parser reports "at or near"
	// the token it could not take: the '?' itself, or the token after it
	// ("," in VALUES (?, ?), ")" in IN (?)).
	at := charOffset(query, int(pe.Position)-1)
	if at < 0 {
		return err
	}
	before := strings.TrimRight(query[:at], " \t\r\n")
	if strings.HasPrefix(query[at:], "?") || strings.HasSuffix(before, "?") {
		return &placeholderError{err: err}
	}
	return err
}

// charOffset returns the byte offset of the n-th character (0-based) of s,
// or -1 past its end.
func charOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	if n == 0 {
		return len(s)
	}
	return -1
}
