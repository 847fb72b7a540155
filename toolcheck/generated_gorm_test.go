package toolcheck

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/lib/pq"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"
)

// gormAuthor is a GORM model with the usual field kinds: a uint64 key,
// text of a size, a nullable unique column, a sql.Null type, JSON through
// GORM's json serializer into jsonb, a text[] array (lib/pq's type, as
// GORM's documentation suggests), timestamps, soft delete and a has-many.
type gormAuthor struct {
	ID        uint64  `gorm:"primaryKey"`
	Name      string  `gorm:"size:120;not null;index"`
	Email     *string `gorm:"uniqueIndex"`
	Bio       sql.NullString
	Karma     int32          `gorm:"not null;default:0"`
	Settings  map[string]any `gorm:"serializer:json;type:jsonb"`
	Tags      pq.StringArray `gorm:"type:text[]"`
	Posts     []gormPost     `gorm:"foreignKey:AuthorID"`
	CreatedAt time.Time
	UpdatedAt time.Time
	DeletedAt gorm.DeletedAt `gorm:"index"`
}

// gormAuthorV2 is gormAuthor's table with one more column: AutoMigrate
// then writes ALTER TABLE.
type gormAuthorV2 struct {
	gormAuthor
	Rank *int64
}

func (gormAuthorV2) TableName() string { return "gorm_authors" }

// gormPost has a bigint key, belongs to an author and has many labels
// through a join table.
type gormPost struct {
	ID          int64  `gorm:"primaryKey;autoIncrement"`
	AuthorID    uint64 `gorm:"not null;index"`
	Author      *gormAuthor
	Title       string         `gorm:"type:text;not null"`
	Meta        map[string]any `gorm:"serializer:json;type:json"`
	Labels      []gormLabel    `gorm:"many2many:gorm_post_labels"`
	PublishedAt *time.Time
	CreatedAt   time.Time
}

// gormLabel is a small table with a unique name.
type gormLabel struct {
	ID   uint   `gorm:"primaryKey"`
	Name string `gorm:"size:40;uniqueIndex"`
}

var gormKinds = withKinds(map[string]string{
	"AutoMigrate introspection": `(?is)information_schema`,
	"CREATE TABLE":              `(?is)^create table`,
	"CREATE INDEX":              `(?is)^create (unique )?index`,
	"ALTER TABLE":               `(?is)^alter table`,
	"SAVEPOINT":                 `(?is)^savepoint\b`,
	"ROLLBACK TO SAVEPOINT":     `(?is)^rollback to savepoint\b`,
	"soft delete":               `(?is)^update\b.*"deleted_at"=`,
	"preload":                   `(?is)^select\b.*from "gorm_posts" where "gorm_posts"\."author_id" in`,
	"join":                      `(?is)left join "gorm_authors" "Author"`,
	"FOR UPDATE":                `(?is)\bfor update\b`,
})

