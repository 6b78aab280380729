package rules_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/crmd/crmd/engine"
	_ "github.com/crmd/crmd/engine/actions"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/rules"
)

// BenchmarkCompile measures compiling generated packs of 100 and 1,000
// rules (issue 3: 1,000 rules in under 1 s), 70% validations and 30%
// automations (set, create and update actions) spread over eight standard
// objects and a custom one, one file per object:
//
//	go test -run XXX -bench Compile -benchmem -count 3 ./rules
//
// "parse+compile" is what every compilation of stored packs does
// (rules.Parse of the files, then rules.Compile with the registered
// actions, as engine.CheckPacks does); "compile" is rules.Compile alone, of
// packs parsed beforehand. Applying a pack with crmd pack apply compiles
// three times: the active packs, the new set, and the snapshot it then
// serves; every other crmd process on the database compiles once.
func BenchmarkCompile(b *testing.B) {
	for _, n := range []int{100, 1000} {
		files := benchPackFiles(b, n)
		parse := func(b *testing.B) *rules.Pack {
			p, errs := rules.Parse("generated", files)
			if errs != nil {
				b.Fatalf("the generated pack does not parse:\n%v", errs)
			}
			return p
		}
		rs, errs := engine.CheckPacks([]*rules.Pack{parse(b)})
		if errs != nil {
			b.Fatalf("the generated pack does not compile:\n%v", errs)
		}
		if got := rs.Rules(); got < n {
			b.Fatalf("the generated pack has %d rules, not %d", got, n)
		}
		b.Run(fmt.Sprintf("rules=%d/parse+compile", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, errs := engine.CheckPacks([]*rules.Pack{parse(b)}); errs != nil {
					b.Fatal(errs)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/rule")
		})
		b.Run(fmt.Sprintf("rules=%d/compile", n), func(b *testing.B) {
			p := parse(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, errs := engine.CheckPacks([]*rules.Pack{p}); errs != nil {
					b.Fatal(errs)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/rule")
		})
	}
}

// benchCustom is the custom object of the generated pack.
const benchCustom = `pack: generated
objects:
  vehicles:
    label: Vans
    fields:
      name: string
      plate: {type: string, required: true, unique: true, pattern: "[A-Z0-9]{2,4}-?[A-Z0-9]{3,4}"}
      model: string
      capacity_kg: {type: number, min: 0}
      seats: integer
      status: {type: string, values: [active, maintenance, retired], default: active}
      bought_on: date
      serviced_at: datetime
      owner: string
      company_id: {type: reference, object: companies}
      notes: text
  deals:
    fields:
      stage: {values: [new, qualified, proposal, won, lost], default: new}
`

// benchObjects are the objects the generated rules apply to.
var benchObjects = []string{"leads", "contacts", "companies", "deals", "invoices", "jobs", "tasks", "activities", "vehicles"}

// benchPackFiles generates a pack of n rules: for rule i, on object i mod 9,
// a validation when i mod 10 < 7 and otherwise an automation, each built
// from the fields of the object (as compiled from the standard objects and
// the pack's own declarations).
func benchPackFiles(b *testing.B, n int) []rules.File {
	b.Helper()
	base, errs := rules.Parse("generated", []rules.File{{Name: "objects.yaml", Data: []byte(benchCustom)}})
	if errs != nil {
		b.Fatal(errs)
	}
	rs, errs := engine.CheckPacks([]*rules.Pack{base})
	if errs != nil {
		b.Fatal(errs)
	}
	validations := map[string]*strings.Builder{}
	automations := map[string]*strings.Builder{}
	for _, name := range benchObjects {
		validations[name], automations[name] = &strings.Builder{}, &strings.Builder{}
	}
	for i := range n {
		name := benchObjects[i%len(benchObjects)]
		obj, _ := rs.Schema.Object(name)
		if i%10 < 7 {
			benchValidation(validations[name], obj, i)
		} else {
			benchAutomation(automations[name], rs.Schema, obj, i)
		}
	}
	files := []rules.File{{Name: "objects.yaml", Data: []byte(benchCustom)}}
	for _, name := range benchObjects {
		data := "pack: generated\n"
		if v := validations[name].String(); v != "" {
			data += "validations:\n" + v
		}
		if a := automations[name].String(); a != "" {
			data += "automations:\n" + a
		}
		files = append(files, rules.File{Name: name + ".yaml", Data: []byte(data)})
	}
	return files
}

// fieldsOf returns the fields of obj whose type is one of types.
func fieldsOf(obj *objects.Object, types ...string) []*objects.Field {
	var out []*objects.Field
	for _, f := range obj.Fields {
		for _, t := range types {
			if f.Type.Name() == t && f.Name != "name" {
				out = append(out, f)
			}
		}
	}
	return out
}

// pick returns the i-th of fs, cycling, or nil.
func pick(fs []*objects.Field, i int) *objects.Field {
	if len(fs) == 0 {
		return nil
	}
	return fs[i%len(fs)]
}

// benchValidation writes validation i on obj, an item of the validations
// list.
func benchValidation(w *strings.Builder, obj *objects.Object, i int) {
	var when, on, field string
	k := i / 10
	str := pick(fieldsOf(obj, "string", "text"), i)
	num := pick(fieldsOf(obj, "number", "integer"), i)
	date := pick(fieldsOf(obj, "date", "datetime"), i)
	email := pick(fieldsOf(obj, "email"), i)
	switch j := (i + k) % 7; {
	case j == 0 && num != nil:
		field = num.Name
		when = fmt.Sprintf(`record.%s < 0 || record.%s > %d`, num.Name, num.Name, 1000*(i+1))
	case j == 1 && date != nil:
		field = date.Name
		when = fmt.Sprintf(`!blank(%q) && record.%s > now() + duration("%dh")`, date.Name, date.Name, 24*(i%300+1))
	case j == 2 && email != nil:
		field = email.Name
		when = fmt.Sprintf(`!blank(%q) && lower(record.%s) endsWith "@blocked%d.example"`, email.Name, email.Name, i)
	case j == 3 && str != nil:
		on, field = "update", str.Name
		when = fmt.Sprintf(`changed(%q) && old.%s == "locked %d"`, str.Name, str.Name, i)
	case j == 4 && str != nil:
		field = str.Name
		when = fmt.Sprintf(`!blank(%q) && lower(trim(record.%s)) in ["tbd", "todo", "test %d"]`, str.Name, str.Name, i)
	case j == 5 && str != nil && num != nil:
		field = num.Name
		when = fmt.Sprintf(`record.%s startsWith "VIP" && record.%s < %d`, str.Name, num.Name, i)
	case str != nil:
		field = str.Name
		when = fmt.Sprintf(`!blank(%q) && (len(record.%s) > %d || record.%s matches "[<>]")`, str.Name, str.Name, 100+i, str.Name)
	default:
		when = fmt.Sprintf(`event == "update" && blank("name") && %d > 0`, i)
	}
	fmt.Fprintf(w, "  - name: rule %d on %s\n    object: %s\n", i, obj.Name, obj.Name)
	if on != "" {
		fmt.Fprintf(w, "    on: %s\n", on)
	}
	if field != "" {
		fmt.Fprintf(w, "    field: %s\n", field)
	}
	fmt.Fprintf(w, "    when: '%s'\n    error: refused by rule %d\n", when, i)
}

// benchAutomation writes automation i on obj, an item of the automations
// list: a set before the save, a create of a task, or an update of a
// referenced record (a set, on objects without references).
func benchAutomation(w *strings.Builder, schema *objects.Schema, obj *objects.Object, i int) {
	str := fieldsOf(obj, "string")
	refs := fieldsOf(obj, "reference")
	fmt.Fprintf(w, "  - name: rule %d on %s\n    object: %s\n", i, obj.Name, obj.Name)
	switch kind := (i / len(benchObjects)) % 3; {
	case kind == 0 || (kind == 2 && len(refs) == 0):
		f := pick(str, i)
		fmt.Fprintf(w, "    on: [create, update]\n    when: changed(%q)\n    actions:\n      - set:\n          %s: = trim(upper(record.%s))\n",
			f.Name, f.Name, f.Name)
	case kind == 1:
		fmt.Fprintf(w, "    on: create\n    when: '!blank(\"name\") && event == \"create\"'\n    actions:\n      - create:\n          object: tasks\n          fields:\n")
		fmt.Fprintf(w, "            name: = \"Follow up \" + record.name + \" (%d)\"\n            status: open\n            due_date: = today() + days(%d)\n", i, i%30+1)
		if ref := singular(obj.Name) + "_id"; hasField(schema, "tasks", ref) {
			fmt.Fprintf(w, "            %s: = record.id\n", ref)
		}
	default:
		ref := pick(refs, i)
		target, _ := schema.Object(ref.Target)
		tf := pick(fieldsOf(target, "string"), i)
		fmt.Fprintf(w, "    on: update\n    when: changed(%q)\n    actions:\n      - update:\n          reference: %s\n          fields: {%s: = record.%s}\n",
			ref.Name, ref.Name, tf.Name, pick(str, i+1).Name)
	}
}

func singular(object string) string {
	switch object {
	case "companies", "activities":
		return strings.TrimSuffix(object, "ies") + "y"
	}
	return strings.TrimSuffix(object, "s")
}

func hasField(schema *objects.Schema, object, field string) bool {
	o, ok := schema.Object(object)
	if !ok {
		return false
	}
	_, ok = o.Field(field)
	return ok
}
