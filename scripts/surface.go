//go:build ignore

// surface prints the size of the code and of the API a user meets: non-test Go and Lua lines,
// the exported top-level identifiers of each package, what package client links, and the
// README's length. Run it from the repository root: go run scripts/surface.go
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// userPackages are the packages a consumer or a service imports.
var userPackages = []string{"client", "topics", "handlers", "handlers/model", "flight", "executor"}

func main() {
	goLines, luaLines := 0, 0
	exported := map[string]int{}
	_ = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || path == "bench" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		switch {
		case strings.HasSuffix(path, ".lua"):
			luaLines += lines(path)
		case strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") && !strings.HasPrefix(path, "scripts/"):
			goLines += lines(path)
			exported[filepath.Dir(path)] += exports(path)
		}
		return nil
	})
	fmt.Printf("non-test Go lines: %d\nLua lines: %d\n", goLines, luaLines)
	fmt.Println("exported top-level identifiers:")
	user := 0
	for _, p := range userPackages {
		fmt.Printf("  %-16s %d\n", p, exported[p])
		user += exported[p]
	}
	fmt.Printf("  %-16s %d\n", "(user packages)", user)
	var others []string
	for p := range exported {
		others = append(others, p)
	}
	sort.Strings(others)
	for _, p := range others {
		if !contains(userPackages, p) {
			fmt.Printf("  %-16s %d\n", p, exported[p])
		}
	}
	out, err := exec.Command("go", "list", "-deps", "./client").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go list:", err)
		os.Exit(1)
	}
	var heavy []string
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range []string{"github.com/prometheus/client_golang/prometheus", "github.com/sony/gobreaker", "github.com/jackc/pgx/v5", "github.com/rs/zerolog", "github.com/ThreeDotsLabs/watermill"} {
			if dep == b || strings.HasPrefix(dep, b+"/v") {
				heavy = append(heavy, dep)
			}
		}
	}
	fmt.Printf("client links: %d packages; of prometheus, gobreaker, pgx, zerolog, watermill: %v\n", len(strings.Fields(string(out))), heavy)
	readme, _ := os.ReadFile("README.md")
	fmt.Printf("README: %d lines, %d words\n", strings.Count(string(readme), "\n"), len(strings.Fields(string(readme))))
}

func lines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

func exports(path string) int {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil || f.Name.Name == "main" {
		return 0
	}
	n := 0
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil && d.Name.IsExported() {
				n++
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
