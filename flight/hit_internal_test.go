package flight

import (
	"strings"
	"testing"
)

// TestFinishedKeepsWhatEventsInline: a kept outcome's result is the compact JSON that the
// events of other tasks inline, or none, whether it is compacted when kept (a result over
// maxKeptResult) or when the first duplicate comes; an outcome whose inlined result stays over
// maxKeptResult is not kept.
func TestFinishedKeepsWhatEventsInline(t *testing.T) {
	var c *Coordinator
	o := Ownership{Key: "k", MaxSharedInline: 8 << 10}
	big := `{"a":"` + strings.Repeat("x", maxKeptResult) + `"}`
	for _, row := range []struct {
		name, result string
		inlineCap    int // MaxSharedInline; 0: 8 KiB
		kept         bool
		inline       string
	}{
		{"compact", `{"v":1}`, 0, true, `{"v":1}`},
		{"spaced", "{ \"v\" : [1, 2] }\n", 0, true, `{"v":[1,2]}`},
		{"not JSON", "plain text", 0, true, ""},
		{"spaced over the bound", `{"v":1` + strings.Repeat(" ", maxKeptResult) + `}`, 0, true, `{"v":1}`},
		{"over the bound", big, 0, false, ""},
		{"over the bound, not JSON", big[1:], 0, true, ""},
		{"over the inline cap", `{"a":"` + strings.Repeat("x", 300) + `"}`, 256, true, ""},
	} {
		t.Run(row.name, func(t *testing.T) {
			o := o
			if row.inlineCap > 0 {
				o.MaxSharedInline = row.inlineCap
			}
			f := c.Finished(o, []byte(row.result))
			if (f != nil) != row.kept {
				t.Fatalf("kept = %v, want %v", f != nil, row.kept)
			}
			if f == nil {
				return
			}
			for range 2 {
				if got := string(f.inline()); got != row.inline {
					t.Fatalf("inline = %q, want %q", got, row.inline)
				}
			}
		})
	}
}
