package grpcwire

// The google.rpc.ErrorInfo of a RESOURCE_EXHAUSTED refusal tells which
// limit refused the call, so that a caller can tell one it may submit
// again after the delay of its google.rpc.RetryInfo (the account's queue
// at its cap: nothing was queued) from one that only says when its wrong
// API key may fail once more, and both from a full disk, which no waiting
// alone mends.
const (
	// ErrorDomain is the ErrorInfo's domain.
	ErrorDomain = "automator.opsgate"
	// ReasonQueueFull: the account has max_queued_per_account units
	// queued; the unit was not queued. Its metadata names the account.
	ReasonQueueFull = "QUEUE_FULL"
	// ReasonTooManyFailedAuthentications: the caller's source address has
	// spent its failed-authentication budget.
	ReasonTooManyFailedAuthentications = "TOO_MANY_FAILED_AUTHENTICATIONS"
	// ReasonStorageFull: the automator's database is out of disk space;
	// nothing was stored. It carries no RetryInfo (space comes back when
	// the operator frees it), and the HTTP gateway answers it 507
	// Insufficient Storage, not 429: the server is short of space, not the
	// caller of patience.
	ReasonStorageFull = "STORAGE_FULL"
)

// ResultRecordedAlready ends the FAILED_PRECONDITION message of a result
// posted again after it was recorded (its answer lost): DESIGN.md has
// every result posted after a terminal state refused, and the proxy tells
// this one, which it delivered, from a refusal by these words.
const ResultRecordedAlready = "this result was recorded already"
