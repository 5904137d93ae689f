package agent

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// SpoolDirName is the spool's directory inside the proxy's state_dir.
const SpoolDirName = "spool"

// spoolVersion is the format of a spooled record.
const spoolVersion = 1

// spooled is one result waiting to be posted, as the spool keeps it: the
// CompleteRequest exactly as it will be sent (its result sealed for the
// unit), and the unit's deadline on this host's wall clock.
//
// The deadline only decides how long a restarted proxy tries to post, and
// whether it still tries once keepPastDeadline has passed since it; the
// automator, whose clock is the only one that counts (guarantee 6),
// refuses a result that arrives after the unit ended.
type spooled struct {
	Version    int       `json:"version"`
	WorkID     string    `json:"work_id"`
	Account    string    `json:"account"`
	InstanceID string    `json:"instance_id"`
	Deadline   time.Time `json:"deadline"`
	Complete   []byte    `json:"complete"` // automatorv1.CompleteRequest, protobuf
}

// spool keeps finished units' results on disk until the automator has
// accepted or refused them for good, so that a proxy restart between "ran"
// and "posted" does not turn a done unit into a timeout. The directory
// exists only while results wait in it, so an uninstall finds the state
// directory as the install made it unless results are left. A nil *spool
// (no state_dir) keeps nothing.
//
// A result is written (fsynced, renamed into place, directory fsynced) at
// the same time as it is first posted, not before: the two fsyncs are off
// the unit's critical path. A result is lost only if the proxy dies before
// the write finished and before the automator acknowledged it. Once the
// automator has settled it (accepted, refused for good, or the deadline
// passed), a write that has not begun its fsyncs is skipped, and a written
// file is removed, by whichever of the two sides comes second.
type spool struct {
	dir string
	log *slog.Logger

	// hook, when set (tests), is called by each write at the stages of
	// spoolStage; an error from it fails the write. It may block, to stand
	// for a slow disk.
	hook func(stage spoolStage, workID string) error
	// read, when set (tests), reads a record's file in place of
	// os.ReadFile: a test makes a read fail as a disk error would (EIO),
	// which it cannot make a real file do (chmod 000 does not stop root).
	read func(path string) ([]byte, error)

	mu      sync.Mutex
	failing bool // the last write failed (logged once per change)
}

// spoolStage names the points of a write that the test hook sees.
type spoolStage int

const (
	// stageStart: the write's goroutine runs; nothing is written yet.
	stageStart spoolStage = iota + 1
	// stageSync: the record is in a temporary file and the write is
	// committed: its fsyncs begin (a settle from now on leaves the removal
	// to the write).
	stageSync
	// stageDone: the write is over: written (and removed again if settled
	// meanwhile), skipped, or failed.
	stageDone
	// stageSettled: not a stage of the write; the poster recorded the
	// automator's final answer (its hook error is ignored).
	stageSettled
)

func newSpool(dir string, log *slog.Logger) *spool {
	if dir == "" {
		return nil
	}
	return &spool{dir: dir, log: log}
}

// safeName is what a work id may look like to name its file as is (the
// automator's ids do: "w_" and lowercase hex); any other id is hex-encoded.
// Lowercase only: on a case-insensitive file system (Windows, macOS) the
// ids w_AB and w_ab would otherwise share one file.
var safeName = regexp.MustCompile(`^[a-z0-9_-][a-z0-9_.-]{0,127}$`)

// deviceName matches a name Windows takes for a device whatever its
// extension (con.json is the console), so it is hex-encoded too.
var deviceName = regexp.MustCompile(`^(con|prn|aux|nul|com[0-9]|lpt[0-9])(\.|$)`)

func (s *spool) path(workID string) string {
	name := workID
	// An id that starts like an encoded one is encoded too, so no id
	// names the file of another.
	if !safeName.MatchString(workID) || deviceName.MatchString(workID) || strings.HasPrefix(workID, "x-") {
		name = "x-" + hex.EncodeToString([]byte(workID))
	}
	return filepath.Join(s.dir, name+".json")
}

