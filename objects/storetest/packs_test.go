package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/crmd/crmd/objects"
)

func TestPackRevisions(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := Open(t, kind)
		a := newBusiness(t, s, "a")
		b := newBusiness(t, s, "b")
		if packs, gen, err := s.ActivePacks(ctx, a.ID); err != nil || len(packs) != 0 || gen != 0 {
			t.Fatalf("ActivePacks of a business without packs = %v, %d, %v", packs, gen, err)
		}
		save := func(biz, pack, content string) int {
			t.Helper()
			rev := &objects.PackRevision{Pack: pack, Files: []objects.PackFile{{Name: "p.yaml", Content: content}}, Hash: "h-" + content,
				CreatedAt: time.Now().UTC().Truncate(time.Microsecond), CreatedBy: "test"}
			err := s.Write(ctx, biz, func(tx objects.Tx) error {
				if err := tx.LockPacks(ctx); err != nil {
					return err
				}
				if err := tx.SavePackRevision(ctx, rev); err != nil {
					return err
				}
				return tx.ActivatePack(ctx, pack, rev.Revision, "test", time.Now())
			})
			if err != nil {
				t.Fatal(err)
			}
			return rev.Revision
		}
		if r := save(a.ID, "sales", "one"); r != 1 {
			t.Errorf("first revision = %d", r)
		}
		if r := save(a.ID, "sales", "two"); r != 2 {
			t.Errorf("second revision = %d", r)
		}
		save(a.ID, "ops", "x")
		save(b.ID, "sales", "b's")
		packs, gen, err := s.ActivePacks(ctx, a.ID)
		if err != nil || len(packs) != 2 || gen != 3 {
			t.Fatalf("ActivePacks = %d packs, generation %d, %v", len(packs), gen, err)
		}
		if packs[1].Pack != "sales" || packs[1].Revision != 2 || packs[1].Files[0].Content != "two" || !packs[1].Active {
			t.Errorf("active sales = %+v", packs[1])
		}
		// Roll back to revision 1.
		if err := s.Write(ctx, a.ID, func(tx objects.Tx) error { return tx.ActivatePack(ctx, "sales", 1, "test", time.Now()) }); err != nil {
			t.Fatal(err)
		}
		gens, err := s.PackGenerations(ctx, []string{a.ID, b.ID, "nobody"})
		if err != nil || gens[a.ID] != 4 || gens[b.ID] != 1 || len(gens) != 2 {
			t.Errorf("PackGenerations = %v, %v", gens, err)
		}
		revs, err := s.PackRevisions(ctx, a.ID)
		if err != nil || len(revs) != 3 {
			t.Fatalf("PackRevisions = %v, %v", revs, err)
		}
		if revs[1].Pack != "sales" || revs[1].Revision != 2 || revs[1].Active || !revs[2].Active {
			t.Errorf("revisions = %+v %+v %+v", revs[0], revs[1], revs[2])
		}
		if r, err := s.PackRevision(ctx, a.ID, "sales", 2); err != nil || r.Files[0].Content != "two" || r.Active {
			t.Errorf("PackRevision = %+v, %v", r, err)
		}
		if _, err := s.PackRevision(ctx, b.ID, "ops", 1); !errors.Is(err, objects.ErrNotFound) {
			t.Errorf("another business's pack = %v", err)
		}
	})
}

func TestUniqueClaims(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := Open(t, kind)
		a := newBusiness(t, s, "a")
		b := newBusiness(t, s, "b")
		claim := func(biz, value, id string) (string, error) {
			var holder string
			err := s.Write(ctx, biz, func(tx objects.Tx) error {
				var err error
				holder, err = tx.Claim(ctx, "contacts", "email", value, id)
				return err
			})
			return holder, err
		}
		if h, err := claim(a.ID, "ada@example.com", "r1"); h != "" || err != nil {
			t.Fatalf("first claim = %q, %v", h, err)
		}
		if h, _ := claim(a.ID, "ada@example.com", "r1"); h != "" {
			t.Errorf("claiming again for the same record = %q", h)
		}
		if h, _ := claim(a.ID, "ada@example.com", "r2"); h != "r1" {
			t.Errorf("claim held by r1 = %q", h)
		}
		if h, _ := claim(b.ID, "ada@example.com", "r9"); h != "" {
			t.Errorf("another business's claim = %q", h)
		}
		// Many writers race for one value: exactly one wins, and every other
		// is told who holds it.
		var wg sync.WaitGroup
		var mu sync.Mutex
		winners := 0
		for i := range 40 {
			wg.Go(func() {
				h, err := claim(a.ID, "race@example.com", fmt.Sprint("w", i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if h == "" {
					winners++
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		if winners != 1 {
			t.Errorf("%d writers won one value", winners)
		}
		err := s.Write(ctx, a.ID, func(tx objects.Tx) error {
			if err := tx.Release(ctx, "contacts", "email", "ada@example.com", "r2"); err != nil { // not the holder: no effect
				return err
			}
			if h, _ := tx.Claim(ctx, "contacts", "email", "ada@example.com", "r2"); h != "r1" {
				return fmt.Errorf("after a release by a non-holder: %q", h)
			}
			if err := tx.ReleaseField(ctx, "contacts", "email"); err != nil {
				return err
			}
			if h, _ := tx.Claim(ctx, "contacts", "email", "race@example.com", "r3"); h != "" {
				return fmt.Errorf("after ReleaseField: %q", h)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestScanCountFieldInUse(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := Open(t, kind)
		a := newBusiness(t, s, "a")
		b := newBusiness(t, s, "b")
		err := s.Write(ctx, a.ID, func(tx objects.Tx) error {
			for i := range 2500 {
				at := time.Now()
				fields := map[string]any{"name": fmt.Sprint(i)}
				if i == 1234 {
					fields["plate"] = "AB-123"
				}
				if err := tx.Insert(ctx, &objects.Record{Object: "vehicles", ID: objects.NewID(), CreatedAt: at, UpdatedAt: at, Fields: fields}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		insert(t, s, b.ID, "vehicles", map[string]any{"name": "b's", "vin": "x"})
		err = s.Write(ctx, a.ID, func(tx objects.Tx) error {
			if n, err := tx.CountRecords(ctx, "vehicles"); err != nil || n != 2500 {
				return fmt.Errorf("CountRecords = %d, %v", n, err)
			}
			for field, want := range map[string]bool{"plate": true, "name": true, "vin": false, "color": false} {
				if got, err := tx.FieldInUse(ctx, "vehicles", field); err != nil || got != want {
					return fmt.Errorf("FieldInUse(%s) = %v, %v", field, got, err)
				}
			}
			seen := 0
			// The scan may write as it goes, as building unique claims does.
			err := tx.ScanRecords(ctx, "vehicles", func(r *objects.Record) error {
				seen++
				_, err := tx.Claim(ctx, "vehicles", "name", r.ID, r.ID)
				return err
			})
			if err != nil || seen != 2500 {
				return fmt.Errorf("ScanRecords saw %d, %v", seen, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
