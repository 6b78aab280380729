package objects

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/objects/decl"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestSchemaErrors(t *testing.T) {
	data, err := os.ReadFile("testdata/bad_objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	root, err := decl.Parse("bad_objects.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	r := &decl.Reader{File: "bad_objects.yaml"}
	var decls []*ObjectDecl
	r.Mapping(root, "", []string{"objects"}, func(_ string, v *yaml.Node, path string) {
		decls = DecodeObjects(r, v, path)
	})
	_, errs := Extend(Standard(), decls, false)
	all := append(r.Errs, errs...)
	all.Sort()
	golden(t, "bad_objects.golden", all.Error()+"\n")
}

func TestStandardObjects(t *testing.T) {
	s := Standard()
	want := []string{"activities", "companies", "contacts", "deals", "invoices", "jobs", "leads", "notes", "products", "quotes", "tasks"}
	if got := s.Names(); len(got) != len(want) {
		t.Fatalf("standard objects = %v, want %v", got, want)
	}
	for _, name := range want {
		o, ok := s.Object(name)
		if !ok || !o.Standard || len(o.Fields) < 5 {
			t.Errorf("standard object %s missing or too thin: %+v", name, o)
			continue
		}
		if _, ok := o.Field("name"); !ok {
			t.Errorf("%s has no name field", name)
		}
	}
	for _, name := range []string{"leads", "contacts", "deals"} {
		o, _ := s.Object(name)
		for _, f := range []string{"status", "source", "name"} {
			if _, ok := o.Field(f); !ok {
				t.Errorf("%s has no %s field", name, f)
			}
		}
	}
	for _, name := range []string{"leads", "contacts"} {
		o, _ := s.Object(name)
		for _, f := range []string{"first_name", "last_name", "email"} {
			if _, ok := o.Field(f); !ok {
				t.Errorf("%s has no %s field", name, f)
			}
		}
	}
	deals, _ := s.Object("deals")
	if f, _ := deals.Field("company_id"); f == nil || f.Type.Name() != "reference" || f.Target != "companies" {
		t.Errorf("deals.company_id = %+v, want a reference to companies", f)
	}
}

func TestExtendAddsFieldsAndObjects(t *testing.T) {
	root, err := decl.Parse("pack.yaml", []byte(`
objects:
  deals:
    fields:
      region: string
  vehicles:
    label: Vehicles
    fields:
      plate: string
      job_id: {type: reference, object: jobs}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := &decl.Reader{File: "pack.yaml"}
	var decls []*ObjectDecl
	r.Mapping(root, "", []string{"objects"}, func(_ string, v *yaml.Node, path string) { decls = DecodeObjects(r, v, path) })
	s, errs := Extend(Standard(), decls, false)
	if err := append(r.Errs, errs...).Err(); err != nil {
		t.Fatal(err)
	}
	deals, _ := s.Object("deals")
	if _, ok := deals.Field("region"); !ok {
		t.Error("deals did not get region")
	}
	if std, _ := Standard().Object("deals"); len(std.Fields) == len(deals.Fields) {
		t.Error("extending changed the standard schema itself")
	}
	v, ok := s.Object("vehicles")
	if !ok || v.Standard || v.Label != "Vehicles" || len(v.Fields) != 2 {
		t.Errorf("vehicles = %+v", v)
	}
}

// decls reads the objects sections of YAML documents, one per file.
func decls(t *testing.T, files ...string) []*ObjectDecl {
	t.Helper()
	var out []*ObjectDecl
	for i, src := range files {
		name := "pack" + string(rune('a'+i)) + ".yaml"
		root, err := decl.Parse(name, []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		r := &decl.Reader{File: name}
		r.Mapping(root, "", []string{"objects"}, func(_ string, v *yaml.Node, path string) { out = append(out, DecodeObjects(r, v, path)...) })
		if err := r.Errs.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestRefineAndConflicts(t *testing.T) {
	s, errs := Extend(Standard(), decls(t, `
objects:
  deals:
    fields:
      stage: {values: [lead, proposal, won, lost], required: true}
      amount: {min: 0}
  contacts:
    fields:
      email: {unique: true}
`), false)
	if errs != nil {
		t.Fatal(errs)
	}
	deals, _ := s.Object("deals")
	stage, _ := deals.Field("stage")
	if !stage.Required || len(stage.Values) != 4 || stage.Type.Name() != "string" {
		t.Errorf("refined stage = %+v", stage)
	}
	if std, _ := Standard().Object("deals"); std.Fields[0] == deals.Fields[0] && std.byName["stage"].Required {
		t.Error("refining changed the standard schema")
	}
	_, errs = Extend(Standard(), decls(t, `
objects:
  vehicles: {label: Vehicles, fields: {plate: string}}
  deals: {fields: {stage: {values: [a]}}}
`, `
objects:
  vehicles: {fields: {plate: string, vin: string}}
  deals: {fields: {stage: {required: true}}}
`), false)
	want := "packb.yaml:3:30: objects.vehicles.fields.plate: field plate of vehicles is declared twice\n" +
		"packb.yaml:4:27: objects.deals.fields.stage: field stage of deals is declared twice"
	if errs.Error() != want {
		t.Errorf("errors:\n%s\nwant:\n%s", errs.Error(), want)
	}
}

func TestCheckConstraints(t *testing.T) {
	s, errs := Extend(Standard(), decls(t, `
objects:
  deals:
    fields:
      stage: {values: [lead, won]}
      amount: {min: 0, max: 1000000}
      probability: {min: 0, max: 100}
      name: {min: 2, max: 5, pattern: "[A-Z][a-z]+"}
`), false)
	if errs != nil {
		t.Fatal(errs)
	}
	deals, _ := s.Object("deals")
	tests := []struct {
		field string
		v     any
		want  string
	}{
		{"stage", "won", ""},
		{"stage", "open", "stage must be one of lead, won"},
		{"amount", 0.0, ""},
		{"amount", -0.01, "amount must be at least 0"},
		{"amount", 1e7, "amount must be at most 1000000"},
		{"probability", int64(101), "probability must be at most 100"},
		{"name", "Ada", ""},
		{"name", "A", "name must match the pattern [A-Z][a-z]+"},
		{"name", "Adaline", "name must be at most 5 characters long"},
		{"name", "ada", "name must match the pattern [A-Z][a-z]+"},
	}
	for _, tt := range tests {
		f, _ := deals.Field(tt.field)
		err := f.CheckConstraints(tt.v)
		if got := fmt.Sprint(err); (tt.want == "" && err != nil) || (tt.want != "" && got != tt.want) {
			t.Errorf("%s = %v: %v, want %q", tt.field, tt.v, err, tt.want)
		}
	}
}

func TestUniqueKey(t *testing.T) {
	c, _ := Standard().Object("contacts")
	email, _ := c.Field("email")
	if email.UniqueKey("Ada@Example.COM") != email.UniqueKey("ada@example.com") {
		t.Error("email unique keys differ by case")
	}
	name, _ := c.Field("name")
	if name.UniqueKey("Ada") == name.UniqueKey("ada") {
		t.Error("string unique keys ignore case")
	}
}
