package toolcheck

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// bunUser is a bun model with the usual field kinds: a bigint identity
// key, a unique column, a nullable one, jsonb, a text[] array, a default
// timestamp, soft delete and a has-many.
type bunUser struct {
	bun.BaseModel `bun:"table:bun_users,alias:u"`

	ID        int64  `bun:",pk,autoincrement"`
	Name      string `bun:",notnull"`
	Email     string `bun:",unique,notnull"`
	Nick      *string
	Attrs     map[string]any `bun:"type:jsonb"`
	Tags      []string       `bun:",array"`
	CreatedAt time.Time      `bun:",nullzero,notnull,default:current_timestamp"`
	UpdatedAt bun.NullTime
	DeletedAt time.Time   `bun:",soft_delete,nullzero"`
	Stories   []*bunStory `bun:"rel:has-many,join:id=author_id"`
}

// bunStory belongs to a user.
type bunStory struct {
	bun.BaseModel `bun:"table:bun_stories,alias:s"`

	ID       int64    `bun:",pk,autoincrement"`
	AuthorID int64    `bun:",notnull"`
	Author   *bunUser `bun:"rel:belongs-to,join:author_id=id"`
	Title    string   `bun:",notnull"`
	Score    int32    `bun:",notnull,default:0"`
}

// bunScratch is a table created and dropped again.
type bunScratch struct {
	bun.BaseModel `bun:"table:bun_scratch"`

	ID   int64 `bun:",pk,autoincrement"`
	Note string
}

var bunKinds = withKinds(map[string]string{
	"CREATE TABLE":                     `(?is)^create table if not exists "bun_users"`,
	"CREATE INDEX":                     `(?is)^create index if not exists`,
	"ALTER TABLE":                      `(?is)^alter table`,
	"DROP TABLE":                       `(?is)^drop table`,
	"SAVEPOINT":                        `(?is)^savepoint\b`,
	"ROLLBACK TO SAVEPOINT":            `(?is)^rollback to savepoint\b`,
	"soft delete":                      `(?is)^update "bun_users" as "u" set "deleted_at" =`,
	"relation":                         `(?is)^select\b.*from "bun_stories" as "s" where .*"s"\."author_id" in`,
	"bulk UPDATE":                      `(?is)^with "_data" .*\bas \(values`,
	"MERGE":                            `(?is)^merge\b`,
	"comment":                          `(?is)/\*.*\*/`,
	"a literal naming a lock function": `(?is)'select pg_advisory_lock\(42\)`,
})

