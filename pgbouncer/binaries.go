package pgbouncer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// MissingBinaryError reports a server program that could not be found, and
// the Debian package that provides it.
type MissingBinaryError struct {
	Program  string   // e.g. "initdb"
	Package  string   // e.g. "postgresql"
	Searched []string // where the harness looked
}

func (e *MissingBinaryError) Error() string {
	where := "on PATH"
	if len(e.Searched) > 0 {
		where += " and in " + strings.Join(e.Searched, ", ")
	}
	return fmt.Sprintf("pgbouncer: %s not found (looked %s); install it with: apt-get install -y %s",
		e.Program, where, e.Package)
}

// binaries are the absolute paths of the programs the local back end runs.
type binaries struct {
	initdb, postgres, pgbouncer string
}

// postgresBinGlob is where Debian installs PostgreSQL's server programs,
// which are not on PATH.
var postgresBinGlob = "/usr/lib/postgresql/*/bin"

// pgbouncerDirs are where Debian installs pgbouncer, often not on PATH.
var pgbouncerDirs = []string{"/usr/sbin", "/usr/local/sbin"}

// lookPath is exec.LookPath, replaceable in tests.
var lookPath = exec.LookPath

// findBinaries looks for initdb and postgres on PATH, then in the newest
// /usr/lib/postgresql/N/bin; and for pgbouncer on PATH and in /usr/sbin
// (Debian's location, often not on a non-root PATH).
func findBinaries() (binaries, error) {
	var b binaries
	pgDirs := postgresBinDirs()
	var err error
	if b.initdb, err = find("initdb", "postgresql", pgDirs); err != nil {
		return b, err
	}
	// Prefer the postgres next to the initdb we found: their versions must
	// match.
	sibling := filepath.Join(filepath.Dir(resolve(b.initdb)), "postgres")
	if isExecutable(sibling) {
		b.postgres = sibling
	} else if b.postgres, err = find("postgres", "postgresql", pgDirs); err != nil {
		return b, err
	}
	if b.pgbouncer, err = find("pgbouncer", "pgbouncer", pgbouncerDirs); err != nil {
		return b, err
	}
	return b, nil
}

func find(program, pkg string, dirs []string) (string, error) {
	if p, err := lookPath(program); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, program)
		if isExecutable(p) {
			return p, nil
		}
	}
	searched := dirs
	if len(searched) == 0 && pkg == "postgresql" {
		searched = []string{postgresBinGlob}
	}
	return "", &MissingBinaryError{Program: program, Package: pkg, Searched: searched}
}

// postgresBinDirs returns the directories matching postgresBinGlob, newest
// major version first.
func postgresBinDirs() []string {
	dirs, _ := filepath.Glob(postgresBinGlob)
	version := func(d string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return n
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return dirs
}

func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
