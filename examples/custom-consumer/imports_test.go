package main

import (
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/imports"
)

// TestOneFlightdeckImport: the example needs one package of the project, handlers.
func TestOneFlightdeckImport(t *testing.T) { imports.Only(t, "main.go", "handlers") }
