package main

import (
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestOneFlightdeckImport: the example needs one package of the project, client.
func TestOneFlightdeckImport(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasPrefix(path, "github.com/flightdeck-ai/flightdeck/") {
			ours = append(ours, path)
		}
	}
	if len(ours) != 1 || ours[0] != "github.com/flightdeck-ai/flightdeck/client" {
		t.Errorf("main.go imports %v, want only github.com/flightdeck-ai/flightdeck/client", ours)
	}
}
