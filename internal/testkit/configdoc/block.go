package configdoc

import (
	"fmt"
	"os"
	"strings"
)

// CodeBlock returns the text of the first fenced code block of the document at path whose
// fence is tagged tag (```tag), without its fences.
func CodeBlock(path, tag string) (string, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	_, block, ok := strings.Cut(string(doc), "\n```"+tag+"\n")
	block, _, ok2 := strings.Cut(block, "\n```")
	if !ok || !ok2 {
		return "", fmt.Errorf("configdoc: %s has no %s block", path, tag)
	}
	return block, nil
}