// gormWorkload drives GORM (gorm.io/driver/postgres over the *sql.DB)
// through AutoMigrate and ordinary CRUD.
func gormWorkload(ctx context.Context, r *recorder, sqlDB *sql.DB) {
	var db *gorm.DB
	r.do("gorm.Open", func() (err error) {
		db, err = gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
		return err
	})
	db = db.WithContext(ctx)
	models := []any{&gormAuthor{}, &gormPost{}, &gormLabel{}}
	r.do("AutoMigrate, new tables", func() error { return db.AutoMigrate(models...) })
	r.do("AutoMigrate, tables up to date", func() error { return db.AutoMigrate(models...) })
	r.do("AutoMigrate, a new column", func() error { return db.AutoMigrate(&gormAuthorV2{}) })
	r.do("Migrator", func() error {
		m := db.Migrator()
		if !m.HasTable(&gormPost{}) || !m.HasColumn(&gormAuthorV2{}, "Rank") || !m.HasIndex(&gormAuthor{}, "Name") {
			return errors.New("the migrator does not see what AutoMigrate made")
		}
		if _, err := m.ColumnTypes(&gormPost{}); err != nil {
			return err
		}
		if err := m.DropIndex(&gormPost{}, "AuthorID"); err != nil {
			return err
		}
		return m.CreateIndex(&gormPost{}, "AuthorID")
	})

	ada := gormAuthor{Name: "ada", Email: ptr("ada@example.com"), Settings: map[string]any{"theme": "dark"}, Tags: pq.StringArray{"go", "sql"}}
	r.do("Create, RETURNING the key", func() error { return db.Create(&ada).Error })
	batch := []gormAuthor{
		{Name: "grace", Email: ptr("grace@example.com"), Bio: sql.NullString{String: "cobol", Valid: true},
			Posts: []gormPost{{Title: "compilers", Meta: map[string]any{"words": 900}, Labels: []gormLabel{{Name: "history"}, {Name: "tools"}}}}},
		{Name: "edsger", Posts: []gormPost{{Title: "goto", Labels: []gormLabel{{Name: "structured"}}}, {Title: "semaphores"}}},
	}
	r.do("Create, a batch with associations", func() error { return db.Create(&batch).Error })
	more := []gormAuthor{{Name: "barbara"}, {Name: "ken"}, {Name: "dennis"}}
	r.do("CreateInBatches", func() error { return db.CreateInBatches(&more, 2).Error })
	r.do("upsert, DO UPDATE", func() error {
		again := gormAuthor{Name: "ada lovelace", Email: ptr("ada@example.com"), Karma: 3}
		return db.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "email"}},
			DoUpdates: clause.AssignmentColumns([]string{"name", "karma", "updated_at"}),
		}).Create(&again).Error
	})
	r.do("upsert, DO NOTHING", func() error {
		return db.Clauses(clause.OnConflict{DoNothing: true}).Create(&[]gormLabel{{Name: "tools"}, {Name: "new"}}).Error
	})
	r.do("FirstOrCreate", func() error {
		var l gormLabel
		return db.Where(gormLabel{Name: "misc"}).FirstOrCreate(&l).Error
	})

	ids := []uint64{ada.ID, batch[0].ID, batch[1].ID}
	var authors []gormAuthor
	var posts []gormPost
	var n int64
	r.do("First, Take, Last", func() error {
		var first, taken, last gormAuthor
		return errors.Join(db.First(&first, ada.ID).Error, db.Take(&taken, "name = ?", "grace").Error, db.Last(&last).Error)
	})
	r.do("Where IN", func() error { return db.Where("id IN ?", ids).Find(&authors).Error })
	r.do("Where struct, Or, Not, Order", func() error {
		return db.Where(&gormAuthor{Name: "ada lovelace"}).Or("karma > ?", 1).Not("name = ?", "nobody").Order("created_at desc").Find(&authors).Error
	})
	r.do("Count", func() error { return db.Model(&gormAuthor{}).Where("karma >= ?", 0).Count(&n).Error })
	r.do("pagination", func() error { return db.Scopes(gormPage(2, 2)).Order("id").Find(&authors).Error })
	r.do("Pluck", func() error {
		var names []string
		return db.Model(&gormAuthor{}).Where("name LIKE ?", "%a%").Pluck("name", &names).Error
	})
	r.do("Group, Having", func() error {
		var rows []struct {
			AuthorID uint64
			N        int64
		}
		return db.Model(&gormPost{}).Select("author_id, count(*) AS n").Group("author_id").Having("count(*) > ?", 0).Scan(&rows).Error
	})
	r.do("jsonb and array conditions", func() error {
		return db.Where("settings->>'theme' = ?", "dark").Where("? = ANY(tags)", "go").Find(&authors).Error
	})
	r.do("Preload", func() error { return db.Preload("Posts").Preload("Posts.Labels").Find(&authors, ids).Error })
	r.do("Joins", func() error { return db.Joins("Author").Where("title <> ?", "").Find(&posts).Error })
	r.do("generics API", func() error {
		_, err := gorm.G[gormAuthor](db).Where("name = ?", "ken").Limit(1).Find(ctx)
		return err
	})

	r.do("Update with an expression", func() error {
		return db.Model(&ada).Update("karma", gorm.Expr("karma + ?", 1)).Error
	})
	r.do("Updates, struct and map", func() error {
		return errors.Join(db.Model(&ada).Updates(gormAuthor{Name: "ada l."}).Error,
			db.Model(&ada).Updates(map[string]any{"bio": "analyst", "tags": pq.StringArray{"math"}}).Error)
	})
	r.do("UpdateColumn, RETURNING", func() error {
		var back []gormAuthor
		return db.Model(&back).Clauses(clause.Returning{}).Where("karma < ?", 100).UpdateColumn("karma", 7).Error
	})
	r.do("Save", func() error { ada.Karma = 9; return db.Save(&ada).Error })
	r.do("associations", func() error {
		p := batch[1].Posts[1]
		a := db.Model(&p).Association("Labels")
		if err := a.Append(&gormLabel{Name: "proofs"}); err != nil {
			return err
		}
		if a.Count() != 1 {
			return errors.New("Association.Count is not 1 after one Append")
		}
		return a.Replace(&gormLabel{Name: "concurrency"})
	})

	r.do("Transaction with a nested one rolled back, SavePoint, FOR UPDATE", func() error {
		return db.Transaction(func(tx *gorm.DB) error {
			var locked []gormAuthor
			if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id IN ?", ids).Find(&locked).Error; err != nil {
				return err
			}
			if err := tx.Create(&gormPost{AuthorID: ada.ID, Title: "notes"}).Error; err != nil {
				return err
			}
			errUndo := errors.New("undo the nested part")
			if err := tx.Transaction(func(tx2 *gorm.DB) error {
				if err := tx2.Create(&gormPost{AuthorID: ada.ID, Title: "draft"}).Error; err != nil {
					return err
				}
				return errUndo
			}); !errors.Is(err, errUndo) {
				return err
			}
			if err := tx.SavePoint("before_delete").Error; err != nil {
				return err
			}
			if err := tx.Where("title = ?", "notes").Delete(&gormPost{}).Error; err != nil {
				return err
			}
			return tx.RollbackTo("before_delete").Error
		})
	})

	r.do("raw, named arguments", func() error {
		var rows []struct {
			ID   uint64
			Name string
		}
		return errors.Join(
			db.Raw("SELECT id, name FROM gorm_authors WHERE name = @name OR email = @email", sql.Named("name", "ken"), sql.Named("email", "grace@example.com")).Scan(&rows).Error,
			db.Exec("UPDATE gorm_authors SET karma = karma + 1 WHERE id IN @ids", map[string]any{"ids": ids}).Error)
	})
	r.doLocks("raw session lock, as GORM users take one", func() error {
		var ok bool
		if err := db.Raw("SELECT pg_try_advisory_lock(?)", 4242).Scan(&ok).Error; err != nil {
			return err
		}
		return db.Exec("SELECT pg_advisory_unlock(?)", 4242).Error
	})

	r.do("soft delete, Unscoped, hard delete", func() error {
		var gone []gormAuthor
		return errors.Join(
			db.Delete(&more[0]).Error,
			db.Unscoped().Where("deleted_at IS NOT NULL").Find(&gone).Error,
			db.Unscoped().Delete(&more[0]).Error,
			db.Delete(&gormAuthor{}, []uint64{more[1].ID, more[2].ID}).Error,
			db.Select("Labels").Delete(&batch[1].Posts[0]).Error)
	})
}

// gormPage is the pagination scope of GORM's documentation.
func gormPage(page, size int) func(*gorm.DB) *gorm.DB {
	return func(db *gorm.DB) *gorm.DB { return db.Offset((page - 1) * size).Limit(size) }
}

func ptr[T any](v T) *T { return &v }
