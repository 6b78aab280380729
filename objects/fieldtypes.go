package objects

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Kind is how a field's value is represented in a record, in memory and in
// storage. Every field type maps its values onto one kind.
type Kind int

const (
	KindString  Kind = iota // Go string
	KindNumber              // float64
	KindInteger             // int64
	KindBool                // bool
	KindJSON                // any value decoded from JSON with json.Number for numbers
)

// A FieldType is a kind of field: string, email, number and so on. Field types
// are plugins in a registry, so the rule compiler and the record checks find
// everything they need to know about a type in one place.
type FieldType interface {
	// Name is the type's name as written in schemas ("email").
	Name() string
	// Kind is how its values are held.
	Kind() Kind
	// Check takes a value decoded from JSON (with json.Number for numbers)
	// and returns it in canonical form, or an error that says what is wrong,
	// written to follow the field name ("must be a number").
	Check(v any) (any, error)
}

var fieldTypes = struct {
	sync.RWMutex
	m map[string]FieldType
}{m: map[string]FieldType{}}

// RegisterFieldType adds a field type. It panics on an empty or duplicate
// name, since that is a programming error found at start-up.
func RegisterFieldType(t FieldType) {
	fieldTypes.Lock()
	defer fieldTypes.Unlock()
	name := t.Name()
	if name == "" {
		panic("objects: field type with empty name")
	}
	if _, dup := fieldTypes.m[name]; dup {
		panic("objects: field type registered twice: " + name)
	}
	fieldTypes.m[name] = t
}

// LookupFieldType returns the registered field type with the given name.
func LookupFieldType(name string) (FieldType, bool) {
	fieldTypes.RLock()
	defer fieldTypes.RUnlock()
	t, ok := fieldTypes.m[name]
	return t, ok
}

// FieldTypeNames returns the names of all registered field types.
func FieldTypeNames() []string {
	fieldTypes.RLock()
	defer fieldTypes.RUnlock()
	names := make([]string, 0, len(fieldTypes.m))
	for n := range fieldTypes.m {
		names = append(names, n)
	}
	return names
}

// Limits on string values. A string is a line of text (a name, a code); a text
// is free text (a description, the body of a note).
const (
	MaxStringLen = 1000
	MaxTextLen   = 100_000
)

func init() {
	for _, t := range []FieldType{
		stringType{name: "string", max: MaxStringLen},
		stringType{name: "text", max: MaxTextLen},
		stringType{name: "email", max: 254, check: checkEmail},
		stringType{name: "phone", max: 40, check: checkPhone},
		stringType{name: "url", max: 2048, check: checkURL},
		stringType{name: "date", max: 10, check: checkDate},
		stringType{name: "datetime", max: 64, normalize: normalizeDatetime},
		stringType{name: "reference", max: IDLen, check: checkReference},
		numberType{},
		integerType{},
		boolType{},
		jsonType{},
	} {
		RegisterFieldType(t)
	}
}

var errNotString = errors.New("must be a string")

// stringType is every type whose values are strings with a format.
type stringType struct {
	name      string
	max       int
	check     func(string) error
	normalize func(string) (string, error)
}

func (t stringType) Name() string { return t.name }
func (t stringType) Kind() Kind   { return KindString }

func (t stringType) Check(v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return nil, errNotString
	}
	if n := utf8.RuneCountInString(s); n > t.max {
		return nil, fmt.Errorf("must be at most %d characters (got %d)", t.max, n)
	}
	if t.check != nil {
		if err := t.check(s); err != nil {
			return nil, err
		}
	}
	if t.normalize != nil {
		return t.normalize(s)
	}
	return s, nil
}

func checkEmail(s string) error {
	bad := errors.New("must be an email address like name@example.com")
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s {
		return bad
	}
	at := strings.LastIndexByte(s, '@')
	domain := s[at+1:]
	if !strings.Contains(domain, ".") || strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, ".") || strings.Contains(domain, "..") || strings.HasPrefix(domain, "[") {
		return bad
	}
	return nil
}

// phonePattern accepts the ways people write phone numbers: digits with
// spaces, dots, dashes and parentheses, a leading +, and an extension.
var phonePattern = regexp.MustCompile(`^\+?[0-9 ().-]+( ?(x|ext\.?) ?[0-9]{1,10})?$`)

func checkPhone(s string) error {
	digits := 0
	for _, c := range s {
		if '0' <= c && c <= '9' {
			digits++
		}
	}
	if !phonePattern.MatchString(s) || digits < 3 || digits > 30 {
		return errors.New("must be a phone number like +1 555 0100")
	}
	return nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(s, " \t\r\n") {
		return errors.New("must be an absolute http or https URL")
	}
	return nil
}

func checkDate(s string) error {
	if _, err := time.Parse(time.DateOnly, s); err != nil || len(s) != 10 {
		return errors.New("must be a date like 2026-01-31")
	}
	return nil
}

// DatetimeLayout is how datetime values are written: RFC 3339 in UTC.
const DatetimeLayout = time.RFC3339Nano

func normalizeDatetime(s string) (string, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "", errors.New("must be a date and time in RFC 3339 form like 2026-01-31T09:30:00Z")
	}
	return t.UTC().Format(DatetimeLayout), nil
}

func checkReference(s string) error {
	if !ValidID(s) {
		return errors.New("must be the id of a record")
	}
	return nil
}

type numberType struct{}

func (numberType) Name() string { return "number" }
func (numberType) Kind() Kind   { return KindNumber }
func (numberType) Check(v any) (any, error) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		if err != nil || math.IsInf(f, 0) {
			return nil, errors.New("must be a number within the range of a 64-bit float")
		}
		return f, nil
	case float64:
		if math.IsInf(n, 0) || math.IsNaN(n) {
			return nil, errors.New("must be a finite number")
		}
		return n, nil
	case int64:
		return float64(n), nil
	}
	return nil, errors.New("must be a number")
}

type integerType struct{}

func (integerType) Name() string { return "integer" }
func (integerType) Kind() Kind   { return KindInteger }
func (integerType) Check(v any) (any, error) {
	notInt := errors.New("must be a whole number")
	switch n := v.(type) {
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, nil
		}
		f, err := n.Float64()
		if err != nil || f != math.Trunc(f) {
			return nil, notInt
		}
		return floatToInt(f)
	case float64:
		if n != math.Trunc(n) {
			return nil, notInt
		}
		return floatToInt(n)
	case int64:
		return n, nil
	}
	return nil, notInt
}

// floatToInt converts a whole float such as 1e3 to an int64 when it is
// exactly representable.
func floatToInt(f float64) (any, error) {
	const limit = 1 << 53
	if f < -limit || f > limit {
		return nil, errors.New("must be a whole number between -9007199254740992 and 9007199254740992 when written with a fraction or exponent")
	}
	return int64(f), nil
}

type boolType struct{}

func (boolType) Name() string { return "boolean" }
func (boolType) Kind() Kind   { return KindBool }
func (boolType) Check(v any) (any, error) {
	b, ok := v.(bool)
	if !ok {
		return nil, errors.New("must be true or false")
	}
	return b, nil
}

// jsonType holds any JSON value: an object, an array, a string, a number or
// a boolean, kept as it was sent.
type jsonType struct{}

func (jsonType) Name() string             { return "json" }
func (jsonType) Kind() Kind               { return KindJSON }
func (jsonType) Check(v any) (any, error) { return v, nil }
