// Package pidtest tells a test whether a process it started, or one a
// script started, has ended: the tests of the runner, the service, the
// CLI and the process tests all ask it of the processes they kill; and it
// reads the pids a script wrote. Unix only (Windows tests wait on process
// handles instead).
//
// Only tests import it (test/deps checks that).
package pidtest
