// Package docs holds the user documentation: README.md's companions, in
// Markdown. It has no code; its test checks the Markdown itself, so that
// a table an edit broke shows as a failure rather than as a paragraph of
// pipes on GitHub.
package docs
