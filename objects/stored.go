package objects

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"
)

// EncodeFields encodes field values for storage: a JSON object with its keys
// in order, each value written exactly as AppendJSON writes it, so that a
// stored record can be answered by copying its values (appendStored).
func EncodeFields(fields map[string]any) []byte {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := make([]byte, 0, 32*len(keys)+2)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendValue(b, fields[k])
	}
	return append(b, '}')
}

// Decode fills in r.Fields, in canonical form, from the stored r.Data.
func (o *Object) Decode(r *Record) error {
	if r.Fields != nil {
		return nil
	}
	fields, err := decodeStored(r.Data)
	if err != nil {
		return err
	}
	o.FromStorage(fields)
	r.Fields = fields
	return nil
}

// appendStored appends a stored record as AppendJSON would after decoding
// it, without decoding: it copies each field's stored value. It returns false
// when data is not the flat object it expects, and the caller decodes.
func (o *Object) appendStored(b []byte, r *Record) ([]byte, bool) {
	var spans [64]member
	ms, err := members(r.Data, spans[:0])
	if err != nil {
		return b, false
	}
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	for _, f := range o.Fields {
		b = append(b, ',')
		b = appendString(b, f.Name)
		b = append(b, ':')
		val := []byte("null")
		for _, m := range ms {
			if string(m.key) == f.Name {
				val = m.val
				break
			}
		}
		b = append(b, val...)
	}
	return appendTimes(b, r), true
}

// member is one key and raw value of a JSON object.
type member struct{ key, val []byte }

var errNotFlat = errors.New("not a stored record")

// members splits the JSON object in data into its keys and raw values. It
// checks only the structure it needs, and refuses keys with escapes, which
// field names never have.
func members(data []byte, out []member) ([]member, error) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, errNotFlat
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return out, nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return nil, errNotFlat
		}
		end, ok := scanString(data, i)
		if !ok {
			return nil, errNotFlat
		}
		key := data[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return nil, errNotFlat
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return nil, errNotFlat
		}
		i = skipSpace(data, i+1)
		vend, ok := scanValue(data, i)
		if !ok {
			return nil, errNotFlat
		}
		out = append(out, member{key: key, val: data[i:vend]})
		i = skipSpace(data, vend)
		if i >= len(data) {
			return nil, errNotFlat
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			if skipSpace(data, i+1) != len(data) {
				return nil, errNotFlat
			}
			return out, nil
		default:
			return nil, errNotFlat
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index after the string starting at data[i].
func scanString(data []byte, i int) (int, bool) {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// scanValue returns the index after the value starting at data[i].
func scanValue(data []byte, i int) (int, bool) {
	if i >= len(data) {
		return 0, false
	}
	switch c := data[i]; {
	case c == '"':
		return scanString(data, i)
	case c == '{' || c == '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end, ok := scanString(data, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	case c == 't' && bytes.HasPrefix(data[i:], []byte("true")):
		return i + 4, true
	case c == 'f' && bytes.HasPrefix(data[i:], []byte("false")):
		return i + 5, true
	case c == 'n' && bytes.HasPrefix(data[i:], []byte("null")):
		return i + 4, true
	case c == '-' || '0' <= c && c <= '9':
		j := i + 1
		for j < len(data) && (data[j] >= '0' && data[j] <= '9' || data[j] == '.' || data[j] == 'e' || data[j] == 'E' || data[j] == '+' || data[j] == '-') {
			j++
		}
		return j, true
	}
	return 0, false
}

// decodeStored is DecodeFields for the records crmd stores: flat objects of
// scalars, most strings without escapes. It reads those values straight
// from their bytes, and hands anything else (escapes, arrays, objects) to
// encoding/json, value by value or, when data is not a flat object, whole;
// the result is the same as DecodeFields' (FuzzDecodeStored). Reading the
// previous values of every update, it is about three times faster.
func decodeStored(data []byte) (map[string]any, error) {
	var spans [64]member
	ms, err := members(data, spans[:0])
	if err != nil {
		return DecodeFields(data)
	}
	fields := make(map[string]any, len(ms))
	for _, m := range ms {
		if !plainKey(m.key) {
			return DecodeFields(data)
		}
		v, ok := plainValue(m.val)
		if !ok {
			dec := json.NewDecoder(bytes.NewReader(m.val))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				return nil, fmt.Errorf("decoding stored record: %w", err)
			}
			if dec.InputOffset() != int64(len(m.val)) {
				return nil, fmt.Errorf("decoding stored record: invalid value %.20q", m.val)
			}
		}
		fields[string(m.key)] = v
	}
	return fields, nil
}

// plainKey reports whether a key can be used as it is: valid UTF-8 without
// control characters (members has refused escapes).
func plainKey(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return false
		}
	}
	return utf8.Valid(b)
}

// plainValue decodes a JSON value that needs no unescaping: a string
// without escapes or control characters, a number (as json.Number), true,
// false or null. It returns false for anything else.
func plainValue(b []byte) (any, bool) {
	if len(b) == 0 {
		return nil, false
	}
	switch c := b[0]; {
	case c == '"':
		if len(b) < 2 || b[len(b)-1] != '"' {
			return nil, false
		}
		s := b[1 : len(b)-1]
		for _, c := range s {
			if c < 0x20 || c == '\\' || c == '"' {
				return nil, false
			}
		}
		if !utf8.Valid(s) {
			return nil, false
		}
		return string(s), true
	case c == '-' || '0' <= c && c <= '9':
		if !isNumber(b) {
			return nil, false
		}
		return json.Number(b), true
	}
	switch string(b) {
	case "true":
		return true, true
	case "false":
		return false, true
	case "null":
		return nil, true
	}
	return nil, false
}

// isNumber reports whether b is a number in JSON's grammar.
func isNumber(b []byte) bool {
	i := 0
	if b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}
