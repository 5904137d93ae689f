package prose

import "testing"

func TestAndListsAsASentenceDoes(t *testing.T) {
	for _, tc := range []struct {
		items []string
		want  string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "a and b"},
		{[]string{"a", "b", "c"}, "a, b and c"},
	} {
		if got := And(tc.items); got != tc.want {
			t.Errorf("And(%q) = %q, want %q", tc.items, got, tc.want)
		}
	}
}

func TestSomeShowsAtMostNAndSaysWhenThereAreMore(t *testing.T) {
	items := []string{"a", "b", "c"}
	if got := Some(items, 5); got != "a, b, c" {
		t.Errorf("Some(3 items, 5) = %q, want all three", got)
	}
	if got := Some(items, 2); got != "a, b, …" {
		t.Errorf("Some(3 items, 2) = %q, want %q", got, "a, b, …")
	}
	if items[2] != "c" {
		t.Errorf("Some changed its argument: %q", items)
	}
}
