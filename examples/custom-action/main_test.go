package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/crmd/crmd/cmd/crmd/cli"
)

// TestSlugAction runs the pack that uses the slug action, and its test,
// with crmd built with the action, as crmd-slug pack test does.
func TestSlugAction(t *testing.T) {
	var out, errs bytes.Buffer
	if code := cli.Run(context.Background(), []string{"pack", "test", "testdata"}, &out, &errs); code != 0 {
		t.Fatalf("pack test exited %d\n%s%s", code, out.String(), errs.String())
	}
	if !strings.Contains(out.String(), "1 tests, 1 passed") {
		t.Errorf("pack test said:\n%s", out.String())
	}
}
