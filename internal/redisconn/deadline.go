package redisconn

import (
	"context"
	"time"
)

// ContextErr returns ctx's error, or context.DeadlineExceeded once ctx's deadline has passed.
// A read that a client with ContextTimeoutEnabled cut at the deadline can fail before the
// context's own timer has fired, so ctx.Err alone may still be nil then.
func ContextErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
