package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/crmd/crmd/engine"
	_ "github.com/crmd/crmd/engine/actions"
	"github.com/crmd/crmd/objects/storetest"
	"github.com/crmd/crmd/rules"
)

// readPack reads the files of a pack directory.
func readPack(t testing.TB, dir string) *rules.Pack {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no pack files in %s: %v", dir, err)
	}
	var files []rules.File
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, rules.File{Name: p, Data: data})
	}
	p, errs := rules.Parse(filepath.Base(dir), files)
	if errs != nil {
		t.Fatalf("parsing %s:\n%v", dir, errs)
	}
	return p
}

// TestExamplePacks applies every example pack and runs the tests it carries.
func TestExamplePacks(t *testing.T) {
	dirs, _ := filepath.Glob("../examples/*")
	ran := 0
	defer func() {
		if ran == 0 {
			t.Error("found no example packs")
		}
	}()
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			continue
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "*.yaml")); len(m) == 0 {
			continue
		}
		ran++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, kind string) {
				ctx := context.Background()
				eng := engine.New(storetest.Open(t, kind), engine.Options{})
				b, err := eng.CreateBusiness(ctx, "example")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := eng.ApplyPacks(ctx, b.ID, []*rules.Pack{readPack(t, dir)}, engine.ApplyOptions{By: "test"}); err != nil {
					t.Fatal(err)
				}
				results, err := eng.RunTests(ctx, b.ID)
				if err != nil {
					t.Fatal(err)
				}
				if len(results) == 0 {
					t.Fatal("the pack carries no tests")
				}
				for _, r := range results {
					if r.Failed != "" {
						t.Errorf("%s: %s: %s", r.Test.Pos, r.Test.Name, r.Failed)
					}
				}
			})
		})
	}
}
