// Package configdoc reads the reference tables of docs/CONFIGURATION.md so that tests can hold
// them to the code: the flags of each command, the stage file's fields and the environment
// variables. It is used by tests only.
//
// The document is a list of sections, one per heading. A reference row is a table row whose
// first cell starts with a code span. Its cells are the name, such as `--redis`,
// `retry.initial` or `REDIS_URL`, then the default, then the meaning.
package configdoc

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Row is one reference row of a table.
type Row struct {
	// Name is the first cell's first code span without leading dashes: "redis" for `--redis`.
	Name string
	// Cells are the row's cells as written, the first one included.
	Cells []string
	// Line is the row's line number in the document, from 1.
	Line int
}

// Default returns the row's second cell, the default, or "" when it has none.
func (r Row) Default() string { return r.cell(1) }

// Meaning returns the row's third cell, what the name means, or "" when it has none.
func (r Row) Meaning() string { return r.cell(2) }

func (r Row) cell(i int) string {
	if i < len(r.Cells) {
		return r.Cells[i]
	}
	return ""
}

// Section is the part of the document under one heading, up to the next heading.
type Section struct {
	// Title is the heading's text without the leading #s and without backquotes.
	Title string
	// Line is the heading's line number, from 1.
	Line int
	// Rows are the section's reference rows, in order.
	Rows []Row
	// Text is every line of the section, the rows included.
	Text string
}

// Doc is a parsed reference document.
type Doc struct {
	// Path is the file the document was read from.
	Path     string
	sections []*Section
}

// Load reads the document at path.
func Load(path string) (*Doc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("configdoc: %w", err)
	}
	return Parse(path, string(b)), nil
}

// Parse splits text, read from path, into its sections. Lines before the first heading and
// lines inside fenced code blocks belong to no reference row.
func Parse(path, text string) *Doc {
	d := &Doc{Path: path}
	cur := &Section{}
	var body []string
	flush := func() {
		cur.Text = strings.Join(body, "\n")
		d.sections = append(d.sections, cur)
	}
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			flush()
			title := strings.ReplaceAll(strings.TrimSpace(strings.TrimLeft(line, "#")), "`", "")
			cur, body = &Section{Title: title, Line: i + 1}, nil
			continue
		}
		body = append(body, line)
		if fenced || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := splitRow(line)
		if len(cells) == 0 {
			continue
		}
		spans := CodeSpans(cells[0])
		if len(spans) == 0 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue // a header row or a row that names nothing
		}
		cur.Rows = append(cur.Rows, Row{Name: strings.TrimLeft(spans[0], "-"), Cells: cells, Line: i + 1})
	}
	flush()
	return d
}

// splitRow returns the cells of a table row, trimmed. "\|" is a | inside a cell.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var cells []string
	var cell strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// Section returns the section whose title is title, or nil when there is none.
func (d *Doc) Section(title string) *Section {
	for _, s := range d.sections {
		if s.Title == title {
			return s
		}
	}
	return nil
}

// Sections returns every section, in order. The first holds the lines before any heading.
func (d *Doc) Sections() []*Section { return d.sections }

// At names a line of the document for a message: "docs/CONFIGURATION.md:12".
func (d *Doc) At(line int) string { return fmt.Sprintf("%s:%d", d.Path, line) }

var codeSpan = regexp.MustCompile("`([^`]*)`")

