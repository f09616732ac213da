package admin

import (
	"strconv"
	"strings"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// AttemptLogField is the flight meta field that holds the flight's attempt log, when the
// flight scripts keep one: one line per ended attempt, oldest first, of the tab-separated
// fields attempt, token, ownerId, taskId, startedAt in Unix ms, endedAt in Unix ms, outcome,
// errorCode and error. The dashboard shows the log with the current attempt from the meta,
// or without a log the current or last attempt alone.
const AttemptLogField = "attemptLog"

// AttemptView is one owner attempt of a flight.
type AttemptView struct {
	// Attempt is the attempt's number, 1 for the first owner. Owner is the consumer that ran
	// it, TaskID the owner's task and Token its fencing token.
	Attempt int    `json:"attempt"`
	Owner   string `json:"owner"`
	TaskID  string `json:"taskId,omitempty"`
	Token   int64  `json:"token"`
	// StartedAt and EndedAt are Unix ms, 0 when unknown. EndedAt is also 0 while running.
	StartedAt int64 `json:"startedAt"`
	EndedAt   int64 `json:"endedAt"`
	// Outcome is PENDING or RUNNING for the current attempt, else how it ended: SUCCEEDED,
	// FAILED, CANCELLED, EXPIRED, or what the attempt log says, such as a takeover or a handover.
	Outcome   string `json:"outcome"`
	ErrorCode string `json:"errorCode,omitempty"`
	Error     string `json:"error,omitempty"`
	// Logged is true for an attempt read from the attempt log, false for the one the meta
	// describes.
	Logged bool `json:"logged"`
}

// attempts returns the flight's attempts, oldest first: those of the attempt log, then the
// meta's own when the log does not hold it yet. It keeps the newest MaxListEntries.
func attempts(m flight.Meta) []AttemptView {
	var out []AttemptView
	for line := range strings.SplitSeq(m.Fields[AttemptLogField], "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 7 {
			continue
		}
		i64 := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
		a := AttemptView{Attempt: int(i64(f[0])), Token: i64(f[1]), Owner: f[2], TaskID: f[3],
			StartedAt: i64(f[4]), EndedAt: i64(f[5]), Outcome: f[6], Logged: true}
		if len(f) > 7 {
			a.ErrorCode = f[7]
		}
		if len(f) > 8 {
			a.Error = strings.Join(f[8:], " ")
		}
		out = append(out, a)
	}
	active := m.Status == flight.StatusPending || m.Status == flight.StatusRunning
	if n := len(out); n > 0 && !active && out[n-1].Token == m.OwnerToken {
		return tail(out)
	}
	cur := AttemptView{Attempt: m.Attempts, Owner: m.OwnerID, TaskID: m.TaskID, Token: m.OwnerToken,
		Outcome: string(m.Status)}
	if v, err := strconv.ParseInt(m.Fields["startedAt"], 10, 64); err == nil {
		cur.StartedAt = v
	} else if !m.ExpireAt.IsZero() && m.Policy.RunningTTL > 0 {
		// An attempt expires runningTTL after its start, as acquire.lua and start.lua set it.
		cur.StartedAt = m.ExpireAt.Add(-m.Policy.RunningTTL).UnixMilli()
	}
	if !active && !m.UpdatedAt.IsZero() {
		cur.EndedAt = m.UpdatedAt.UnixMilli()
		cur.ErrorCode, cur.Error = m.ErrorCode, m.Error
	}
	return tail(append(out, cur))
}

// tail keeps the newest MaxListEntries attempts.
func tail(a []AttemptView) []AttemptView {
	if len(a) > MaxListEntries {
		return a[len(a)-MaxListEntries:]
	}
	return a
}
