package chaos

// Figures summarise a run.
type Figures struct {
	Tasks          int `json:"tasks"`          // tasks surely enqueued (distinct task ids)
	UnsureEnqueues int `json:"unsureEnqueues"` // XADDs that answered an error
	DistinctKeys   int `json:"distinctKeys"`
	Events         int `json:"events"`          // terminal events read
	DuplicateEvts  int `json:"duplicateEvents"` // events beyond the first per task
	StrayEvents    int `json:"strayEvents"`     // events of task ids never surely enqueued
	// Succeeded, Failed, Expired, Cancelled count tasks by the status of their first event.
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Expired   int `json:"expired"`
	Cancelled int `json:"cancelled"`
	// ConflictingTasks got events with different statuses or tokens (delivery is at least
	// once; clients keep the first).
	ConflictingTasks int `json:"conflictingTasks"`
	LostTasks        int `json:"lostTasks"` // surely enqueued, no event
	DeadLetters      int `json:"deadLetters"`

	Faults      map[string]int `json:"faults"`
	FaultsTotal int            `json:"faultsTotal"`
	// CancelledKeys counts keys a cancel script ran for; CancellerCrashes the cancellers
	// that exited 86 after it (canceller-crash).
	CancelledKeys    int `json:"cancelledKeys"`
	CancellerCrashes int `json:"cancellerCrashes"`

	ModelRuns      int `json:"modelRuns"`
	Flights        int `json:"flights"`        // flight generations that ran the model (per key: 1 + fresh flights)
	FreshAfterEnd  int `json:"freshAfterEnd"`  // fresh flights after the previous one ended without a result
	FreshVanished  int `json:"freshVanished"`  // fresh flights after the previous one's records vanished
	DuplicateRuns  int `json:"duplicateRuns"`  // runs beyond the first of each flight
	Takeovers      int `json:"takeovers"`      // runs with reason takeover
	ExpiredRuns    int `json:"expiredRuns"`    // runs with reason expired
	RetryRuns      int `json:"retryRuns"`      // runs with reason retry (allowed extra)
	ResultLostRuns int `json:"resultLostRuns"` // runs with reason result_lost (allowed extra)
	HandoverRuns   int `json:"handoverRuns"`   // runs with reason handover (no attempt spent)
	// RunsAfterAnswer counts runs of a task that started after its first terminal event
	// (rule 6 violations); ReRunsMultiEnqueued the same runs of tasks enqueued more than
	// once or unsurely (allowed); LateRunLogs the runs logged after their task's first
	// event whose token dates their acquire before it (a consumer stopped in between).
	RunsAfterAnswer     int `json:"runsAfterAnswer"`
	ReRunsMultiEnqueued int `json:"reRunsMultiEnqueued"`
	LateRunLogs         int `json:"lateRunLogs"`
	Completions         int `json:"completions"` // results accepted by Redis
	Restored            int `json:"restored"`    // of which written back with the flight
	MetaBack            int `json:"metaWrittenBack"`

	Refused   int `json:"refusedResults"`   // late results refused by fencing
	Aborted   int `json:"abortedRuns"`      // runs a heartbeat aborted (stale token, cancel, expiry)
	Spooled   int `json:"spooled"`          // uncertain outcomes spooled
	Held      int `json:"heldAnswers"`      // owners that completed with an outcome their process held
	SpoolBack int `json:"spoolWrittenBack"` // spooled outcomes written back by the flush loop or at start
	PickedUp  int `json:"pickedUp"`         // entries consumers restarted under their name picked up
	Crashes   int `json:"consumerCrashes"`  // exits nobody asked for
	// InjectedCrashes counts consumers a fault knob made exit 86 (crash-after-complete).
	InjectedCrashes int `json:"injectedCrashes"`

	// Redis data losses (redis-data-loss, with the archive on; rule 7).
	DataLosses int `json:"dataLosses"`
	// UnansweredAtLoss counts the tasks enqueued before a loss without an event then (their
	// entries went with Redis); LostWithRedis those of them never answered (excused from
	// rule 1); Resent the tasks the producer sent again, under new ids, after a loss.
	UnansweredAtLoss int `json:"unansweredAtLoss"`
	LostWithRedis    int `json:"lostWithRedis"`
	Resent           int `json:"resent"`
	// ArchivedAtLoss counts the keys whose SUCCEEDED outcome the archive held at a loss (per
	// loss); AskedAfterLoss those of them sent a task after the loss.
	ArchivedAtLoss int `json:"archivedAtLoss"`
	AskedAfterLoss int `json:"askedAfterLoss"`
	// ArchiveAnswers counts the events of owners that answered from the archive (shared
	// "archive"), ArchiveKeys their distinct keys, ArchiveTasks the tasks whose first event
	// carries an archive answer's token (its followers and hits included).
	ArchiveAnswers int `json:"archiveAnswers"`
	ArchiveKeys    int `json:"archiveKeys"`
	ArchiveTasks   int `json:"archiveTasks"`
	// ArchivedRunsBefore and ArchivedRunsAfter count the model runs of keys archived at a
	// loss, started before and after it; KeysRanAgain the keys with a run after it. A run
	// after is a rule 7 violation unless its owner's lookup failed (LookupFailedRuns).
	ArchivedRunsBefore int `json:"archivedRunsBefore"`
	ArchivedRunsAfter  int `json:"archivedRunsAfter"`
	KeysRanAgain       int `json:"keysRanAgain"`
	LookupFailedRuns   int `json:"lookupFailedRuns"`
	// FreshAfterLoss counts fresh flights of keys whose previous flight's records went with
	// Redis (not archived yet, or still running at the loss): allowed by rule 4.
	FreshAfterLoss int `json:"freshAfterLoss"`

	Pending int64 `json:"pending"` // pending (parked included) + undelivered entries at the end
	Parked  int64 `json:"parkedPending"`

	Violations       int            `json:"violations"`
	ViolationsByRule map[string]int `json:"violationsByRule"`
}