// spoolEntry is one result's place in the spool while it is being posted:
// it joins the write (in its own goroutine) and the posting (which settles
// it). A nil *spoolEntry (no spool) does nothing.
type spoolEntry struct {
	s      *spool
	workID string
	// path is the record's file: s.path(workID) for a result of this run;
	// for one an earlier run left, the file it was found in, whose name an
	// older proxy may have made by other rules.
	path string
	done chan struct{} // closed when the write is over

	// account, deadline and req are what the write wrote, kept to write
	// it again (rewrite) when it failed.
	account  string
	deadline time.Time
	req      *automatorv1.CompleteRequest

	// foreign: a record another instance left (pending.foreign).
	foreign bool

	// settled: accepted, refused for good, or past its deadline. Once the
	// write has committed (see commit) it removes its file itself when it
	// finds the entry settled at its end.
	mu      sync.Mutex
	settled bool
	onDisk  bool // the file is in place and nobody removed it yet
	// failed: the last write failed (the spool's disk full, say), so
	// nothing of the result is on disk: rewrite writes it again.
	failed bool
}

// put starts writing req to the spool in the background and returns its
// entry at once; the caller posts req meanwhile and settles the entry when
// the automator has answered for good. track is called with the goroutine
// to run (so the agent can wait for it when it stops).
func (s *spool) put(account string, deadline time.Time, req *automatorv1.CompleteRequest, track func(func())) *spoolEntry {
	if s == nil {
		return nil
	}
	e := &spoolEntry{s: s, workID: req.GetWorkId(), path: s.path(req.GetWorkId()), done: make(chan struct{}),
		account: account, deadline: deadline, req: req}
	track(func() { e.write(account, deadline, req) })
	return e
}

// written is the entry of a result already in the spool, in the file at
// path (an earlier run wrote it).
func (s *spool) written(workID, path string) *spoolEntry {
	if s == nil {
		return nil
	}
	e := &spoolEntry{s: s, workID: workID, path: path, done: make(chan struct{}), onDisk: true}
	close(e.done)
	return e
}

// leftForItsInstance reports whether a refusal with code of e's result
// leaves its record in place rather than settling it: e is another
// instance's record, refused as no unit this proxy's account holds
// (NotFound, PermissionDenied), so it may be another account's, or
// another automator's, which its own instance posts when it starts.
func (e *spoolEntry) leftForItsInstance(code codes.Code) bool {
	return e != nil && e.foreign && (code == codes.NotFound || code == codes.PermissionDenied)
}

// write writes the record unless the entry is settled before the fsyncs
// begin; if it is settled while they run, it removes the file afterwards.
func (e *spoolEntry) write(account string, deadline time.Time, req *automatorv1.CompleteRequest) {
	s := e.s
	defer close(e.done)
	defer func() {
		if s.hook != nil {
			_ = s.hook(stageDone, e.workID)
		}
	}()
	if s.hook != nil {
		if err := s.hook(stageStart, e.workID); err != nil {
			e.mu.Lock()
			e.failed = true
			e.mu.Unlock()
			s.noteWrite(err)
			return
		}
	}
	e.mu.Lock()
	settled := e.settled
	e.mu.Unlock()
	if settled {
		return // answered already: nothing to keep
	}
	err := s.write(e.path, account, deadline, req, e.commit)
	if errors.Is(err, errSettled) {
		return // skipped before its fsyncs: nothing was left on disk
	}
	e.mu.Lock()
	e.onDisk, e.failed = err == nil, err != nil
	remove := e.settled && e.onDisk
	if remove {
		e.onDisk = false
	}
	e.mu.Unlock()
	s.noteWrite(err)
	if remove {
		s.remove(e.workID, e.path)
	}
}

