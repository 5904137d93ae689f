package grpcwire

// The google.rpc.ErrorInfo of a RESOURCE_EXHAUSTED refusal that waiting
// mends (it carries a google.rpc.RetryInfo too) tells which limit refused
// the call, so that a caller can tell one it may submit again after the
// delay (the account's queue at its cap: nothing was queued) from one that
// only says when its wrong API key may fail once more.
const (
	// ErrorDomain is the ErrorInfo's domain.
	ErrorDomain = "automator.opsgate"
	// ReasonQueueFull: the account has max_queued_per_account units
	// queued; the unit was not queued. Its metadata names the account.
	ReasonQueueFull = "QUEUE_FULL"
	// ReasonTooManyFailedAuthentications: the caller's source address has
	// spent its failed-authentication budget.
	ReasonTooManyFailedAuthentications = "TOO_MANY_FAILED_AUTHENTICATIONS"
)
