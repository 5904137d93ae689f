// Package browser tests the automator's web dashboard in a real browser:
// headless Chromium (Debian's chromium package, installed by
// scripts/chromium.sh when missing), driven by chromedp, signs in and walks
// every page of a real `automator serve` with a real `proxy run`, asserts
// what each page shows and saves a screenshot of each in
// bin/dashboard-screenshots (or $AUTOMATOR_SCREENSHOTS).
//
// Without Chromium the test is skipped with the reason, unless
// AUTOMATOR_REQUIRE_BROWSER is set (make test sets it): then it fails.
package browser