// rewrite writes the record again when its write is over and failed (the
// spool's file system full, a mode set wrong) while the result is still
// unposted and unsettled, and reports whether the record is on disk. The
// poster calls it before each new attempt and when the proxy stops with
// the result unposted: a write that failed once was never tried again,
// so a result spooled while the disk was full was lost at the next
// restart, though the disk had room again long before it. The poster
// alone settles the entry, so nothing settles it meanwhile; a write
// still running is left to end on its own.
func (e *spoolEntry) rewrite() bool {
	if e == nil {
		return false
	}
	select {
	case <-e.done:
	default:
		return false // the first write is still on its way
	}
	e.mu.Lock()
	again, kept := e.failed && !e.settled && !e.onDisk, e.onDisk
	e.mu.Unlock()
	if !again {
		return kept
	}
	err := e.s.write(e.path, e.account, e.deadline, e.req, func() error { return nil })
	e.mu.Lock()
	e.onDisk, e.failed = err == nil, err != nil
	e.mu.Unlock()
	e.s.noteWrite(err)
	return err == nil
}

// errSettled: the write was skipped, its result settled before its fsyncs.
var errSettled = errors.New("settled before the write")

// commit is called by the write with the record in a temporary file, just
// before the fsyncs: it says whether to go on (the result is not settled).
// From a nil answer on, a settle leaves the file's removal to the write.
func (e *spoolEntry) commit() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.settled {
		return errSettled
	}
	return nil
}

// settle records that the result needs the spool no more and removes its
// file when it is already written; a write still running removes it when it
// ends, one not yet committed is skipped. It does not wait for the write.
func (e *spoolEntry) settle() {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.settled = true
	remove := e.onDisk
	e.onDisk = false
	e.mu.Unlock()
	if remove {
		e.s.remove(e.workID, e.path)
	}
	if e.s.hook != nil {
		_ = e.s.hook(stageSettled, e.workID)
	}
}

// wait waits for the write to end and reports whether the result is kept
// in the spool.
func (e *spoolEntry) wait() bool {
	if e == nil {
		return false
	}
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.onDisk
}

// noteWrite logs a write failure, and the first success after failures.
func (s *spool) noteWrite(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil && !s.failing:
		s.log.Warn("cannot keep results in the spool; a restart before they are posted loses them, unless the spool takes them first: each is written again before its next attempt to post it, and at the stop", "dir", s.dir, "err", err)
	case err == nil && s.failing:
		s.log.Info("results are kept in the spool again", "dir", s.dir)
	}
	s.failing = err != nil
}

// write writes req's record to a temporary file, asks commit whether to go
// on, then fsyncs it, renames it into place at path and fsyncs the
// directory. When it fails, or commit says no, it leaves nothing behind.
func (s *spool) write(path, account string, deadline time.Time, req *automatorv1.CompleteRequest, commit func() error) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	data, err := json.Marshal(spooled{
		Version:    spoolVersion,
		WorkID:     req.GetWorkId(),
		Account:    account,
		InstanceID: req.GetInstanceId(),
		Deadline:   deadline.Round(0).UTC(),
		Complete:   body,
	})
	if err != nil {
		return err
	}
	return s.writeFile(path, data, func() error {
		if err := commit(); err != nil {
			return err
		}
		if s.hook != nil {
			return s.hook(stageSync, req.GetWorkId())
		}
		return nil
	})
}

// writeFile writes data and a newline to a temporary file, asks beforeSync
// (if not nil) whether to go on, then fsyncs it, renames it into place at
// path and fsyncs the directory. When it fails, or beforeSync says no, it
// leaves nothing behind.
func (s *spool) writeFile(path string, data []byte, beforeSync func() error) error {
	tmp, err := s.createTemp()
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(data, '\n'))
	if err == nil && beforeSync != nil {
		err = beforeSync()
	}
	if err == nil {
		err = tmp.Sync()
	}
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = renameDurable(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		s.removeDirIfEmpty()
		return err
	}
	syncDir(s.dir)
	return nil
}

