// Package errdefs defines the error classes that every kcand component uses
// and that survive the plugin wire: a typed error stays the same class on the
// other side of a gRPC call.
package errdefs

import (
	"errors"
	"fmt"
)

// The error classes. Test with errors.Is.
var (
	// ErrUnsupported says a candidate or device cannot serve a valid request.
	ErrUnsupported = errors.New("unsupported")
	// ErrInvalidRequest says the caller asked for something malformed.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrInternal says something broke that the caller did not cause.
	ErrInternal = errors.New("internal error")
	// ErrNotFound says a named thing (plugin, candidate, prepared id) is unknown.
	ErrNotFound = errors.New("not found")
	// ErrDeviceLost says a plugin's device context failed for good (a
	// sticky CUDA error such as an illegal address): every later call in
	// that process fails, so the plugin exits and only a new process
	// recovers.
	ErrDeviceLost = errors.New("device context lost")
)

// FieldError is an invalid request that names the offending field and value.
type FieldError struct {
	Field  string
	Value  any
	Reason string
}

// Error implements error.
func (e *FieldError) Error() string {
	return fmt.Sprintf("invalid %s=%v: %s", e.Field, e.Value, e.Reason)
}

// Is makes every FieldError an ErrInvalidRequest.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidRequest }

// Invalid returns a FieldError for field holding value.
func Invalid(field string, value any, format string, args ...any) error {
	return &FieldError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// Unsupported wraps a reason in ErrUnsupported.
func Unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

// Internal wraps a reason in ErrInternal.
func Internal(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInternal, fmt.Sprintf(format, args...))
}

// Class returns the class of err: one of the sentinel errors above, or
// ErrInternal for anything unclassified. A nil error has no class.
func Class(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrDeviceLost): // first: it wraps whatever the failed call returned
		return ErrDeviceLost
	case errors.Is(err, ErrInvalidRequest):
		return ErrInvalidRequest
	case errors.Is(err, ErrUnsupported):
		return ErrUnsupported
	case errors.Is(err, ErrNotFound):
		return ErrNotFound
	default:
		return ErrInternal
	}
}
