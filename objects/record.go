package objects

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/crmd/crmd/objects/decl"
)

// A Record is one row of an object. Fields holds the values that are set, in
// canonical form (see Kind); a field that is not set is absent. A record read
// from a store comes with Data, its fields as stored, and Fields nil until
// Object.Decode fills them in: answering a read needs only Data.
type Record struct {
	Object    string
	ID        string
	CreatedAt time.Time
	UpdatedAt time.Time
	Fields    map[string]any
	Data      []byte
}

// CheckInput checks the fields a client sent and returns them in canonical
// form. For a create (patch false) a null is the same as leaving the field
// out; for an update (patch true) a null clears the field and is returned as
// a nil value. Fields are checked in name order and the first problem is
// returned as a *FieldError.
func (o *Object) CheckInput(in map[string]any, patch bool) (map[string]any, error) {
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]any, len(in))
	for _, k := range keys {
		f, ok := o.byName[k]
		if !ok {
			if slices.Contains(ReservedFields, k) {
				return nil, &FieldError{Field: k, Code: CodeReadOnlyField, Message: k + " is set by the server and cannot be written"}
			}
			return nil, &FieldError{Field: k, Code: CodeUnknownField,
				Message: fmt.Sprintf("unknown field %s on %s%s", k, o.Name, decl.DidYouMean(k, o.names))}
		}
		v := in[k]
		if v == nil {
			if patch {
				out[k] = nil
			}
			continue
		}
		cv, err := f.Type.Check(v)
		if err != nil {
			return nil, &FieldError{Field: k, Code: CodeInvalidValue, Message: k + " " + err.Error()}
		}
		out[k] = cv
	}
	return out, nil
}

// DeriveName fills in name when the object has one and it is not set or is
// blank: first and last name joined by a space (or whichever is set), and
// failing those the email.
func (o *Object) DeriveName(fields map[string]any) {
	if _, ok := o.byName["name"]; !ok {
		return
	}
	if s, _ := fields["name"].(string); strings.TrimSpace(s) != "" {
		return
	}
	var parts []string
	for _, k := range []string{"first_name", "last_name"} {
		if s, _ := fields[k].(string); strings.TrimSpace(s) != "" {
			parts = append(parts, strings.TrimSpace(s))
		}
	}
	switch {
	case len(parts) > 0:
		fields["name"] = strings.Join(parts, " ")
	case fields["email"] != nil:
		fields["name"] = fields["email"]
	default:
		delete(fields, "name")
	}
}

// FromStorage converts values decoded from storage (numbers as json.Number)
// to canonical form, in place. A value that no longer fits its field's type
// (after a schema change) is left as stored.
func (o *Object) FromStorage(fields map[string]any) {
	for k, v := range fields {
		n, ok := v.(json.Number)
		f := o.byName[k]
		if !ok || f == nil {
			continue
		}
		switch f.Type.Kind() {
		case KindNumber:
			if x, err := n.Float64(); err == nil {
				fields[k] = x
			}
		case KindInteger:
			if x, err := n.Int64(); err == nil {
				fields[k] = x
			}
		}
	}
}

// DecodeFields decodes field values from storage, with numbers as
// json.Number; Object.FromStorage finishes the job.
func DecodeFields(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decoding stored record: %w", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// TimeLayout is how created_at and updated_at are written: RFC 3339 in UTC
// with microseconds.
const TimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// AppendJSON appends r as a JSON object: id, then every field of the object
// in declaration order (null when not set), then created_at and updated_at.
// Values kept in storage for fields the object no longer has are left out.
func (o *Object) AppendJSON(b []byte, r *Record) []byte {
	if r.Fields == nil && r.Data != nil {
		if out, ok := o.appendStored(b, r); ok {
			return out
		}
		if err := o.Decode(r); err != nil {
			r.Fields = map[string]any{} // unreadable stored data shows as unset fields
		}
	}
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	for _, f := range o.Fields {
		b = append(b, ',')
		b = appendString(b, f.Name)
		b = append(b, ':')
		b = appendValue(b, r.Fields[f.Name])
	}
	return appendTimes(b, r)
}

func appendTimes(b []byte, r *Record) []byte {
	b = append(b, `,"created_at":"`...)
	b = r.CreatedAt.UTC().AppendFormat(b, TimeLayout)
	b = append(b, `","updated_at":"`...)
	b = r.UpdatedAt.UTC().AppendFormat(b, TimeLayout)
	return append(b, `"}`...)
}

func appendValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case string:
		return appendString(b, v)
	case bool:
		return strconv.AppendBool(b, v)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case float64:
		if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) || math.IsNaN(v) || math.IsInf(v, 0) {
			break
		}
		return strconv.AppendFloat(b, v, 'f', -1, 64)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Values come from decoded JSON and canonical forms, which always
		// encode; keep the output valid if that ever changes.
		return append(b, "null"...)
	}
	return append(b, bytes.TrimRight(buf.Bytes(), "\n")...)
}

// JSONText is v written as JSON, for messages.
func JSONText(v any) string { return string(appendValue(nil, v)) }

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. It escapes what JSON requires and
// U+2028 and U+2029, which break JavaScript that embeds JSON.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// SameValue reports whether a and b are the same canonical value: what
// decides whether a write changes a field.
func SameValue(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

// SameFields reports whether two sets of canonical field values are the
// same.
func SameFields(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !SameValue(v, w) {
			return false
		}
	}
	return true
}