// createTemp makes a temporary file in the spool directory, making the
// directory first; a remove may take away the directory when it empties,
// between the two, so it tries again. Both are the state_dir's owner's
// (see ownLike), so that a proxy run as root on a service's directory
// leaves a spool the service's user can post and empty.
func (s *spool) createTemp() (*os.File, error) {
	var err error
	for range 3 {
		if err = checkNotLinked(s.dir); err != nil {
			return nil, err
		}
		if err = os.MkdirAll(s.dir, 0o700); err != nil {
			return nil, err
		}
		if err = ownLike(s.dir, filepath.Dir(s.dir)); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		var f *os.File
		if f, err = os.CreateTemp(s.dir, ".tmp-*"); err == nil {
			if err = ownLike(f.Name(), filepath.Dir(s.dir)); err != nil {
				f.Close()
				_ = os.Remove(f.Name())
				return nil, err
			}
			return f, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return nil, err
}

// remove forgets a unit's result, kept at path: the automator accepted or
// refused it, or its deadline passed.
func (s *spool) remove(workID, path string) {
	if s == nil {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("cannot remove a posted result from the spool", "work_id", workID, "err", err)
	}
	s.removeDirIfEmpty()
}

// removeDirIfEmpty removes the spool directory when no result waits in it
// (removing a directory that holds files fails, harmlessly).
func (s *spool) removeDirIfEmpty() {
	_ = os.Remove(s.dir)
}

// keepPastDeadline is how long past its deadline on this host's wall
// clock a spooled result is still posted by a start. That clock may have
// stepped forward since the result was spooled (an NTP step at boot, a
// real-time clock kept in local time, a virtual machine restored), while
// the deadline that counts is the automator's (guarantee 6), which refuses
// a result that comes after its unit ended: dropping every record past
// this host's reading of its deadline dropped results the automator was
// still waiting for. Past it, twice the longest timeout a unit may have
// by default (24 h), no unit of the record can still be open, however
// the clocks stepped.
const keepPastDeadline = 48 * time.Hour

// latePostFor is how long a start tries at least to post a spooled result
// (resume): its deadline on this host's clock may have passed, or be near,
// only because that clock stepped forward.
const latePostFor = time.Minute

// pending is a spooled result to post again, found at path.
type pending struct {
	account  string
	deadline time.Time
	req      *automatorv1.CompleteRequest
	path     string
	// foreign: another instance's record (recordOthers).
	foreign bool
}

// loadAll returns this instance's spooled results that are not
// keepPastDeadline past their deadline at now, and the records it could
// not read, each path with its
// error (an open or read error: EIO, EACCES, EMFILE...), left in place,
// untouched, for a later read (loadRecord) or the next start. It deletes
// those past it (expired, of any instance sharing the directory: the
// automator has ended their units), leftovers of interrupted writes, and sets aside
// (*.bad) the records it read whose content does not decode. Records of
// another instance not expired are returned too (others counts them by
// instance): the proxy that wrote them stopped before it posted them, and
// no other can hold this directory while this one does, so a standby
// started on a dead proxy's directory (or one restarted with another
// instance_id) posts them. Each request still names the instance and
// claim that ran its unit, which is what the automator checks; one it
// refuses for its unit having ended leaves the spool, one it refuses as
// no unit of this proxy's account (the directory served another account,
// or another automator, before) is left for its own instance.
func (s *spool) loadAll(instanceID string, now time.Time) (due []pending, others map[string]int, unread map[string]error) {
	if s == nil {
		return nil, nil, nil
	}
	if err := checkNotLinked(s.dir); err != nil {
		s.log.Error("cannot read the spool; results kept there are not posted", "dir", s.dir, "err", err)
		return nil, nil, nil
	}
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		s.log.Error("cannot read the spool; results kept there are not posted", "dir", s.dir, "err", err)
		return nil, nil, nil
	}
	var expired []string
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(s.dir, name)
		switch {
		case e.IsDir():
			continue
		case strings.HasPrefix(name, ".tmp-"):
			_ = os.Remove(path) // a write interrupted before its rename
			continue
		case !strings.HasSuffix(name, ".json"):
			continue
		}
		p, workID, fate, err := s.loadRecord(path, instanceID, now)
		switch fate {
		case recordDue:
			due = append(due, p)
		case recordOthers:
			due = append(due, p)
			if others == nil {
				others = map[string]int{}
			}
			others[p.req.GetInstanceId()]++
		case recordExpired:
			expired = append(expired, workID)
		case recordUnread:
			// Nothing is known of it, not even whether its deadline
			// passed: only its bytes could tell, so it is neither
			// dropped as expired nor set aside, but kept as it is.
			s.log.Error("cannot read a record in the spool; left in place, untouched (not set aside): read again while this proxy runs, until it posts it or the longest timeout a unit may have has passed, and at the next start",
				"path", path, "err", err)
			if unread == nil {
				unread = map[string]error{}
			}
			unread[path] = err
		}
	}
	if len(expired) > 0 {
		syncDir(s.dir)
		s.log.Warn("dropped spooled results far past their deadline; the automator has ended those units", "count", len(expired), "past_deadline_by", keepPastDeadline, "work_ids", expired)
	}
	if len(due) == 0 {
		s.removeDirIfEmpty() // fails, harmlessly, while a record is left in it
	}
	return due, others, unread
}

