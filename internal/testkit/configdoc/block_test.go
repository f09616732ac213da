package configdoc_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/configdoc"
)

// TestCodeBlock: the first block of a tag, without its fences; a missing tag is an error.
func TestCodeBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "# Doc\n\n```sh\necho a\n```\n\n```acl\nuser a on\n```\n\n```acl\nuser b on\n```\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := configdoc.CodeBlock(path, "acl"); err != nil || got != "user a on" {
		t.Errorf("CodeBlock(acl) = %q, %v", got, err)
	}
	if _, err := configdoc.CodeBlock(path, "acl-gateway"); err == nil {
		t.Error("CodeBlock of a missing tag: no error")
	}
}