// CodeSpans returns the contents of the `code spans` of s, in order.
func CodeSpans(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

var flagMention = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9-]*)`)

// FlagMentions returns the flag names s writes as --name, in order, repeats included.
func FlagMentions(s string) []string {
	var out []string
	for _, m := range flagMention.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// envRef matches a code span that names an environment variable: $NAME, $NAME/more.
var envRef = regexp.MustCompile(`^\$[A-Za-z_]`)

// CheckDefault reports whether cell, a default as the document writes it, states def. A nil
// def, for a default derived from another setting or from somewhere else, accepts any cell.
//
// An empty string def is a value the code fills in later, or none. The cell's first code
// span, if it has one, must then be `""` or name an environment variable, as in
// "`$REDIS_URL`, else ...". Any other def must be the cell's first code span that does not
// name an environment variable. A duration may be written in any form time.ParseDuration
// reads, such as "1m" for 1m0s.
func CheckDefault(cell string, def any) error {
	if def == nil {
		return nil
	}
	spans := CodeSpans(cell)
	if s, ok := def.(string); ok && s == "" {
		if len(spans) == 0 || spans[0] == `""` || envRef.MatchString(spans[0]) {
			return nil
		}
		return fmt.Errorf("the default is empty, the document says `%s`", spans[0])
	}
	for _, s := range spans {
		if envRef.MatchString(s) {
			continue
		}
		if !equal(s, def) {
			return fmt.Errorf("the default is %v, the document says `%s`", def, s)
		}
		return nil
	}
	return fmt.Errorf("the default is %v, the document shows no value in backquotes", def)
}

// equal reports whether the written value s is v.
func equal(s string, v any) bool {
	switch v := v.(type) {
	case time.Duration:
		d, err := time.ParseDuration(s)
		return err == nil && d == v
	case bool:
		b, err := strconv.ParseBool(s)
		return err == nil && b == v
	case int:
		n, err := strconv.ParseInt(s, 10, 64)
		return err == nil && n == int64(v)
	case int64:
		n, err := strconv.ParseInt(s, 10, 64)
		return err == nil && n == v
	case float64:
		f, err := strconv.ParseFloat(s, 64)
		return err == nil && f == v
	case string:
		return s == v
	}
	return s == fmt.Sprint(v)
}

// FlagDefault returns the default of f as a typed value when its flag.Value is a flag.Getter,
// read before any parse, else its DefValue string.
func FlagDefault(f *flag.Flag) any {
	if g, ok := f.Value.(flag.Getter); ok {
		return g.Get()
	}
	return f.DefValue
}

// Entry is a name the code has, with its default: what a reference row must document.
type Entry struct {
	// Name is the name as the row's first cell writes it, without leading dashes.
	Name string
	// Default is the value CheckDefault holds the row's default to, nil for any.
	Default any
}

// CheckRows holds section s to entries: every entry has exactly one row, whose default states
// the entry's by CheckDefault and whose meaning is not empty, and every row names an entry.
// Each error names the line it is about.
func CheckRows(d *Doc, s *Section, entries []Entry) []error {
	var errs []error
	want := map[string]Entry{}
	for _, e := range entries {
		want[e.Name] = e
	}
	rows := map[string]Row{}
	for _, r := range s.Rows {
		if prev, ok := rows[r.Name]; ok {
			errs = append(errs, fmt.Errorf("%s: %s is documented twice (also line %d)", d.At(r.Line), r.Name, prev.Line))
			continue
		}
		rows[r.Name] = r
		if _, ok := want[r.Name]; !ok {
			errs = append(errs, fmt.Errorf("%s: %q documents %s, which the code does not define there", d.At(r.Line), s.Title, r.Name))
		}
	}
	for _, e := range entries {
		r, ok := rows[e.Name]
		if !ok {
			def := ""
			if e.Default != nil {
				def = fmt.Sprintf(" (default %v)", e.Default)
			}
			errs = append(errs, fmt.Errorf("%s: section %q (line %d) has no row for %s%s",
				d.Path, s.Title, s.Line, e.Name, def))
			continue
		}
		if err := CheckDefault(r.Default(), e.Default); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", d.At(r.Line), e.Name, err))
		}
		if r.Meaning() == "" {
			errs = append(errs, fmt.Errorf("%s: %s: no meaning given", d.At(r.Line), e.Name))
		}
	}
	return errs
}

// CheckFlags holds section s to the flag set fs as CheckRows does, with one entry per flag of
// fs that is not in skip, FlagDefault its default.
func CheckFlags(d *Doc, s *Section, fs *flag.FlagSet, skip map[string]bool) []error {
	var entries []Entry
	fs.VisitAll(func(f *flag.Flag) {
		if !skip[f.Name] {
			entries = append(entries, Entry{Name: f.Name, Default: FlagDefault(f)})
		}
	})
	return CheckRows(d, s, entries)
}

// CheckMentions reports every flag section s writes as --name, in its rows or its prose,
// for which known is false. --help is always known.
func CheckMentions(d *Doc, s *Section, known func(name string) bool) []error {
	var errs []error
	seen := map[string]bool{}
	for _, name := range FlagMentions(s.Text) {
		if name != "help" && !known(name) && !seen[name] {
			errs = append(errs, fmt.Errorf("%s: section %q (line %d) mentions --%s, which is not a flag there",
				d.Path, s.Title, s.Line, name))
		}
		seen[name] = true
	}
	return errs
}

// Field is one setting of a YAML file, found in a struct's yaml tags.
type Field struct {
	// Path is the setting's name, nested ones joined by dots: "retry.initial".
	Path string
	// Value is the setting's value in the struct value it was read from, nil under a nil
	// pointer to a struct.
	Value any
}

// YAMLFields returns the settings of v, a struct, from the yaml tags of its exported fields,
// sorted by path. A field of struct type or pointer to one contributes its own fields under
// its name, and an embedded one tagged ",inline" its fields at its own level. A pointer to a
// scalar is read through, nil when it is nil, and fields tagged "-" or without a tag are left
// out.
func YAMLFields(v any) ([]Field, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Struct {
		return nil, errors.New("configdoc: YAMLFields wants a struct")
	}
	var out []Field
	walkYAML(rv, "", &out)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func walkYAML(v reflect.Value, prefix string, out *[]Field) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if sf.Anonymous && opts == "inline" && sf.Type.Kind() == reflect.Struct {
			walkYAML(v.Field(i), prefix, out)
			continue
		}
		if !sf.IsExported() || name == "" || name == "-" {
			continue
		}
		path := prefix + name
		fv := v.Field(i)
		ft := sf.Type
		if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct && ft.Elem() != reflect.TypeOf(time.Time{}) {
			if fv.IsNil() {
				fv = reflect.Zero(ft.Elem())
				walkYAML(fv, path+".", out)
				for j := range *out {
					if strings.HasPrefix((*out)[j].Path, path+".") {
						(*out)[j].Value = nil
					}
				}
				continue
			}
			fv, ft = fv.Elem(), ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			walkYAML(fv, path+".", out)
		case ft.Kind() == reflect.Pointer && fv.IsNil():
			*out = append(*out, Field{Path: path})
		case ft.Kind() == reflect.Pointer:
			*out = append(*out, Field{Path: path, Value: fv.Elem().Interface()})
		default:
			*out = append(*out, Field{Path: path, Value: fv.Interface()})
		}
	}
}
