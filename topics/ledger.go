package topics

import (
	"strconv"
	"strings"
	"time"
)

// StatsHourRetention is how long an hourly stats hash, Keyspace.StatsHour, lives after its last
// write: a little over the day the ledger reports.
const StatsHourRetention = 25 * time.Hour

// StatsHour is the hourly statistics hash of stage for the hour that starts at Unix second
// 3600*hour. It holds the ledger's counters of every consumer of the fleet, summed with
// HINCRBY, as LedgerField names them. It expires StatsHourRetention after its last write.
func (k Keyspace) StatsHour(stage string, hour int64) string {
	return k.p() + ":stats:" + stage + ":h" + strconv.FormatInt(hour, 10)
}

// LedgerPrefix opens the ledger's fields in the stats hashes, Keyspace.Stats and StatsHour.
const LedgerPrefix = "l:"

// LedgerOther is the tenant the ledger counts a consumer's tenants under once it counts
// MaxLedgerTenants of one stage. No tenant has this name.
const LedgerOther = "*"

// MaxLedgerTenants bounds the tenants one consumer's ledger counts apart, per stage: the
// Prometheus series and the stats hash fields grow with them.
const MaxLedgerTenants = 100

// LedgerField names tenant's counter name in the stats hashes: "l:<tenant>:<name>".
func LedgerField(tenant, name string) string { return LedgerPrefix + tenant + ":" + name }

// ParseLedgerField reads a stats hash field LedgerField wrote; ok is false for any other field.
func ParseLedgerField(f string) (tenant, name string, ok bool) {
	rest, ok := strings.CutPrefix(f, LedgerPrefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// LedgerCounts is what the savings ledger counted for one stage and tenant: the tasks answered
// by each path, the model calls made, the tokens and money they spent, and what the tasks
// answered without a call avoided.
type LedgerCounts struct {
	// Owner counts tasks whose own model call answered them; Joined, tasks that waited in the
	// owner's consumer and rode its complete; Follower, tasks parked on a flight and answered
	// by its outcome; Hit, tasks answered by a finished flight's stored outcome; Archive,
	// tasks answered from the durable archive; Local, tasks of a stage that runs without
	// coordination, or of a consumer that lost Redis, each with a call of its own.
	Owner    int64 `json:"owner"`
	Joined   int64 `json:"joined"`
	Follower int64 `json:"follower"`
	Hit      int64 `json:"hit"`
	Archive  int64 `json:"archive"`
	Local    int64 `json:"local"`
	// Calls counts the model calls made, and RateLimited those the provider refused with a 429.
	Calls       int64 `json:"calls"`
	RateLimited int64 `json:"rateLimited"`
	// LimiterWaits counts the owner calls a limiter made wait.
	LimiterWaits int64 `json:"limiterWaits"`
	// PromptTokens and CompletionTokens are what the calls used, as their providers reported it.
	PromptTokens     int64 `json:"promptTokens"`
	CompletionTokens int64 `json:"completionTokens"`
	// AvoidedPromptTokens and AvoidedCompletionTokens are the usage of the calls whose results
	// answered other tasks successfully, once per such task.
	AvoidedPromptTokens     int64 `json:"avoidedPromptTokens"`
	AvoidedCompletionTokens int64 `json:"avoidedCompletionTokens"`
	// SpentNanoUSD and AvoidedNanoUSD price those tokens with the stage file's prices, in
	// billionths of a US dollar.
	SpentNanoUSD   int64 `json:"spentNanoUSD"`
	AvoidedNanoUSD int64 `json:"avoidedNanoUSD"`
}

// LedgerNames lists the names of the ledger's counters, as the stats hash fields name them, in
// the order of LedgerCounts.Counter.
var LedgerNames = [...]string{"owner", "joined", "follower", "hit", "archive", "local", "calls", "rateLimited",
	"limiterWaits", "promptTokens", "completionTokens", "avoidedPromptTokens", "avoidedCompletionTokens",
	"spentNanoUSD", "avoidedNanoUSD"}

// Counter returns the counter LedgerNames[i] names, or nil for an index out of range.
func (c *LedgerCounts) Counter(i int) *int64 {
	ptrs := [...]*int64{&c.Owner, &c.Joined, &c.Follower, &c.Hit, &c.Archive, &c.Local, &c.Calls, &c.RateLimited,
		&c.LimiterWaits, &c.PromptTokens, &c.CompletionTokens, &c.AvoidedPromptTokens, &c.AvoidedCompletionTokens,
		&c.SpentNanoUSD, &c.AvoidedNanoUSD}
	if i < 0 || i >= len(ptrs) {
		return nil
	}
	return ptrs[i]
}

// Add adds o's counts to c.
func (c *LedgerCounts) Add(o LedgerCounts) {
	for i := range LedgerNames {
		*c.Counter(i) += *o.Counter(i)
	}
}

// Tasks counts the tasks answered, by every path.
func (c LedgerCounts) Tasks() int64 {
	return c.Owner + c.Joined + c.Follower + c.Hit + c.Archive + c.Local
}

// Shared counts the tasks answered without a model call of their own.
func (c LedgerCounts) Shared() int64 { return c.Joined + c.Follower + c.Hit + c.Archive }
