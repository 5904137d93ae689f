package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// LostPollsName is the file in the spool where a stopped proxy keeps the
// polls whose answers it never read and could not tell the automator of
// before it exited (the automator was unreachable). Not a result's record:
// its name does not end in ".json", which load skips.
const LostPollsName = "lost-polls"

// lostPolls is one proxy process's (run's) polls from From on whose
// answers it never read: the automator may have claimed units for them,
// which no process will ever run. A poll of that run numbered Seq, made by
// a later process of the instance, says so (lost_from), and the automator
// fails those units rather than leave them claimed until their deadline.
type lostPolls struct {
	Version    int       `json:"version"`
	InstanceID string    `json:"instance_id"`
	Run        string    `json:"run_id"`
	From       uint64    `json:"lost_from"`
	Seq        uint64    `json:"poll_seq"`
	StoppedAt  time.Time `json:"stopped_at"`
}

// keepLostFor is how long a record of lost polls is kept: twice the
// longest timeout a unit may have (24 h, the automator's limit), counted
// from the stop. Every unit claimed for polls made before it has ended by
// then, timed out if not failed, so an older record has nothing left to
// tell, and one of an instance id that never polls again (a host renamed,
// a container's host name) does not keep the spool forever.
const keepLostFor = 48 * time.Hour

// loadLost returns the lost polls kept in the spool: those of instance,
// and the others (of another instance that shares the directory), which
// are left for it (readLost, without its error).
func (s *spool) loadLost(instance string) (mine, others []lostPolls) {
	mine, others, _ = s.readLost(instance)
	return mine, others
}

// readLost returns the lost polls kept in the spool: those of instance,
// and the others (of another instance that shares the directory), which
// are left for it. Records past keepLostFor, of any instance, are
// dropped; a file whose content does not decode is set aside (*.bad).
//
// A file that is there but could not be read (an open or read error:
// EIO, EACCES, EMFILE...) is left in place, untouched, and its error is
// returned: whoever would write the record (saveEarlier) must not write
// over it, which would lose what it holds.
func (s *spool) readLost(instance string) (mine, others []lostPolls, err error) {
	if s == nil {
		return nil, nil, nil
	}
	path := filepath.Join(s.dir, LostPollsName)
	data, err := s.readFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && gone(path) {
			return nil, nil, nil
		}
		s.log.Error("cannot read the spool's record of lost polls; left in place, untouched (not set aside, not written over): the lost polls it holds are not reported by this run, but by the next start that can read it",
			"path", path, "err", err)
		return nil, nil, err
	}
	var all []lostPolls
	if err := json.Unmarshal(data, &all); err != nil {
		s.log.Error("the spool's record of lost polls does not decode; set aside as .bad: units claimed for them time out at their deadline", "path", path, "err", err)
		_ = os.Rename(path, path+".bad")
		return nil, nil, nil
	}
	stale := 0
	for _, l := range all {
		switch {
		case time.Since(l.StoppedAt) > keepLostFor:
			stale++
		case l.InstanceID == instance:
			mine = append(mine, l)
		default:
			others = append(others, l)
		}
	}
	if stale > 0 {
		if err := s.saveLost(append(append([]lostPolls{}, others...), mine...)); err != nil {
			s.log.Warn("cannot drop old records of lost polls from the spool", "path", path, "err", err)
		} else {
			s.log.Info("dropped records of lost polls older than their units' longest deadline: the automator has ended those units", "count", stale, "older_than", keepLostFor)
		}
	}
	return mine, others, nil
}

// saveLost replaces the spool's lost polls with all (none: the file is
// removed), written as a result's record is.
func (s *spool) saveLost(all []lostPolls) error {
	path := filepath.Join(s.dir, LostPollsName)
	if len(all) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		s.removeDirIfEmpty()
		return nil
	}
	data, err := json.Marshal(all)
	if err != nil {
		return err
	}
	return s.writeFile(path, data, nil)
}

