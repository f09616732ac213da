package admin

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
)

// TestReplyClientGone: a read that ends because its client went away answers 499, not a
// server error; a read past its own deadline answers 504.
func TestReplyClientGone(t *testing.T) {
	for err, want := range map[error]int{
		fmt.Errorf("admin: flights: %w", context.Canceled):         statusClientClosed,
		fmt.Errorf("admin: flights: %w", context.DeadlineExceeded): 504,
		fmt.Errorf("admin: flights: boom"):                         500,
	} {
		rec := httptest.NewRecorder()
		reply(rec, nil, err)
		if rec.Code != want {
			t.Errorf("%v: %d, want %d", err, rec.Code, want)
		}
	}
}
