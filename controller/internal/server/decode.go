package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
)

// maxBody bounds a request body.
const maxBody = 4 << 20

// decodeBody reads r's JSON body into v: one JSON value, no unknown field,
// nothing after it, at most maxBody bytes.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeJSON(http.MaxBytesReader(w, r.Body, maxBody), v)
}

// decodeJSON is decodeBody's parser; every failure is a 400 naming the
// field where there is one.
func decodeJSON(rd io.Reader, v any) error {
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, err := dec.Token(); err != io.EOF {
			return invalid("", "malformed JSON: data after the request object")
		}
		return nil
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var big *http.MaxBytesError
	switch {
	case errors.Is(err, io.EOF):
		return invalid("", "the request body is empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "malformed JSON: the body ends early")
	case errors.As(err, &syn):
		return invalid("", "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return invalid("", "the request body must be a JSON object, not %s", typ.Value)
		}
		return invalid(field, "field %s: want %s, got %s", field, jsonType(typ.Type.Kind().String()), typ.Value)
	case errors.As(err, &big):
		return invalid("", "the request body is larger than %d bytes", big.Limit)
	}
	if name, ok := unknownField(err); ok {
		return invalid(name, "unknown field %s", name)
	}
	return invalid("", "malformed JSON: %v", err)
}

var unknownFieldRE = regexp.MustCompile(`^json: unknown field "(.*)"$`)

// unknownField extracts the field of encoding/json's unknown-field error
// (it has no type of its own).
func unknownField(err error) (string, bool) {
	m := unknownFieldRE.FindStringSubmatch(err.Error())
	if m == nil {
		return "", false
	}
	return m[1], true
}

func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "a boolean"
	case kind == "slice", kind == "array":
		return "an array"
	case kind == "struct", kind == "map", kind == "ptr":
		return "an object"
	}
	return fmt.Sprintf("a %s", kind)
}

// nameRE is what VM, host and tenant names look like: safe in a URL path, a
// file name, a CSV cell and a terminal.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func checkName(field, v string) error {
	if v == "" {
		return invalid(field, "field %s is required", field)
	}
	if !nameRE.MatchString(v) {
		return invalid(field, "field %s %q: want 1-64 of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit", field, v)
	}
	return nil
}
