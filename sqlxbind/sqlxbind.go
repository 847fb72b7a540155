// Package sqlxbind tells github.com/jmoiron/sqlx that the pgadvisory driver
// speaks PostgreSQL's $1 bind variables. Import it for its side effect:
//
//	import _ "github.com/pgadvisory/pgadvisory/sqlxbind"
//
// sqlx picks the bind style by driver name and falls back to "?" for names
// it does not know, which breaks NamedExec, In and Rebind on PostgreSQL. The
// import does exactly what this one line does, which sqlx users may write
// instead:
//
//	sqlx.BindDriver(pgadvisory.DriverName, sqlx.DOLLAR)
//
// It is a module of its own, so that the pgadvisory module does not require
// sqlx.
package sqlxbind

import (
	"github.com/jmoiron/sqlx"

	"github.com/pgadvisory/pgadvisory"
)

func init() { sqlx.BindDriver(pgadvisory.DriverName, sqlx.DOLLAR) }
