package objects

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func contacts(t *testing.T) *Object {
	t.Helper()
	o, ok := Standard().Object("contacts")
	if !ok {
		t.Fatal("no contacts object")
	}
	return o
}

func TestCheckInput(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		patch     bool
		wantField string
		wantCode  string
		wantMsg   string
		want      string // canonical output as JSON, when ok
	}{
		{name: "known fields", in: `{"first_name":"Ada","email":"ada@example.com"}`, want: `{"email":"ada@example.com","first_name":"Ada"}`},
		{name: "typo suggests", in: `{"frist_name":"Ada"}`, wantField: "frist_name", wantCode: CodeUnknownField,
			wantMsg: "unknown field frist_name on contacts; did you mean first_name?"},
		{name: "unknown without suggestion", in: `{"shoe_size":42}`, wantField: "shoe_size", wantCode: CodeUnknownField,
			wantMsg: "unknown field shoe_size on contacts"},
		{name: "id is read-only", in: `{"id":"x"}`, wantField: "id", wantCode: CodeReadOnlyField, wantMsg: "id is set by the server and cannot be written"},
		{name: "created_at is read-only", in: `{"created_at":"2026-01-01T00:00:00Z"}`, wantField: "created_at", wantCode: CodeReadOnlyField},
		{name: "updated_at is read-only", in: `{"updated_at":null}`, wantField: "updated_at", wantCode: CodeReadOnlyField},
		{name: "wrong type names field", in: `{"do_not_contact":"yes"}`, wantField: "do_not_contact", wantCode: CodeInvalidValue,
			wantMsg: "do_not_contact must be true or false"},
		{name: "bad email", in: `{"email":"not-an-email"}`, wantField: "email", wantCode: CodeInvalidValue},
		{name: "first problem by name", in: `{"zzz":1,"email":"bad"}`, wantField: "email", wantCode: CodeInvalidValue},
		{name: "null on create is absent", in: `{"title":null}`, want: `{}`},
		{name: "null in patch clears", in: `{"title":null}`, patch: true, want: `{"title":null}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec := json.NewDecoder(strings.NewReader(tt.in))
			dec.UseNumber()
			var in map[string]any
			if err := dec.Decode(&in); err != nil {
				t.Fatal(err)
			}
			got, err := contacts(t).CheckInput(in, tt.patch)
			if tt.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("error = %v, want a FieldError", err)
				}
				if fe.Field != tt.wantField || fe.Code != tt.wantCode || (tt.wantMsg != "" && fe.Message != tt.wantMsg) {
					t.Fatalf("error = %+v, want field %s code %s message %q", fe, tt.wantField, tt.wantCode, tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := mustJSON(t, got); g != tt.want {
				t.Errorf("got %s, want %s", g, tt.want)
			}
		})
	}
}

func TestDeriveName(t *testing.T) {
	tests := []struct {
		name   string
		object string
		in     map[string]any
		want   any
	}{
		{"first and last", "contacts", map[string]any{"first_name": "Ada", "last_name": "Lovelace", "email": "a@b.co"}, "Ada Lovelace"},
		{"first only", "leads", map[string]any{"first_name": " Ada "}, "Ada"},
		{"last only", "contacts", map[string]any{"last_name": "Lovelace"}, "Lovelace"},
		{"email when no names", "leads", map[string]any{"email": "ada@example.com"}, "ada@example.com"},
		{"blank names fall back to email", "leads", map[string]any{"first_name": " ", "email": "ada@example.com"}, "ada@example.com"},
		{"given name kept", "contacts", map[string]any{"name": "The Countess", "first_name": "Ada"}, "The Countess"},
		{"blank name derived", "contacts", map[string]any{"name": "  ", "first_name": "Ada"}, "Ada"},
		{"nothing to derive from", "deals", map[string]any{"amount": 5.0}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _ := Standard().Object(tt.object)
			o.DeriveName(tt.in)
			if got := tt.in["name"]; got != tt.want {
				t.Errorf("name = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestAppendJSON(t *testing.T) {
	o, _ := Standard().Object("products")
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	r := &Record{ID: "06c3ax93w5zpype3m3zskw1xyx", CreatedAt: at, UpdatedAt: at, Fields: map[string]any{
		"name":       "Pipe <1/2\"> & fittings\u2028",
		"unit_price": 12.5,
		"taxable":    true,
		"dropped":    "a value of a field the object no longer has",
	}}
	got := string(o.AppendJSON(nil, r))
	want := `{"id":"06c3ax93w5zpype3m3zskw1xyx","name":"Pipe <1/2\"> & fittings\u2028","sku":null,"description":null,"unit_price":12.5,"currency":null,"unit":null,"taxable":true,"active":null,"category":null,"created_at":"2026-01-02T03:04:05.123456Z","updated_at":"2026-01-02T03:04:05.123456Z"}`
	if got != want {
		t.Errorf("AppendJSON =\n%s\nwant\n%s", got, want)
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(got), &back); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
}

func TestAppendValueMatchesEncodingJSON(t *testing.T) {
	for _, v := range []any{"", "a\x00b\tc\n\"\\", "é€😀", 0.0, -1.5, 1e21, 1e-7, 123456789.125, int64(-42), false,
		map[string]any{"k": []any{json.Number("1.50"), "x"}}} {
		got := string(appendValue(nil, v))
		var a, b any
		if err := json.Unmarshal([]byte(got), &a); err != nil {
			t.Fatalf("appendValue(%#v) = %s, not JSON: %v", v, got, err)
		}
		want, _ := json.Marshal(v)
		json.Unmarshal(want, &b)
		if mustJSON(t, a) != mustJSON(t, b) {
			t.Errorf("appendValue(%#v) = %s, want the value of %s", v, got, want)
		}
	}
}

func TestFromStorage(t *testing.T) {
	o, _ := Standard().Object("companies")
	fields, err := DecodeFields([]byte(`{"employees":40,"annual_revenue":1.5e6,"name":"Acme","gone":3}`))
	if err != nil {
		t.Fatal(err)
	}
	o.FromStorage(fields)
	if fields["employees"] != int64(40) || fields["annual_revenue"] != 1.5e6 || fields["name"] != "Acme" {
		t.Errorf("FromStorage = %#v", fields)
	}
	if _, ok := fields["gone"].(json.Number); !ok {
		t.Errorf("a value of an undeclared field changed: %#v", fields["gone"])
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for range 10000 {
		id := NewID()
		if !ValidID(id) {
			t.Fatalf("NewID() = %q is not valid", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		if id <= prev {
			t.Fatalf("NewID() = %q does not sort after %q", id, prev)
		}
		seen[id], prev = true, id
	}
	for _, bad := range []string{"", "x", strings.Repeat("0", 25), strings.Repeat("z", 26), "06c3ax93w5zpype3m3zskw1xyU", "06c3ax93w5zpype3m3zskw1xyi"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}
