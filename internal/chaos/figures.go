package chaos

// Figures summarise a run.
type Figures struct {
	Tasks          int `json:"tasks"`          // tasks surely enqueued, as distinct task ids
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
	// ConflictingTasks counts tasks that got events with different statuses or tokens.
	// Delivery is at least once, and clients keep the first.
	ConflictingTasks int `json:"conflictingTasks"`
	LostTasks        int `json:"lostTasks"` // surely enqueued, with no event
	DeadLetters      int `json:"deadLetters"`

	Faults      map[string]int `json:"faults"`
	FaultsTotal int            `json:"faultsTotal"`
	// CancelledKeys counts keys a cancel script ran for. CancellerCrashes counts the
	// cancellers that exited 86 after it in canceller-crash faults.
	CancelledKeys    int `json:"cancelledKeys"`
	CancellerCrashes int `json:"cancellerCrashes"`

	ModelRuns      int `json:"modelRuns"`
	Flights        int `json:"flights"`        // flight generations that ran the model, per key 1 + fresh flights
	FreshAfterEnd  int `json:"freshAfterEnd"`  // fresh flights after the previous one ended without a result
	FreshVanished  int `json:"freshVanished"`  // fresh flights after the previous one's records vanished
	DuplicateRuns  int `json:"duplicateRuns"`  // runs beyond the first of each flight
	Takeovers      int `json:"takeovers"`      // runs with reason takeover
	ExpiredRuns    int `json:"expiredRuns"`    // runs with reason expired
	RetryRuns      int `json:"retryRuns"`      // runs with reason retry, allowed extra
	ResultLostRuns int `json:"resultLostRuns"` // runs with reason result_lost, allowed extra
	HandoverRuns   int `json:"handoverRuns"`   // runs with reason handover, no attempt spent
	// RunsAfterAnswer counts runs of a task that started after its first terminal event,
	// which are rule 6 violations.
	RunsAfterAnswer     int `json:"runsAfterAnswer"`
	ReRunsMultiEnqueued int `json:"reRunsMultiEnqueued"` // the same runs of tasks enqueued more than once or unsurely, allowed
	LateRunLogs         int `json:"lateRunLogs"`         // runs logged after their task's first event whose token dates the acquire before it
	Completions         int `json:"completions"`         // results accepted by Redis
	Restored            int `json:"restored"`            // completions written back with the flight
	MetaBack            int `json:"metaWrittenBack"`

	Refused   int `json:"refusedResults"`   // late results refused by fencing
	Aborted   int `json:"abortedRuns"`      // runs a heartbeat aborted on a stale token, cancel or expiry
	Spooled   int `json:"spooled"`          // uncertain outcomes spooled
	Held      int `json:"heldAnswers"`      // owners that completed with an outcome their process held
	SpoolBack int `json:"spoolWrittenBack"` // spooled outcomes written back by the flush loop or at start
	PickedUp  int `json:"pickedUp"`         // entries consumers restarted under their name picked up
	Crashes   int `json:"consumerCrashes"`  // exits nobody asked for
	// InjectedCrashes counts consumers a fault knob made exit 86 in crash-after-complete faults.
	InjectedCrashes int `json:"injectedCrashes"`

	// DataLosses counts redis-data-loss faults, drawn with the archive on. Rule 7 covers them.
	DataLosses int `json:"dataLosses"`
	// UnansweredAtLoss counts the tasks enqueued before a loss without an event then, whose
	// entries went with Redis.
	UnansweredAtLoss int `json:"unansweredAtLoss"`
	LostWithRedis    int `json:"lostWithRedis"` // those of them never answered, which rule 1 excuses
	Resent           int `json:"resent"`        // tasks the producer sent again, under new ids, after a loss
	// ArchivedAtLoss counts, per loss, the keys whose SUCCEEDED outcome the archive held at
	// the loss. AskedAfterLoss counts those of them sent a task after the loss.
	ArchivedAtLoss int `json:"archivedAtLoss"`
	AskedAfterLoss int `json:"askedAfterLoss"`
	// ArchiveAnswers counts the events of owners that answered from the archive, with shared
	// "archive".
	ArchiveAnswers int `json:"archiveAnswers"`
	ArchiveKeys    int `json:"archiveKeys"`  // distinct keys of ArchiveAnswers
	ArchiveTasks   int `json:"archiveTasks"` // tasks whose first event carries an archive answer's token, followers and hits included
	// ArchivedRunsBefore and ArchivedRunsAfter count the model runs of keys archived at a
	// loss, started before and after it. A run after is a rule 7 violation unless its owner's
	// lookup failed.
	ArchivedRunsBefore int `json:"archivedRunsBefore"`
	ArchivedRunsAfter  int `json:"archivedRunsAfter"`
	KeysRanAgain       int `json:"keysRanAgain"`     // keys with a run after a loss
	LookupFailedRuns   int `json:"lookupFailedRuns"` // runs after a loss whose owner's archive lookup failed
	// FreshAfterLoss counts fresh flights of keys whose previous flight's records went with
	// Redis, not archived yet or still running at the loss. Rule 4 allows them.
	FreshAfterLoss int `json:"freshAfterLoss"`

	Pending int64 `json:"pending"` // pending and undelivered entries at the end, parked included
	Parked  int64 `json:"parkedPending"`

	Violations       int            `json:"violations"`
	ViolationsByRule map[string]int `json:"violationsByRule"`
}
