package toolcheck

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// sqlxPerson is a struct read and written by sqlx's db tags.
type sqlxPerson struct {
	ID        int64          `db:"id"`
	FirstName string         `db:"first_name"`
	Email     sql.NullString `db:"email"`
	Meta      []byte         `db:"meta"`
	Tags      pq.StringArray `db:"tags"`
	CreatedAt time.Time      `db:"created_at"`
}

var sqlxKinds = withKinds(map[string]string{
	"named parameters rebound": `(?is)^insert into sqlx_people \(first_name, email, meta, tags\) values \(\$1, \$2, \$3, \$4\)`,
	"In rebound":               `(?is)\bid in \(\$1, \$2, \$3\) and first_name <> \$4`,
})

// sqlxWorkload drives sqlx over the *sql.DB: the statements are written
// by hand, as sqlx's users do, and sqlx turns their :name and ? parameters
// and IN lists into the $n text that pgx sends.
func sqlxWorkload(ctx context.Context, r *recorder, sqlDB *sql.DB) {
	db := sqlx.NewDb(sqlDB, "pgx")
	r.do("schema", func() error {
		_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS sqlx_people (
	id bigserial PRIMARY KEY,
	first_name text NOT NULL,
	email text UNIQUE,
	meta jsonb NOT NULL DEFAULT '{}',
	tags text[] NOT NULL DEFAULT '{}',
	created_at timestamptz NOT NULL DEFAULT now()
)`)
		return err
	})

	const insert = `INSERT INTO sqlx_people (first_name, email, meta, tags) VALUES (:first_name, :email, :meta, :tags)`
	people := []sqlxPerson{
		{FirstName: "barbara", Email: sql.NullString{String: "barbara@example.com", Valid: true}, Meta: []byte(`{"lang":"clu"}`), Tags: pq.StringArray{"abstraction"}},
		{FirstName: "john", Meta: []byte(`{}`), Tags: pq.StringArray{}},
		{FirstName: "frances", Email: sql.NullString{String: "frances@example.com", Valid: true}, Meta: []byte(`{"lang":"fortran"}`), Tags: pq.StringArray{"compilers", "parallelism"}},
	}
	r.do("NamedExec, one row", func() error {
		_, err := db.NamedExecContext(ctx, insert, people[0])
		return err
	})
	r.do("NamedExec, a batch", func() error {
		_, err := db.NamedExecContext(ctx, insert, people[1:])
		return err
	})
	var ids []int64
	r.do("NamedQuery, upsert RETURNING", func() error {
		rows, err := db.NamedQueryContext(ctx, `INSERT INTO sqlx_people (first_name, email, meta) VALUES (:first_name, :email, :meta)
ON CONFLICT (email) DO UPDATE SET first_name = EXCLUDED.first_name RETURNING id`, people[0])
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	r.do("Select, Get, pagination, count", func() error {
		var page []sqlxPerson
		var n int
		var p sqlxPerson
		return errors.Join(
			db.SelectContext(ctx, &page, `SELECT * FROM sqlx_people ORDER BY id LIMIT $1 OFFSET $2`, 2, 1),
			db.GetContext(ctx, &n, `SELECT count(*) FROM sqlx_people WHERE meta ? 'lang'`),
			db.GetContext(ctx, &p, `SELECT * FROM sqlx_people WHERE email = $1`, "frances@example.com"))
	})
	r.do("In and Rebind", func() error {
		if err := db.SelectContext(ctx, &ids, `SELECT id FROM sqlx_people ORDER BY id`); err != nil {
			return err
		}
		q, args, err := sqlx.In(`SELECT * FROM sqlx_people WHERE id IN (?) AND first_name <> ?`, ids, "nobody")
		if err != nil {
			return err
		}
		var found []sqlxPerson
		return db.SelectContext(ctx, &found, db.Rebind(q), args...)
	})
	r.do("Named, In and Rebind(DOLLAR)", func() error {
		q, args, err := sqlx.Named(`UPDATE sqlx_people SET tags = array_append(tags, :tag) WHERE id IN (:ids) AND first_name <> :name`,
			map[string]any{"tag": "pioneer", "ids": ids, "name": "nobody"})
		if err != nil {
			return err
		}
		if q, args, err = sqlx.In(q, args...); err != nil {
			return err
		}
		_, err = db.ExecContext(ctx, sqlx.Rebind(sqlx.DOLLAR, q), args...)
		return err
	})
	r.do("PrepareNamed", func() error {
		st, err := db.PrepareNamedContext(ctx, `SELECT * FROM sqlx_people WHERE first_name = :first_name AND tags @> :tags`)
		if err != nil {
			return err
		}
		var found []sqlxPerson
		return errors.Join(st.SelectContext(ctx, &found, map[string]any{"first_name": "barbara", "tags": pq.StringArray{"abstraction"}}), st.Close())
	})
	r.do("Beginx, NamedExec, FOR UPDATE SKIP LOCKED, Commit", func() error {
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		_, err1 := tx.NamedExecContext(ctx, `UPDATE sqlx_people SET meta = meta || CAST(:patch AS jsonb) WHERE id = :id`, map[string]any{"patch": `{"seen":true}`, "id": ids[0]})
		var locked []int64
		err2 := tx.SelectContext(ctx, &locked, `SELECT id FROM sqlx_people WHERE id = ANY($1) FOR UPDATE SKIP LOCKED`, ids)
		_, err3 := tx.ExecContext(ctx, `DELETE FROM sqlx_people WHERE id = $1`, ids[len(ids)-1])
		if err := errors.Join(err1, err2, err3); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		return tx.Commit()
	})
	r.doLocks("session lock", func() error {
		var ok bool
		return errors.Join(db.GetContext(ctx, &ok, `SELECT pg_try_advisory_lock($1)`, 4444),
			db.GetContext(ctx, &ok, `SELECT pg_advisory_unlock($1)`, 4444))
	})
}
