package engine

import (
	"regexp"
	"testing"
)

func TestAPIKeyFormat(t *testing.T) {
	shape := regexp.MustCompile(`^ak_[0-9A-Za-z]{38}$`)
	seen := map[string]bool{}
	for range 1000 {
		k := newAPIKey()
		if !shape.MatchString(k) || !wellFormedKey(k) {
			t.Fatalf("newAPIKey() = %q is not well formed", k)
		}
		if seen[k] {
			t.Fatalf("newAPIKey() repeated %q", k)
		}
		seen[k] = true
		// Every single-character typo is caught by the checksum.
		for i := len(keyPrefix); i < len(k); i++ {
			for _, c := range []byte{'0', 'a', 'Z'} {
				if c == k[i] {
					continue
				}
				typo := k[:i] + string(c) + k[i+1:]
				if wellFormedKey(typo) {
					t.Fatalf("typo %q of %q passes the checksum", typo, k)
				}
			}
		}
	}
	for _, bad := range []string{"", "ak_", "ak_" + string(make([]byte, 38)), "xk_" + newAPIKey()[3:], newAPIKey() + "0", newAPIKey()[:40]} {
		if wellFormedKey(bad) {
			t.Errorf("wellFormedKey(%q) = true", bad)
		}
	}
}

func FuzzWellFormedKey(f *testing.F) {
	f.Add(newAPIKey())
	f.Add("ak_")
	f.Add("ak_ImxczN9E4wQohjAE7RdCoKaMjRincpvt1euq0R")
	f.Fuzz(func(t *testing.T, s string) {
		if wellFormedKey(s) && (len(s) != keyLen || s[:3] != keyPrefix) {
			t.Fatalf("wellFormedKey(%q) = true for a key of the wrong shape", s)
		}
	})
}
