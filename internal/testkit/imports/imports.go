// Package imports checks which of the project's packages a Go file imports.
package imports

import (
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// Module is the project's module path, with its trailing slash.
const Module = "github.com/flightdeck-ai/flightdeck/"

// Only fails t unless file imports exactly one package of the project, want. want is a path
// below Module, such as "client".
func Only(t testing.TB, file, want string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasPrefix(path, Module) {
			ours = append(ours, strings.TrimPrefix(path, Module))
		}
	}
	if len(ours) != 1 || ours[0] != want {
		t.Errorf("%s imports %v of the project, want only %s", file, ours, want)
	}
}
