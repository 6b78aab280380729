package rules_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/crmd/crmd/engine"
	_ "github.com/crmd/crmd/engine/actions"
	"github.com/crmd/crmd/rules"
)

var update = flag.Bool("update", false, "rewrite golden files")

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

// TestCompileErrors checks what an operator sees for a pack full of
// mistakes: every one, in file order, with its line and column.
func TestCompileErrors(t *testing.T) {
	data, err := os.ReadFile("testdata/bad_pack.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, errs := rules.Parse("broken", []rules.File{{Name: "bad_pack.yaml", Data: data}})
	out := ""
	if errs != nil {
		out += "parse:\n" + errs.Error() + "\n"
	}
	if _, errs := engine.CheckPacks([]*rules.Pack{p}); errs != nil {
		out += "compile:\n" + errs.Error() + "\n"
	}
	golden(t, "bad_pack.golden", out)
}

func TestCompileConflictsBetweenPacks(t *testing.T) {
	a, _ := rules.Parse("a", []rules.File{{Name: "a.yaml", Data: []byte(`
objects:
  deals: {fields: {region: string}}
validations:
  - {name: shared, object: deals, when: "true", error: x}
`)}})
	b, _ := rules.Parse("b", []rules.File{{Name: "b.yaml", Data: []byte(`
objects:
  deals: {fields: {region: string}}
automations:
  - {name: shared, object: deals, on: create, actions: [{set: {stage: x}}]}
`)}})
	_, errs := engine.CheckPacks([]*rules.Pack{a, b})
	golden(t, "conflicts.golden", errs.Error()+"\n")
}

func TestExamplePackCompiles(t *testing.T) {
	paths, _ := filepath.Glob("../examples/field-services/*.yaml")
	var files []rules.File
	for _, p := range paths {
		data, _ := os.ReadFile(p)
		files = append(files, rules.File{Name: p, Data: data})
	}
	p, errs := rules.Parse("x", files)
	if errs != nil {
		t.Fatal(errs)
	}
	rs, errs := engine.CheckPacks([]*rules.Pack{p})
	if errs != nil {
		t.Fatal(errs)
	}
	if p.Name != "field-services" || rs.Rules() == 0 || len(rs.Tests) == 0 {
		t.Errorf("pack %s: %d rules, %d tests", p.Name, rs.Rules(), len(rs.Tests))
	}
	if _, ok := rs.Schema.Object("vehicles"); !ok {
		t.Error("no vehicles object")
	}
}
