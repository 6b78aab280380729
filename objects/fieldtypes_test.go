package objects

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestFieldTypesCheck(t *testing.T) {
	tests := []struct {
		typ     string
		in      any
		want    any    // canonical value when ok
		wantErr string // error text when not ok
	}{
		{"string", "Ada", "Ada", ""},
		{"string", json.Number("1"), nil, "must be a string"},
		{"string", string(make([]byte, MaxStringLen+1)), nil, "must be at most 1000 characters (got 1001)"},
		{"text", string(make([]byte, MaxStringLen+1)), string(make([]byte, MaxStringLen+1)), ""},
		{"email", "ada@example.com", "ada@example.com", ""},
		{"email", "Ada <ada@example.com>", nil, "must be an email address like name@example.com"},
		{"email", "ada@localhost", nil, "must be an email address like name@example.com"},
		{"email", "ada", nil, "must be an email address like name@example.com"},
		{"email", "ada@example..com", nil, "must be an email address like name@example.com"},
		{"email", true, nil, "must be a string"},
		{"phone", "+1 (555) 010-0199 ext. 12", "+1 (555) 010-0199 ext. 12", ""},
		{"phone", "+44 20 7946 0958", "+44 20 7946 0958", ""},
		{"phone", "call me", nil, "must be a phone number like +1 555 0100"},
		{"phone", "12", nil, "must be a phone number like +1 555 0100"},
		{"url", "https://example.com/a?b=c", "https://example.com/a?b=c", ""},
		{"url", "example.com", nil, "must be an absolute http or https URL"},
		{"url", "javascript:alert(1)", nil, "must be an absolute http or https URL"},
		{"number", json.Number("12.5"), 12.5, ""},
		{"number", json.Number("-3"), -3.0, ""},
		{"number", json.Number("1e400"), nil, "must be a number within the range of a 64-bit float"},
		{"number", "12", nil, "must be a number"},
		{"integer", json.Number("42"), int64(42), ""},
		{"integer", json.Number("1e3"), int64(1000), ""},
		{"integer", json.Number("2.0"), int64(2), ""},
		{"integer", json.Number("2.5"), nil, "must be a whole number"},
		{"integer", json.Number("9223372036854775807"), int64(9223372036854775807), ""},
		{"integer", json.Number("1e300"), nil, "must be a whole number between -9007199254740992 and 9007199254740992 when written with a fraction or exponent"},
		{"integer", "42", nil, "must be a whole number"},
		{"boolean", true, true, ""},
		{"boolean", "true", nil, "must be true or false"},
		{"date", "2026-02-28", "2026-02-28", ""},
		{"date", "2026-02-30", nil, "must be a date like 2026-01-31"},
		{"date", "2026-2-3", nil, "must be a date like 2026-01-31"},
		{"datetime", "2026-01-31T10:30:00+02:00", "2026-01-31T08:30:00Z", ""},
		{"datetime", "2026-01-31T08:30:00.250Z", "2026-01-31T08:30:00.25Z", ""},
		{"datetime", "2026-01-31 08:30", nil, "must be a date and time in RFC 3339 form like 2026-01-31T09:30:00Z"},
		{"reference", NewID(), nil, ""}, // canonical value is the id itself; checked below
		{"reference", "42", nil, "must be the id of a record"},
		{"json", map[string]any{"a": []any{json.Number("1")}}, map[string]any{"a": []any{json.Number("1")}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			typ, ok := LookupFieldType(tt.typ)
			if !ok {
				t.Fatalf("type %s is not registered", tt.typ)
			}
			got, err := typ.Check(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Check(%#v) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check(%#v): %v", tt.in, err)
			}
			if tt.want == nil {
				tt.want = tt.in
			}
			if g, w := mustJSON(t, got), mustJSON(t, tt.want); g != w {
				t.Errorf("Check(%#v) = %s, want %s", tt.in, g, w)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRegisterFieldTypePanicsOnDuplicate(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("registering a type twice did not panic")
		}
	}()
	RegisterFieldType(boolType{})
}

func TestPending(t *testing.T) {
	ms := []Migration{{Version: 1}, {Version: 2}, {Version: 3}}
	if p, err := Pending(ms, 1); err != nil || len(p) != 2 || p[0].Version != 2 {
		t.Errorf("Pending(at 1) = %v, %v", p, err)
	}
	if p, err := Pending(ms, 3); err != nil || len(p) != 0 {
		t.Errorf("Pending(at 3) = %v, %v", p, err)
	}
	var tooNew *SchemaTooNewError
	if _, err := Pending(ms, 4); !errors.As(err, &tooNew) || tooNew.Database != 4 || tooNew.Binary != 3 {
		t.Errorf("Pending(at 4) error = %v, want schema too new", err)
	}
}