// bunWorkload drives bun (pgdialect over the *sql.DB) through
// CreateTable/CreateIndex and ordinary CRUD. bun writes the arguments into
// the text itself, so most of its statements carry literals.
func bunWorkload(ctx context.Context, r *recorder, sqlDB *sql.DB) {
	db := bun.NewDB(sqlDB, pgdialect.New())
	r.do("CreateTable", func() error {
		_, err1 := db.NewCreateTable().Model((*bunUser)(nil)).IfNotExists().Exec(ctx)
		_, err2 := db.NewCreateTable().Model((*bunStory)(nil)).IfNotExists().
			ForeignKey(`("author_id") REFERENCES "bun_users" ("id") ON DELETE CASCADE`).Exec(ctx)
		_, err3 := db.NewCreateTable().Model((*bunScratch)(nil)).Comment("scratch").Exec(ctx)
		return errors.Join(err1, err2, err3)
	})
	r.do("CreateIndex", func() error {
		_, err1 := db.NewCreateIndex().Model((*bunStory)(nil)).Index("bun_stories_author_idx").IfNotExists().Column("author_id").Exec(ctx)
		_, err2 := db.NewCreateIndex().Model((*bunUser)(nil)).Index("bun_users_tags_idx").IfNotExists().Using("GIN").Column("tags").Exec(ctx)
		return errors.Join(err1, err2)
	})
	r.do("AddColumn, DropTable", func() error {
		_, err1 := db.NewAddColumn().Model((*bunUser)(nil)).ColumnExpr("rank bigint").IfNotExists().Exec(ctx)
		_, err2 := db.NewDropTable().Model((*bunScratch)(nil)).IfExists().Cascade().Exec(ctx)
		return errors.Join(err1, err2)
	})

	alan := bunUser{Name: "alan", Email: "alan@example.com", Nick: ptr("turing"), Attrs: map[string]any{"plan": "pro"}, Tags: []string{"go", "sql"}}
	r.do("insert, RETURNING", func() error {
		_, err := db.NewInsert().Model(&alan).Returning("id, created_at").Exec(ctx)
		return err
	})
	users := []bunUser{
		{Name: "alonzo", Email: "alonzo@example.com", Tags: []string{"lambda"}},
		{Name: "haskell", Email: "haskell@example.com", Attrs: map[string]any{"plan": "free", "seats": 2}},
		{Name: "kurt", Email: "kurt@example.com"},
	}
	r.do("batch insert", func() error {
		_, err := db.NewInsert().Model(&users).Exec(ctx)
		return err
	})
	stories := []bunStory{{AuthorID: alan.ID, Title: "machines"}, {AuthorID: alan.ID, Title: "morphogenesis", Score: 5}, {AuthorID: users[0].ID, Title: "calculus"}}
	r.do("batch insert of children", func() error {
		_, err := db.NewInsert().Model(&stories).Exec(ctx)
		return err
	})
	// bun writes values into the text: a user's data that reads like SQL
	// is a literal, not a call (River's job states, a post about locks, a
	// Windows path with backslashes).
	r.do("insert of text that names lock functions and settings, with a comment", func() error {
		_, err := db.NewInsert().Model(&[]bunStory{
			{AuthorID: alan.ID, Title: "SELECT pg_advisory_lock(42); -- and pg_advisory_unlock(42), explained"},
			{AuthorID: alan.ID, Title: `reset the 'discarded' jobs, then SET standard_conforming_strings = off`},
			{AuthorID: users[0].ID, Title: `C:\jobs\x41 and $$ dollar $$ signs`},
		}).Comment(`job: reset discarded, payload \xAAAA`).Exec(ctx)
		return err
	})
	r.do("upsert, DO UPDATE and DO NOTHING", func() error {
		again := bunUser{Name: "alan m. turing", Email: "alan@example.com"}
		_, err1 := db.NewInsert().Model(&again).On("CONFLICT (email) DO UPDATE").Set("name = EXCLUDED.name").Returning("id").Exec(ctx)
		_, err2 := db.NewInsert().Model(&bunUser{Name: "kurt", Email: "kurt@example.com"}).On("CONFLICT DO NOTHING").Exec(ctx)
		return errors.Join(err1, err2)
	})

	ids := []int64{alan.ID, users[0].ID, users[1].ID}
	var list []bunUser
	r.do("select by key, Where IN, order, pagination with count", func() error {
		var u bunUser
		err1 := db.NewSelect().Model(&u).Where("? = ?", bun.Ident("id"), alan.ID).Scan(ctx)
		_, err2 := db.NewSelect().Model(&list).Where("id IN (?)", bun.In(ids)).OrderExpr("id ASC").Limit(2).Offset(1).ScanAndCount(ctx)
		return errors.Join(err1, err2)
	})
	r.do("Count, Exists", func() error {
		_, err1 := db.NewSelect().Model((*bunUser)(nil)).Where("name LIKE ?", "a%").Count(ctx)
		_, err2 := db.NewSelect().Model((*bunStory)(nil)).Where("score > ?", 3).Exists(ctx)
		return errors.Join(err1, err2)
	})
	r.do("WhereGroup, jsonb and array conditions", func() error {
		return db.NewSelect().Model(&list).
			WhereGroup(" AND ", func(q *bun.SelectQuery) *bun.SelectQuery {
				return q.Where("attrs->>'plan' = ?", "pro").WhereOr("? = ANY(tags)", "lambda")
			}).Where("nick IS NOT NULL OR name <> ?", "").Scan(ctx)
	})
	r.do("relations", func() error {
		var withStories []bunUser
		var withAuthor []bunStory
		err1 := db.NewSelect().Model(&withStories).Relation("Stories", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Order("score DESC")
		}).Where("u.id IN (?)", bun.In(ids)).Scan(ctx)
		err2 := db.NewSelect().Model(&withAuthor).Relation("Author").Scan(ctx)
		return errors.Join(err1, err2)
	})
	r.do("group by, raw named arguments", func() error {
		var rows []struct {
			AuthorID int64 `bun:"author_id"`
			N        int64 `bun:"n"`
		}
		err1 := db.NewSelect().Model((*bunStory)(nil)).Column("author_id").ColumnExpr("count(*) AS n").Group("author_id").Having("count(*) > ?", 0).Scan(ctx, &rows)
		var names []string
		arg := struct {
			Name  string
			Email string
		}{"alan m. turing", "kurt@example.com"}
		err2 := db.NewRaw("SELECT name FROM bun_users WHERE name = ?name OR email = ?email", arg).Scan(ctx, &names)
		return errors.Join(err1, err2)
	})

	r.do("update by key, RETURNING; columns; bulk", func() error {
		_, err1 := db.NewUpdate().Model(&alan).Set("name = ?", "turing").Set("updated_at = now()").WherePK().Returning("id, name, updated_at").Exec(ctx)
		users[0].Nick = ptr("church")
		_, err2 := db.NewUpdate().Model(&users[0]).Column("nick").WherePK().Exec(ctx)
		users[1].Name, users[2].Name = "curry", "gödel"
		_, err3 := db.NewUpdate().Model(&users).Column("name").Bulk().Exec(ctx)
		return errors.Join(err1, err2, err3)
	})
	r.do("MERGE", func() error {
		_, err := db.NewMerge().Model(&bunStory{AuthorID: alan.ID, Title: "machines", Score: 9}).
			Using("(SELECT ?::bigint AS author_id, ? AS title) AS src", alan.ID, "machines").
			On("s.author_id = src.author_id AND s.title = src.title").
			WhenUpdate("MATCHED", func(q *bun.UpdateQuery) *bun.UpdateQuery { return q.Set("score = s.score + 1") }).
			WhenInsert("NOT MATCHED", func(q *bun.InsertQuery) *bun.InsertQuery { return q.Value("score", "0") }).
			Exec(ctx)
		return err
	})

	r.do("RunInTx with a nested one rolled back, FOR UPDATE", func() error {
		return db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead}, func(ctx context.Context, tx bun.Tx) error {
			var locked []bunUser
			if err := tx.NewSelect().Model(&locked).Where("id IN (?)", bun.In(ids)).For("UPDATE OF u").Scan(ctx); err != nil {
				return err
			}
			if _, err := tx.NewInsert().Model(&bunStory{AuthorID: alan.ID, Title: "notes"}).Comment("from a transaction").Exec(ctx); err != nil {
				return err
			}
			errUndo := errors.New("undo the nested part")
			if err := tx.RunInTx(ctx, nil, func(ctx context.Context, sp bun.Tx) error {
				if _, err := sp.NewDelete().Model((*bunStory)(nil)).Where("title = ?", "notes").Exec(ctx); err != nil {
					return err
				}
				return errUndo
			}); !errors.Is(err, errUndo) {
				return err
			}
			return nil
		})
	})
	r.doLocks("raw session lock", func() error {
		var ok bool
		if err := db.NewRaw("SELECT pg_try_advisory_lock(?)", 4343).Scan(ctx, &ok); err != nil {
			return err
		}
		return db.NewRaw("SELECT pg_advisory_unlock(?)", 4343).Scan(ctx, &ok)
	})

	r.do("soft delete, deleted rows, force delete", func() error {
		_, err1 := db.NewDelete().Model(&users[2]).WherePK().Exec(ctx)
		var gone []bunUser
		err2 := db.NewSelect().Model(&gone).WhereDeleted().Scan(ctx)
		_, err3 := db.NewDelete().Model(&users[2]).WherePK().ForceDelete().Exec(ctx)
		var deleted []int64
		_, err4 := db.NewDelete().Model((*bunStory)(nil)).Where("id IN (?)", bun.In([]int64{stories[0].ID, stories[1].ID})).Returning("id").Exec(ctx, &deleted)
		return errors.Join(err1, err2, err3, err4)
	})
}
