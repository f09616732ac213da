package model_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/flightdeck-ai/flightdeck/handlers/model"
)

// errShape is the part of an *Error a caller acts on.
type errShape struct {
	Retryable  bool
	Type, Code string
	RetryAfter time.Duration
}

// requireErr fails t unless err is an *Error of the wanted shape, and returns it.
func requireErr(t *testing.T, err error, want errShape) *model.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %+v", want)
	}
	e, ok := errors.AsType[*model.Error](err)
	if !ok {
		t.Fatalf("err = %T %v, want *model.Error", err, err)
	}
	got := errShape{Retryable: e.Retryable, Type: e.Type, Code: e.Code, RetryAfter: e.RetryAfter}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("error shape mismatch for %q (-want +got):\n%s", err, diff)
	}
	return e
}

type netTimeout struct{}

func (netTimeout) Error() string   { return "i/o timeout" }
func (netTimeout) Timeout() bool   { return true }
func (netTimeout) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	t.Parallel()

	typed := &model.Error{Type: model.TypeBadRequest, Code: "x"}
	tests := []struct {
		name string
		err  error
		want errShape
	}{
		{"Typed", typed, errShape{Type: model.TypeBadRequest, Code: "x"}},
		{"WrappedTyped", fmt.Errorf("run: %w", typed), errShape{Type: model.TypeBadRequest, Code: "x"}},
		{"Canceled", fmt.Errorf("run: %w", context.Canceled), errShape{Type: model.TypeCancelled, Code: "canceled"}},
		{"DeadlineExceeded", context.DeadlineExceeded, errShape{Retryable: true, Type: model.TypeTimeout, Code: "deadline_exceeded"}},
		{"NetTimeout", &url.Error{Op: "Post", URL: "http://x", Err: netTimeout{}}, errShape{Retryable: true, Type: model.TypeTimeout, Code: "net_timeout"}},
		{"Other", io.ErrUnexpectedEOF, errShape{Retryable: true, Type: model.TypeUpstream, Code: "unclassified"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := requireErr(t, model.Classify(tt.err), tt.want)
			if !errors.Is(e, tt.err) && !errors.Is(tt.err, e) {
				t.Errorf("Classify(%v) = %v, lost the original error", tt.err, e)
			}
		})
	}

	t.Run("Nil", func(t *testing.T) {
		t.Parallel()
		if e := model.Classify(nil); e != nil {
			t.Errorf("Classify(nil) = %v, want nil", e)
		}
	})
	t.Run("TypedIsReturnedAsIs", func(t *testing.T) {
		t.Parallel()
		if e := model.Classify(fmt.Errorf("a: %w", typed)); e != typed {
			t.Errorf("Classify(wrapped) = %p, want %p", e, typed)
		}
	})
}

func TestErrorString(t *testing.T) {
	t.Parallel()

	inner := errors.New("boom")
	tests := []struct {
		err  *model.Error
		want string
	}{
		{&model.Error{Type: model.TypeUpstream}, "model: upstream"},
		{&model.Error{Type: model.TypeRateLimited, Code: "http_429", Message: "slow down"}, "model: rate_limited (http_429): slow down"},
		{&model.Error{Type: model.TypeTimeout, Message: "openai", Err: inner}, "model: timeout: openai: boom"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	if e := (&model.Error{Err: inner}); !errors.Is(e, inner) {
		t.Errorf("errors.Is(%v, inner) = false, want true", e)
	}
}