// recordFate is what loadRecord made of a record.
type recordFate int

const (
	// recordDue: a result of the instance to post, not keepPastDeadline
	// past its deadline.
	recordDue recordFate = iota + 1
	// recordExpired: keepPastDeadline past its deadline; removed.
	recordExpired
	// recordOthers: as recordDue, of another instance.
	recordOthers
	// recordSetAside: read, but its content does not decode; renamed
	// *.bad (logged).
	recordSetAside
	// recordUnread: its file could not be opened or read; left in place,
	// untouched.
	recordUnread
	// recordGone: its file is no longer there.
	recordGone
)

// loadRecord reads the record at path and decides its fate (recordFate).
// Only a record whose bytes were read can be decided about: one that
// could not be read (the error is returned) is left as it is, whatever it
// holds, so a transient fault (EIO, EMFILE, EINTR, ENOMEM, a mode set
// wrong by hand) costs no result. For a record due it returns what to
// post, for an expired one its work id.
func (s *spool) loadRecord(path, instanceID string, now time.Time) (pending, string, recordFate, error) {
	data, err := s.readFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && gone(path) {
			return pending{}, "", recordGone, nil
		}
		return pending{}, "", recordUnread, err
	}
	rec, err := decodeSpooled(data)
	if err != nil {
		s.setAside(path, err)
		return pending{}, "", recordSetAside, nil
	}
	if !now.Before(rec.Deadline.Add(keepPastDeadline)) {
		_ = os.Remove(path)
		return pending{}, rec.WorkID, recordExpired, nil
	}
	var req automatorv1.CompleteRequest
	if err := proto.Unmarshal(rec.Complete, &req); err != nil || req.GetWorkId() != rec.WorkID {
		s.setAside(path, fmt.Errorf("its request does not decode for work %q", rec.WorkID))
		return pending{}, "", recordSetAside, nil
	}
	p := pending{account: rec.Account, deadline: rec.Deadline, req: &req, path: path, foreign: rec.InstanceID != instanceID}
	if p.foreign {
		return p, rec.WorkID, recordOthers, nil
	}
	return p, rec.WorkID, recordDue, nil
}

// gone reports whether nothing is at path, after a read of it failed as
// not existing: a link whose target is missing is there, unreadable.
func gone(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// setAside renames a record that was read but does not decode to
// path.bad: it will never decode, so it is neither posted nor read again
// (its unit times out at its deadline); the file is kept for a look.
func (s *spool) setAside(path string, why error) {
	s.log.Error("a record in the spool does not decode; set aside as .bad, not posted", "path", path, "err", why)
	_ = os.Rename(path, path+".bad")
}

// readFile reads a record's file (the test hook read, when set).
func (s *spool) readFile(path string) ([]byte, error) {
	if s.read != nil {
		return s.read(path)
	}
	return os.ReadFile(path)
}

// decodeSpooled decodes a record's bytes; an error says they are not a
// whole record (bad JSON, another version, a field missing).
func decodeSpooled(data []byte) (spooled, error) {
	var rec spooled
	if err := json.Unmarshal(data, &rec); err != nil {
		return spooled{}, err
	}
	if rec.Version != spoolVersion || rec.WorkID == "" || rec.Deadline.IsZero() || len(rec.Complete) == 0 {
		return spooled{}, fmt.Errorf("record of version %d for work %q is incomplete", rec.Version, rec.WorkID)
	}
	return rec, nil
}

// syncDir makes a rename or removal in dir durable. Where directories
// cannot be synced (Windows), renameDurable writes the rename through.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
