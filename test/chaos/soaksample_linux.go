package chaos

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SoakTarget is a process a SoakSampler reads.
type SoakTarget struct {
	Name, Role string
	// PID returns the process to read now; 0 when there is none (yet).
	PID func() int
	// MetricsURL, when set, is a Prometheus page of the process's own
	// (its goroutines and heap), read at each sample.
	MetricsURL string
	// Later marks a process that appears some time after the run starts
	// (a proxy's reaper starts with its first script): until it is first
	// read, a sample that finds none is not a failed reading.
	Later bool
}

// SoakFile is a file whose size a SoakSampler reads.
type SoakFile struct {
	Name, Role, Resource string
	Path                 string
}

// SoakSampler reads, at each Sample, what each target holds: from /proc its
// resident memory, open files and threads; from its /metrics, when it has
// one, its goroutines, heap in use and live heap, and the units it ended;
// and the size of each file. Every reading is kept, and written as a CSV
// line (elapsed seconds, process, role, resource, value) to the writer
// given, as it is taken, so a run that dies leaves what it read.
type SoakSampler struct {
	start   time.Time
	targets []SoakTarget
	files   []SoakFile
	client  *http.Client

	mu     sync.Mutex
	csv    io.Writer
	series map[string]*SoakSeries
	errs   map[string]int
	last   map[string]string // the last error of each kind
	seen   map[string]bool   // targets read at least once
	n      int
}

// NewSoakSampler reads targets and files from now on; csv, when not nil,
// gets a header and then every reading.
func NewSoakSampler(targets []SoakTarget, files []SoakFile, csv io.Writer) *SoakSampler {
	s := &SoakSampler{
		start: time.Now(), targets: targets, files: files, csv: csv,
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		series: map[string]*SoakSeries{}, errs: map[string]int{}, last: map[string]string{}, seen: map[string]bool{},
	}
	if csv != nil {
		fmt.Fprintln(csv, "elapsed_s,process,role,resource,value")
	}
	return s
}

// Run samples at once and then every interval until ctx is done.
func (s *SoakSampler) Run(ctx context.Context, every time.Duration) {
	s.Sample()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.Sample()
		}
	}
}

// Sample takes one reading of everything.
func (s *SoakSampler) Sample() {
	at := time.Since(s.start)
	for _, t := range s.targets {
		pid := t.PID()
		s.mu.Lock()
		waiting := t.Later && !s.seen[t.Name]
		s.mu.Unlock()
		if pid == 0 {
			if !waiting {
				s.fail(t.Name, "not running")
			}
			continue
		}
		st, err := ReadProcStat(pid)
		if err != nil {
			s.fail(t.Name, err.Error())
			continue
		}
		s.mu.Lock()
		s.seen[t.Name] = true
		s.mu.Unlock()
		s.add(t.Name, t.Role, ResRSS, at, pid, st.RSS)
		s.add(t.Name, t.Role, ResFDs, at, pid, float64(st.FDs))
		s.add(t.Name, t.Role, ResThreads, at, pid, float64(st.Threads))
		if t.MetricsURL == "" {
			continue
		}
		m, err := s.metrics(t.MetricsURL)
		if err != nil {
			s.fail(t.Name, err.Error())
			continue
		}
		if v, ok := m["go_goroutines"]; ok {
			s.add(t.Name, t.Role, ResGoroutines, at, pid, v)
		}
		if v, ok := m["go_memstats_heap_inuse_bytes"]; ok {
			s.add(t.Name, t.Role, ResHeapInuse, at, pid, v)
		}
		if v, ok := PromHeapLive(m); ok {
			s.add(t.Name, t.Role, ResHeapLive, at, pid, v)
		}
		if v, ok := PromSum(m, "automator_work_finished_total"); ok {
			s.add(t.Name, t.Role, ResUnitsEnded, at, pid, v)
		}
	}
	for _, f := range s.files {
		fi, err := os.Stat(f.Path)
		if err != nil {
			s.fail(f.Name+" "+f.Resource, err.Error())
			continue
		}
		s.add(f.Name, f.Role, f.Resource, at, 0, float64(fi.Size()))
	}
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
}

func (s *SoakSampler) metrics(url string) (map[string]float64, error) {
	resp, err := s.client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return ParsePromText(resp.Body)
}

