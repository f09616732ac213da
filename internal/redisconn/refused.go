package redisconn

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Refused reports whether err holds Redis refusing a command under the client's ACL user: a
// NOPERM reply, or the error of a script or function that ran a command, or touched a key,
// that the user may not.
func Refused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "ERR ACL failure in script") ||
		strings.HasPrefix(msg, "ERR The user executing the script can't")
}
