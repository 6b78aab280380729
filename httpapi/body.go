package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"
)

// maxDepth bounds how deeply a request body may nest arrays and objects.
const maxDepth = 64

// readObject reads a request body that must be one JSON object, and returns
// it with numbers as json.Number. It refuses, each with its own message: a
// Content-Type other than application/json (415), a body over the limit
// (413), and a body that is not valid UTF-8, not JSON, not an object, has a
// key twice, or has anything after the object (400).
func readObject(w http.ResponseWriter, r *http.Request, limit int64) (map[string]any, error) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, &apiError{status: http.StatusUnsupportedMediaType, code: codeUnsupportedMedia,
			message: "Content-Type must be application/json"}
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return nil, &apiError{status: http.StatusUnsupportedMediaType, code: codeUnsupportedMedia,
			message: "the body must be UTF-8 (charset=utf-8)"}
	}
	data, err := readBody(w, r, limit)
	if err != nil {
		return nil, err
	}
	return decodeObject(data)
}

// readBody reads a request body of at most limit bytes (413 beyond).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	tooLarge := &apiError{status: http.StatusRequestEntityTooLarge, code: codeBodyTooLarge,
		message: fmt.Sprintf("request body is larger than the limit of %d bytes", limit)}
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge
		}
		return nil, badRequest("reading the request body: %v", err)
	}
	return data, nil
}

// decodeObject parses data as one JSON object.
func decodeObject(data []byte) (map[string]any, error) {
	if !utf8.Valid(data) {
		return nil, badRequest("request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, badRequest("request body is empty; send a JSON object of field names to values")
	}
	if err != nil {
		return nil, malformed(dec, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, badRequest("request body must be a JSON object of field names to values")
	}
	m, err := decodeMembers(dec, 1)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("request body has data after the JSON object")
	}
	return m, nil
}

func decodeMembers(dec *json.Decoder, depth int) (map[string]any, error) {
	m := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, malformed(dec, err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, badRequest("malformed JSON near byte %d: object keys must be strings", dec.InputOffset())
		}
		if _, dup := m[key]; dup {
			return nil, badRequest("request body has the key %q twice", key)
		}
		v, err := decodeValue(dec, depth)
		if err != nil {
			return nil, err
		}
		m[key] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, malformed(dec, err)
	}
	return m, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, malformed(dec, err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth >= maxDepth {
		return nil, badRequest("request body nests arrays and objects more than %d deep", maxDepth)
	}
	if d == '{' {
		return decodeMembers(dec, depth+1)
	}
	list := []any{}
	for dec.More() {
		v, err := decodeValue(dec, depth+1)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, malformed(dec, err)
	}
	return list, nil
}

func malformed(dec *json.Decoder, err error) error {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return badRequest("malformed JSON: the body ends before the JSON object does")
	}
	return badRequest("malformed JSON near byte %d: %v", dec.InputOffset(), err)
}