func (s *SoakSampler) add(name, role, resource string, at time.Duration, pid int, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := name + "\x00" + resource
	sr := s.series[key]
	if sr == nil {
		sr = &SoakSeries{Process: name, Role: role, Resource: resource}
		s.series[key] = sr
	}
	sr.Points = append(sr.Points, SoakPoint{At: at, Value: v})
	if pid != 0 && (len(sr.PIDs) == 0 || sr.PIDs[len(sr.PIDs)-1] != pid) {
		sr.PIDs = append(sr.PIDs, pid)
	}
	if s.csv != nil {
		fmt.Fprintf(s.csv, "%.3f,%s,%s,%s,%s\n", at.Seconds(), name, role, resource, strconv.FormatFloat(v, 'f', -1, 64))
	}
}

func (s *SoakSampler) fail(what, err string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs[what]++
	s.last[what] = err
}

// soakResources orders a process's resources in tables.
var soakResources = []string{ResRSS, ResFDs, ResThreads, ResGoroutines, ResHeapInuse, ResHeapLive, ResUnitsEnded, ResDBBytes, ResWALBytes}

// Series returns the readings so far: by process in the order of the
// targets and files given, each process's resources in a fixed order.
func (s *SoakSampler) Series() []SoakSeries {
	s.mu.Lock()
	defer s.mu.Unlock()
	rank := map[string]int{}
	for i, t := range s.targets {
		rank[t.Name] = i
	}
	for i, f := range s.files {
		if _, ok := rank[f.Name]; !ok {
			rank[f.Name] = len(s.targets) + i
		}
	}
	out := make([]SoakSeries, 0, len(s.series))
	for _, sr := range s.series {
		c := *sr
		c.Points = append([]SoakPoint(nil), sr.Points...)
		c.PIDs = append([]int(nil), sr.PIDs...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if ri, rj := rank[out[i].Process], rank[out[j].Process]; ri != rj {
			return ri < rj
		}
		return slices.Index(soakResources, out[i].Resource) < slices.Index(soakResources, out[j].Resource)
	})
	return out
}

// Samples counts the samples taken.
func (s *SoakSampler) Samples() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Errors says, per target or file, how many readings failed and the last
// reason; empty when none did.
func (s *SoakSampler) Errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for what, n := range s.errs {
		out = append(out, fmt.Sprintf("%s: %d readings failed, the last: %s", what, n, s.last[what]))
	}
	return out
}

// Units returns the readings of the units ended, summed over the targets
// that report them.
func (s *SoakSampler) Units() []SoakPoint {
	for _, sr := range s.Series() {
		if sr.Resource == ResUnitsEnded {
			return sr.Points
		}
	}
	return nil
}

// ProcStat is what /proc says a process holds.
type ProcStat struct {
	RSS     float64 // bytes
	FDs     int
	Threads int
}

// ReadProcStat reads a process's resident memory and threads from
// /proc/PID/status and counts its open files in /proc/PID/fd.
func ReadProcStat(pid int) (ProcStat, error) {
	var st ProcStat
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	var haveRSS, haveThreads bool
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "VmRSS": // "  1234 kB"
			n, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return st, fmt.Errorf("/proc/%d/status VmRSS %q: %w", pid, v, err)
			}
			st.RSS, haveRSS = n*1024, true
		case "Threads":
			n, err := strconv.Atoi(f[0])
			if err != nil {
				return st, fmt.Errorf("/proc/%d/status Threads %q: %w", pid, v, err)
			}
			st.Threads, haveThreads = n, true
		}
	}
	if !haveRSS || !haveThreads {
		// A zombie has neither: it holds nothing, and is not what was
		// asked for.
		return st, fmt.Errorf("process %d has exited (no VmRSS or Threads in /proc/%d/status)", pid, pid)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return st, err
	}
	st.FDs = len(fds)
	return st, nil
}

// ChildWithEnv returns the pid of a child of parent whose environment holds
// kv ("PROXY_REAPER=1"), or 0 when it has none.
func ChildWithEnv(parent int, kv string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid(pid) != parent {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, v := range bytes.Split(env, []byte{0}) {
			if string(v) == kv {
				return pid
			}
		}
	}
	return 0
}

// ppid is a process's parent, from /proc/PID/stat ("pid (comm) state ppid
// ..."; comm may hold spaces and parentheses, so it is read after the last
// one); 0 when it cannot be read.
func ppid(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
