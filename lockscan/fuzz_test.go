package lockscan

import (
	"slices"
	"strings"
	"testing"
)

// fuzzSeedGroups are the seeds of the fuzz tests, grouped by lexical trap.
var fuzzSeedGroups = map[string][]string{
	"quoted-identifiers": {
		`SELECT "pg_advisory_lock"(1)`, `SELECT "PG_ADVISORY_LOCK"(1)`, `SELECT "a""b", pg_advisory_lock(1)`,
		`SELECT "pg_catalog"."pg_try_advisory_lock"(1)`,
	},
	"e-strings": {
		`SELECT E'\'', pg_advisory_lock(1)`, `DO E'BEGIN PERFORM pg_\x61dvisory_lock(1); END'`,
		`SELECT E'pg_advisory_lock(1)\\'`, `CREATE FUNCTION f() RETURNS bool LANGUAGE sql AS E'SELECT pg_try_advisory_lock(1)'`,
	},
	"comments": {
		`SELECT /* a /* pg_advisory_lock(1) */ b */ pg_advisory_unlock(1)`, "SELECT 1 -- pg_advisory_lock(1)\n, pg_advisory_lock(2)",
		`SELECT pg_catalog/**/.pg_advisory_lock(1)`,
	},
	"dollar-quotes": {
		`SELECT $$pg_advisory_lock(1)$$`, `DO $x$ BEGIN PERFORM pg_advisory_lock(1); END $x$`,
		`DO $$ BEGIN EXECUTE $q$SELECT pg_advisory_lock(1)$q$; END $$`,
		`CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN DO $d$ BEGIN PERFORM pg_advisory_lock(1); END $d$; END $f$`,
	},
	"unicode-escapes": {
		`SELECT U&"pg_\0061dvisory_lock"(1)`, `SELECT U&"pg_!0061dvisory_lock" UESCAPE '!'(1)`,
		`SELECT u&"pg_\+000061dvisory_lock"(1)`, `DO U&'BEGIN PERFORM pg_advisory_lock(1); END'`,
	},
	"casing": {
		`select PG_Advisory_Lock(1)`, `SELECT Pg_Catalog.PG_TRY_ADVISORY_LOCK_SHARED(1)`,
		`DO $$ BEGIN Perform PG_ADVISORY_LOCK(1); END $$`,
	},
	"bodies": {
		`DO 'BEGIN PERFORM pg_advisory_lock(1); RAISE NOTICE ''x''; END'`,
		`CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT pg_advisory_lock(1); END`,
		`DO $$ DECLARE b bool; BEGIN SELECT pg_try_advisory_lock(1) INTO b; b := pg_try_advisory_lock(2); END $$`,
		`DO $$ BEGIN EXECUTE format('SELECT %s', 1); END $$`,
		`CREATE FUNCTION f() RETURNS void LANGUAGE plpython3u AS $$ plpy.execute("x") $$`,
	},
	"continuation": {
		"DO 'BEGIN PERFORM pg_advis'\n'ory_lock(1); END'", "DO E'BEGIN PERFORM pg_advis'\r\n  'ory_lock(1); END'",
		"DO $$ BEGIN DO 'BEGIN PERFORM pg_a''\n-- c\n''dvisory_lock(1); END'; END $$",
		"DO E'BEGIN DO \\'BEGIN PERFORM pg_advis\\'\n\\'ory_lock(1); END\\'; END'",
	},
	"escaped-punctuation": {
		`DO E'BEGIN PERFORM ts\_stat(\'select 1\'); END'`, `DO E'BEGIN PERFORM query\_to\_xml(\'select 1\', true, true, \'\'); END'`,
		`DO E'BEGIN PERFORM U\&"pg_!0061dvisory_lock" UESCAPE \'!\'(1); END'`,
	},
	"plain": {
		benchPlain, benchLock, `SELECT pg_advisory_lock($1); SELECT pg_advisory_unlock($1)`, `SELECT dblink_exec('c', 'x')`,
	},
}

func FuzzScan(f *testing.F) {
	for _, group := range fuzzSeedGroups {
		for _, s := range group {
			f.Add(s)
		}
	}
	f.Fuzz(func(t *testing.T, q string) {
		if len(q) > 4096 {
			return
		}
		r, err := scanQuery(q, reading{}) // bypass the pre-filter: it is what we check
		if err != nil {
			if !strings.HasPrefix(err.Error(), "lockscan: ") {
				t.Fatalf("error without prefix: %v", err)
			}
			return
		}
		if (len(r.Calls) > 0 || len(r.Dynamic) > 0) && !MayContainCall(q) {
			t.Fatalf("pre-filter unsound: %q has %+v", q, r)
		}
		for _, c := range r.Calls {
			if c.Start < 0 || c.End > len(q) || c.Start >= c.End {
				t.Fatalf("bad span %+v in %q", c, q)
			}
		}
		checkUnlockRewrite(t, q, r.Calls)
		if !r.HasSessionLock() {
			return
		}
		out, err := RewriteXact(q)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "lockscan: ") {
				t.Fatalf("rewrite error without prefix: %v", err)
			}
			return
		}
		checkRewrite(t, q, out)
	})
}

// fuzzSeeds returns every seed of fuzzSeedGroups, group by group in a fixed
// order.
func fuzzSeeds() []string {
	var groups []string
	for g := range fuzzSeedGroups {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	var out []string
	for _, g := range groups {
		out = append(out, fuzzSeedGroups[g]...)
	}
	return out
}
