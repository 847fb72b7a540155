package pgadvisory_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// typedPackage is a package parsed and type-checked from source, its
// imports from the compiler's export data: what TestNoDynamicSQL reads.
type typedPackage struct {
	PkgPath   string
	Fset      *token.FileSet
	Syntax    []*ast.File
	TypesInfo *types.Info
	Errors    []error
}

// loadPackages loads the packages that match patterns (relative to the
// working directory) with the go command's `go list -export`, which builds
// the export data of every dependency, and go/types; the standard library's
// answer to golang.org/x/tools/go/packages for a module that requires no
// module for its tests alone.
func loadPackages(patterns ...string) ([]*typedPackage, error) {
	args := append([]string{"list", "-e", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,CgoFiles,Export,DepOnly,Error"}, patterns...)
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.Bytes())
	}
	type listed struct {
		ImportPath, Dir, Export string
		GoFiles, CgoFiles       []string
		DepOnly                 bool
		Error                   *struct{ Err string }
	}
	exports := map[string]string{}
	var roots []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %v", err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			roots = append(roots, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	var pkgs []*typedPackage
	for _, p := range roots {
		tp := &typedPackage{PkgPath: p.ImportPath, Fset: fset, TypesInfo: &types.Info{
			Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{},
			Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{},
		}}
		pkgs = append(pkgs, tp)
		if p.Error != nil {
			tp.Errors = append(tp.Errors, errors.New(p.Error.Err))
			continue
		}
		if len(p.CgoFiles) > 0 {
			tp.Errors = append(tp.Errors, errors.New("cgo files are not loaded"))
			continue
		}
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ParseComments)
			if err != nil {
				tp.Errors = append(tp.Errors, err)
				continue
			}
			tp.Syntax = append(tp.Syntax, f)
		}
		conf := types.Config{Importer: imp, Error: func(err error) { tp.Errors = append(tp.Errors, err) }}
		_, _ = conf.Check(p.ImportPath, fset, tp.Syntax, tp.TypesInfo)
	}
	return pkgs, nil
}
