package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"cohort/actors"
	"cohort/actors/planner"
)

// Retry-After values (seconds) for the retryable statuses.
const (
	retryAfterOverloaded = "1"
	retryAfterNotReady   = "5"
)

// apiError is an OpenAI-shaped error:
// {"error":{"message","type","param","code"}} with an HTTP status.
type apiError struct {
	status     int
	typ        string
	code       string // "" → null
	param      string // "" → null
	msg        string
	retryAfter string // seconds; set for 429 and 503
}

func (e *apiError) Error() string { return e.msg }

// badRequest is a 400 naming the offending parameter (param may be "").
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param,
		msg: fmt.Sprintf(format, args...)}
}

// notSupported is a 400 for a known OpenAI parameter Cohort does not implement.
func notSupported(param string) *apiError {
	e := badRequest(param, "%s is not supported by this server", param)
	e.code = "unsupported_parameter"
	return e
}

func contextTooLong(param, format string, args ...any) *apiError {
	e := badRequest(param, format, args...)
	e.code = "context_length_exceeded"
	return e
}

func modelNotFound(model string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model",
		code: "model_not_found", msg: fmt.Sprintf("the model %q does not exist", model)}
}

func notFound(method, path string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "unknown_url",
		msg: fmt.Sprintf("unknown route: %s %s", method, path)}
}

func methodNotAllowed(method, path string) *apiError {
	return &apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error", code: "method_not_allowed",
		msg: fmt.Sprintf("method %s is not allowed on %s", method, path)}
}

func tooLarge(limit int) *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large",
		msg: fmt.Sprintf("the request body exceeds the limit of %d bytes", limit)}
}

func notReady(reason string) *apiError {
	if reason == "" {
		reason = "the engine is not ready"
	}
	return &apiError{status: http.StatusServiceUnavailable, typ: "service_unavailable_error", code: "not_ready",
		msg: "the server is not ready: " + reason, retryAfter: retryAfterNotReady}
}

// statusClientClosed is nginx's 499: the client closed the connection
// before the response (nobody reads it; it goes to logs and tests).
const statusClientClosed = 499

// clientGone answers a non-streamed request whose client disconnected.
func clientGone() *apiError {
	return &apiError{status: statusClientClosed, typ: "invalid_request_error", code: "client_closed_request",
		msg: errClientGone.Error()}
}

func internal(format string, args ...any) *apiError {
	return &apiError{status: http.StatusInternalServerError, typ: "server_error", code: "internal_error",
		msg: fmt.Sprintf(format, args...)}
}

// engineError maps an engine error (from Submit or a request's final
// "error" event) onto the status a client should see.
func engineError(err error) *apiError {
	var rej *planner.Rejection
	var bad *actors.RequestError
	switch {
	case errors.As(err, &bad):
		return badRequest(bad.Param, "%s", bad.Msg)
	case errors.Is(err, actors.ErrOverloaded):
		return &apiError{status: http.StatusTooManyRequests, typ: "overloaded_error", code: "server_overloaded",
			msg: "the server is overloaded, retry later: " + err.Error(), retryAfter: retryAfterOverloaded}
	case errors.Is(err, actors.ErrNotReady):
		return notReady(err.Error())
	case errors.Is(err, actors.ErrInvalidRequest):
		return badRequest("", "%v", err)
	case errors.As(err, &rej):
		if rej.Reason == planner.ReasonContextLength {
			return contextTooLong("max_tokens", "%s", rej.Msg)
		}
		return badRequest("", "%s", rej.Msg)
	}
	return internal("the engine failed: %v", err)
}

// appendError appends the JSON envelope of e.
func appendError(b []byte, e *apiError) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendString(b, e.msg)
	b = append(b, `,"type":`...)
	b = appendString(b, e.typ)
	b = append(b, `,"param":`...)
	b = appendNullableString(b, e.param)
	b = append(b, `,"code":`...)
	b = appendNullableString(b, e.code)
	return append(b, "}}"...)
}
