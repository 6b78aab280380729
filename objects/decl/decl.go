// Package decl reads declaration files (YAML, or JSON, which YAML reads too)
// strictly: every value is checked for its shape, unknown keys are errors with
// a suggestion when a known key is close, and every error carries the file,
// the line and column, and the path of the value in the document.
package decl

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Pos is a place in a declaration file.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// An Error is one problem in a declaration file.
type Error struct {
	Pos  Pos
	Path string // where in the document, such as objects.deals.fields.amount
	Msg  string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s: %s", e.Pos, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.Pos, e.Path, e.Msg)
}

// Errors is a list of problems, in the order they were found.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Sort orders es by file and position.
func (es Errors) Sort() {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i].Pos, es[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// Err returns es as an error, or nil when it is empty.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// Parse reads one YAML or JSON document and returns its root node, which must
// be a mapping.
func Parse(file string, data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Errors{parseError(file, err)}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, Errors{{Pos: Pos{File: file}, Msg: "file is empty"}}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, Errors{{Pos: PosOf(file, root), Msg: "must be a mapping of keys to values"}}
	}
	return root, nil
}

// parseError turns a YAML syntax error ("yaml: line 3: did not find
// expected key") into an Error with its line.
func parseError(file string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if strings.Contains(msg, "mapping values are not allowed") {
		msg += ` (a value that contains ": " must be quoted, such as '= a ? "x" : "y"')`
	}
	e := &Error{Pos: Pos{File: file}, Msg: msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ": "); i > 0 {
			if line, err := strconv.Atoi(rest[:i]); err == nil {
				e.Pos.Line, e.Pos.Col, e.Msg = line, 1, rest[i+2:]
			}
		}
	}
	return e
}

// PosOf returns the position of n in file.
func PosOf(file string, n *yaml.Node) Pos {
	return Pos{File: file, Line: n.Line, Col: n.Column}
}

// A Reader walks the nodes of one file and collects the errors it finds, so
// that one pass reports every problem rather than the first.
type Reader struct {
	File string
	Errs Errors
}

// Errorf records an error at n.
func (r *Reader) Errorf(n *yaml.Node, path, format string, args ...any) {
	r.Errs = append(r.Errs, &Error{Pos: PosOf(r.File, n), Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Pos returns the position of n.
func (r *Reader) Pos(n *yaml.Node) Pos { return PosOf(r.File, n) }

// Join returns path extended by key.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Mapping calls fn for each key of the mapping n, in order, with the path of
// the value. Keys that are not in known are errors (none are when known is
// nil), and so are duplicate keys.
func (r *Reader) Mapping(n *yaml.Node, path string, known []string, fn func(key string, val *yaml.Node, path string)) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		r.Errorf(n, path, "must be a mapping of keys to values")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			r.Errorf(k, path, "keys must be plain strings")
			continue
		}
		key := k.Value
		if seen[key] {
			r.Errorf(k, path, "%s is given twice", key)
			continue
		}
		seen[key] = true
		if known != nil && !contains(known, key) {
			r.Errorf(k, path, "unknown key %s%s", key, DidYouMean(key, known))
			continue
		}
		fn(key, v, Join(path, key))
	}
}

// Sequence calls fn for each item of the sequence n.
func (r *Reader) Sequence(n *yaml.Node, path string, fn func(i int, item *yaml.Node, path string)) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		r.Errorf(n, path, "must be a list")
		return
	}
	for i, item := range n.Content {
		fn(i, item, fmt.Sprintf("%s[%d]", path, i))
	}
}

// String returns the string value of the scalar n.
func (r *Reader) String(n *yaml.Node, path string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		r.Errorf(n, path, "must be a string")
		return "", false
	}
	if n.Tag != "!!str" {
		r.Errorf(n, path, "must be a string (put %s in quotes to make it one)", n.Value)
		return "", false
	}
	return n.Value, true
}

// Bool returns the boolean value of the scalar n.
func (r *Reader) Bool(n *yaml.Node, path string) (bool, bool) {
	n = resolve(n)
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		r.Errorf(n, path, "must be true or false")
		return false, false
	}
	return b, true
}

// Number returns the numeric value of the scalar n.
func (r *Reader) Number(n *yaml.Node, path string) (float64, bool) {
	n = resolve(n)
	var f float64
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&f) != nil {
		r.Errorf(n, path, "must be a number")
		return 0, false
	}
	return f, true
}

// Value returns the value of n as plain Go data: strings, bools, float64 or
// int for numbers, nil, []any and map[string]any.
func (r *Reader) Value(n *yaml.Node, path string) (any, bool) {
	var v any
	if err := resolve(n).Decode(&v); err != nil {
		r.Errorf(n, path, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil, false
	}
	return v, true
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// DidYouMean returns "; did you mean X?" when one of candidates is close to
// name, and "" otherwise.
func DidYouMean(name string, candidates []string) string {
	if c := Closest(name, candidates); c != "" {
		return "; did you mean " + c + "?"
	}
	return ""
}

// Closest returns the candidate nearest to name by edit distance, when it is
// near enough to be a likely typo, or "".
func Closest(name string, candidates []string) string {
	best, bestDist := "", 0
	for _, c := range candidates {
		d := distance(name, c)
		if best == "" || d < bestDist || d == bestDist && c < best {
			best, bestDist = c, d
		}
	}
	limit := 2
	if n := len([]rune(name)); n <= 4 {
		limit = 1
	}
	if best == "" || bestDist > limit || bestDist == 0 {
		return ""
	}
	return best
}

// distance is the optimal string alignment distance: insertions, deletions,
// substitutions and transpositions of adjacent characters each cost one.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 64 || len(rb) > 64 {
		if a == b {
			return 0
		}
		return 1 << 20
	}
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
