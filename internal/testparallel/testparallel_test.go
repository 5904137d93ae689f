package testparallel

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDefaultSetsParallelUnlessTheCommandLineDid runs this test binary
// again, with and without -test.parallel on its command line; the child
// calls Default(7) and prints what -test.parallel became.
func TestDefaultSetsParallelUnlessTheCommandLineDid(t *testing.T) {
	if os.Getenv("TESTPARALLEL_CHILD") != "" {
		Default(7)
		fmt.Printf("parallel=%s\n", flag.Lookup("test.parallel").Value)
		return
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "parallel=7"},
		{[]string{"-test.parallel", "3"}, "parallel=3"},
		{[]string{"-test.parallel=1"}, "parallel=1"},
	} {
		cmd := exec.Command(os.Args[0], append([]string{"-test.run", "^TestDefaultSetsParallelUnlessTheCommandLineDid$"}, tc.args...)...)
		cmd.Env = append(os.Environ(), "TESTPARALLEL_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, out)
		}
		if !strings.Contains(string(out), tc.want+"\n") {
			t.Errorf("command line %q: want %s, the child printed:\n%s", tc.args, tc.want, out)
		}
	}
}
