package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/configdoc"
)

// configDocPath is the configuration reference, from this package's directory.
var configDocPath = filepath.Join("..", "..", "docs", "CONFIGURATION.md")

func loadConfigDoc(t *testing.T) *configdoc.Doc {
	t.Helper()
	doc, err := configdoc.Load(configDocPath)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestConfigurationDocConsumerFlags: the consumer table of docs/CONFIGURATION.md has one row
// per flag of the flag set main parses (newFlags), with the flag's default, and no row or
// mention of a flag the consumer does not have. The defaults read from the environment are
// taken with an empty environment, as the document writes them ($NAME, else ...).
func TestConfigurationDocConsumerFlags(t *testing.T) {
	doc := loadConfigDoc(t)
	s := doc.Section("consumer")
	if s == nil {
		t.Fatalf("%s has no section titled consumer", configDocPath)
	}
	fs, _ := newFlags(func(string) string { return "" })
	errs := configdoc.CheckFlags(doc, s, fs, nil)
	errs = append(errs, configdoc.CheckMentions(doc, s, func(name string) bool { return fs.Lookup(name) != nil })...)
	for _, err := range errs {
		t.Error(err)
	}
}

// envName is the shape of the environment variables the project defines.
var envName = regexp.MustCompile(`^(FLIGHTDECK|REDIS|OPENAI)_[A-Z0-9_]*[A-Z0-9]$`)

// TestConfigurationDocEnvironment: every FLIGHTDECK_*, REDIS_* and OPENAI_* name written as a
// string in the project's Go code (tests left out) has a row in the environment table of
// docs/CONFIGURATION.md, and every row names a variable the code reads: a string of its Go
// code, the _FILE twin of one, or HOME (read through os.UserHomeDir).
func TestConfigurationDocEnvironment(t *testing.T) {
	doc := loadConfigDoc(t)
	s := doc.Section("Environment variables")
	if s == nil {
		t.Fatalf("%s has no section titled Environment variables", configDocPath)
	}
	strs := goStrings(t, filepath.Join("..", ".."))
	var entries []configdoc.Entry
	for v := range strs {
		if envName.MatchString(v) {
			entries = append(entries, configdoc.Entry{Name: v})
		}
	}
	for _, r := range s.Rows {
		if envName.MatchString(r.Name) && strs[r.Name] {
			continue // an entry already
		}
		base, twin := strings.CutSuffix(r.Name, "_FILE")
		if strs[r.Name] || twin && strs[base] || r.Name == "HOME" {
			entries = append(entries, configdoc.Entry{Name: r.Name})
		}
	}
	for _, err := range configdoc.CheckRows(doc, s, entries) {
		t.Error(err)
	}
}

// goStrings returns the string literals of the Go files under root, test files, testdata,
// vendor directories and nested modules left out.
func goStrings(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || isModule(path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					out[v] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// isModule reports whether dir holds a go.mod of its own (a nested module, such as bench/asynq).
func isModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}
