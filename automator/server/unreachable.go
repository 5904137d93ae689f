package server

// An outage of the database fails every call that needs it, and the
// sweeper's every look at the deadlines: one line per failure would bury
// the log (a poll alone fails every few seconds per instance). So the
// first failure of an outage is a warning with its details (the call, its
// account, the error), the next ones debug lines, and the first store call
// that succeeds after it says that the database answers again: as the
// replica's listener and the per-account gauges log their own outages.

// databaseUnreachable logs a store call that found the database out of
// reach: a warning for the first of an outage, debug for the others.
func (s *Server) databaseUnreachable(attrs ...any) {
	if !s.dbDown.Swap(true) {
		s.log.Warn("the database is unreachable: calls that need it answer UNAVAILABLE, and units are not timed out, until it answers again; further failures are logged at debug level", attrs...)
		return
	}
	s.log.Debug("the database is unreachable", attrs...)
}

// databaseAnswered ends an outage databaseUnreachable logged, saying so
// once. It costs one atomic load when there is none.
func (s *Server) databaseAnswered() {
	if s.dbDown.Load() && s.dbDown.Swap(false) {
		s.log.Info("the database answers again")
	}
}
