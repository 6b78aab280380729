package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects"
)

// Error codes of the error body, stable for clients to branch on. Field
// errors carry the codes of the objects package.
const (
	codeBadRequest       = "bad_request"
	codeInvalidParameter = "invalid_parameter"
	codeUnauthorized     = "unauthorized"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeBodyTooLarge     = "body_too_large"
	codeUnsupportedMedia = "unsupported_media_type"
	codeInternal         = "internal"
	codeUnavailable      = "unavailable"
	codeRateLimited      = "rate_limited"
)

// An apiError is a response decided in this package: a bad body, a bad
// parameter.
type apiError struct {
	status  int
	code    string
	message string
	field   string
}

func (e *apiError) Error() string { return e.message }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: codeBadRequest, message: fmt.Sprintf(format, args...)}
}

func badParameter(name, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: codeInvalidParameter, field: name, message: fmt.Sprintf(format, args...)}
}

// writeError answers with the error body for err. Errors the engine and the
// store define map to their statuses; anything else is a 500 whose cause
// goes to the log, with the request id, and not to the client.
func (a *api) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		ae  *apiError
		fe  *objects.FieldError
		aue *engine.AuthError
		pe  *engine.PacksError
	)
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &pe):
		a.log.LogAttrs(r.Context(), slog.LevelError, "refusing a request: the business's rule packs do not compile",
			slog.String("request_id", requestID(r.Context())), slog.String("business", pe.BusinessID), slog.String("err", pe.Errs.Error()))
		ae = &apiError{status: http.StatusServiceUnavailable, code: engine.CodePacksInvalid,
			message: "this business's rule packs cannot be loaded by this server; an operator must fix them"}
	case errors.As(err, &aue):
		w.Header().Set("WWW-Authenticate", "Bearer")
		ae = &apiError{status: http.StatusUnauthorized, code: codeUnauthorized, message: aue.Reason}
	case errors.As(err, &fe):
		ae = &apiError{status: http.StatusUnprocessableEntity, code: fe.Code, message: fe.Message, field: fe.Field}
	case errors.Is(err, objects.ErrNotFound):
		ae = &apiError{status: http.StatusNotFound, code: codeNotFound, message: err.Error()}
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads this answer.
		ae = &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, message: "request canceled"}
	default:
		id := requestID(r.Context())
		a.log.LogAttrs(r.Context(), slog.LevelError, "internal error", slog.String("request_id", id), slog.String("err", err.Error()))
		ae = &apiError{status: http.StatusInternalServerError, code: codeInternal,
			message: "internal server error; the server log has the cause under request id " + id}
	}
	writeJSON(w, ae.status, errorBody(ae))
}

func errorBody(e *apiError) []byte {
	b := []byte(`{"error":`)
	b = appendJSONString(b, e.message)
	if e.field != "" {
		b = append(b, `,"field":`...)
		b = appendJSONString(b, e.field)
	}
	b = append(b, `,"code":`...)
	b = appendJSONString(b, e.code)
	return append(b, '}')
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body)
}