// keepLost records, when the agent stops, that its polls from lostFrom on
// were never answered and that it could not say so (why: the error of its
// last try, nil when none was made to the end): with a spool, the next
// start of the instance says it for this run (reportEarlier); without one,
// the units claimed for them time out at their deadline, as logged (or
// were cancelled, if a refusal of the token was for the account's
// deletion).
func (a *Agent) keepLost(seq, lostFrom uint64, why error) {
	if lostFrom == 0 {
		return
	}
	attrs := []any{"run_id", a.run, "lost_from", lostFrom}
	if why != nil {
		// Unreachable, or refused (a revoked token, say): the operator
		// is told which, not one of them whatever happened.
		attrs = append(attrs, "code", status.Code(why).String(), "err", status.Convert(why).Message())
	}
	// The automator refuses a deleted account's token as any token it
	// does not know (it destroyed it), and the deletion cancelled every
	// unit the account had claimed: refused so, the proxy cannot tell a
	// deletion from a token withdrawn by a rotation, after which the
	// units do time out.
	fate := "time out at their deadline"
	nextStart := "the next start tells it, and it fails the units it claimed for them"
	if status.Code(why) == codes.Unauthenticated {
		fate += ", unless its account was deleted, which cancelled them"
		nextStart = "the next start tells it once the automator accepts this proxy's token, and it fails the units it claimed for them, unless its account was deleted, which cancelled them"
	}
	if a.spool == nil {
		a.log.Warn("stopped without telling the automator of polls whose answers were never read (its last try failed: see err): units it claimed for them "+fate, attrs...)
		return
	}
	a.earlier = append(a.earlier, lostPolls{
		Version: 1, InstanceID: a.o.InstanceID, Run: a.run, From: lostFrom, Seq: seq + 1, StoppedAt: time.Now().UTC(),
	})
	if err := a.saveEarlier(); err != nil {
		a.log.Error("cannot keep in the spool the polls whose answers were never read: units the automator claimed for them "+fate,
			append(attrs, "spool_err", err)...)
		return
	}
	a.log.Warn("stopped without telling the automator of polls whose answers were never read (its last try failed: see err): "+nextStart, attrs...)
}

// loadEarlier reads the polls whose answers earlier runs of this instance
// never read, kept in the spool, into a.earlier, at the start. A record
// that cannot be read is left in place and not read again in this run:
// an earlier run's report must come before this run's first poll
// (pollLoop), so the next start reports what it holds.
func (a *Agent) loadEarlier() {
	var err error
	a.earlier, _, err = a.spool.readLost(a.o.InstanceID)
	a.earlierUnread = err != nil
}

// saveEarlier writes a.earlier to the spool, with the other instances'
// records there.
//
// It writes nothing when the record in the spool cannot be read now: the
// new file would replace it with a list that lacks what it holds (other
// instances' lost polls, and earlier runs' of this one that this run could
// not load), lost for good, where refusing loses at most this run's
// update (its own lost polls, whose units then time out at their deadline,
// as without a spool; or the removal of a record just reported, which the
// next start reports again). Nor is the unread file moved aside: nothing
// would read it there.
func (a *Agent) saveEarlier() error {
	mine, others, err := a.spool.readLost(a.o.InstanceID)
	if err != nil {
		return fmt.Errorf("the spool's record of lost polls cannot be read; not written over, so as to lose none of the polls it keeps: %w", err)
	}
	all := others
	if a.earlierUnread {
		// The start could not read it: its records of this instance
		// are in no a.earlier, and are kept for the next start (each
		// once: this run's own, written by an earlier call, are).
		for _, l := range mine {
			if !slices.ContainsFunc(a.earlier, func(e lostPolls) bool { return e.Run == l.Run }) {
				all = append(all, l)
			}
		}
	}
	return a.spool.saveLost(append(all, a.earlier...))
}

// reportEarlier tells the automator of the lost polls an earlier process
// of this instance kept in the spool, each in a poll for no units of that
// process's run, before this process polls: the automator fails the units
// it claimed for them. An answered poll, or one refused as invalid (a
// record it cannot take will never be taken), settles its record. Another
// error is returned, the record kept: the automator cannot be reached, and
// the poll loop backs off as after a failed poll.
func (a *Agent) reportEarlier(ctx context.Context) error {
	for len(a.earlier) > 0 {
		l := a.earlier[0]
		// A poll for no units, bounded as every poll of this run: on a
		// thin link it may wait behind the results posted again from
		// the spool (resumeSpooled), for seconds. A fixed 5 s cut it
		// off there, and it was made again, logged as the automator
		// unreachable, until they were sent.
		_, err := a.pollAsBounded(ctx, l.Run, 0, 0, l.Seq, l.From)
		switch {
		case err == nil:
			a.log.Info("told the automator of polls an earlier run of this instance never read the answers of", "run_id", l.Run, "lost_from", l.From)
		case status.Code(err) == codes.InvalidArgument:
			a.log.Warn("the automator refused the report of polls an earlier run of this instance never read the answers of; units it claimed for them time out at their deadline",
				"run_id", l.Run, "lost_from", l.From, "err", err)
		default:
			return fmt.Errorf("telling the automator of an earlier run's lost polls: %w", err)
		}
		a.earlier = a.earlier[1:]
		if err := a.saveEarlier(); err != nil {
			a.log.Warn("cannot update the spool's record of lost polls", "err", err)
		}
	}
	return nil
}
