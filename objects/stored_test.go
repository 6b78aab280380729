package objects

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestStoredAnswersMatch checks that a record answered from its stored bytes
// reads exactly as the same record answered from its values, which is what
// a client sees when it creates a record and then reads it back.
func TestStoredAnswersMatch(t *testing.T) {
	inputs := []string{
		`{}`,
		`{"name":"Pipe <1/2\"> & fittings\u2028\u2029","sku":"A\\B\t\u0001","unit_price":12.5,"taxable":true,"active":false}`,
		`{"unit_price":1e21,"description":"é€😀 \u0000"}`,
		`{"unit_price":-0.0}`,
		`{"unit_price":0.000001}`,
		`{"unit_price":1e-7}`,
		`{"unit_price":123456789012345678}`,
	}
	o, _ := Standard().Object("products")
	inv, _ := Standard().Object("invoices")
	inputs2 := []string{
		`{"line_items":[{"sku":"A-1","qty":2,"price":9.990,"note":"<b>\u2028</b>","nested":{"a":[1,{"b":null}]}}],"amount":1200.50}`,
		`{"line_items":"just text","paid_at":"2026-01-31T10:30:00+02:00"}`,
		`{"line_items":[],"number":"INV-1"}`,
	}
	check := func(obj *Object, in string) {
		t.Helper()
		fields := decodeInput(t, in)
		canon, err := obj.CheckInput(fields, false)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
		fromValues := string(obj.AppendJSON(nil, &Record{ID: "06c3ax93w5zpype3m3zskw1xyx", CreatedAt: at, UpdatedAt: at, Fields: canon}))
		stored := &Record{ID: "06c3ax93w5zpype3m3zskw1xyx", CreatedAt: at, UpdatedAt: at, Data: EncodeFields(canon)}
		fromStored := string(obj.AppendJSON(nil, stored))
		if fromStored != fromValues {
			t.Errorf("%s\nfrom values: %s\nfrom stored: %s", in, fromValues, fromStored)
		}
		if _, ok := obj.appendStored(nil, stored); !ok {
			t.Errorf("%s: stored data %s was not copied but decoded", in, stored.Data)
		}
		// Decoding the stored data gives the values back.
		if err := obj.Decode(stored); err != nil {
			t.Fatal(err)
		}
		if a, b := mustJSON(t, stored.Fields), mustJSON(t, canon); a != b {
			t.Errorf("%s: decoded %s, want %s", in, a, b)
		}
	}
	for _, in := range inputs {
		check(o, in)
	}
	for _, in := range inputs2 {
		check(inv, in)
	}
}

func decodeInput(t *testing.T, in string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(in))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// FuzzMembers checks that members splits any JSON object as encoding/json
// reads it, and refuses what is not one rather than misreading it.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":"x\"}","b":[1,{"c":"]"}],"d":null}`, ` { "a" : true , "b":false } `, `{"a":1,}`, `{"a"}`, `[1]`, `{"a\u0062":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := members(data, nil)
		if !utf8.Valid(data) {
			return // stored data is always UTF-8: the API refuses anything else
		}
		var want map[string]json.RawMessage
		if jerr := json.Unmarshal(data, &want); jerr != nil || want == nil {
			return // members may refuse or accept invalid JSON; it is only given valid JSON
		}
		if err != nil {
			return // refusing valid JSON is allowed: the caller then decodes
		}
		got := map[string]json.RawMessage{}
		for _, m := range ms {
			got[string(m.key)] = json.RawMessage(m.val)
		}
		if len(got) != len(want) {
			t.Fatalf("members(%s) found %d keys, encoding/json %d", data, len(got), len(want))
		}
		for k, v := range want {
			var a, b any
			if json.Unmarshal(v, &a) != nil || json.Unmarshal(got[k], &b) != nil || mustJSON(t, a) != mustJSON(t, b) {
				t.Fatalf("members(%s)[%s] = %s, want %s", data, k, got[k], v)
			}
		}
	})
}

// FuzzDecodeStored checks that decodeStored reads any input as DecodeFields
// does: the same fields, or an error for both.
func FuzzDecodeStored(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":"x\"}","b":[1,{"c":"]"}],"d":null}`, ` { "a" : true , "b":false } `,
		`{"a":1,}`, `{"a"}`, `[1]`, `null`, `{"a\u0062":1}`, `{"a":-0.5e+3,"b":"é","c":"\u2028"}`, `{"a":01}`, `{"a":1.}`, `{"a":"` + "\x01" + `"}`,
		`{"a":1,"a":2}`, `{"a":"\xff"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := DecodeFields(data)
		got, gerr := decodeStored(data)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("decodeStored(%q): error %v, DecodeFields: %v", data, gerr, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeStored(%q) = %#v, DecodeFields: %#v", data, got, want)
		}
	})
}
