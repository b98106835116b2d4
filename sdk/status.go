package sdk

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kcand/kcand/sdk/errdefs"
	pb "github.com/kcand/kcand/sdk/proto"
)

// Error classes as they appear in ErrorDetail.Class.
const (
	classInvalid     = "invalid_request"
	classUnsupported = "unsupported"
	classNotFound    = "not_found"
	classDeviceLost  = "device_lost"
	classUnavailable = "unavailable"
	classInternal    = "internal"
)

// ErrUnavailable says the plugin process could not serve the call (it died,
// hung past its deadline, is restarting, or is exiting after losing its
// CUDA context). It is not one of the request error classes: the same call
// may succeed after a restart.
var ErrUnavailable = errors.New("plugin unavailable")

// errorDetail describes an error's class and, for field errors, the field
// and value, as they travel: in a gRPC status or a doorbell answer.
func errorDetail(err error) (*pb.ErrorDetail, codes.Code) {
	detail := &pb.ErrorDetail{Reason: err.Error()}
	code := codes.Internal
	if errors.Is(err, ErrUnavailable) {
		// The plugin cannot serve the call now (it is exiting): the host
		// may retry it once the process is replaced.
		detail.Class = classUnavailable
		return detail, codes.Unavailable
	}
	switch errdefs.Class(err) {
	case errdefs.ErrInvalidRequest:
		detail.Class, code = classInvalid, codes.InvalidArgument
		var fe *errdefs.FieldError
		if errors.As(err, &fe) {
			detail.Field, detail.Value, detail.Reason = fe.Field, fmt.Sprint(fe.Value), fe.Reason
		}
	case errdefs.ErrUnsupported:
		detail.Class, code = classUnsupported, codes.Unimplemented
	case errdefs.ErrNotFound:
		detail.Class, code = classNotFound, codes.NotFound
	case errdefs.ErrDeviceLost:
		detail.Class = classDeviceLost
	default:
		detail.Class = classInternal
	}
	return detail, code
}

// errorFromDetail restores what errorDetail sent.
func errorFromDetail(detail *pb.ErrorDetail, message string) error {
	switch detail.Class {
	case classInvalid:
		if detail.Field != "" {
			return &errdefs.FieldError{Field: detail.Field, Value: detail.Value, Reason: detail.Reason}
		}
		return fmt.Errorf("%w: %s", errdefs.ErrInvalidRequest, message)
	case classUnsupported:
		return &remoteError{class: errdefs.ErrUnsupported, msg: message}
	case classNotFound:
		return &remoteError{class: errdefs.ErrNotFound, msg: message}
	case classDeviceLost:
		return &remoteError{class: errdefs.ErrDeviceLost, msg: message}
	case classUnavailable:
		return &remoteError{class: ErrUnavailable, msg: message}
	default:
		return &remoteError{class: errdefs.ErrInternal, msg: message}
	}
}

// toStatus turns an error into a gRPC status that carries its class and,
// for field errors, the field and value.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	detail, code := errorDetail(err)
	if errors.Is(err, context.DeadlineExceeded) {
		code = codes.DeadlineExceeded
	}
	st, derr := status.New(code, err.Error()).WithDetails(detail)
	if derr != nil {
		return status.Error(code, err.Error())
	}
	return st.Err()
}

// fromStatus restores the error class that toStatus sent. Transport
// failures become ErrUnavailable; deadline and cancellation keep their
// context errors.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	for _, d := range st.Details() {
		if detail, ok := d.(*pb.ErrorDetail); ok {
			return errorFromDetail(detail, st.Message())
		}
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %w: %s", ErrUnavailable, context.DeadlineExceeded, st.Message())
	case codes.Canceled:
		return fmt.Errorf("%w: %s", context.Canceled, st.Message())
	case codes.Unavailable:
		return fmt.Errorf("%w: %s", ErrUnavailable, st.Message())
	default:
		return &remoteError{class: errdefs.ErrInternal, msg: st.Message()}
	}
}

// remoteError is an error that crossed the wire: its message as the plugin
// wrote it, its class restored for errors.Is.
type remoteError struct {
	class error
	msg   string
}

func (e *remoteError) Error() string        { return e.msg }
func (e *remoteError) Is(target error) bool { return target == e.class }
