package objects

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound means the object or record does not exist for the business
	// asking; a record of another business is not found either.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a unique name or value is taken.
	ErrConflict = errors.New("already exists")
)

// Codes of field errors, stable for clients to branch on.
const (
	CodeUnknownField  = "unknown_field"
	CodeReadOnlyField = "read_only_field"
	CodeInvalidValue  = "invalid_value"
)

// A FieldError is a value a client sent that cannot be stored as it is.
type FieldError struct {
	Field   string
	Code    string
	Message string
}

func (e *FieldError) Error() string { return e.Message }

// NotFoundError is a record that does not exist in the business asking.
type NotFoundError struct {
	Object string
	ID     string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no %s record with id %s", e.Object, e.ID)
}

func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// UnknownObjectError is an object name the business does not have.
type UnknownObjectError struct {
	Name    string
	Suggest string // a close object name, or ""
}

func (e *UnknownObjectError) Error() string {
	if e.Suggest != "" {
		return fmt.Sprintf("unknown object %s; did you mean %s?", e.Name, e.Suggest)
	}
	return fmt.Sprintf("unknown object %s", e.Name)
}

func (e *UnknownObjectError) Is(target error) bool { return target == ErrNotFound }

// CodeInvalidReference is a reference to a record that does not exist.
const CodeInvalidReference = "invalid_reference"
