package redisconn

import "strings"

// Refused reports whether err is Redis refusing a command under the client's ACL user: a
// NOPERM reply, or the error of a script or function that ran a command the user may not run.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "NOPERM ") ||
		strings.Contains(msg, "The user executing the script can't run this command")
}
