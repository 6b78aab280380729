package decl

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestClosest(t *testing.T) {
	candidates := []string{"first_name", "last_name", "email", "stage", "name", "fields"}
	tests := map[string]string{
		"frist_name": "first_name", // transposition
		"fist_name":  "first_name", // deletion
		"emial":      "email",
		"stag":       "stage",
		"nmae":       "name",
		"feilds":     "fields",
		"zzz":        "",
		"name":       "", // exact match is not a suggestion
		"amount":     "",
	}
	for in, want := range tests {
		if got := Closest(in, candidates); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"syntax", "objects:\n  a: [1,\n", "f.yaml:2:1: did not find expected node content"},
		{"not a mapping", "- a\n- b\n", "f.yaml:1:1: must be a mapping of keys to values"},
		{"empty", "", "f.yaml: file is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.in))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Parse error = %v, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestReaderMapping(t *testing.T) {
	root, err := Parse("f.yaml", []byte("a: 1\nb: x\nb: y\nc: [1]\nsize: big\nflag: yes\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := &Reader{File: "f.yaml"}
	got := map[string]any{}
	r.Mapping(root, "", []string{"a", "b", "c", "size", "flag"}, func(key string, v *yaml.Node, path string) {
		switch key {
		case "a":
			got[key], _ = r.String(v, path)
		case "b":
			got[key], _ = r.String(v, path)
		case "c":
			got[key], _ = r.Number(v, path)
		case "size":
			got[key], _ = r.Number(v, path)
		case "flag":
			got[key], _ = r.Bool(v, path)
		}
	})
	want := strings.Join([]string{
		"f.yaml:1:4: a: must be a string (put 1 in quotes to make it one)",
		"f.yaml:3:1: b is given twice",
		"f.yaml:4:4: c: must be a number",
		"f.yaml:5:7: size: must be a number",
		"f.yaml:6:7: flag: must be true or false",
	}, "\n")
	if r.Errs.Error() != want {
		t.Errorf("errors:\n%s\nwant:\n%s", r.Errs.Error(), want)
	}
}
